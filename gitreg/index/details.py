"""Module details: what the details endpoints and pages show of one module at one commit.

DetailsService reads them: the commit's files from git (tree.py, in the git pool), what they
declare parsed in worker processes (declarations.py run by parse_workers.py) under a
wall-clock budget per module, so no README or `.tf` file can hold the server's GIL. Details
depend only on the commit, so they are cached by (repository, path, tag, commit SHA) in a
bounded LRU (and kept on disk by the index: persist.py).

A read cut short by its budget, or by a parse worker that stopped, is not a result (the host
was busy, the worker was stopped or killed): it raises DetailsUnfinished, nothing is cached or
kept, and the index reads it again later. What a file itself causes (a syntax error, a file too
large, a parser out of memory) is a note in the details: the rest still shows.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cachetools import LRUCache

from gitreg.config.model import IndexConfig
from gitreg.core.errors import Overloaded
from gitreg.core.flight import InFlight
from gitreg.core.urls import origin_label
from gitreg.git.pool import Priority, git_priority
from gitreg.index.declarations import (
    directory_details,
    is_declarations,
    merge_declarations,
    no_declarations,
    parse_request,
    readme_of,
)
from gitreg.index.model import DetailsUnfinished
from gitreg.index.parse_workers import BudgetExceeded, ParseWorkers, WorkerFailed, WorkersClosed
from gitreg.index.tree import CommitTree, read_commit

if TYPE_CHECKING:  # annotations only
    from gitreg.config.rules import ResolvedModule
    from gitreg.core.versions import TaggedVersion
    from gitreg.git.mirror import MirrorGit
    from gitreg.git.pool import GitPool
    from gitreg.storage.mirrors import MirrorStore

log = logging.getLogger(__name__)

CACHE_ENTRIES = 256


@dataclass(frozen=True)
class ModuleDetails:
    """What the details endpoints show about one module at one commit (JSON-ready parts)."""

    description: str
    published_at: str
    root: dict[str, Any]
    submodules: list[dict[str, Any]] = field(default_factory=list)
    examples: list[dict[str, Any]] = field(default_factory=list)  # each `examples/*` directory
    archive_sha256: str | None = None  # of the archive of this commit and path (index.tree.CommitTree)


class DetailsService:
    """Details per (repository, path, tag, commit), from the mirrors, cached and de-duplicated.

    The LRU and the in-flight map are touched from the event loop only (cachetools is not
    thread-safe). The git work runs in the app's executor; the parsing in this service's
    worker processes (ParseWorkers), within `parse_seconds` per module (`[index] parse_seconds`:
    python-hcl2 reads about 100 KB of ordinary .tf a second, hostile files at the 512 KB cap take
    10-30 s), so hostile content never holds the server's GIL. close() stops the workers (the app's cleanup calls it).
    """

    def __init__(
        self,
        mirrors: MirrorStore,
        git: MirrorGit,
        pool: GitPool,
        entries: int = CACHE_ENTRIES,
        parse_seconds: float = IndexConfig.parse_seconds,
    ) -> None:
        self.mirrors = mirrors
        self.git = git
        self.pool = pool
        self.parse_seconds = parse_seconds
        self.workers = ParseWorkers(f"{parse_request.__module__}:{parse_request.__name__}")
        self._cache: LRUCache[tuple[str, str, str, str], ModuleDetails] = LRUCache(maxsize=entries)
        self._inflight: InFlight[tuple[str, str, str, str], ModuleDetails] = InFlight(self._done)
        self.builds = 0

    async def get(self, resolved: ResolvedModule, tagged: TaggedVersion) -> ModuleDetails:
        """The details of `resolved` at `tagged`; GitregError when the mirror cannot be read,
        DetailsUnfinished when the parse was cut short (nothing is cached then)."""
        key = (resolved.repository, resolved.rule.path, tagged.tag, tagged.sha)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        # Shielded: a reader who leaves does not stop the build others (or the next one) wait for.
        return await self._inflight.wait(self._inflight.join(key, lambda: self._build(resolved, tagged)))

    def _done(self, key: tuple[str, str, str, str], fut: asyncio.Future[ModuleDetails]) -> None:
        if not fut.cancelled() and fut.exception() is None:
            self._cache[key] = fut.result()

    def cached(self, resolved: ResolvedModule, tagged: TaggedVersion) -> ModuleDetails | None:
        """The details when they are in memory, else None (no git)."""
        return self._cache.get((resolved.repository, resolved.rule.path, tagged.tag, tagged.sha))

    def remember(self, resolved: ResolvedModule, tagged: TaggedVersion, details: ModuleDetails) -> None:
        """Keep details read from elsewhere (the index's disk store) in memory."""
        self._cache[(resolved.repository, resolved.rule.path, tagged.tag, tagged.sha)] = details

    async def _build(self, resolved: ResolvedModule, tagged: TaggedVersion) -> ModuleDetails:
        self.workers.warm()  # a worker starts while git works
        # The repository is kept while it is read (a mirror is held from eviction under
        # [storage] max_bytes, a scratch fetch removed after); reading details is background work.
        with git_priority(Priority.BACKGROUND):
            # A mirror when one is kept, else one tag's shallow fetch: never a mirror made just to be
            # described, archive mode (the default) included; its first download makes the mirror.
            async with self.mirrors.snapshot(resolved.repository, tagged.tag, tagged.sha) as mirror:
                self.builds += 1
                tree = await self.pool.run(
                    read_commit, self.git, str(mirror), resolved, tagged, host=origin_label(resolved.repository)
                )
        try:
            return await self._parse(tree)
        except DetailsUnfinished as e:
            e.published_at = tree.published_at
            raise

    async def _parse(self, tree: CommitTree) -> ModuleDetails:
        """The description and each `.tf` file, parsed in a worker one by one, within one `parse_seconds` budget."""
        description = ""
        declared: dict[str, list[dict[str, Any]]] = {path: [] for path in tree.dirs}
        readme = readme_of(tree.dirs[""])[0]
        jobs = [  # (directory, what the notes call it, request): the root's README first, then the root
            (path, f"{path}/{name}" if path else name, {"path": path, "name": name, "data": files[name]})
            for path, files in sorted(tree.dirs.items())
            for name in sorted(n for n in files if n.endswith(".tf"))
        ]
        if readme:
            jobs.insert(0, ("", "the README's description", {"readme": readme}))
        try:
            if jobs:
                async with self.workers.budget(self.parse_seconds) as call:
                    for path, shown, request in jobs:
                        answer = await self._ask(call, request, shown)
                        if isinstance(answer.get("description"), str):
                            description = answer["description"]
                        else:  # declarations, or the note saying why there are none
                            declared[path].append(answer)
        except OSError as e:
            log.warning("no parse worker for the details: %s", e)
            raise Overloaded("gitreg cannot start a process to read the module's files now; try again later") from e
        dirs = {
            path: directory_details(
                path, tree.dirs[path], merge_declarations(declared[path]), tree.notes if path == "" else []
            )
            for path in sorted(tree.dirs)
        }
        root = dirs.pop("")
        submodules = [d for path, d in dirs.items() if path.startswith("modules/")]
        examples = [d for path, d in dirs.items() if path.startswith("examples/")]
        return ModuleDetails(description, tree.published_at, root, submodules, examples, tree.archive_sha256)

    async def _ask(self, call: Callable[[Any], Any], request: dict[str, Any], shown: str) -> dict[str, Any]:
        """One parse_request() answer from the worker, or no declarations and a note saying why
        (what the file itself caused); DetailsUnfinished when the read was cut short (not a result)."""
        try:
            answer = await call(request)
        except BudgetExceeded:
            raise DetailsUnfinished(
                f"reading {shown} took longer than [index] parse_seconds ({self.parse_seconds:g} s); "
                "the details are read again later"
            ) from None
        except WorkersClosed:  # gitreg is stopping: not worth a warning
            raise DetailsUnfinished(f"the parse workers were shut down while reading {shown}", stopping=True) from None
        except WorkerFailed as e:
            log.warning("a parse worker stopped while reading %s: %s", shown, e)
            raise DetailsUnfinished(
                f"the parse worker stopped while reading {shown}; the details are read again later"
            ) from None
        if isinstance(answer, dict) and (
            is_declarations(answer) if "data" in request else isinstance(answer.get("description"), str)
        ):
            return answer
        # The worker's way of saying it ran out of memory (its bound is per file), or an answer we cannot use.
        return no_declarations(f"{shown}: could not be parsed; its contents are not shown")

    async def close(self) -> None:
        """Stop the parse workers (a build still running ends with DetailsUnfinished, keeping nothing)."""
        await self.workers.close()
