"""Terraform version constraints (`~> 1.2`, `>= 1.0, < 2.0.0`, `= 1.4.2`), as Terraform reads them.

Terraform checks a module's `version` with hashicorp/go-version: comma-separated terms, each an
operator (`=` when none, `!=`, `>`, `>=`, `<`, `<=`, `~>`) and a version of one to three numbers
with an optional prerelease. `~>` allows only the last given number to grow (`~> 1.2` is `>= 1.2,
< 2.0`; `~> 1.2.3` is `>= 1.2.3, < 1.3.0`; `~> 1` is `>= 1`). A prerelease version matches only a
term that names a prerelease of the same numbers, and a release never matches such a term.
Used for `.gitreg.toml`'s `versions` and for the constraints consumers write in `source` blocks.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

import semver

from gitreg.core.versions import parse_version

_TERM_RE = re.compile(
    r"\s*(=|!=|>=|<=|>|<|~>)?\s*v?([0-9]+)(?:\.([0-9]+))?(?:\.([0-9]+))?"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?\s*"
)
MAX_CONSTRAINT = 500  # characters: a constraint is a short expression, not a document


class ConstraintError(ValueError):
    """A version constraint Terraform would not accept; the message says which part."""


@dataclass(frozen=True)
class _Term:
    operator: str
    numbers: tuple[int, int, int]
    given: int  # how many numbers were written (1-3): `~>` keeps all but the last fixed
    prerelease: str | None

    def allows(self, version: semver.Version) -> bool:
        numbers = (version.major, version.minor, version.patch)
        # go-version's prerelease rule: a prerelease only meets a term naming a prerelease of the
        # same numbers (and a release never meets such a term).
        either = version.prerelease or self.prerelease
        if either and not (version.prerelease and self.prerelease and numbers == self.numbers):
            return False
        order = _compare(version, self.numbers, self.prerelease)
        op = self.operator
        if op == "=":
            return order == 0
        if op == "!=":
            return order != 0
        if op == ">":
            return order > 0
        if op == ">=":
            return order >= 0
        if op == "<":
            return order < 0
        if op == "<=":
            return order <= 0
        # ~>: at least the named version, the numbers before the last given one unchanged.
        fixed = self.given - 1
        return order >= 0 and numbers[:fixed] == self.numbers[:fixed]


def _compare(version: semver.Version, numbers: tuple[int, int, int], prerelease: str | None) -> int:
    other = semver.Version(*numbers, prerelease=prerelease)
    return version.replace(build=None).compare(other)


@dataclass(frozen=True)
class Constraint:
    """A parsed constraint: every term must allow a version for the constraint to allow it."""

    text: str
    terms: tuple[_Term, ...]

    def allows(self, version: str | semver.Version) -> bool:
        """True when Terraform would accept `version` (a SemVer text, `v` optional) for this constraint."""
        parsed = parse_version(version) if isinstance(version, str) else version
        return parsed is not None and all(term.allows(parsed) for term in self.terms)

    def newest(self, versions: Iterable[str]) -> str | None:
        """The highest of `versions` this constraint allows, as Terraform would pick it; None when none."""
        best: semver.Version | None = None
        best_text = None
        for text in versions:
            parsed = parse_version(text)
            if parsed is not None and self.allows(parsed) and (best is None or parsed.compare(best) > 0):
                best, best_text = parsed, text
        return best_text


@functools.lru_cache(maxsize=1024)
def parse_constraint(text: str) -> Constraint:
    """Parse a Terraform version constraint; ConstraintError naming the bad part otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise ConstraintError("a version constraint is empty")
    if len(text) > MAX_CONSTRAINT:
        raise ConstraintError(f"a version constraint is longer than {MAX_CONSTRAINT} characters")
    terms = []
    for part in text.split(","):
        match = _TERM_RE.fullmatch(part)
        if match is None:
            shown = part.strip()[:80]
            raise ConstraintError(f"{shown!r} is not a version constraint (expected e.g. '~> 1.2' or '< 2.0.0')")
        op, major, minor, patch, pre = match.groups()
        given = 1 + (minor is not None) + (patch is not None)
        numbers = (int(major), int(minor or 0), int(patch or 0))
        if pre is not None and given < 3:
            shown = part.strip()[:80]
            raise ConstraintError(f"{shown!r}: a prerelease in a version constraint needs all three version numbers")
        terms.append(_Term(op or "=", numbers, given, pre))
    return Constraint(text.strip(), tuple(terms))
