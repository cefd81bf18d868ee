"""orgs.json: the org listings as last enumerated, so a restart serves them before the API answers.

The document (format 1): `{"format": 1, "owners": [{"address", "provider", "api_url",
"group", "full_name"}, ...], "orgs": [{"provider", "api_url", "group", "enumerated_at",
"repositories": [RepoRecord.to_json(), ...]}, ...]}`, one entry per org that has a listing
(`owners`, who holds each address, orgs.owners, is optional: older files lack it). Written
whole and atomically (`.orgs-*.tmp` renamed over it) off the event loop, only when the
listing changed since the last write; read at start, where a damaged file is set aside as
`orgs.json.damaged` and the listings start empty. The file mechanics are kept apart from the
document (`encode`/`decode`) so that they can move to one shared state-file helper.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from gitreg.config.model import OrgConfig
from gitreg.core.names import ModuleAddress
from gitreg.forges.records import RepoRecord
from gitreg.orgs.model import OrgState
from gitreg.orgs.owners import Held, Owners, owner_items, parse_owners
from gitreg.storage.files import collector_paused, drained, json_pieces, remove_leftovers, write_atomically

log = logging.getLogger(__name__)

FILE_NAME = "orgs.json"
FORMAT = 1
_TMP_PREFIX = ".orgs-"  # temp files of write_atomically (`.orgs-*.tmp`)

# How many container levels loads_sliced walks in Python: the document, its `orgs`, an org,
# its `repositories`; each repository is then one small C call.
_WALKED_LEVELS = 4
_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")

# One org's listing read back: its state, its repositories, when it was enumerated.
Loaded = tuple[OrgState, list[RepoRecord], float | None]


# An org's listing as written: its config, when it was enumerated, its records (never mutated once taken).
Listed = tuple[OrgConfig, float | None, Mapping[str, RepoRecord]]


def encode(orgs: Iterable[OrgState], owners: Iterable[dict[str, Any]] | None = None) -> str:
    """The orgs.json document of the orgs that have a listing (and who owns each address: orgs.owners)."""
    return _encode([(s.config, s.enumerated_at, s.records) for s in orgs if s.records is not None], owners)


def _encode(listed: Sequence[Listed], owners: Iterable[dict[str, Any]] | None) -> str:
    return "".join(_pieces(listed, owners))


def _pieces(listed: Sequence[Listed], owners: Iterable[dict[str, Any]] | None) -> Iterator[str]:
    """The document in pieces, each repository and owner encoded by itself (one json.dumps of 230,000
    of them holds the GIL, so the event loop, for 0.3 s), never joined (see write_atomically)."""
    entries = (
        json_pieces(
            {"provider": org.provider, "api_url": org.api_url, "group": org.group, "enumerated_at": enumerated_at},
            # In the listing's order: sorting 230,000 (name, record) pairs is one C call that held the
            # GIL, so the loop, for 0.2 s when they came in the API's order (#22).
            {"repositories": (json.dumps(r.to_json()) for r in records.values())},
        )
        for org, enumerated_at, records in listed
    )
    lists: dict[str, Iterable[str | Iterable[str]]] = {}
    if owners is not None:
        lists["owners"] = (json.dumps(o) for o in owners)
    lists["orgs"] = entries
    return json_pieces({"format": FORMAT}, lists)


def decode(data: Any, orgs: Sequence[OrgState]) -> list[Loaded]:
    """The listings of an orgs.json document for the orgs still configured (and not listed yet);
    the repositories taken are removed from `data` as they are decoded."""
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("orgs"), list):
        return []
    found: list[Loaded] = []
    taken: set[int] = set()
    for entry in data["orgs"]:
        if not isinstance(entry, dict):
            continue
        for s in orgs:
            key = (s.config.provider, s.config.api_url, s.config.group.lower())
            if key != (entry.get("provider"), entry.get("api_url"), str(entry.get("group", "")).lower()):
                continue
            items = entry.get("repositories")
            if not isinstance(items, list) or s.records is not None or s.index in taken:
                break
            # (The decoded items are freed one by one as they become records: see drained.)
            records = [r for r in (RepoRecord.from_json(item) for item in drained(items)) if r is not None]
            when = entry.get("enumerated_at")
            enumerated_at = float(when) if isinstance(when, (int, float)) and not isinstance(when, bool) else None
            found.append((s, records, enumerated_at))
            taken.add(s.index)
            break
    return found


class OrgStore:
    """orgs.json for a catalog's orgs: read once at start, written when changed (event loop only)."""

    def __init__(
        self, path: Path | None, executor: Executor | None, orgs: Sequence[OrgState], owners: Owners | None = None
    ) -> None:
        self.path = path  # None: not persisted (gitreg check --probe)
        self.owners = owners  # who holds each address: written with the listings, read back first
        self.executor = executor
        self._orgs = orgs
        self._dirty = False
        self._write_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._soon: asyncio.Task[None] | None = None  # a flush_soon waiting its delay

    def changed(self) -> None:
        """The listings differ from what the file holds: the next flush writes it."""
        self._dirty = True

    async def read(self) -> list[Loaded]:
        """The listings in the file (read off the loop), for orgs without one; nothing without a path."""
        if self.path is None:
            return []
        # Read and decoded on a thread: 230,000 repositories take seconds, and the port is open meanwhile.
        owners, listings = await asyncio.get_running_loop().run_in_executor(
            self.executor, _read_listings, self.path, self._orgs
        )
        if self.owners is not None and owners is not None:
            self.owners.take_loaded(owners)  # (a file without `owners` predates them: none held)
        return listings

    def loaded(self) -> None:
        """What was just read and taken is what the file holds: nothing to write (unless owners were
        settled that it lacks: a file older than `owners`)."""
        self._dirty = self.owners is not None and self.owners.dirty

    async def flush(self) -> None:
        """Write orgs.json if the listing changed since the last write (off the event loop)."""
        if self.path is None:
            return
        async with self._write_lock:
            if not self._dirty:
                return
            # A snapshot (references to listings never mutated, a copy of the owners), encoded on a thread.
            listed = [(s.config, s.enumerated_at, s.records) for s in self._orgs if s.records is not None]
            held = self.owners.snapshot if self.owners is not None else None  # (copied on the thread)
            self._dirty = False
            if self.owners is not None:
                self.owners.dirty = False
            # Shielded: cancelled in the middle (shutdown stops the enumeration that flushes), the
            # write still finishes before the cancellation goes on, so close()'s last flush never
            # finds the listing marked written while the file is not.
            write = asyncio.get_running_loop().run_in_executor(
                self.executor, _write, self.path, listed, self._orgs, held
            )
            try:
                await asyncio.shield(write)
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    await write
                raise
            except OSError as e:
                self._dirty = True
                log.warning("could not write %s: %s", self.path, e)

    def flush_soon(self, delay: float = 0.0) -> None:
        """Flush in a task of its own (a webhook's answer does not wait for the disk), after `delay`
        seconds: what changes meanwhile is written with it (one write for a burst of webhooks)."""
        if self._soon is not None:
            return  # one is due: it writes this change too
        self._soon = task = asyncio.ensure_future(self._flush_after(delay))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _flush_after(self, delay: float) -> None:
        await asyncio.sleep(delay)
        self._soon = None  # (a change from here on asks for a write of its own)
        await self.flush()

    async def close(self) -> None:
        """At shutdown: let pending flushes finish (a flush cancelled in the middle of its write
        would leave the listing marked written when it may not be), then write what changed."""
        if self._soon is not None:
            self._soon.cancel()  # (still waiting: the last flush below writes its change)
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.flush()


