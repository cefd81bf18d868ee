"""What the usage scan found, per repository, in memory and in `[storage] path/usage.json`.

A repository's entry keeps the push marker and the default-branch commit it was read at: an
entry whose marker has not moved is not read again (no git call), one whose commit has not
moved costs one `ls-remote`. The file is written whole (tmp + rename) off the event loop after
a scan changed something, and read at start, so a restart reads no unchanged repository again.
Touched from the event loop only; the per-address view is kept up to date entry by entry.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Mapping
from concurrent.futures import Executor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gitreg.storage.files import run_file_work, write_atomically
from gitreg.usage.model import Consumer

log = logging.getLogger(__name__)

FILE_NAME = "usage.json"
FORMAT = 1


@dataclass(frozen=True)
class RepoScan:
    """One repository as the scan last read it."""

    repository: str  # its https clone URL (what the identity door's visibility takes)
    full_name: str  # as its host names it: "acme/app" or "group/sub/app"
    web_url: str
    namespace: str  # the registry namespace of the org that listed it
    marker: str  # the host's push marker when it was read
    commit: str  # the default branch's commit read ("" for an empty repository)
    consumers: tuple[Consumer, ...] = ()
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["consumers"] = [asdict(c) for c in self.consumers]
        data["notes"] = list(self.notes)
        return data

    @classmethod
    def from_json(cls, data: Any) -> RepoScan | None:
        """An entry read back from usage.json, or None when it is damaged."""
        try:
            consumers = tuple(Consumer(**c) for c in data["consumers"])
            fields = {k: data[k] for k in ("repository", "full_name", "web_url", "namespace", "marker", "commit")}
            if not all(isinstance(v, str) for v in fields.values()):
                return None
            return cls(**fields, consumers=consumers, notes=tuple(str(n) for n in data.get("notes", ())))
        except (KeyError, TypeError, AttributeError):
            return None


class UsageStore:
    """Every scanned repository (clone URL -> RepoScan) and, per module address, its consumers."""

    def __init__(self, path: Path | None, executor: Executor | None = None) -> None:
        self.path = path  # None: kept in memory only (`gitreg check --probe --consumers`)
        self.executor = executor
        self._repos: dict[str, RepoScan] = {}
        self._by_address: dict[str, dict[str, tuple[Consumer, ...]]] = {}  # address -> repository -> its blocks
        self._dirty = False

    def get(self, repository: str) -> RepoScan | None:
        return self._repos.get(repository)

    def repositories(self) -> Mapping[str, RepoScan]:
        return self._repos

    def consumers(self, address: str) -> list[tuple[RepoScan, Consumer]]:
        """The `module` blocks that call `address` ("acme/vpc/aws"), by repository name then file and line."""
        found = [
            (self._repos[repo], consumer)
            for repo, consumers in self._by_address.get(address, {}).items()
            for consumer in consumers
        ]
        found.sort(key=lambda rc: (rc[0].full_name.lower(), rc[1].file, rc[1].line))
        return found

    def put(self, scan: RepoScan) -> None:
        """Record a repository's scan (replacing its last one)."""
        self._drop_consumers(scan.repository)
        self._repos[scan.repository] = scan
        grouped: dict[str, list[Consumer]] = {}
        for consumer in scan.consumers:
            grouped.setdefault(consumer.address, []).append(consumer)
        for address, consumers in grouped.items():
            self._by_address.setdefault(address, {})[scan.repository] = tuple(consumers)
        self._dirty = True

    def keep_only(self, repositories: Iterable[str]) -> int:
        """Forget the repositories not in `repositories` (no longer listed); how many were forgotten."""
        keep = set(repositories)
        gone = [repo for repo in self._repos if repo not in keep]
        for repo in gone:
            self._drop_consumers(repo)
            del self._repos[repo]
        self._dirty = self._dirty or bool(gone)
        return len(gone)

    def _drop_consumers(self, repository: str) -> None:
        old = self._repos.get(repository)
        if old is None:
            return
        for address in {c.address for c in old.consumers}:
            users = self._by_address.get(address)
            if users is not None:
                users.pop(repository, None)
                if not users:
                    del self._by_address[address]

    # ---- usage.json --------------------------------------------------------------------------

    async def load(self) -> int:
        """Read usage.json (off the loop), in place of what is in memory; how many repositories it held
        (0: none, or unreadable). Taken in slices: the loop is free between them."""
        if self.path is None:
            return 0
        entries = await run_file_work(self.executor, _read, self.path)
        self._repos, self._by_address = {}, {}
        for start in range(0, len(entries), 2000):
            for entry in entries[start : start + 2000]:
                self.put(entry)
            await asyncio.sleep(0)
        self._dirty = False
        return len(entries)

    async def flush(self) -> None:
        """Write usage.json when something changed since the last write (encoded and written off the loop)."""
        if self.path is None or not self._dirty:
            return
        self._dirty = False
        entries = list(self._repos.values())  # a snapshot: entries are immutable
        try:
            await run_file_work(self.executor, _write, self.path, entries)
        except OSError as e:
            self._dirty = True
            log.warning("could not write %s: %s", self.path, e.strerror or e)


def _read(path: Path) -> list[RepoScan]:
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as e:
        log.warning("%s is unreadable (%s); every repository is read again", path, e)
        return []
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("repositories"), list):
        return []
    return [entry for item in data["repositories"] if (entry := RepoScan.from_json(item)) is not None]


def _write(path: Path, entries: list[RepoScan]) -> None:
    document = json.dumps({"format": FORMAT, "repositories": [e.to_json() for e in entries]})
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, document, prefix=".usage-")
