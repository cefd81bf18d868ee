"""The module index: what list, search, latest and details answer from, kept in memory and on disk.

Browsing never runs git or calls a Git host's API inside a request: it reads this index. The
index is built and kept fresh in the background, below `terraform init`'s work:

- which modules: every fully specified `[[modules]]` rule, every module a wildcard rule has
  served (the catalog remembers them), and every module an `[[orgs]]` source enumerates;
- for each: its versions (through the tag cache, so one `ls-remote` serves both the index and
  the versions endpoint), then the details of its latest version (README, inputs, outputs...),
  which depend only on the commit and are kept on disk under `[storage] path/details`;
- when: all of them at start (from the persisted index first, so a restart serves at once),
  again whenever the tag cache fetched a repository's tags (a webhook, a `terraform init` after
  the TTL), when an org source reports a repository changed, and every `[cache] ttl_seconds` for
  rule modules (the tag cache answers from memory within its TTL, so that costs no git).

`index.json` is written atomically (temp file + `os.replace`) at most every FLUSH_SECONDS and at
shutdown. A module without a SemVer tag, or whose repository is gone, is not listed.

Under `gitreg serve` this work runs in the index process (indexer.py), at a lower CPU priority:
its ModuleIndex builds (and records `changes`), the serving process's ModuleIndex only `take()`s
the entries it sends and forwards the details someone asked for (`on_wanted`).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import hashlib
import json
import logging
import os
import re
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from gitreg.config.rules import ResolvedModule
from gitreg.core.errors import GitregError, ModuleNotFound, Overloaded
from gitreg.core.names import ModuleAddress, address_from_text
from gitreg.core.versions import TaggedVersion, is_canonical, parse_version
from gitreg.index.details import DetailsService, ModuleDetails
from gitreg.storage.files import collector_paused, json_document, remove_leftovers, write_atomically

log = logging.getLogger(__name__)

FILE_NAME = "index.json"
DETAILS_DIR = "details"
FORMAT = 1
FLUSH_SECONDS = 2.0
# Modules indexed at once: a bounded share of the git pool, so `terraform init` goes first.
WORKERS = 4
# README words kept per module for search (distinct, lowercased).
MAX_WORDS = 2000
# Search answers remembered per index generation (a new generation forgets them all).
SEARCH_MEMO = 256
# While the indexer is busy, lists may be this much behind it (see ModuleIndex.view).
VIEW_STALE_SECONDS = 1.0
_WORD_RE = re.compile(r"[a-z0-9][a-z0-9_-]{1,39}")
_TMP_PREFIX = ".index-"  # temp files of write_atomically (`.index-*.tmp`)

Sources = Callable[[], Mapping[ModuleAddress, ResolvedModule]]
Resolve = Callable[[ModuleAddress], ResolvedModule | None]
Versions = Callable[[ModuleAddress], Any]  # async: (ResolvedModule, ModuleVersions)


class DetailsPending(Overloaded):
    """A version's details are not read yet: they are being read now; ask again shortly (503)."""

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


def readme_words(readme: str) -> str:
    """The distinct words of a README (lowercased, in order of first use), for search."""
    seen: dict[str, None] = {}
    for word in _WORD_RE.findall(readme.casefold()):
        seen.setdefault(word, None)
        if len(seen) >= MAX_WORDS:
            break
    return " ".join(seen)


def search_rank(query: str, entry: IndexEntry, readme: Callable[[str], bool] | None = None) -> int | None:
    """Lower is better; None when the module does not match.

    0 the name is the query; 1 the name starts with it; 2 the name contains it (or every
    word of it); 3 the namespace, system or a topic is it, or `namespace/name/system` contains
    it; 4 the description contains it; 5 every word appears somewhere (in the name, namespace,
    system, description or topics, or as a word of the README: `readme(word)`).
    """
    q = query.casefold()
    a = entry.address
    name, namespace, system = a.name.casefold(), a.namespace.casefold(), a.system
    words = _words(q)
    if name == q:
        return 0
    if name.startswith(q):
        return 1
    if q in name or (len(words) > 1 and all(w in name for w in words)):
        return 2
    topics = [t.casefold() for t in entry.topics]
    if q in (namespace, system) or q in topics or q in f"{namespace}/{name}/{system}":
        return 3
    text = entry.description.casefold()
    if q in text:
        return 4
    haystack = f"{namespace}/{name}/{system} {text} {' '.join(topics)}"
    in_readme = readme or (lambda w: f" {w} " in f" {entry.words} ")
    if words and all(w in haystack or in_readme(w) for w in words):
        return 5
    return None


