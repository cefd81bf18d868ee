"""Signature verdicts kept under `[storage] path` (signatures.json), so a restart verifies nothing again.

One record per (keys digest, repository, tag, commit): what git said of that tag's signatures
with the keys whose digest it names. Only the current keys' records are loaded; the others are
dropped at the next write (a key change verifies again). A transient failure is never a record.
Written atomically by `StateFile`, after each batch of verifications and at shutdown.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from gitreg.git.verify import Verdict
from gitreg.storage.state import StateFile

FILE = "signatures.json"
FORMAT = 1
# (keys digest, repository, tag, commit)
VerdictKey = tuple[str, str, str, str]
_FIELDS = ("status", "signer", "fingerprint", "format", "signed", "object", "reason")
STATUSES = frozenset({"signed", "unsigned", "unknown_key", "bad"})


def verdict_to_json(verdict: Verdict) -> dict[str, str]:
    """The verdict's fields as JSON (for the file and Redis)."""
    return {name: getattr(verdict, name) for name in _FIELDS}


def verdict_from_json(data: Any) -> Verdict | None:
    """A verdict from `verdict_to_json`'s form; None when it is not one."""
    if not isinstance(data, dict) or data.get("status") not in STATUSES:
        return None
    values = [data.get(name, "") for name in _FIELDS]
    if not all(isinstance(v, str) and len(v) <= 1024 for v in values):
        return None
    return Verdict(*values)


class VerdictStore:
    """The verdicts on disk: loaded once at start, written whole when new ones came."""

    def __init__(self, root: Path, executor: Executor | None = None) -> None:
        self._records: dict[VerdictKey, Verdict] = {}
        self.file = StateFile(
            root / FILE,
            FORMAT,
            ".signatures-",
            self._snapshot,
            unreadable="signatures are verified again",
            executor=executor,
        )

    async def load(self, keys: str) -> dict[VerdictKey, Verdict]:
        """The stored verdicts made with the keys of digest `keys`."""
        data = await self.file.load()
        self._records = {}
        for row in (data or {}).get("verdicts", []):
            if not isinstance(row, dict) or row.get("keys") != keys:
                continue
            verdict = verdict_from_json(row)
            parts = (row.get("keys"), row.get("repository"), row.get("tag"), row.get("commit"))
            if verdict is not None and all(isinstance(p, str) for p in parts):
                self._records[(keys, row["repository"], row["tag"], row["commit"])] = verdict
        return dict(self._records)

    def put(self, key: VerdictKey, verdict: Verdict) -> None:
        """Remember one verdict (written at the next flush)."""
        self._records[key] = verdict
        self.file.mark_dirty()

    def forget_other_keys(self, keys: str) -> None:
        """The keys changed: verdicts made with others are dropped."""
        self._records = {key: v for key, v in self._records.items() if key[0] == keys}
        self.file.mark_dirty()

    async def flush(self) -> None:
        """Write the file if something changed."""
        await self.file.flush()

    def _snapshot(self) -> Callable[[], str]:
        rows = list(self._records.items())

        def encode() -> str:
            verdicts = [
                {"keys": k, "repository": r, "tag": t, "commit": c, **verdict_to_json(v)} for (k, r, t, c), v in rows
            ]
            return json.dumps({"format": FORMAT, "verdicts": verdicts})

        return encode