def _write(
    path: Path,
    listed: Sequence[Listed],
    orgs: Sequence[OrgState],
    held: Callable[[], Mapping[ModuleAddress, Held]] | None,
) -> None:
    """Write a snapshot taken on the loop (the owners copied here), on a thread (230,000 repositories
    take seconds to encode), the collector paused: what it makes is freed as it goes, and collections
    walking it on this thread held the GIL, so the event loop, 40-130 ms at a time (#22)."""
    with collector_paused():
        owners = owner_items(orgs, held()) if held is not None else None
        write_atomically(path, _pieces(listed, owners), _TMP_PREFIX)


def read_owners(path: Path) -> Any:
    """orgs.json's `owners` list, read only (blocking; nothing is set aside): None when there is none."""
    try:
        with collector_paused():
            data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data.get("owners") if isinstance(data, dict) and data.get("format") == FORMAT else None


def _read_listings(path: Path, orgs: Sequence[OrgState]) -> tuple[dict[ModuleAddress, Held] | None, list[Loaded]]:
    """The file's owners (None without them) and its listings, decoded (on a thread: only each
    org's config and index are read)."""
    data = _read_json(path)
    owners = data.get("owners") if isinstance(data, dict) and data.get("format") == FORMAT else None
    with collector_paused(keep=True):  # 10,000 repositories: a million objects, all kept (see storage.files)
        return (None if owners is None else parse_owners(orgs, owners)), decode(data, orgs)


