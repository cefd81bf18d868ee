"""The index on disk: `index.json` (every listed module) and the details of each version read.

index.json is one of gitreg's persisted state files (storage.state.StateFile: read, set aside
when damaged, written atomically off the event loop); this module knows its document only.
It is not fsynced: after a power loss a damaged file is set aside (`.damaged`) and the index
built again. Details depend only on the commit, so each is written once
(`details/<hash>.json`) and read back at every later start. All of it is blocking: the store
calls it with run_file_work.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gitreg.core.content import ContentKey
from gitreg.core.names import ModuleAddress, address_from_text
from gitreg.index.details import ModuleDetails
from gitreg.index.model import IndexEntry, Untagged
from gitreg.storage.files import json_document, write_atomically

FILE_NAME = "index.json"
DETAILS_DIR = "details"
FORMAT = 1
TMP_PREFIX = ".index-"  # temp files of write_atomically (`.index-*.tmp`), beside index.json and the details


@dataclass
class IndexDocument:
    """What an index.json holds: its entries, and whether the index was complete when written."""

    entries: list[IndexEntry]
    complete: bool
    untagged: dict[ModuleAddress, Untagged] = field(default_factory=dict)


def parse_index(data: dict[str, Any]) -> IndexDocument | None:
    """The entries of an index.json document of this FORMAT (StateFile checked that), those that
    are entries; None when it has no list of them."""
    if not isinstance(data.get("entries"), list):
        return None
    entries = [entry for item in data["entries"] if (entry := IndexEntry.from_json(item)) is not None]
    untagged = data.get("untagged")
    remembered = {
        address: found
        for text, item in (untagged.items() if isinstance(untagged, dict) else ())
        if (address := address_from_text(text)) is not None and (found := Untagged.from_json(item)) is not None
    }
    return IndexDocument(entries, bool(data.get("complete")), remembered)


def encode_index(entries: Iterable[IndexEntry], complete: bool, untagged: Mapping[ModuleAddress, Untagged]) -> str:
    """index.json's text, entries by address (blocking: tens of ms for thousands of entries)."""
    return IndexEncoder(0)(entries, complete, untagged)


# Entries whose JSON an IndexEncoder keeps between writes (about 1.5 KB each at 20 versions).
ENCODED_KEPT = 5000


class IndexEncoder:
    """encode_index, keeping the text of up to `kept` entries from one write to the next.

    Entries are immutable (a changed module is a new entry object), so an entry written before
    is the same text: while an org is first listed, index.json is written every few seconds
    with a few dozen entries more each time, and encoding all of them again each time cost the
    index process CPU that competes with git's (#33). One write at a time (StateFile's flushes
    are serialized); the kept texts hold their entries, so an id is never reused meanwhile.
    """

    def __init__(self, kept: int = ENCODED_KEPT) -> None:
        self.kept = kept
        self._texts: dict[int, tuple[IndexEntry, str, str]] = {}  # id(entry) -> (entry, address, JSON)

    def __call__(
        self, entries: Iterable[IndexEntry], complete: bool, untagged: Mapping[ModuleAddress, Untagged]
    ) -> str:
        known, texts = self._texts, {}
        for entry in entries:
            found = known.get(id(entry))
            if found is None or found[0] is not entry:
                found = (entry, str(entry.address), "")
            texts[id(entry)] = found
        ordered = sorted(texts.values(), key=lambda found: found[1])
        keep: dict[int, tuple[IndexEntry, str, str]] = {}
        encoded = (self._text(found, keep) for found in ordered)
        remembered = {str(address): u.to_json() for address, u in sorted(untagged.items(), key=lambda i: str(i[0]))}
        text = json_document({"format": FORMAT, "complete": complete, "untagged": remembered}, "entries", encoded)
        self._texts = keep
        return text

    def _text(self, found: tuple[IndexEntry, str, str], keep: dict[int, tuple[IndexEntry, str, str]]) -> str:
        entry, address, text = found
        if not text:
            text = json.dumps(entry.to_json())
        if len(keep) < self.kept:
            keep[id(entry)] = (entry, address, text)
        return text


# What gitreg 0.1 wrote as a note when a parse ran out of its budget or its worker stopped:
# a busy host, not the file. Such details are read again (once: what is read now never has them).
_CUT_SHORT = (": not shown: parsing took longer than ", ": the parser stopped on it; its contents are not shown")


def cut_short(details: ModuleDetails) -> bool:
    """Whether stored details were cut short by a transient failure (an earlier gitreg kept them)."""
    for directory in (details.root, *details.submodules, *details.examples):
        notes = directory.get("notes") if isinstance(directory, dict) else None
        for note in notes if isinstance(notes, list) else ():
            if isinstance(note, str) and any(marker in note for marker in _CUT_SHORT):
                return True
    return False


class DetailsStore:
    """Details of module versions on disk (`<storage>/details/<hash>.json`): immutable per commit."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _file(self, repository: str, path: str, sha: str) -> Path:
        return self.root / ContentKey(repository, path, sha).details_name

    def load(self, repository: str, path: str, sha: str) -> ModuleDetails | None:
        """The stored details, or None (absent, unreadable, cut short, or without the archive's SHA-256)."""
        try:
            data = json.loads(self._file(repository, path, sha).read_text(encoding="utf-8"))
            details = ModuleDetails(
                str(data["description"]),
                str(data["published_at"]),
                dict(data["root"]),
                list(data["submodules"]),
                list(data.get("examples", [])),
                _sha256(data.get("archive_sha256")),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None
        # Written before details kept the archive's SHA-256 (the key absent, not null): read again,
        # once, so that every version's page and details show it.
        return None if cut_short(details) or "archive_sha256" not in data else details

    def save(self, repository: str, path: str, sha: str, details: ModuleDetails) -> None:
        """Write the details atomically."""
        # Not fsynced: details are read again from git when a power loss left a file behind.
        write_atomically(self._file(repository, path, sha), json.dumps(asdict(details)), TMP_PREFIX, durable=False)


def _sha256(value: object) -> str | None:
    """An archive's SHA-256 as details files keep it (absent from files written before it was kept)."""
    return value if isinstance(value, str) and len(value) == 64 else None
