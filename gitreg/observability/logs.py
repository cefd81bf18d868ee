"""The access log: combined log format, or JSON (lines.py has the JSON formatter and the secret filter).

Only the classes live here; the CLI (`cli.main`) is the one place that installs them.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
import time
import weakref
from typing import Any, ClassVar, NamedTuple, Protocol
from urllib.parse import unquote_plus

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.http_exceptions import HttpProcessingError

from gitreg.observability.lines import (
    ACCESS_FIELD,
    SENSITIVE_QUERY,
    JsonFormatter,
    SecretFilter,
    json_access_lines,
    mask_user_info,
)


class Who(Protocol):
    """Who made a request, as the access log and the metrics see it (identity's Principal is one)."""

    @property
    def name(self) -> str:
        """The access log's user field: a username, `oidc:<project>`, `token:<id>`; never a token."""
        ...

    @property
    def kind(self) -> str:
        """The kind of credential presented (the metrics' label)."""
        ...


# The caller of a request, recorded by the web layer once its credential is checked (absent
# when none was), read here and by the metrics; the web layer reads the same entry as its Principal.
WHO_KEY = web.RequestKey[Who]("who")
# Characters a name in the access line's user field may not hold (spaces and quotes would split it).
_USER_UNSAFE_RE = re.compile(r"[^A-Za-z0-9._@:+/-]")


def mask_query(raw_path: str) -> str:
    """`raw_path` (path and query as sent) with the values of sensitive query parameters replaced by `***`."""
    path, sep, query = raw_path.partition("?")
    if not sep:
        return path
    parts = []
    for part in query.split("&"):
        name, eq, _ = part.partition("=")
        if eq and any(s in unquote_plus(name).lower() for s in SENSITIVE_QUERY):
            part = f"{name}=***"
        parts.append(part)
    return f"{path}?{'&'.join(parts)}"


class AccessEntry(NamedTuple):
    """What the access log keeps of one request until its line is written."""

    created: float  # time.time() at the end of the loop iteration in which the response was done
    remote: str | None
    method: str
    raw_path: str
    http_version: tuple[int, int]
    status: int
    body_length: int
    referer: str
    user_agent: str
    duration: float
    user: str = ""  # the principal's name, "" when none was checked

    @property
    def who(self) -> str:
        """The combined log format's user field: the principal's name, `-` when none."""
        return _user_field(self.user)

    def fields(self) -> dict[str, Any]:
        """The entry as the JSON log's `http` object."""
        return {
            "remote": self.remote or "-",
            "user": self.who,
            "method": self.method,
            "path": mask_user_info(mask_query(self.raw_path)),
            "protocol": f"HTTP/{self.http_version[0]}.{self.http_version[1]}",
            "status": self.status,
            "bytes": self.body_length,
            "referer": mask_user_info(self.referer),
            "user_agent": self.user_agent,
            "duration_seconds": round(self.duration, 6),
        }


class _Batch:
    """The access log's requests, made into lines and written at the end of each event-loop iteration.

    `log` keeps only (request, response, duration); their entries are made once the iteration
    ends, with its end as their time, one after another in one loop: the same steps for each
    request, run together, cost less than a line made amid each request's own work. The request
    and its response live until then; every field read is fixed by then (peer address, headers,
    status, bytes sent). The iteration's lines are then written at once, before the next
    iteration answers anything: a process killed (`kill -9`, the OOM killer) loses no line of a
    request it answered. Where the logger's handlers only write the line (the text log's
    "%(message)s", or JsonFormatter, to a stream with a file descriptor) the block is one
    `os.write` per stream (_Sink), without a LogRecord or the handler's work; otherwise it is one
    record for `logging`.
    """

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self.items: list[_Done] = []
        self.sinks = _sinks(logger)

    def make(self) -> None:
        """Make and write the lines of the requests noted so far (answered in the iteration that
        just ended, so its time is theirs)."""
        items, self.items = self.items, []
        if not items:
            return
        made = _made(items, time.time())
        if self.sinks is None:
            write_access_lines(self.logger, made)
            return
        lines = [access_line(entry) for entry in made]
        for sink in self.sinks:
            sink.write(self.logger.name, made, lines)


class _Sink:
    """A stream handler whose access lines are written straight to its file descriptor (see _Batch)."""

    def __init__(self, handler: logging.StreamHandler[Any], fd: int, json_lines: bool) -> None:
        self.handler = handler
        self.fd = fd
        self.json_lines = json_lines

    def write(self, logger: str, entries: list[AccessEntry], lines: list[str]) -> None:
        """Write `lines` (as JSON objects when the handler's format is JSON) in one `os.write`."""
        text = json_access_lines(logger, entries, lines) if self.json_lines else "\n".join(lines)
        data = (text + "\n").encode("utf-8", "backslashreplace")
        handler = self.handler
        handler.acquire()  # other threads' records to the same stream: whole lines, in order
        try:
            handler.stream.flush()  # what the stream still buffers goes first
            while data:
                data = data[os.write(self.fd, data) :]
        except OSError:  # as logging does with a stream it cannot write to: the line is dropped
            pass
        finally:
            handler.release()


def _sinks(logger: logging.Logger) -> list[_Sink] | None:
    """The streams the access lines of `logger` go to, when every handler that would see them only
    writes the line (the format "%(message)s" or JsonFormatter, filters that pass access records,
    a stream with a file descriptor); None when any does more (then `logging` writes them)."""
    if logger.filters:
        return None
    sinks: list[_Sink] = []
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if handler.level > logging.INFO:
                continue
            sink = _sink(handler)
            if sink is None:
                return None
            sinks.append(sink)
        current = current.parent if current.propagate else None
    return sinks


def _sink(handler: logging.Handler) -> _Sink | None:
    if type(handler) not in (logging.StreamHandler, logging.FileHandler):
        return None
    if not all(isinstance(f, SecretFilter) for f in handler.filters):  # SecretFilter passes access records
        return None
    formatter = handler.formatter
    if isinstance(formatter, JsonFormatter):
        json_lines = True
    elif formatter is None or (type(formatter) is logging.Formatter and formatter._fmt == "%(message)s"):
        json_lines = False
    else:
        return None
    stream = getattr(handler, "stream", None)
    if stream is None or getattr(handler, "terminator", "\n") != "\n":
        return None
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.StringIO and friends: no descriptor
        return None
    return _Sink(handler, fd, json_lines)  # type: ignore[arg-type]


# What `AccessLogger.log` keeps of a request until its batch is written.
_Done = tuple[web.BaseRequest, web.StreamResponse, float]


def _made(done: list[_Done], created: float) -> list[AccessEntry]:
    """The access entries of requests answered, at `created` (time.time())."""
    made: list[AccessEntry] = []
    for request, response, duration in done:
        headers = request.headers
        status = response.status
        who = request.get(WHO_KEY)
        entry = AccessEntry(
            created,
            request.remote,
            request.method,
            request.raw_path,
            request.version,
            status,
            body_bytes(request, response, status),
            headers.get("Referer", ""),
            headers.get("User-Agent", ""),
            duration,
            "" if who is None else who.name,
        )
        made.append(entry)
    return made


# The same few callers make most requests: each name made safe once (bounded: names are not).
# Buys 1.6 µs of CPU a request (bench/warm_parts.py's operator request, 60 paired rounds with and
# without it in one process, medians; under load: ~70 µs a request).
@functools.lru_cache(maxsize=1024)
def _user_field(user: str) -> str:
    return _USER_UNSAFE_RE.sub("_", user)[:120] if user else "-"


# Buys 2.5 µs of CPU a request (measured as `_user_field`).
@functools.lru_cache(maxsize=4)
def _clf_time(second: int) -> str:
    """`[time]` of the combined log format (UTC), made once per second."""
    return time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(second))


