"""What the index holds: listed modules and their versions, what org sources add, counters, changes.

Plain values, no I/O: the store (`store`), search (`search`), index.json (`persist`) and the
index-process messages (`protocol`) all speak in these.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from gitreg.core.errors import Overloaded
from gitreg.core.names import ModuleAddress, address_from_text
from gitreg.core.versions import TaggedVersion, is_canonical, parse_version


class DetailsPending(Overloaded):
    """A version's details are not read yet: they are being read now; ask again shortly (503)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retry_after=2)


class DetailsUnfinished(Overloaded):
    """A version's details could not be read completely now (its parse ran out of its budget, or a
    parse worker stopped): not a result, never kept; read again later (503 meanwhile)."""

    def __init__(self, message: str, published_at: str = "", stopping: bool = False) -> None:
        super().__init__(message, retry_after=5)
        self.published_at = published_at  # the tag's date: git gave it, only the parsing was cut short
        self.stopping = stopping  # cut short because gitreg is stopping: nothing failed


class NotListedYet(Overloaded):
    """A module a rule or org serves that the index has not listed yet: it is being indexed; ask again
    shortly (503, never a 404: the module exists)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retry_after=2)


@dataclass(frozen=True)
class OrgInfo:
    """What an org source knows about a module beyond its repository (from the host's API)."""

    source: str = ""  # the repository's web page
    description: str = ""
    topics: tuple[str, ...] = ()
    marker: str = ""  # changes when the repository was pushed to (GitHub pushed_at...)


class IndexedVersion(NamedTuple):
    """One listed version: its text, the tag it comes from and the tag's commit.

    A NamedTuple, not a frozen dataclass: a persisted index of 10,000 modules holds 200,000
    of them, and a restart creates them all before it serves (a dataclass costs 4x as much).
    """

    canonical: str
    tag: str
    sha: str

    def tagged(self) -> TaggedVersion:
        """As the registry's TaggedVersion (what details are keyed by)."""
        version = parse_version(self.canonical)
        assert version is not None  # written from a parsed version
        return TaggedVersion(version, self.tag, self.sha)


@dataclass(frozen=True)
class IndexEntry:
    """One listed module, as list, search and the details endpoints show it."""

    address: ModuleAddress
    repository: str  # the cache key: what gitreg runs `ls-remote` on
    path: str  # the module's directory in the repository
    source: str  # the repository's web page ("" when unknown)
    versions: tuple[IndexedVersion, ...]  # highest first
    latest: IndexedVersion
    description: str
    published_at: str
    verified: bool
    topics: tuple[str, ...] = ()
    words: str = ""  # README words, space-separated, for search
    marker: str = ""  # the org source's change marker this was indexed at
    details: bool = False  # the latest version's details are on disk
    indexed_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The entry as index.json stores it (by hand: `asdict` deep-copies, 10x slower at 20 versions)."""
        return {
            "address": str(self.address),
            "repository": self.repository,
            "path": self.path,
            "source": self.source,
            "versions": [[v.canonical, v.tag, v.sha] for v in self.versions],
            "latest": self.latest.canonical,
            "description": self.description,
            "published_at": self.published_at,
            "verified": self.verified,
            "topics": list(self.topics),
            "words": self.words,
            "marker": self.marker,
            "details": self.details,
            "indexed_at": self.indexed_at,
        }

    @staticmethod
    def from_json(data: Any) -> IndexEntry | None:
        """An entry from index.json, or None when it is not one (the file may be edited or damaged)."""
        try:
            address = address_from_text(data["address"])
            versions = tuple([IndexedVersion(str(c), str(t), str(s)) for c, t, s in data["versions"]])
            latest = next(v for v in versions if v.canonical == data["latest"])
            # Strict, and cheap enough for a restart with 200,000 versions: never an invalid one listed.
            if address is None or not all(map(is_canonical, [v.canonical for v in versions])):
                return None
            return IndexEntry(
                address=address,
                repository=str(data["repository"]),
                path=str(data.get("path", "")),
                source=str(data.get("source", "")),
                versions=versions,
                latest=latest,
                description=str(data.get("description", "")),
                published_at=str(data.get("published_at", "")),
                verified=bool(data.get("verified", False)),
                topics=tuple(str(t) for t in data.get("topics", ())),
                words=str(data.get("words", "")),
                marker=str(data.get("marker", "")),
                details=bool(data.get("details", False)),
                indexed_at=float(data.get("indexed_at", 0.0)),
            )
        except (KeyError, TypeError, ValueError, StopIteration):
            return None

    def find(self, requested: str) -> IndexedVersion | None:
        """The listed version a client asked for (`1.2.3` or `v1.2.3`, build metadata optional)."""
        wanted = requested[1:] if requested.startswith("v") else requested
        for v in self.versions:
            if v.canonical == wanted or v.canonical.split("+", 1)[0] == wanted:
                return v
        return None


@dataclass(frozen=True)
class Untagged:
    """A module a rule or an org serves whose repository has no SemVer tag yet: not listed, but
    remembered (its page says why, and an org repository is looked at again only when its
    marker moves, as a listed one is)."""

    repository: str
    marker: str = ""  # the org source's change marker it was looked at ("" for a rule's module)

    def to_json(self) -> dict[str, str]:
        return {"repository": self.repository, "marker": self.marker}

    @staticmethod
    def from_json(data: Any) -> Untagged | None:
        """One from index.json or a report, or None when it is not one."""
        if not isinstance(data, dict) or not isinstance(data.get("repository"), str):
            return None
        marker = data.get("marker", "")
        return Untagged(data["repository"], marker if isinstance(marker, str) else "")


@dataclass
class IndexStats:
    """Counters for /metrics and the benchmarks."""

    indexed: int = 0  # modules (re)indexed
    failures: int = 0  # indexing attempts that failed (kept the previous entry)
    details_built: int = 0  # details computed (not found on disk)
    writes: int = 0  # index.json writes
    passes: int = 0  # complete passes over every listable module
    last_pass: float = field(default_factory=time.time)


class ChangeLog:
    """Entries set (or dropped: None; or found without a SemVer tag: Untagged) and modules found
    gone since they were last taken; `ready` is set while there are some (the index process sends
    them to the serving process)."""

    def __init__(self) -> None:
        self.entries: dict[ModuleAddress, IndexEntry | Untagged | None] = {}
        self.gone: list[ModuleAddress] = []  # repository gone: the catalog forgets them
        self.ready = asyncio.Event()

    def record(self, address: ModuleAddress, entry: IndexEntry | Untagged | None) -> None:
        self.entries[address] = entry
        self.ready.set()

    def forget(self, address: ModuleAddress) -> None:
        self.gone.append(address)
        self.ready.set()

    def take(self) -> tuple[dict[ModuleAddress, IndexEntry | Untagged | None], list[ModuleAddress]]:
        entries, gone, self.entries, self.gone = self.entries, self.gone, {}, []
        self.ready.clear()
        return entries, gone
