"""Log formats: the access log (combined log format, or JSON) and a one-object-per-line JSON formatter.

Only the classes live here; the CLI (`cli.main`) is the one place that installs them.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from typing import Any
from urllib.parse import unquote_plus

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

# Query parameters whose values are capabilities (signed download URLs, tokens): never logged.
SENSITIVE_QUERY = ("sig", "signature", "token", "key", "secret", "password", "expires")
# The attribute an access log record carries its fields in (read by JsonFormatter).
HTTP_FIELD = "http"


def masked_path(request: web.BaseRequest) -> str:
    """The path and query as sent, with the values of sensitive query parameters replaced by `***`."""
    path, sep, query = request.raw_path.partition("?")
    if not sep:
        return path
    parts = []
    for part in query.split("&"):
        name, eq, _ = part.partition("=")
        if eq and any(s in unquote_plus(name).lower() for s in SENSITIVE_QUERY):
            part = f"{name}=***"
        parts.append(part)
    return f"{path}?{'&'.join(parts)}"


class AccessLogger(AbstractAccessLogger):
    """One line per request: the combined log format plus the duration in seconds.

    `remote - - [time] "METHOD path HTTP/x.y" status bytes "referer" "user-agent" seconds`.
    The fields also ride on the record (`record.http`), so the JSON formatter emits them as
    JSON fields. The Authorization header is never logged.
    """

    @property
    def enabled(self) -> bool:
        """Skip building the line when INFO is off (`--log-level warning`)."""
        return self.logger.isEnabledFor(logging.INFO)

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time_taken: float) -> None:
        path = masked_path(request)
        fields: dict[str, Any] = {
            "remote": request.remote or "-",
            "method": request.method,
            "path": path,
            "protocol": f"HTTP/{request.version.major}.{request.version.minor}",
            "status": response.status,
            "bytes": response.body_length,
            "referer": request.headers.get("Referer", ""),
            "user_agent": request.headers.get("User-Agent", ""),
            "duration_seconds": round(time_taken, 6),
        }
        now = datetime.now(timezone.utc).strftime("%d/%b/%Y:%H:%M:%S %z")
        self.logger.info(
            '%s - - [%s] "%s %s %s" %d %d "%s" "%s" %.6f',
            fields["remote"], now, request.method, path, fields["protocol"], response.status,
            response.body_length, fields["referer"] or "-", fields["user_agent"] or "-", time_taken,
            extra={HTTP_FIELD: fields},
        )


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, plus `http` for access records."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        http = getattr(record, HTTP_FIELD, None)
        if isinstance(http, dict):
            out[HTTP_FIELD] = http
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)