def access_line(entry: AccessEntry) -> str:
    """One combined-log-format line plus the duration in seconds (the text log's line, the JSON log's `message`)."""
    raw_path, version = entry.raw_path, entry.http_version
    path = mask_query(raw_path) if "?" in raw_path else raw_path
    path, referer = mask_user_info(path), mask_user_info(entry.referer)
    return (
        f'{entry.remote or "-"} - {entry.who} [{_clf_time(int(entry.created))}] "{entry.method} {path} '
        f'HTTP/{version[0]}.{version[1]}" {entry.status} {entry.body_length} "{referer or "-"}" '
        f'"{entry.user_agent or "-"}" {entry.duration:.6f}'
    )


def write_access_lines(logger: logging.Logger, entries: list[AccessEntry]) -> None:
    """Hand `entries` to `logger` as ONE record.

    The message is the lines joined by newlines; `record.access` holds the (entry, line) pairs,
    which JsonFormatter writes as one object each.
    """
    lines = [access_line(entry) for entry in entries]
    record = logger.makeRecord(
        logger.name,
        logging.INFO,
        "(access log)",
        0,
        "\n".join(lines),
        (),  # no %-arguments: the lines are the message
        None,
        extra={ACCESS_FIELD: list(zip(entries, lines, strict=True))},
    )
    logger.handle(record)


