"""The index on disk: `index.json` (every listed module) and the details of each version read.

index.json is written atomically (temp file + `os.replace`), not fsynced: after a power loss a
damaged file is set aside (`.damaged`) and the index built again. Details depend only on the
commit, so each is written once (`details/<hash>.json`) and read back at every later start.
All of it is blocking: the store calls it in the executor.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gitreg.index.details import ModuleDetails
from gitreg.index.model import IndexEntry
from gitreg.storage.files import json_document, remove_leftovers, write_atomically

log = logging.getLogger(__name__)

FILE_NAME = "index.json"
DETAILS_DIR = "details"
FORMAT = 1
TMP_PREFIX = ".index-"  # temp files of write_atomically (`.index-*.tmp`), beside index.json and the details


@dataclass
class IndexDocument:
    """What an index.json holds: its entries, and whether the index was complete when written."""

    entries: list[IndexEntry]
    complete: bool


def parse_index(data: Any) -> IndexDocument | None:
    """The entries of an index.json document (those that are entries); None when it is not one."""
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries"), list):
        return None
    entries = [entry for item in data["entries"] if (entry := IndexEntry.from_json(item)) is not None]
    return IndexDocument(entries, bool(data.get("complete")))


def parse_index_text(text: str) -> IndexDocument | None:
    """An index.json's text (another replica's, with Redis) as a document; None when it is not one."""
    try:
        return parse_index(json.loads(text))
    except (ValueError, RecursionError):
        return None


def read_index(path: Path) -> IndexDocument | None:
    """The index.json at `path` (temp files a crash left removed first); None when absent or damaged."""
    remove_leftovers(path, TMP_PREFIX)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: `[[[[...` nested deeply
        log.warning("%s could not be read (%s); the index is built again", path, type(e).__name__)
        with contextlib.suppress(OSError):
            os.replace(path, path.with_name(path.name + ".damaged"))
        return None
    return parse_index(data)


def write_index(path: Path, entries: Iterable[IndexEntry], complete: bool) -> str:
    """Serialize and write index.json (entries by address); its text."""
    ordered = sorted(entries, key=lambda e: str(e.address))
    encoded = (json.dumps(e.to_json()) for e in ordered)
    text = json_document({"format": FORMAT, "complete": complete}, "entries", encoded)
    # Not fsynced (written every few seconds while indexing): a damaged file is built again.
    write_atomically(path, text, TMP_PREFIX, durable=False)
    return text


class DetailsStore:
    """Details of module versions on disk (`<storage>/details/<hash>.json`): immutable per commit."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @staticmethod
    def key(repository: str, path: str, sha: str) -> str:
        return hashlib.sha256(f"{repository}\0{path}\0{sha}".encode()).hexdigest()[:40]

    def load(self, repository: str, path: str, sha: str) -> ModuleDetails | None:
        """The stored details, or None (absent or unreadable: built again)."""
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
        """Write the details atomically."""
        # Not fsynced: details are read again from git when a power loss left a file behind.
        target = self.root / f"{self.key(repository, path, sha)}.json"
        write_atomically(target, json.dumps(asdict(details)), TMP_PREFIX, durable=False)