def _words(query: str) -> list[str]:
    return [w for w in re.split(r"[\s/]+", query) if w]


class _Blob:
    """One short text per entry, joined, so `str.find` (C speed) finds the entries containing a string."""

    def __init__(self, texts: Iterable[str]) -> None:
        parts: list[str] = []
        self.starts: list[int] = []
        offset = 0
        for text in texts:
            self.starts.append(offset)
            clean = text.replace("\n", " ")
            parts.append(clean)
            offset += len(clean) + 1
        self.text = "\n".join(parts)

    def matching(self, needle: str) -> set[int]:
        """Indexes of the entries whose text contains `needle`."""
        found: set[int] = set()
        if not needle or "\n" in needle:
            return found
        pos = self.text.find(needle)
        while pos >= 0:
            i = bisect.bisect_right(self.starts, pos) - 1
            found.add(i)
            nxt = self.starts[i + 1] if i + 1 < len(self.starts) else len(self.text)
            pos = self.text.find(needle, nxt)
        return found


class _View:
    """The entries of one index generation: sorted for listing, with what search looks in.

    Built once per change of the index; lists and searches of a generation are remembered
    (bounded), so a warm list or search is a dictionary lookup and a slice.
    """

    def __init__(self, entries: Iterable[IndexEntry], readme: Mapping[str, set[ModuleAddress]]) -> None:
        self.ordered = sorted(
            entries,
            key=lambda e: (e.address.namespace.casefold(), e.address.name.casefold(), e.address.system, str(e.address)),
        )
        self.by_namespace: dict[str, list[IndexEntry]] = {}
        for e in self.ordered:
            self.by_namespace.setdefault(e.address.namespace, []).append(e)
        # Names, descriptions and topics: substring search. README words: whole words only.
        self.ids = _Blob(str(e.address).casefold() for e in self.ordered)
        self.texts = _Blob(f"{e.description} {' '.join(e.topics)}".casefold() for e in self.ordered)
        self.position = {e.address: i for i, e in enumerate(self.ordered)}
        self.readme = readme  # word -> modules whose README has it (kept by the index as it changes)
        self.memo: OrderedDict[tuple[object, ...], list[IndexEntry]] = OrderedDict()

    def remembered(self, key: tuple[object, ...], make: Callable[[], list[IndexEntry]]) -> list[IndexEntry]:
        """The answer for `key` in this generation, made once."""
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = make()
            while len(self.memo) > SEARCH_MEMO:
                self.memo.popitem(last=False)
        else:
            self.memo.move_to_end(key)
        return found

    def candidates(self, query: str) -> list[IndexEntry]:
        """Entries that may match `query`; search_rank decides (and orders)."""
        q = query.casefold()
        words = _words(q)
        if not words:
            return []
        hits = self.ids.matching(q) | self.texts.matching(q)
        common: set[int] | None = None
        for word in words:
            found = self.ids.matching(word) | self.texts.matching(word) | self.in_readme(word)
            common = found if common is None else common & found
            if not common:
                break
        hits |= common or set()
        return [self.ordered[i] for i in sorted(hits)]

    def in_readme(self, word: str) -> set[int]:
        """Positions of the modules whose README has `word`."""
        position = self.position
        return {position[a] for a in self.readme.get(word, ()) if a in position}


