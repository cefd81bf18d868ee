"""What "Used by" shows one reader: the module page's tab (consumers and installs), the API's installs.

What a reader is shown by name is what the Git host says they can read: a person signed in through
a Git host (or presenting its token) sees the consuming repositories and the installing projects
their host lists for them (the same `Visibility` lists and search use), and a count of the rest;
anyone else (an open registry's visitor, a static token's session) sees counts only.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aiohttp import web

from gitreg.core.names import ModuleAddress
from gitreg.core.urls import web_url
from gitreg.identity.door import Visibility
from gitreg.index.model import IndexEntry
from gitreg.usage.model import Install
from gitreg.usage.view import ConsumersView, consumers_view
from gitreg.web.auth import visibility
from gitreg.web.keys import CONFIG, INSTALLS, REGISTRY, USAGE


@dataclass(frozen=True)
class _Listed:
    """A version as listed, for the .gitreg.toml declaration's lookups."""

    canonical: str


@dataclass(frozen=True)
class InstallRow:
    """One observed install as the tab shows it."""

    project: str
    link: str  # the project's web page ("" when gitreg knows none)
    version: str
    at: str  # ISO 8601, UTC, to the second (a <time>'s datetime)
    when: str  # "2026-11-28 10:31 UTC"

    def to_json(self) -> dict[str, str]:
        """As the consumers API lists it."""
        return {"project": self.project, "url": self.link, "version": self.version, "at": self.at}


@dataclass(frozen=True)
class SeenInstalls:
    """A module's observed installs as one reader may see them: by name, and how many others."""

    shown: list[InstallRow]
    hidden: int

    @property
    def total(self) -> int:
        """Every install of the last 90 days (one per project and version)."""
        return len(self.shown) + self.hidden


def reads_repository(seen: Visibility, namespace: str) -> Callable[[str | None], bool]:
    """Whether a reader who sees `seen` may be shown a repository by name, for a module of `namespace`:
    only what a Git host listed for them (`seen.hosts` set), never by namespace alone."""

    def readable(repository: str | None) -> bool:
        return repository is not None and seen.hosts is not None and seen.allows(namespace, repository)

    return readable


def install_row(install: Install) -> InstallRow:
    """`install` as the tab and the API show it."""
    moment = datetime.datetime.fromtimestamp(install.at, datetime.UTC)
    link = web_url(install.repository) if install.repository else ""
    return InstallRow(
        install.project,
        link,
        install.version,
        moment.isoformat(timespec="seconds").replace("+00:00", "Z"),
        moment.strftime("%Y-%m-%d %H:%M UTC"),
    )


def seen_installs(installs: list[Install], readable: Callable[[str | None], bool]) -> SeenInstalls:
    """`installs` split into those shown by name (their repository `readable`) and a count of the rest."""
    shown = [install_row(i) for i in installs if readable(i.repository)]
    return SeenInstalls(shown, len(installs) - len(shown))


async def installs_for(request: web.Request, address: ModuleAddress, seen: Visibility | None = None) -> SeenInstalls:
    """The observed installs of `address` as this request's reader (who sees `seen`) may see them (every
    replica's)."""
    found = await request.app[INSTALLS].current(address)
    seen = seen if seen is not None else await visibility(request)
    return seen_installs(found, reads_repository(seen, address.namespace))


@dataclass(frozen=True)
class UsedBy:
    """The "Used by" tab of one module, for one reader."""

    consumers: ConsumersView  # the `module` blocks in repositories the reader may read, and the count of the rest
    hidden: int  # consuming repositories the reader may not read: a count only
    installs: SeenInstalls

    @property
    def repositories(self) -> int:
        """Every consuming repository, shown or not (the tab's N)."""
        return self.consumers.repositories


def consumers_for(
    request: web.Request, address: ModuleAddress, versions: Sequence[str], seen: Visibility
) -> ConsumersView:
    """`address`'s consumers as a reader who sees `seen` may see them (`versions`: its served versions): the one
    place the consumers API and the module page ask."""
    usage = request.app[USAGE]
    declared = request.app[REGISTRY].declared_for(address)  # .gitreg.toml as last read: no git here
    return consumers_view(
        str(address),
        usage.consumers(str(address)),
        versions,
        lambda scan: reads_repository(seen, scan.namespace)(scan.repository),
        deprecated=lambda version: declared.deprecation(_Listed(version)) is not None,
        revoked=lambda version: declared.revocation(_Listed(version)) is not None,
    )


async def used_by(request: web.Request, entry: IndexEntry) -> UsedBy | None:
    """What the module page's "Used by" tab shows this request's reader, from memory (no git); None when
    this registry can know no consumer (no `[usage] scan` of orgs, no CI jobs' OIDC tokens to see installs)."""
    usage = request.app[USAGE]
    if not usage.enabled and not request.app[CONFIG].auth.oidc:
        return None
    address = entry.address
    seen = await visibility(request)
    view = consumers_for(request, address, [v.canonical for v in entry.versions], seen)
    hidden = view.repositories - len({row.repository for row in view.shown})
    return UsedBy(view, hidden, await installs_for(request, address, seen))
