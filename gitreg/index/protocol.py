"""The index process's messages, defined once: what the serving process tells it, what it reports.

Serving to index (`Command`): the Seed first, then what changed on the serving side, each a
length-prefixed pickle (parse_workers.pickled_frame; the serving process is the trusted side).
Index to serving (`Report`): one JSON object a line, `{kind: payload}`; the index process reads
hostile repository content, so nothing it sends is unpickled, and decode_report checks every
field. encode_/decode_ here are the only code that knows either wire form.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
from dataclasses import dataclass, field, fields
from typing import Any

from gitreg.config.model import Config
from gitreg.core.names import ModuleAddress, address_from_text
from gitreg.git.remote import SHA_RE
from gitreg.index.model import IndexEntry, IndexStats, Untagged
from gitreg.index.parse_workers import pickled_frame
from gitreg.orgs.model import OrgRepo
from gitreg.storage.files import collector_paused

# The index process sends a change at once, then what changed meanwhile at most this often: a
# webhook's module is listed without delay, and the first index of an org costs the serving
# process a batch every half second, not a message per module (BENCHMARKS.md, section 13).
FEED_SECONDS = 0.5
# ... or this often once no module waits to be listed (a listing's last entries, details): the
# serving process lists every module as soon as it is read (#33), at 20 batches a second at most.
FEED_TAIL_SECONDS = 0.05
# It reports at least this often: the serving process kills one silent for longer (process.py).
HEARTBEAT_SECONDS = 2.0

# ---------------------------------------------------------------------------------------
# Serving process -> index process
# ---------------------------------------------------------------------------------------


@dataclass
class Seed:
    """What the index process is given at its start (its first message)."""

    config: Config
    log_level: int
    log_json: bool
    orgs: list[OrgRepo] = field(default_factory=list)
    orgs_complete: bool = True  # every org had its first listing (until then the index drops nothing)
    remembered: list[ModuleAddress] = field(default_factory=list)
    resync: bool = False  # a restart: send every entry, the serving process may hold others
    leading: bool = True  # with Redis: this replica holds the index lease (builds); Leading updates it


@dataclass(frozen=True)
class OrgsChanged:
    """An enumeration or a repository webhook changed the org listing."""

    repos: list[OrgRepo]  # added or changed
    gone: list[ModuleAddress]
    concerned: list[ModuleAddress]  # every module added, changed or removed: indexed again
    complete: bool  # every org had its first listing
    more: bool = False  # a part of a large change: the rest follows, taken all together at the last part


@dataclass(frozen=True)
class Remember:
    """A wildcard rule served this module for the first time: it is listable now."""

    address: ModuleAddress


@dataclass(frozen=True)
class TagsFetched:
    """The serving process fetched a repository's tags: the index process takes them (no git)."""

    key: str
    tags: dict[str, str]
    # Its annotated tags' own objects (git.remote.TagObjects): the details fetch asks for them.
    objects: dict[str, tuple[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Want:
    """Someone asked for details not on disk yet: read them next."""

    address: ModuleAddress
    version: str


@dataclass(frozen=True)
class Adopt:
    """With Redis, a follower: the leader's index.json text, kept as this replica's index."""

    text: str


@dataclass(frozen=True)
class Leading:
    """With Redis: whether this replica holds the index lease now (its index process builds)."""

    leading: bool


Command = Seed | OrgsChanged | Remember | TagsFetched | Want | Adopt | Leading
# A seed's org modules are pickled this many at a time (see encode_seed).
SEED_PART = 5000
_COMMANDS = (Seed, OrgsChanged, Remember, TagsFetched, Want, Adopt, Leading)


def encode_command(message: Command) -> bytes:
    """A command as the index process reads it: a length-prefixed pickle."""
    return pickled_frame(message)


def encode_seed(seed: Seed) -> bytes:
    """`encode_command(seed)`, to run on a thread: a seed carries every org module (230,000 took 1.1-1.3 s
    to pickle, all of it on the event loop before, #22). Its org modules are pickled in parts
    (SEED_PART), each by a pickler of its own: one pickler's memo of a million objects, freed at its
    end in one C call, held the GIL (so the loop) 100 ms. The collector is paused meanwhile."""
    with collector_paused():
        orgs = seed.orgs
        parts = [pickle.dumps(orgs[i : i + SEED_PART], pickle.HIGHEST_PROTOCOL) for i in range(0, len(orgs), SEED_PART)]
        return encode_command(dataclasses.replace(seed, orgs=_Parts(parts)))


class _Parts(list[OrgRepo]):
    """A seed's org modules as pickled parts: unpickled, the list of them all (`_joined`)."""

    def __init__(self, parts: list[bytes]) -> None:
        super().__init__()
        self.parts = parts

    def __reduce__(self) -> tuple[Any, ...]:
        return _joined, (self.parts,)


def _joined(parts: list[bytes]) -> list[OrgRepo]:
    """The org modules of a seed's parts (in the index process, which trusts its parent's pickles)."""
    return [repo for part in parts for repo in pickle.loads(part)]


def decode_command(payload: bytes) -> Command:
    """A command from its pickle (the frame's payload); ValueError when it is none."""
    try:
        message = pickle.loads(payload)
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, IndexError) as e:
        raise ValueError(f"not a command: {e}") from None
    if not isinstance(message, _COMMANDS):
        raise ValueError(f"not a command: {type(message).__name__}")
    return message


# ---------------------------------------------------------------------------------------
# Index process -> serving process
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EntrySet:
    """The index process listed this entry (new or changed)."""

    entry: IndexEntry


@dataclass(frozen=True)
class TagObjectsKnown:
    """The annotated tags' own objects of a repository (git.remote.TagObjects), as the index process's
    ls-remote advertised them, sent before the entries made from it: the serving process, which may
    never have listed that repository's tags itself, reads the version picker's dates by the tag
    object (its tagger's date), not by the commit (the commit's date)."""

    key: str
    objects: dict[str, tuple[str, str]]


@dataclass(frozen=True)
class EntryDropped:
    """The index process no longer lists this module."""

    address: ModuleAddress


@dataclass(frozen=True)
class UntaggedSet:
    """The index process found this module without a SemVer tag (not listed; its page says so)."""

    address: ModuleAddress
    untagged: Untagged


@dataclass(frozen=True)
class Forgotten:
    """This module's repository is gone: the catalog forgets it."""

    address: ModuleAddress


@dataclass(frozen=True)
class Reset:
    """A restarted index process lists these modules only: drop every other entry."""

    keep: frozenset[ModuleAddress]


@dataclass(frozen=True)
class Status:
    """The index process's progress, for /readyz and /metrics."""

    complete: bool
    queued: int
    stats: dict[str, float]  # IndexStats's fields


@dataclass(frozen=True)
class Written:
    """The index process wrote index.json (with Redis, the leader publishes it)."""


Report = EntrySet | TagObjectsKnown | EntryDropped | UntaggedSet | Forgotten | Reset | Status | Written
_STATS = frozenset(f.name for f in fields(IndexStats))


def encode_report(message: Report) -> bytes:
    """A report as one JSON line."""
    match message:
        case EntrySet(entry):
            data: dict[str, Any] = {"set": entry.to_json()}
        case TagObjectsKnown(key, objects):
            data = {"tag_objects": {"key": key, "objects": objects}}
        case EntryDropped(address):
            data = {"drop": str(address)}
        case UntaggedSet(address, untagged):
            data = {"untagged": {"address": str(address), **untagged.to_json()}}
        case Forgotten(address):
            data = {"forget": str(address)}
        case Reset(keep):
            data = {"reset": sorted(str(a) for a in keep)}
        case Status(complete, queued, stats):
            data = {"status": {"complete": complete, "queued": queued, **stats}}
        case Written():
            data = {"written": True}
    return json.dumps(data).encode() + b"\n"


def decode_report(line: bytes) -> Report | None:
    """A report from its JSON line: None for one of no use (an unknown kind, an invalid address or
    entry); ValueError for a line that is not a report at all."""
    try:
        data = json.loads(line)
        kind, payload = next(iter(data.items()))
        decode = _DECODERS.get(kind)
        return decode(payload) if decode is not None else None
    except (TypeError, KeyError, AttributeError, StopIteration, OverflowError, RecursionError) as e:
        raise ValueError(f"not a report: {type(e).__name__}") from None


def _entry_set(payload: Any) -> Report | None:
    entry = IndexEntry.from_json(payload)
    return EntrySet(entry) if entry is not None else None


def _tag_objects(payload: Any) -> Report | None:
    key, objects = (payload.get("key"), payload.get("objects")) if isinstance(payload, dict) else (None, None)
    if not isinstance(key, str) or not isinstance(objects, dict):
        return None
    kept = {
        tag: (pair[0], pair[1])
        for tag, pair in objects.items()
        if isinstance(pair, list) and len(pair) == 2 and all(isinstance(h, str) and SHA_RE.fullmatch(h) for h in pair)
    }
    return TagObjectsKnown(key, kept)


def _dropped(payload: Any) -> Report | None:
    address = address_from_text(payload)
    return EntryDropped(address) if address is not None else None


def _untagged(payload: Any) -> Report | None:
    address = address_from_text(payload.get("address")) if isinstance(payload, dict) else None
    untagged = Untagged.from_json(payload)
    return UntaggedSet(address, untagged) if address is not None and untagged is not None else None


def _forgotten(payload: Any) -> Report | None:
    address = address_from_text(payload)
    return Forgotten(address) if address is not None else None


def _reset(payload: Any) -> Report | None:
    if not isinstance(payload, list):
        return None
    return Reset(frozenset(a for text in payload if (a := address_from_text(text)) is not None))


def _status(payload: Any) -> Report | None:
    if not isinstance(payload, dict):
        return None
    stats = {
        name: value
        for name, value in payload.items()
        if name in _STATS and isinstance(value, (int, float)) and not isinstance(value, bool)
    }
    return Status(bool(payload.get("complete")), int(payload.get("queued") or 0), stats)


def _written(_payload: Any) -> Report | None:
    return Written()


_DECODERS = {
    "set": _entry_set,
    "tag_objects": _tag_objects,
    "drop": _dropped,
    "untagged": _untagged,
    "forget": _forgotten,
    "reset": _reset,
    "status": _status,
    "written": _written,
}