class DetailsStore:
    """Details of module versions on disk (`<storage>/details/<hash>.json`): immutable per commit."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @staticmethod
    def key(repository: str, path: str, sha: str) -> str:
        return hashlib.sha256(f"{repository}\0{path}\0{sha}".encode()).hexdigest()[:40]

    def load(self, repository: str, path: str, sha: str) -> ModuleDetails | None:
        """Blocking: the stored details, or None (absent or unreadable: built again)."""
        try:
            data = json.loads((self.root / f"{self.key(repository, path, sha)}.json").read_text(encoding="utf-8"))
            return ModuleDetails(
                str(data["description"]),
                str(data["published_at"]),
                dict(data["root"]),
                list(data["submodules"]),
                list(data.get("examples", [])),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def save(self, repository: str, path: str, sha: str, details: ModuleDetails) -> None:
        """Blocking: write the details atomically."""
        # Not fsynced: details are read again from git when a power loss left a file behind.
        target = self.root / f"{self.key(repository, path, sha)}.json"
        write_atomically(target, json.dumps(asdict(details)), _TMP_PREFIX, durable=False)


class ChangeLog:
    """Entries set (or dropped: None) and modules found gone since they were last taken; `ready`
    is set while there are some."""

    def __init__(self) -> None:
        self.entries: dict[ModuleAddress, IndexEntry | None] = {}
        self.gone: list[ModuleAddress] = []  # repository gone: the catalog forgets them
        self.ready = asyncio.Event()

    def record(self, address: ModuleAddress, entry: IndexEntry | None) -> None:
        self.entries[address] = entry
        self.ready.set()

    def forget(self, address: ModuleAddress) -> None:
        self.gone.append(address)
        self.ready.set()

    def take(self) -> tuple[dict[ModuleAddress, IndexEntry | None], list[ModuleAddress]]:
        entries, gone, self.entries, self.gone = self.entries, self.gone, {}, []
        self.ready.clear()
        return entries, gone


@dataclass
class IndexStats:
    """Counters for /metrics and the benchmarks."""

    indexed: int = 0  # modules (re)indexed
    failures: int = 0  # indexing attempts that failed (kept the previous entry)
    details_built: int = 0  # details computed (not found on disk)
    writes: int = 0  # index.json writes
    passes: int = 0  # complete passes over every listable module
    last_pass: float = field(default_factory=time.time)


class ModuleIndex:
    """Listable modules with their versions and latest details, served from memory."""

    def __init__(
        self,
        root: Path,
        sources: Sources,
        resolve: Resolve,
        versions: Versions,
        details: DetailsService,
        refresh_seconds: float,
        org_info: Callable[[ModuleAddress], OrgInfo | None] | None = None,
        on_gone: Callable[[ModuleAddress], None] | None = None,
        enabled: bool = True,
        builds: bool = True,
        listed: Callable[[], bool] | None = None,
    ) -> None:
        self.path = root / FILE_NAME
        self.store = DetailsStore(root / DETAILS_DIR)
        self._sources = sources  # every listable module (a pass)
        # False while an org's first listing is still being fetched: what `sources` lacks then may
        # only not be listed yet, so nothing is dropped and no pass counts as the first index.
        self._listed = listed or (lambda: True)
        self._resolve = resolve  # one listable module, O(1)
        self._by_repository: dict[str, set[ModuleAddress]] = {}
        self._readme: dict[str, set[ModuleAddress]] = {}  # README word -> modules (search)
        self._versions = versions
        self._details = details
        self._org_info = org_info or (lambda _a: None)
        self.on_gone = on_gone or (lambda _a: None)
        # Rule modules are looked at again this often (the tag cache's TTL, at least a minute).
        self.refresh_seconds = max(60.0, refresh_seconds)
        self.enabled = enabled
        # False in the serving process when the index process builds: load, then take() its entries.
        self.builds = builds
        self._entries: dict[ModuleAddress, IndexEntry] = {}
        self._view: _View | None = None
        self._view_stale = False
        self._view_built = 0.0
        self._pending: OrderedDict[ModuleAddress, None] = OrderedDict()
        # New modules listed with their versions, details still to build: done once nothing is
        # pending, so a large org is listed at the speed of `ls-remote`, then described.
        self._later: OrderedDict[ModuleAddress, None] = OrderedDict()
        # Versions someone asked for whose details are not on disk: read first, in the background
        # (a request never runs git: it gets DetailsPending and asks again).
        self._wanted: OrderedDict[tuple[ModuleAddress, str], None] = OrderedDict()
        self._reading = 0  # versions being read now
        self._active: set[ModuleAddress] = set()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._dirty = False
        self._complete = False
        self._pass: set[ModuleAddress] | None = None  # what the running pass has still to index
        self._pass_listed = False  # it started with every org listed: once done, the index is complete
        self.stats = IndexStats()
        # With Redis (browse.py sets these): only the lease holder indexes; the others adopt() what it wrote.
        self.leading: Callable[[], bool] = lambda: True
        self.on_written: list[Callable[[str], Awaitable[None]]] = []
        # In the index process: what changed since the serving process was sent it (indexer.py).
        self.changes: ChangeLog | None = None
        # In the serving process: details someone asked for go to the index process, which reads them.
        self.on_wanted: Callable[[ModuleAddress, str], None] | None = None
        self._remote_queued = 0  # the index process's queue depth (take_status)

    # --- reads (event loop, no I/O) -----------------------------------------------------------

    @property
    def complete(self) -> bool:
        """True once every listable module was indexed at least once (or loaded from disk)."""
        return self._complete

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[IndexEntry]:
        """Every listed module now (unordered; lists and search use the sorted view)."""
        return list(self._entries.values())

    def get(self, address: ModuleAddress) -> IndexEntry | None:
        """The indexed module at `address`, or None when it is not listed."""
        return self._entries.get(address)

    def view(self) -> _View:
        """The current generation's sorted entries, rebuilt lazily after a change.

        While the indexer is busy (the first pass over a large org changes the index many
        times a second) a view up to VIEW_STALE_SECONDS old is served, so requests do not
        rebuild it after every module; once the indexer is idle, the next request sees all.
        """
        view = self._view
        if view is not None and (
            not self._view_stale or (self.queue_depth() and time.monotonic() - self._view_built < VIEW_STALE_SECONDS)
        ):
            return view
        self._view = view = _View(self._entries.values(), self._readme)
        self._view_stale = False
        self._view_built = time.monotonic()
        return view

    def listed(
        self,
        keep: Callable[[IndexEntry], bool],
        memo_key: tuple[object, ...] | None = None,
        namespaces: Iterable[str] | None = None,
    ) -> list[IndexEntry]:
        """Listed modules for which `keep` holds, in list order; remembered per `memo_key`.

        `namespaces`, when given, bounds the work to those namespaces' modules.
        """
        view = self.view()

        def make() -> list[IndexEntry]:
            if namespaces is None:
                pool: Iterable[IndexEntry] = view.ordered
            else:
                wanted = sorted(set(namespaces), key=lambda n: (n.casefold(), n))
                pool = [e for n in wanted for e in view.by_namespace.get(n, ())]
            return [e for e in pool if keep(e)]

        if memo_key is None:
            return make()
        return view.remembered(("list", *memo_key), make)

    def search(
        self,
        query: str,
        keep: Callable[[IndexEntry], bool],
        memo_key: tuple[object, ...],
        downloads: Callable[[ModuleAddress], int],
    ) -> list[IndexEntry]:
        """Matching modules, best first (ties: most downloaded, then by address)."""
        view = self.view()

        def make() -> list[IndexEntry]:
            ranked = []
            for entry in view.candidates(query):
                if not keep(entry):
                    continue
                address = entry.address

                def in_readme(word: str, address: ModuleAddress = address) -> bool:
                    return address in view.readme.get(word, ())

                rank = search_rank(query, entry, in_readme)
                if rank is not None:
                    ranked.append(((rank, -downloads(entry.address), str(entry.address)), entry))
            ranked.sort(key=lambda pair: pair[0])
            return [entry for _, entry in ranked]

        return view.remembered(("search", query.casefold(), *memo_key), make)

    def age(self) -> float:
        """Seconds since the last complete pass over every listable module."""
        return max(0.0, time.time() - self.stats.last_pass)

    def queue_depth(self) -> int:
        """Modules waiting to be (re)indexed."""
        return len(self._pending) + len(self._later) + len(self._wanted) + len(self._active) + self._remote_queued

    # --- details (the latest's from disk; others built once, then on disk) ------------------------

    async def details(self, resolved: ResolvedModule, version: IndexedVersion, build: bool) -> ModuleDetails | None:
        """Details of one version: memory, then disk, then (when `build`) computed from the mirror."""
        tagged = version.tagged()
        cached = self._details.cached(resolved, tagged)
        if cached is not None:
            return cached
        loop = asyncio.get_running_loop()
        stored = await loop.run_in_executor(None, self.store.load, resolved.repository, resolved.rule.path, version.sha)
        if stored is not None:
            self._details.remember(resolved, tagged, stored)
            return stored
        if not build:
            return None
        built = await self._details.get(resolved, tagged)
        self.stats.details_built += 1
        await loop.run_in_executor(None, self.store.save, resolved.repository, resolved.rule.path, version.sha, built)
        return built

    def ready_details(self, entry: IndexEntry, version: IndexedVersion) -> ModuleDetails | None:
        """The details of `version` when they are in memory, else None (and see request_details)."""
        resolved = self._resolve(entry.address)
        return self._details.cached(resolved, version.tagged()) if resolved is not None else None

    async def stored_details(self, entry: IndexEntry, version: IndexedVersion) -> ModuleDetails:
        """The details of `version` from memory or disk, never from git: DetailsPending (503) when
        they have not been read yet, and then they are read in the background for the next ask."""
        resolved = self._resolve(entry.address)
        if resolved is None:
            raise ModuleNotFound(f"module {entry.address} is not served by this registry any more")
        found = await self.details(resolved, version, build=False)
        if found is not None:
            return found
        (self.on_wanted or self.want)(entry.address, version.canonical)
        raise DetailsPending(
            f"the details of {entry.address} {version.canonical} are being read from its repository; "
            "ask again in a moment"
        )

    def want(self, address: ModuleAddress, canonical: str) -> None:
        """Read the details of this version next, in the background (someone asked for them)."""
        self._wanted[(address, canonical)] = None
        self._wanted.move_to_end((address, canonical), last=False)
        self._idle.clear()
        self._wake.set()

    async def _read_version(self, address: ModuleAddress, canonical: str) -> None:
        """Build one version's details in the background (at browsing priority: someone asked)."""
        from gitreg.git.pool import Priority, git_priority  # the pool imports nothing of the index

        entry, resolved = self._entries.get(address), self._resolve(address)
        version = entry.find(canonical) if entry is not None else None
        if resolved is None or version is None:
            return
        try:
            with git_priority(Priority.BROWSE):
                await self.details(resolved, version, build=True)
        except GitregError as e:
            log.warning("no details for %s %s: %s", address, canonical, e.message)

    # --- changes --------------------------------------------------------------------------------

    def notice(self, addresses: Iterable[ModuleAddress]) -> None:
        """(Re)index these modules soon (a new module served, an org repository changed)."""
        if not self.leading():
            return  # another replica indexes; its index arrives through adopt()
        for address in addresses:
            self._pending[address] = None
        if self._pending:
            self._idle.clear()
            self._wake.set()

    def notice_repository(self, repository: str) -> None:
        """The tag cache fetched new tags of `repository`: reindex the listed modules it serves.

        (A module not listed yet is indexed anyway: it is pending, or not listable.)
        """
        self.notice(list(self._by_repository.get(repository, ())))

    async def settled(self, timeout: float = 30.0) -> None:
        """Wait until nothing is waiting to be indexed (tests, benchmarks)."""
        await asyncio.wait_for(self._idle.wait(), timeout)

    # --- the background work ------------------------------------------------------------------------

    def load(self) -> None:
        """Read index.json (blocking, at start); a damaged file is set aside, never fatal."""
        remove_leftovers(self.path, _TMP_PREFIX)
        with collector_paused():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                return
            except (OSError, ValueError) as e:
                log.warning("%s could not be read (%s); the index is built again", self.path, type(e).__name__)
                with contextlib.suppress(OSError):
                    os.replace(self.path, self.path.with_name(self.path.name + ".damaged"))
                return
            if self._read(data):
                log.info("loaded %d indexed module(s) from %s", len(self._entries), self.path)

    def _read(self, data: Any) -> bool:
        """Take the entries of an index.json document; False when it is not one."""
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries"), list):
            return False
        for item in data["entries"]:
            entry = IndexEntry.from_json(item)
            if entry is not None:
                self._entries[entry.address] = entry
                self._link(entry)
        self._complete = bool(data.get("complete")) and bool(self._entries)
        return True

    def adopt(self, text: str) -> None:
        """Replace the index with the one another replica built (its index.json text); kept on disk here too."""
        try:
            data = json.loads(text)
        except ValueError:
            return
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            return
        for entry in list(self._entries.values()):
            self._unlink(entry)
        self._entries.clear()
        self._read(data)
        self.stats.last_pass = time.time()
        self._changed()

    def take(self, entries: Iterable[IndexEntry], dropped: Iterable[ModuleAddress] = ()) -> None:
        """Entries the index process built (or dropped), replacing these only (serving process)."""
        for entry in entries:
            self._set(entry)
        for address in dropped:
            self._drop(address, None)  # the index process logged why

    def status(self) -> dict[str, Any]:
        """What the serving process shows of this index process's work (/readyz, /metrics)."""
        return {"complete": self._complete, "queued": self.queue_depth(), **asdict(self.stats)}

    def take_status(self, status: Mapping[str, Any]) -> None:
        """The index process's status() (serving process)."""
        self._complete = bool(status.get("complete"))
        self._remote_queued = int(status.get("queued") or 0)
        for name in asdict(self.stats):
            value = status.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                setattr(self.stats, name, value)

    async def lifetime(self) -> AsyncIterator[None]:
        """Load, index in the background while the app runs, write once more at shutdown."""
        if not self.enabled:
            yield
            return
        await asyncio.get_running_loop().run_in_executor(None, self.load)
        if not self.builds:  # the index process builds, writes index.json, and sends its changes
            yield
            return
        tasks = [asyncio.ensure_future(self._schedule()), asyncio.ensure_future(self._flusher())]
        tasks += [asyncio.ensure_future(self._worker()) for _ in range(WORKERS)]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.flush()

    async def _schedule(self) -> None:
        """A pass at start and every refresh_seconds; modules no longer listable drop out.

        A pass indexes every rule module again (the tag cache answers from memory within its
        TTL, so that is no git call until the TTL expired) but an org module only when its
        repository changed (the org source's marker, e.g. GitHub's pushed_at), so a pass over
        an org where nothing changed costs no git at all.
        """
        while True:
            if not self.leading():
                await asyncio.sleep(1.0)  # another replica indexes; take over within a second of its lease
                continue
            listed = self._listed()
            listable = self._sources()
            if listed:
                for address in [a for a in self._entries if a not in listable]:
                    self._drop(address, "no rule or org serves it any more")
            todo = [a for a in listable if self._needs_index(a)]
            self._pass = (self._pass or set()) | set(todo)
            self._pass_listed = listed
            if not self._pass:
                self._pass_end()
            self.notice(todo)
            for _ in range(int(self.refresh_seconds)):
                await asyncio.sleep(1.0)
                if not self.leading() or (not listed and self._listed()):
                    break  # (listed now: the pass that makes the index complete starts at once)

    def _needs_index(self, address: ModuleAddress) -> bool:
        entry = self._entries.get(address)
        org = self._org_info(address)
        return entry is None or org is None or org.marker != entry.marker or not entry.details

    def _pass_end(self) -> None:
        if self._pass_listed:
            self._pass_done()
        else:
            self._pass = None

    def _pass_done(self) -> None:
        self._pass = None
        self._complete = True
        self.stats.passes += 1
        self.stats.last_pass = time.time()
        self._dirty = True

    def _busy(self) -> bool:
        return bool(self._pending or self._later or self._wanted or self._active or self._reading)

    async def _worker(self) -> None:
        while True:
            while not self._pending and not self._later and not self._wanted:
                if not self._busy():
                    self._idle.set()
                self._wake.clear()
                await self._wake.wait()
            if self._wanted:  # someone is waiting for these
                (wanted, canonical), _ = self._wanted.popitem(last=False)
                self._reading += 1
                try:
                    await self._read_version(wanted, canonical)
                finally:
                    self._reading -= 1
                if not self._busy():
                    self._idle.set()
                continue
            queue = self._pending if self._pending else self._later
            address, _ = queue.popitem(last=False)
            if address in self._active:  # another worker has it: index it again after that one
                queue[address] = None
                await asyncio.sleep(0.01)
                continue
            self._active.add(address)
            try:
                await self._index(address, build=queue is self._later)
            except asyncio.CancelledError:
                raise
            except Exception:
                self.stats.failures += 1
                log.exception("indexing %s failed", address)
            finally:
                self._active.discard(address)
                if self._pass is not None:
                    self._pass.discard(address)
                    if not self._pass:
                        self._pass_end()
                if not self._busy():
                    self._idle.set()

    async def _index(self, address: ModuleAddress, build: bool = False) -> None:
        """Versions, then (when the latest changed) details: one module's entry made current.

        A module not listed yet is listed with its versions first; its details, unless they
        are on disk already, are built later (`build`), once no module waits for its versions.
        """
        resolved = self._resolve(address)
        if resolved is None:
            if self._listed():  # (else its org's page may only not have arrived yet)
                self._drop(address, "no rule or org serves it any more")
            return
        old = self._entries.get(address)
        if (
            build
            and old is not None
            and not old.details
            and old.repository == resolved.repository
            and old.path == resolved.rule.path
        ):
            # Listed a moment ago with its versions: only its details are missing (and the tag
            # cache's TTL may have run out since, which must not cost a second ls-remote).
            versions, newest = old.versions, old.latest
        else:
            try:
                resolved, found = await self._versions(address)
            except ModuleNotFound as e:
                self._drop(address, e.message)
                self.on_gone(address)
                return
            except GitregError as e:
                self.stats.failures += 1
                log.warning("not indexing %s now (the last indexed state stays): %s", address, e.message)
                return
            latest = found.latest()
            if latest is None:
                self._drop(address, "no tag is a SemVer version")
                return
            versions = tuple(IndexedVersion(tv.canonical, tv.tag, tv.sha) for tv in found.versions)
            newest = next(v for v in versions if v.tag == latest.tag)
            old = self._entries.get(address)
        org = self._org_info(address)
        details: ModuleDetails | None = None
        if (
            old is not None
            and old.details
            and old.latest == newest
            and old.repository == resolved.repository
            and old.path == resolved.rule.path
        ):
            description, published, words = old.description, old.published_at, old.words
        elif not build and old is None:
            # New: listed now with its versions; described later, from disk when it is there
            # (a restart that lost index.json), else built (listing is not held up by either).
            self._later[address] = None
            description, published, words = "", "", ""
        else:
            try:
                details = await self.details(resolved, newest, build=True)
            except GitregError as e:
                self.stats.failures += 1
                log.warning("no details for %s %s (listed without them): %s", address, newest.canonical, e.message)
            description = details.description if details else ""
            published = details.published_at if details else ""
            words = readme_words(details.root.get("readme", "")) if details else ""
        entry = IndexEntry(
            address=address,
            repository=resolved.repository,
            path=resolved.rule.path,
            source=(org.source if org and org.source else _web_url(resolved.clone_url)),
            versions=versions,
            latest=newest,
            description=(org.description if org and org.description else description),
            published_at=published,
            verified=resolved.rule.verified,
            topics=org.topics if org else (),
            words=words,
            marker=org.marker if org else "",
            details=details is not None or (old is not None and old.details and old.latest == newest),
            indexed_at=time.time(),
        )
        self.stats.indexed += 1
        if old != _same_time(entry, old):
            self._set(entry)

    def _set(self, entry: IndexEntry) -> None:
        old = self._entries.get(entry.address)
        if old is not None:
            self._unlink(old)
        self._entries[entry.address] = entry
        self._link(entry)
        self._changed()
        if self.changes is not None:
            self.changes.record(entry.address, entry)

    def _drop(self, address: ModuleAddress, why: str | None) -> None:
        old = self._entries.pop(address, None)
        if old is not None:
            self._unlink(old)
            if why is not None:
                log.info("%s is no longer listed: %s", address, why)
            self._changed()
            if self.changes is not None:
                self.changes.record(address, None)

    def _link(self, entry: IndexEntry) -> None:
        self._by_repository.setdefault(entry.repository, set()).add(entry.address)
        for word in entry.words.split():
            self._readme.setdefault(word, set()).add(entry.address)

    def _unlink(self, entry: IndexEntry) -> None:
        self._by_repository.get(entry.repository, set()).discard(entry.address)
        for word in entry.words.split():
            modules = self._readme.get(word)
            if modules is not None:
                modules.discard(entry.address)
                if not modules:
                    del self._readme[word]

    def _changed(self) -> None:
        self._view_stale = True
        self._dirty = True

    async def flush(self) -> None:
        """Write index.json if anything changed (off the event loop)."""
        if not self._dirty:
            return
        self._dirty = False
        # Entries are immutable: a snapshot of the list is all the loop does; serializing
        # thousands of them (tens of ms) would hold up every request.
        entries, complete = list(self._entries.values()), self._complete
        try:
            text = await asyncio.get_running_loop().run_in_executor(None, self._write_entries, entries, complete)
        except OSError as e:
            self._dirty = True
            log.warning("could not write %s: %s", self.path, e)
            return
        for listener in self.on_written:  # with Redis: the other replicas load what this one wrote
            await listener(text)

    def _write_entries(self, entries: list[IndexEntry], complete: bool) -> str:
        """Blocking: serialize and write index.json; its text."""
        ordered = sorted(entries, key=lambda e: str(e.address))
        encoded = (json.dumps(e.to_json()) for e in ordered)
        text = json_document({"format": FORMAT, "complete": complete}, "entries", encoded)
        self._write(text)
        return text

    def _write(self, text: str) -> None:
        # Not fsynced (written every FLUSH_SECONDS while indexing): after a power loss a damaged
        # file is set aside and the index built again.
        write_atomically(self.path, text, _TMP_PREFIX, durable=False)
        self.stats.writes += 1

    async def _flusher(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            await self.flush()


def _same_time(entry: IndexEntry, old: IndexEntry | None) -> IndexEntry:
    """`entry` with the old entry's `indexed_at`, so an unchanged module does not count as a change."""
    if old is None:
        return entry
    from dataclasses import replace

    return replace(entry, indexed_at=old.indexed_at)


def _web_url(clone_url: str) -> str:
    from gitreg.core.urls import web_url

    return web_url(clone_url)


class IndexCollector:
    """Prometheus view of the index (read at scrape time)."""

    def __init__(self, index: ModuleIndex, process_starts: Callable[[], int] | None = None) -> None:
        self.index = index
        self.process_starts = process_starts  # gitreg serve: how many index processes were started

    def collect(self):  # type: ignore[no-untyped-def]
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        index = self.index
        yield GaugeMetricFamily("gitreg_index_modules", "Modules listed by the index.", value=len(index))
        yield GaugeMetricFamily(
            "gitreg_index_complete",
            "1 once every listable module was indexed at least once.",
            value=1 if index.complete else 0,
        )
        yield GaugeMetricFamily(
            "gitreg_index_age_seconds", "Seconds since the index's last complete pass.", value=index.age()
        )
        yield GaugeMetricFamily(
            "gitreg_index_queue_depth", "Modules waiting to be (re)indexed.", value=index.queue_depth()
        )
        yield CounterMetricFamily(
            "gitreg_index_failures", "Indexing attempts that failed (the last state stays).", value=index.stats.failures
        )
        yield CounterMetricFamily(
            "gitreg_index_process_starts",
            "Index processes started: 1, and one more for each that died and was replaced (0: no index process).",
            value=self.process_starts() if self.process_starts is not None else 0,
        )