# Statuses whose answers have no body, whatever Content-Length says.
_NO_BODY = frozenset({204, 304})


def body_bytes(request: web.BaseRequest, response: web.StreamResponse, status: int) -> int:
    """The bytes of the response body sent, as the combined log format counts them (no headers).

    aiohttp's `body_length` is everything written to the connection, the status line and
    headers included; those are taken off again, measured as aiohttp serializes them.
    """
    written = response.body_length
    if not written:
        return 0
    if (
        isinstance(response, web.Response)
        and isinstance(body := response.body, bytes)
        and not response.compression
        and not response.chunked
        and request.method != "HEAD"
        and status not in _NO_BODY
        and status >= 200
    ):
        # The warm path's answer: a whole body, written at once with its headers; no need to
        # serialize the head again to take it off.
        return len(body)
    version = request.version
    head = f"HTTP/{version[0]}.{version[1]} {status} {response.reason}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in response.headers.items()) + "\r\n"
    return max(written - len(head.encode("utf-8")), 0)


class AccessLogger(AbstractAccessLogger):
    """One line per request: the combined log format plus the duration in seconds.

    `remote - - [time] "METHOD path HTTP/x.y" status bytes "referer" "user-agent" seconds`.
    The Authorization header is never logged, nor the values of sensitive query parameters.

    Written per event-loop iteration, because the logging machinery costs more than answering
    a warm request (bench/warm_path.py): `log` notes the request; at the end of the iteration
    its lines are made and written before the next iteration answers anything (_Batch), as one
    `os.write` per stream where the handlers only write lines, else as one LogRecord, the lines
    joined by newlines (for a "%(message)s" handler the bytes are the same as one record per
    line). For the JSON log the record's `access` attribute holds (entry, line) pairs, so
    JsonFormatter still writes one JSON object per request, with its own time.
    """

    # aiohttp makes one AccessLogger per connection; the batch is shared per loop and logger.
    _batches: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _Batch]]] = (
        weakref.WeakKeyDictionary()
    )
    _batch: _Batch | None = None  # this connection's (found once)

    @property
    def enabled(self) -> bool:
        """Skip building the line when INFO is off (`--log-level warning`)."""
        return self.logger.isEnabledFor(logging.INFO)

    @classmethod
    def write_pending(cls) -> None:
        """Write every access line this event loop still holds (at shutdown, once the last request is answered:
        the lines of the iteration that answered it)."""
        for batch in cls._batches.get(asyncio.get_running_loop(), {}).values():
            batch.make()

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time_taken: float) -> None:
        batch = self._batch
        if batch is None:
            try:
                asyncio.get_running_loop()
            except RuntimeError:  # not called from a running loop: nothing to batch with
                write_access_lines(self.logger, _made([(request, response, time_taken)], time.time()))
                return
            batch = self._batch = self._batch_of_loop()
        items = batch.items
        if not items:
            # The first request of this iteration: its lines are made once the iteration ends.
            # No reference to the loop is kept (it is the key of _batches).
            asyncio.get_running_loop().call_soon(batch.make)
        items.append((request, response, time_taken))

    def _batch_of_loop(self) -> _Batch:
        batches = self._batches.setdefault(asyncio.get_running_loop(), {})
        return batches.setdefault(self.logger.name, _Batch(self.logger))


class ServerLogger(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's server logger, minus tracebacks for requests its HTTP parser refused.

    A request line or header beyond aiohttp's limits, an unknown method, a duplicate Host
    header, bytes that are not HTTP: aiohttp answers 400 before any handler runs and logs the
    parser's exception with a traceback (at ERROR, or at DEBUG for a bad method). That is the
    client's mistake, and anyone can send it: one line at most WARNING, with the exception's
    class only, at every level: its message quotes the request, which may hold a capability
    (a signed URL's `signature=`).
    """

    def log(self, level: int, msg: object, *args: object, exc_info: Any = None, **kwargs: Any) -> None:
        exc = exc_info if isinstance(exc_info, BaseException) else None
        if isinstance(exc, HttpProcessingError) and 400 <= (exc.code or 0) < 500:
            super().log(
                min(level, logging.WARNING),
                f"{msg}: %s (%d), refused by the HTTP parser",
                *args,
                type(exc).__name__,
                exc.code,
                **kwargs,
            )
            return
        super().log(level, msg, *args, exc_info=exc_info, **kwargs)
