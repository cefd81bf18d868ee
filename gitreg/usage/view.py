"""What the API and the module page show of one module's consumers, for one reader: `consumers_view`.

A consumer's repository (its name, web URL and file) is shown only to a reader the Git host says
can read that repository (`can_read`, from the identity door's visibility of a Git host identity:
a forge token, a `terraform login` token, a page sign-in); every other consumer is counted in
`hidden` and nothing more. Each shown consumer carries the newest served version its constraint
allows (Terraform's pick, core/constraints.py) and three flags:

- `not_latest_major`: that version is not on the module's latest major (or none is allowed);
- `allows_deprecated`: the version its constraint selects (the newest it allows, what `terraform
  init` installs) is one `.gitreg.toml` deprecates (a broad constraint that merely admits an old
  deprecated version, and would install a newer one, is not flagged: it is not the one to chase);
- `pinned_revoked`: its constraint is an exact pin to a version `.gitreg.toml` revokes.

Deprecation and revocation are asked through two callables (default: nothing is either).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gitreg.core.constraints import Constraint, ConstraintError, parse_constraint
from gitreg.core.versions import parse_version
from gitreg.usage.model import Consumer
from gitreg.usage.store import RepoScan

VersionFlag = Callable[[str], bool]
# An exact pin: `1.4.2`, `= 1.4.2`, `v1.4.2` (one term, a whole version).
_PIN_RE = re.compile(r"\s*=?\s*v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?)\s*")
ANY_VERSION = ">= 0.0.0"  # no `version` argument: Terraform takes the newest (non-prerelease) version


def never(_version: str) -> bool:
    """No version is deprecated (or revoked): the default until `.gitreg.toml` says otherwise."""
    return False


@dataclass(frozen=True)
class ConsumerRow:
    """One `module` block that calls the module, as a reader allowed to see its repository sees it."""

    repository: str  # the repository's name on its host ("acme/app")
    url: str  # its web page
    file: str
    line: int
    constraint: str
    newest_allowed: str | None
    not_latest_major: bool
    allows_deprecated: bool
    pinned_revoked: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "repository": {"name": self.repository, "url": self.url},
            "file": self.file,
            "line": self.line,
            "constraint": self.constraint,
            "newest_allowed": self.newest_allowed,
            "not_latest_major": self.not_latest_major,
            "allows_deprecated": self.allows_deprecated,
            "pinned_revoked": self.pinned_revoked,
        }


@dataclass(frozen=True)
class ConsumersView:
    """A module's consumers for one reader: those shown, and how many are hidden from them."""

    address: str
    shown: list[ConsumerRow] = field(default_factory=list)
    hidden: int = 0  # `module` blocks in repositories this reader may not see
    repositories: int = 0  # consuming repositories in all (shown or not)
    latest: str | None = None

    @property
    def total(self) -> int:
        return len(self.shown) + self.hidden


def _constraint(text: str) -> Constraint | None:
    try:
        return parse_constraint(text or ANY_VERSION)
    except ConstraintError:
        return None


def _major(version: str | None) -> int | None:
    parsed = parse_version(version) if version else None
    return parsed.major if parsed is not None else None


def newest_served(versions: Sequence[str], revoked: VersionFlag = never) -> str | None:
    """The version a module block without `version` gets: the newest served, not revoked (not a prerelease)."""
    return parse_constraint(ANY_VERSION).newest([v for v in versions if not revoked(v)])


def consumer_row(
    scan: RepoScan,
    consumer: Consumer,
    versions: Sequence[str],
    deprecated: VersionFlag = never,
    revoked: VersionFlag = never,
    latest: str | None = None,
) -> ConsumerRow:
    """One consumer's row: the newest served (not revoked) version it allows, and its flags
    (`latest`: newest_served(versions, revoked), computed once by the caller)."""
    served = [v for v in versions if not revoked(v)]
    constraint = _constraint(consumer.constraint)
    newest = constraint.newest(served) if constraint is not None else None
    latest_major = _major(latest)
    allowed_major = _major(newest)
    pin = _PIN_RE.fullmatch(consumer.constraint)
    return ConsumerRow(
        repository=scan.full_name,
        url=scan.web_url,
        file=consumer.file,
        line=consumer.line,
        constraint=consumer.constraint,
        newest_allowed=newest,
        not_latest_major=latest_major is not None and allowed_major != latest_major,
        allows_deprecated=newest is not None and deprecated(newest),
        pinned_revoked=pin is not None and any(revoked(v) for v in versions if _same(v, pin.group(1))),
    )


def _same(version: str, pinned: str) -> bool:
    a, b = parse_version(version), parse_version(pinned)
    return a is not None and b is not None and a.compare(b) == 0


def consumers_view(
    address: str,
    found: Sequence[tuple[RepoScan, Consumer]],
    versions: Sequence[str],
    can_read: Callable[[RepoScan], bool],
    deprecated: VersionFlag = never,
    revoked: VersionFlag = never,
) -> ConsumersView:
    """`address`'s consumers (`found`: the store's, in order) as the reader `can_read` allows:
    `versions` are the module's served versions (any order)."""
    latest = newest_served(versions, revoked)
    shown: list[ConsumerRow] = []
    hidden = 0
    readable: dict[str, bool] = {}  # one answer per repository
    for scan, consumer in found:
        allowed = readable.get(scan.repository)
        if allowed is None:
            allowed = readable[scan.repository] = can_read(scan)
        if allowed:
            shown.append(consumer_row(scan, consumer, versions, deprecated, revoked, latest))
        else:
            hidden += 1
    return ConsumersView(address, shown, hidden, len(readable), latest)
