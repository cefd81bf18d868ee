"""Blocking file work, done one way: off the event loop with `run_file_work`, written whole with
`write_atomically` (a crash leaves the old file or the new one), temp files a crash left removed
with `remove_leftovers`, large persisted documents encoded (`json_document`) and decoded
(`collector_paused`) without holding the event loop or the collector up, then kept out of the
collector's walks (`keep_long_lived`), sizes measured with `tree_bytes`. The persisted JSON
state files are built on these (`state`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Executor
from pathlib import Path
from typing import IO, Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


async def run_file_work(executor: Executor | None, fn: Callable[..., T], *args: object) -> T:
    """Blocking file work (sizes, renames, removals, pin records) off the event loop.

    At shutdown the app's file executor closes while cancelled work may still run its cleanup
    (a half-made mirror's removal): that last bit of file work then runs inline, instead of
    failing with "cannot schedule new futures after shutdown" and a traceback in the log.
    """
    try:
        return await asyncio.get_running_loop().run_in_executor(executor, fn, *args)
    except RuntimeError:
        if executor is None or not getattr(executor, "_shutdown", False):
            raise
        return fn(*args)


@contextlib.contextmanager
def collector_paused(keep: bool = False) -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a large persisted file becomes objects.

    Loading a 10,000-module index.json makes about a million objects, all kept: the collector
    ran again and again as they piled up, finding nothing, and took 2/3 of the load time.
    Reference counting still frees whatever is dropped meanwhile.

    `keep`: what was made is long-lived (an org listing built on a thread): it is frozen at the
    end (`gc.freeze`, see keep_long_lived), else the first collection after the pause walks every
    object made during it (a million: 0.1-0.4 s holding the GIL, so the event loop too, wherever
    it runs). No collection first: it would be that very walk.

    Pauses on several threads at once nest: the collector runs again when the last one ends (the
    first to end re-enabled it under the others: a webhook's patch ended in the middle of orgs.json's
    write, whose collections then held the loop, #22).
    """
    with _PAUSE_LOCK:
        if _PAUSED.count == 0:
            _PAUSED.enabled = gc.isenabled()
        _PAUSED.count += 1
        gc.disable()
    try:
        yield
        if keep:
            gc.freeze()
    finally:
        with _PAUSE_LOCK:
            _PAUSED.count -= 1
            if _PAUSED.count == 0 and _PAUSED.enabled:
                gc.enable()


class _Paused:
    """How many collector_paused() run now, and whether the collector ran before the first."""

    count = 0
    enabled = False


_PAUSED = _Paused()
_PAUSE_LOCK = threading.Lock()


def drained(items: list[T]) -> Iterator[T]:
    """The items of `items`, in order, each removed from the list as it is taken.

    Dropping a decoded document of 230,000 items at once frees millions of objects in one C call,
    holding the GIL (so the event loop, even from a worker thread) for a quarter of a second;
    taken out one by one, each is freed by itself once its caller is done with it.
    """
    items.reverse()
    while items:
        yield items.pop()


def keep_long_lived() -> None:
    """Take every object alive now out of the cyclic collector's work (`gc.freeze`), once a large
    long-lived state (index.json, an adopted index, the org listings) is loaded.

    Each full collection walked the whole heap: with 10,000 modules indexed, 64-120 ms with the
    event loop stopped (BENCHMARKS.md section 14). Frozen objects are still freed by reference
    counting when dropped (an index replaced by the next one: its entries hold no cycles), so
    repeated calls do not grow memory (measured: 20 adoptions of 10,000 modules); only cyclic
    garbage alive at the call would stay, hence the young generations are collected first
    (cheap: what the call freezes is mostly old already).
    """
    gc.collect(1)
    gc.freeze()


def write_atomically(path: Path, content: str | bytes | Iterable[str], prefix: str, durable: bool = True) -> None:
    """Replace `path` with `content` (text is written as UTF-8) whole: a temp file `<prefix>*.tmp`
    beside it (mode 0600), renamed over it. Text may come in pieces (`json_pieces`): a large
    document is then never one string (its join and encoding, each one C call holding the GIL,
    held the event loop 40-50 ms apiece for a 121 MiB orgs.json, #22).

    A crash leaves the old file or the new one, never half of one (the temp file is removed
    at the next start by whoever owns `prefix`: remove_leftovers). `durable`: fsync the file
    before the rename and the directory after it, so a power loss keeps the new content too.
    Blocking.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(content, bytes):
                f.write(content)
            elif isinstance(content, str):
                f.write(content.encode("utf-8"))
            else:
                _write_pieces(f, content)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)  # the rename itself survives a power loss
        finally:
            os.close(directory)


def _write_pieces(f: IO[bytes], pieces: Iterable[str], batch: int = 1 << 16) -> None:
    """Write text pieces as UTF-8, about `batch` characters at a time."""
    waiting: list[str] = []
    size = 0
    for piece in pieces:
        waiting.append(piece)
        size += len(piece)
        if size >= batch:
            f.write("".join(waiting).encode("utf-8"))
            waiting, size = [], 0
    f.write("".join(waiting).encode("utf-8"))


def remove_leftovers(path: Path, prefix: str) -> None:
    """Delete the temp files beside `path` that a write_atomically(path, ..., prefix) cut short by a
    crash left (the file itself is whole: it was only ever replaced by a rename). Blocking."""
    try:
        leftovers = list(path.parent.glob(f"{prefix}*.tmp"))
    except OSError:
        return
    for tmp in leftovers:
        try:
            tmp.unlink()
            log.info("removed %s, left by an interrupted write", tmp.name)
        except OSError:
            pass


def json_document(fields: Mapping[str, Any], key: str, items: Iterable[str]) -> str:
    """`{**fields, key: [items...]}` as JSON text, from items already encoded one by one.

    The same document as one `json.dumps`, but that is a single C call holding the GIL for all
    of it (54 ms for 2,000 index entries): encoded item by item (`json.dumps(item)` each), the
    event loop thread gets the GIL between items, so writing a large index or org listing in
    a worker thread never holds up a request.
    """
    return "".join(json_pieces(fields, {key: items}))


def json_pieces(fields: Mapping[str, Any], lists: Mapping[str, Iterable[str | Iterable[str]]]) -> Iterator[str]:
    """`{**fields, key: [items...], ...}` for each key of `lists`, as JSON text in pieces (as json_document,
    without ever joining them: see write_atomically); an item is encoded already, or the pieces of one."""
    head = json.dumps(dict(fields))
    yield head[:-1]
    between = ", " if fields else ""
    for key, items in lists.items():
        yield f"{between}{json.dumps(key)}: ["
        between = ", "
        first = True
        for item in items:
            if not first:
                yield ", "
            first = False
            if isinstance(item, str):
                yield item
            else:
                yield from item
        yield "]"
    yield "}"


def tree_bytes(path: str) -> int:
    """The apparent size of a file, or of every file under a directory (blocking: run it off the loop)."""
    try:
        if not os.path.isdir(path):
            return os.lstat(path).st_size
    except OSError:
        return 0
    total = 0
    for top, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # removed meanwhile (a git lock file, a temporary pack)
                total += os.lstat(os.path.join(top, name)).st_size
    return total
