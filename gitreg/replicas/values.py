"""What gitreg reads back from Redis, checked: whoever can write to Redis is not trusted with more
than the values gitreg itself would write there (SECURITY.md, "Redis").

A value that is not one of gitreg's is ignored (a tag list: fetched again from git; a download
count: left out and counted), never taken as "Redis is down" and never passed on.
"""

from __future__ import annotations

import json
from typing import Any

from gitreg.core.errors import GitregError, ModuleNotFound, UpstreamTimeout, UpstreamUnavailable
from gitreg.git.remote import SHA_RE

_ERRORS: dict[str, type[GitregError]] = {
    "not_found": ModuleNotFound,
    "timeout": UpstreamTimeout,
    "error": UpstreamUnavailable,
}


def tag_list(raw: bytes | str) -> tuple[int, dict[str, str], str | None] | None:
    """(its TTL in ms, tag -> commit, HEAD's commit) of a stored tag list, raising the stored error; None if damaged.

    Only commit ids are taken: a planted value never reaches git or a download location.
    """
    try:
        data = json.loads(raw)
        px = int(data["px"])
        if "error" in data:
            raise _ERRORS.get(str(data["error"]), UpstreamUnavailable)(str(data["message"]))
        tags = {str(k): str(v) for k, v in data["tags"].items()}
        if not all(SHA_RE.fullmatch(v) for v in tags.values()):
            return None
        head = data.get("head")
        if head is not None and not SHA_RE.fullmatch(str(head)):
            return None
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None  # not ours, or damaged: fetch again
    return px, tags, None if head is None else str(head)


def download_totals(raw: dict[Any, Any]) -> tuple[dict[str, int], int]:
    """(address -> count, how many values were not counts) of the shared download counts."""
    totals: dict[str, int] = {}
    bad = 0
    for key, value in raw.items():
        count = _count(value)
        if count is None:
            bad += 1
            continue
        totals[key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)] = count
    return totals, bad


def _count(value: object) -> int | None:
    """A non-negative integer, or None."""
    try:
        count = int(value.decode() if isinstance(value, bytes) else str(value))
    except (ValueError, UnicodeDecodeError):
        return None
    return count if count >= 0 else None
