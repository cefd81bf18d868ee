"""The CLI's side of archive mode (the default download mode): the signing key `serve` keeps in its
storage when the config sets none, `check`'s warning about it, and the moved tags `check --probe` lists."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from gitreg.config.model import Config
from gitreg.storage.moved import MOVED_FILE, MovedTag, read_moved, utc
from gitreg.storage.pins import read_pins
from gitreg.storage.signing_key import KEY_FILE, DamagedKey, needs_stored_key, with_stored_key


def keep_signing_key(config: Config) -> Config | None:
    """`serve`: the config with the stored (or newly made) signing key when it needs one; None, said on
    stderr, when the storage cannot keep one."""
    try:
        return with_stored_key(config)
    except DamagedKey as e:
        print(f"gitreg: storage.path: {e}", file=sys.stderr)
    except OSError as e:
        print(f"gitreg: storage.path: cannot keep a signing key: {e.strerror or e}", file=sys.stderr)
    return None


def signing_key_warnings(config: Config) -> list[str]:
    """`check`: a warning when replicas would each sign archive URLs with a key of their own."""
    if not needs_stored_key(config) or config.cache.backend != "redis":
        return []
    where = Path(config.storage.path, KEY_FILE)
    warning = (
        "warning: [auth] signing_key is not set: this replica signs archive URLs and page sessions with the key "
        f'it made in its storage ({where}), and replicas need one shared key ([cache] backend = "redis": an '
        "archive URL one replica hands out is refused by another); set [auth] signing_key on every replica "
        '(e.g. signing_key = "${GITREG_SIGNING_KEY}", from `openssl rand -hex 32`)'
    )
    return [warning]


class MovedReport:
    """`check --probe`: the tags whose commit differs from the one gitreg first served (read-only: the
    pins and moved-tag records under `[storage] path` and its workers' directories)."""

    def __init__(self, config: Config) -> None:
        root = Path(config.storage.path)
        directories = [root, *sorted((root / "workers").glob("*"))] if root.is_dir() else []
        self.pins: dict[tuple[str, str], str] = {}
        self.moved: dict[tuple[str, str], MovedTag] = {}
        for directory in directories:
            for key, sha in read_pins(directory / "tagpins.jsonl").items():
                self.pins.setdefault(key, sha)
            for key, record in read_moved(directory / MOVED_FILE).items():
                if key not in self.moved or record.noticed < self.moved[key].noticed:
                    self.moved[key] = record

    def lines(self, repository: str, tags: Mapping[str, str]) -> list[str]:
        """One line per tag of `repository` (tag -> commit it names now) that moved since first served."""
        found = []
        for tag, current in sorted(tags.items()):
            first = self.pins.get((repository, tag))
            if first is None or first == current:
                continue
            record = self.moved.get((repository, tag))
            noticed = utc(record.noticed) if record is not None else "now, by this probe"
            moved = f"first served at commit {first[:12]}, now names {current[:12]}"
            found.append(f"  moved tag {tag!r}: {moved} (noticed {noticed})")
        return found