def _read_json(path: Path) -> Any:
    """The file's JSON; None when missing; a damaged file is set aside (never fatal)."""
    remove_leftovers(path, _TMP_PREFIX)
    try:
        with collector_paused(keep=True), path.open(encoding="utf-8") as f:
            return loads_sliced("".join(iter(lambda: f.read(1 << 20), "")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as e:
        log.warning("%s could not be read (%s); the org listings start empty", path, type(e).__name__)
        with contextlib.suppress(OSError):
            os.replace(path, path.with_name(path.name + ".damaged"))
        return None


def loads_sliced(text: str, levels: int = _WALKED_LEVELS) -> Any:
    """`json.loads(text)`, with the outer `levels` of arrays and objects walked item by item.

    One json.loads of a large orgs.json (80 MiB for 230,000 repositories) is a single C call
    that holds the GIL, and with it the event loop, for over a second even on a worker thread;
    item by item, the loop's thread gets the GIL back between items (as json_document does
    for writing). ValueError (json.JSONDecodeError) for text that is not one JSON document.
    """
    value, end = _walk(text, _SPACE.match(text).end(), levels)  # type: ignore[union-attr]
    if _SPACE.match(text, end).end() != len(text):  # type: ignore[union-attr]
        raise json.JSONDecodeError("Extra data", text, end)
    return value


def _walk(text: str, i: int, levels: int) -> tuple[Any, int]:
    """The JSON value at `text[i]` and the index after it."""
    opener = text[i : i + 1]
    if levels <= 0 or opener not in ("[", "{"):
        return _DECODER.raw_decode(text, i)
    closer = "]" if opener == "[" else "}"
    items: list[Any] = []
    fields: dict[str, Any] = {}
    i = _skip(text, i + 1)
    if text[i : i + 1] == closer:
        return (items if opener == "[" else fields), i + 1
    while True:
        if opener == "{":
            if text[i : i + 1] != '"':
                raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, i)
            key, i = _DECODER.raw_decode(text, i)
            i = _skip(text, i)
            if text[i : i + 1] != ":":
                raise json.JSONDecodeError("Expecting ':' delimiter", text, i)
            fields[key], i = _walk(text, _skip(text, i + 1), levels - 1)
        else:
            value, i = _walk(text, i, levels - 1)
            items.append(value)
        i = _skip(text, i)
        found = text[i : i + 1]
        if found == closer:
            return (items if opener == "[" else fields), i + 1
        if found != ",":
            raise json.JSONDecodeError(f"Expecting ',' or '{closer}'", text, i)
        i = _skip(text, i + 1)


def _skip(text: str, i: int) -> int:
    return _SPACE.match(text, i).end()  # type: ignore[union-attr]
