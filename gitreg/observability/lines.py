"""Log lines as every gitreg process writes them: one JSON object a line (JsonFormatter), and no
capability in any line (SecretFilter, mask_text).

Apart from `logs` (the access log, which is aiohttp's) so that the processes that serve no HTTP
(the index process, `gitreg check`) set up their logging without importing aiohttp's server (#33).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from gitreg.core import urls

# Query parameters whose values are capabilities (signed download URLs, tokens): never logged.
# OAuth's `code` and `state` (`/oauth/callback`, Terraform's localhost URL) are one-time capabilities too.
SENSITIVE_QUERY = ("sig", "signature", "token", "key", "secret", "password", "expires", "code", "state")
# The key of an access line's fields in the JSON log.
HTTP_FIELD = "http"
# The attribute a batch of access lines rides on: (AccessEntry, line) pairs (read by JsonFormatter).
ACCESS_FIELD = "access"


class Entry(Protocol):
    """An access line's entry as the JSON log writes it (logs.AccessEntry)."""

    @property
    def created(self) -> float: ...

    def fields(self) -> dict[str, Any]: ...


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, plus `http` for access records."""

    def format(self, record: logging.LogRecord) -> str:
        access = getattr(record, ACCESS_FIELD, None)
        if isinstance(access, list) and access:
            # A batch of access lines: one object per request.
            entries, lines = zip(*access, strict=True)
            return json_access_lines(record.name, entries, lines)
        out: dict[str, Any] = {
            "time": _iso(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        http = getattr(record, HTTP_FIELD, None)
        if isinstance(http, dict):
            out[HTTP_FIELD] = http
        if record.exc_info:
            # exc_text when SecretFilter already made (and masked) it
            out["exception"] = record.exc_text or self.formatException(record.exc_info)
        return self._dumps(out)

    @staticmethod
    def _dumps(out: dict[str, Any]) -> str:
        return json.dumps(out, ensure_ascii=False, default=str)


def json_access_lines(logger: str, entries: Sequence[Entry], lines: Sequence[str]) -> str:
    """The JSON log's access lines: one object per request (its own time), joined by newlines."""
    return "\n".join(
        json.dumps(
            {
                "time": _iso(entry.created),
                "level": "info",
                "logger": logger,
                "message": line,
                HTTP_FIELD: entry.fields(),
            },
            ensure_ascii=False,
            default=str,
        )
        for entry, line in zip(entries, lines, strict=True)
    )


def _iso(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")


# A sensitive query parameter or an Authorization credential anywhere in a log line's text.
_SECRET_IN_TEXT_RE = re.compile(
    r"(?P<key>[?&;](?:[^=&\s\\'\"]*?(?:" + "|".join(SENSITIVE_QUERY) + r")[^=&\s\\'\"]*)=)[^&\s\\'\"]+"
    r"|(?P<scheme>\b(?:Bearer|Basic|token)\s+)[A-Za-z0-9._~+/=-]{8,}",
    re.IGNORECASE,
)


# User info of a URL anywhere in a log line's text (a token is often written as the user name).
_USERINFO_IN_TEXT_RE = re.compile(r"\b(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<userinfo>[^\s/?#@\\'\"<>]+)@")


def mask_text(text: str) -> str:
    """`text` with the values of sensitive query parameters, Authorization credentials and URL user
    info (but an ssh login such as `git@`) replaced by `***`."""
    text = _SECRET_IN_TEXT_RE.sub(lambda m: (m.group("key") or m.group("scheme")) + "***", text)
    return mask_user_info(text)


def mask_user_info(text: str) -> str:
    """`text` with the user info of every `scheme://user[:password]@` in it replaced by `***`."""
    if "@" not in text:
        return text

    def masked(m: re.Match[str]) -> str:
        if urls.is_ssh_login(m.group("scheme"), m.group("userinfo")):
            return m.group(0)
        return f"{m.group('scheme')}://{urls.masked_userinfo(m.group('userinfo'))}@"

    return _USERINFO_IN_TEXT_RE.sub(masked, text)


class SecretFilter(logging.Filter):
    """A last line of defence on every handler: no capability in a log line, whoever logs it.

    gitreg's own lines never hold one (URLs are masked where they are logged), but libraries
    log at DEBUG what they see: a request line, a URL. Access-log batches are already masked
    and skip the (cheap) search.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, ACCESS_FIELD, None) is not None:
            return True
        message = record.getMessage()
        masked = mask_text(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:  # made here, or by a handler before this one (formatters reuse it)
            record.exc_text = mask_text(record.exc_text)
        return True
