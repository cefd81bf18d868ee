"""What every Git host's API client shares: pages, rate limits, errors, counters; and `Host`.

One client per `[[orgs]]` entry, on the app's `aiohttp.ClientSession`. Listings follow every
page (`Link: rel="next"`, or GitLab's `X-Next-Page`), only ever on the API's own origin, so the
token never goes anywhere else. Rate limits are respected: a `429`, or a `403` with the host's
`...Remaining: 0` or `Retry-After`, waits for the reset (at most `rate_wait_budget` seconds)
and tries again; a longer wait fails the listing, and the caller keeps its last good one.

A host module (`github`, `gitlab`) subclasses `ForgeClient` for its URLs, headers and record
fields (`records.read_record`), turns its webhook payloads into `payloads.TagEvent`/`RepositoryEvent`,
checks its deliveries' signatures, and describes itself in one `Host`. The same client, given a person's own token
(`hosts.user_client`), answers identity/'s questions: `username`, `can_read`, `member_repositories`.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from yarl import URL

from gitreg import __version__
from gitreg.config.model import OrgConfig
from gitreg.core.urls import GitUrl, mask, parse
from gitreg.forges.records import OnPage, Release, RepoRecord

log = logging.getLogger(__name__)

PER_PAGE = 100
API_TIMEOUT_SECONDS = 30.0
# A page of 100 repositories is a few hundred kilobytes; this bounds what a broken or hostile host
# can make us read and parse (a 29 MB page once cost 12 s of event loop and 460 MiB).
MAX_PAGE_BYTES = 8 * 1024 * 1024
# A body larger than this is parsed on an executor thread, not on the event loop.
PARSE_ON_LOOP_BYTES = 64 * 1024
# A page's items become records this many at a time, with a yield to the event loop between slices.
RECORD_SLICE = 200
# 2,000 pages of 100: far beyond any real org; stops a `next` link that goes round in circles.
MAX_PAGES = 2000
# A transient failure (5xx, reset connection, timeout) is tried again after these pauses, then given up.
RETRY_DELAYS = (0.5, 2.0)
# At most this many rate-limited answers are waited out for one page.
MAX_RATE_WAITS = 3
# Longest wait for a rate-limit reset within one listing (also capped by the org's refresh_seconds).
MAX_RATE_WAIT_SECONDS = 300.0
USER_AGENT = f"gitreg/{__version__}"
_LINK_NEXT_RE = re.compile(r'<([^>]*)>\s*;\s*rel="?next"?')


@dataclass
class OrgStats:
    """Counters of one org's API use, read by the metrics collector at scrape time."""

    calls: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    rate_remaining: int | None = None
    modules: int = 0
    repositories: int = 0
    conflicts: int = 0  # repositories not served: another repository holds their address (orgs.owners)
    owners_adopted: int = 0  # owners of its addresses taken from another replica (through Redis), ever
    last_success: float | None = None  # wall-clock time of the last complete listing

    def failed(self, reason: str) -> None:
        """Count one failed API call (or rate-limited answer) by reason."""
        self.failures[reason] = self.failures.get(reason, 0) + 1


class ForgeError(Exception):
    """An API call failed; `reason` is a short metric label, the message is safe to log."""

    def __init__(self, reason: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retry_after = retry_after  # seconds the host asked to wait (Retry-After, a rate-limit reset)


class ForgeNotFound(ForgeError):
    """404: the org, group or repository does not exist (or the token cannot see it)."""

    def __init__(self, message: str) -> None:
        super().__init__("not_found", message)


class ForgeClient:
    """Lists one org's repositories through its host's REST API."""

    def __init__(self, org: OrgConfig, session: aiohttp.ClientSession, stats: OrgStats | None = None) -> None:
        self.org = org
        self.session = session
        self.stats = stats or OrgStats()
        api = parse(org.api_url)
        # Where the token may go: the API's scheme, host, port, and paths under its own.
        self._origin = _origin(api) if api is not None else None
        self._api_path = api.path.rstrip("/") if api is not None else ""
        self.reset_at: float | None = None  # wall clock at which the rate limit resets, as the host last said
        self.rate_wait_budget = min(MAX_RATE_WAIT_SECONDS, org.refresh_seconds)
        self.as_user = False  # a person's own token (identity/): `Authorization: Bearer`, as hosts take any
        self.retry_delays: tuple[float, ...] = RETRY_DELAYS  # pauses before trying a transient failure again

    def headers(self) -> dict[str, str]:
        """Request headers, with the token (never logged)."""
        return {"User-Agent": USER_AGENT, "Accept": "application/json"}

    async def list_repositories(self, on_page: OnPage | None = None) -> list[RepoRecord]:
        """Every repository of the org, all pages; ForgeError when any page fails.

        `on_page` is given each page's records but the last's as it arrives (before the next page
        is asked for).
        """
        raise NotImplementedError

    async def repository(self, key: str) -> RepoRecord | None:
        """One repository by id or full name (a webhook names it without describing it, or a person's
        token asks whether it can read it); None when the host says it does not exist, or by default."""
        return None

    async def username(self) -> str | None:
        """Whom the client's token belongs to (`GET /user`); None when the host refuses the token (401/403)."""
        raise NotImplementedError

    async def can_read(self, full_name: str) -> bool:
        """True when the client's token can read the repository `full_name` (200); False on a 404, 401 or 403."""
        try:
            return await self.repository(full_name) is not None
        except ForgeError as e:
            if e.reason == "unauthorized":
                return False
            raise

    async def member_repositories(self) -> list[RepoRecord]:
        """The repositories the client's token is a member of, all pages (one listing, not a call per repository)."""
        raise NotImplementedError

    async def releases(self, full_name: str) -> list[Release]:
        """The repository's releases, every page (forges/releases.py); ForgeError when a page fails."""
        raise NotImplementedError

    def asset_headers(self) -> dict[str, str]:
        """The headers (with the token) that fetch a release asset's bytes on the API's origin."""
        return self.headers()

    async def _username(self, url: str, key: str) -> str | None:
        """The `key` field of the user object at `url`; None when the host refuses the token."""
        try:
            data, _ = await self.get_json(url)
        except ForgeError as e:
            if e.reason == "unauthorized":
                return None
            raise
        name = data.get(key) if isinstance(data, dict) else None
        if not isinstance(name, str) or not name:
            raise self._failure("bad_json", f"{self.org.label}: the API's user object has no {key}")
        return name[:255]

    async def _pages(
        self,
        url: str,
        record: Callable[[Any], RepoRecord | None],
        on_page: OnPage | None = None,
        items: str | None = None,
    ) -> list[RepoRecord]:
        """Follow `next` links from `url`, turning each item into a record (malformed ones skipped).

        A page's items are taken in slices, with a yield to the event loop between them, and
        past the org's `max_repositories` the listing fails (the caller keeps what it had).
        """
        found: dict[str, RepoRecord] = {}
        seen: set[str] = set()
        next_url: str | None = url
        while next_url is not None:
            if next_url in seen or len(seen) >= MAX_PAGES:
                raise self._failure(
                    "error", f"{self.org.label}: the API's page links go round in circles or past {MAX_PAGES} pages"
                )
            seen.add(next_url)
            data, headers = await self.get_json(next_url)
            data = data.get(items) if items is not None and isinstance(data, dict) else data  # {items: [...]}
            if not isinstance(data, list):
                raise self._failure("bad_json", f"{self.org.label}: the API answered a page that is not a JSON list")
            following = self._next_page(next_url, headers)
            for start in range(0, len(data), RECORD_SLICE):
                page = [rec for rec in map(record, data[start : start + RECORD_SLICE]) if rec is not None]
                for rec in page:
                    # An item that moved between pages while we read them is counted once.
                    found[rec.full_name.lower()] = rec
                if len(found) > self.org.max_repositories:
                    raise self._failure(
                        "too_many",
                        f"{self.org.label}: the API lists more than max_repositories = "
                        f"{self.org.max_repositories} repositories; not taken (raise the org's max_repositories)",
                    )
                if following is not None and on_page is not None:
                    on_page(page)  # (not the last page: its records come back with all the others)
                await asyncio.sleep(0)
            next_url = following
            if next_url is not None:
                await self._respect_remaining()
        return list(found.values())

    def _failure(self, reason: str, message: str) -> ForgeError:
        """A counted API failure, to raise."""
        self.stats.failed(reason)
        return ForgeError(reason, message)

    def _next_page(self, url: str, headers: Mapping[str, str]) -> str | None:
        link = headers.get("Link", "")
        m = _LINK_NEXT_RE.search(link)
        if m:
            target = m.group(1)
            if "\\" not in target:  # (a backslash is refused below, never resolved by guess)
                with contextlib.suppress(ValueError):  # not a URL: refused below, as not under api_url
                    target = str(URL(url).join(URL(target, encoded=True)))
        else:
            page = headers.get("X-Next-Page", "").strip()
            if not page:
                return None
            if not page.isdigit():
                raise self._failure("bad_json", f"{self.org.label}: X-Next-Page {page[:20]!r} is not a page number")
            target = str(URL(url, encoded=True).update_query(page=page))
        if not self._under_api(target):
            # The token goes with every request: only to the API itself, under its path.
            raise self._failure(
                "error",
                f"{self.org.label}: the API's next-page link {mask(target)[:200]!r} is not under "
                f"{self.org.api_url}; not followed",
            )
        return target

    def _under_api(self, target: str) -> bool:
        """True when `target` is under api_url: same scheme, host, port and path prefix, no user info."""
        if "\\" in target or self._origin is None:
            return False
        found = parse(target)
        if found is None or found.user is not None or found.is_scp or _origin(found) != self._origin:
            return False
        path = found.path
        if any(seg in (".", "..") or seg.lower() in ("%2e", "%2e%2e", ".%2e", "%2e.") for seg in path.split("/")):
            return False
        return path == self._api_path or path.startswith(self._api_path + "/")

    async def _respect_remaining(self) -> None:
        """Before the next page: when the quota is spent, wait for its reset (within budget)."""
        if self.stats.rate_remaining == 0 and self.reset_at is not None:
            wait = self.reset_at - time.time()
            if wait > 0:
                await self._wait_for_rate_limit(wait)

    async def _wait_for_rate_limit(self, wait: float) -> None:
        if wait > self.rate_wait_budget:
            raise ForgeError(
                "rate_limited",
                f"{self.org.label}: rate limited for {wait:.0f} s more, past the wait "
                f"budget of {self.rate_wait_budget:.0f} s; the last listing stays",
                retry_after=wait,
            )
        log.info("%s: API rate limit reached; waiting %.1f s for its reset", self.org.label, wait)
        await asyncio.sleep(wait)

    # The provider's rate-limit headers: `<prefix>Remaining`, `<prefix>Reset` (epoch seconds).
    RATE_HEADERS = ""

    def _rate_headers(self, headers: Mapping[str, str]) -> tuple[int | None, float | None]:
        """(remaining, reset as wall-clock time) from the provider's rate-limit headers."""
        reset = _int_header(headers, f"{self.RATE_HEADERS}Reset")
        return _int_header(headers, f"{self.RATE_HEADERS}Remaining"), float(reset) if reset is not None else None

    async def get_record(self, url: str, record: Callable[[Any], RepoRecord | None]) -> RepoRecord | None:
        """One repository's record from the API (`record` reads the host's JSON); None on a 404."""
        try:
            data, _ = await self.get_json(url)
        except ForgeNotFound:
            return None
        return record(data)

    async def get_json(self, url: str) -> tuple[Any, Mapping[str, str]]:
        """GET `url` (an API URL), with retries of transient failures and rate-limit waits."""
        transient = 0
        rate_waits = 0
        hint: float | None = None  # a 5xx's Retry-After
        while True:
            self.stats.calls += 1
            try:
                status, headers, body = await self._get(url)
            except TimeoutError:
                reason, message = (
                    "timeout",
                    f"{self.org.label}: the API did not answer within {API_TIMEOUT_SECONDS:g} s",
                )
            except aiohttp.ClientError as e:
                reason, message = "error", f"{self.org.label}: cannot reach the API: {type(e).__name__}"
            else:
                remaining, reset = self._rate_headers(headers)
                if remaining is not None:
                    self.stats.rate_remaining = remaining
                if reset is not None:
                    self.reset_at = reset
                wait = self._rate_limited(status, headers, remaining, reset)
                if wait is not None:
                    self.stats.failed("rate_limited")
                    rate_waits += 1
                    if rate_waits > MAX_RATE_WAITS:
                        raise ForgeError(
                            "rate_limited", f"{self.org.label}: still rate limited after {MAX_RATE_WAITS} waits"
                        )
                    await self._wait_for_rate_limit(wait)
                    continue
                if status < 500:
                    return await self._decode(url, status, body), headers
                reason, message = "error", f"{self.org.label}: the API answered HTTP {status}"
                hint = retry_after_seconds(headers.get("Retry-After"))
            self.stats.failed(reason)
            if transient >= len(self.retry_delays):
                raise ForgeError(reason, message, retry_after=hint)
            await asyncio.sleep(self.retry_delays[transient])
            transient += 1

    async def _get(self, url: str) -> tuple[int, Mapping[str, str], bytes]:
        """One GET: status, headers and the (bounded) body; the connection is released before any wait."""
        async with self.session.get(
            URL(url, encoded=True),
            headers=self.headers(),
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=API_TIMEOUT_SECONDS),
        ) as resp:
            if resp.status != 200:
                return resp.status, resp.headers, b""
            return resp.status, resp.headers, await self._read_bounded(resp, url)

    async def _read_bounded(self, resp: aiohttp.ClientResponse, url: str) -> bytes:
        """The body, read a chunk at a time; a counted ForgeError as soon as it passes MAX_PAGE_BYTES."""
        limit = MAX_PAGE_BYTES
        size = resp.content_length or 0
        chunks: list[bytes] = []
        if size <= limit:
            size = 0
            async for chunk in resp.content.iter_chunked(256 * 1024):
                size += len(chunk)
                if size > limit:
                    break
                chunks.append(chunk)
        if size > limit:
            raise self._failure(
                "too_large",
                f"{self.org.label}: the API's answer to {mask(url)[:200]!r} is larger than {limit} bytes; not read",
            )
        return b"".join(chunks)

    async def _decode(self, url: str, status: int, body: bytes) -> Any:
        """The JSON of a 200 answer; ForgeError (counted) for anything else."""
        if status == 404:
            self.stats.failed("not_found")
            raise ForgeNotFound(f"{self.org.label}: the API answered 404 for {_path(url)}")
        if status in (401, 403):
            self.stats.failed("unauthorized")
            raise ForgeError(
                "unauthorized",
                f"{self.org.label}: the API refused access (HTTP {status}); check the org's token and its scopes",
            )
        if status != 200:
            self.stats.failed("error")
            raise ForgeError("error", f"{self.org.label}: the API answered HTTP {status} for {_path(url)}")
        try:
            if len(body) <= PARSE_ON_LOOP_BYTES:
                return json.loads(body)
            return await asyncio.get_running_loop().run_in_executor(None, json.loads, body)  # megabytes: off the loop
        except (ValueError, RecursionError):
            self.stats.failed("bad_json")
            raise ForgeError("bad_json", f"{self.org.label}: the API answered something that is not JSON") from None

    def _rate_limited(
        self, status: int, headers: Mapping[str, str], remaining: int | None, reset: float | None
    ) -> float | None:
        """Seconds to wait when the answer says "rate limited", else None."""
        if status not in (403, 429):
            return None
        retry_after = retry_after_seconds(headers.get("Retry-After"))
        if retry_after is not None:
            return retry_after
        if remaining == 0 and reset is not None:
            return max(0.0, reset - time.time()) + 0.5  # the reset is in whole seconds
        if status == 429:
            return 60.0  # no hint: GitHub's documented minimum for secondary limits
        return None  # a plain 403: the token may not read this


def _path(url: str) -> str:
    return urlsplit(url).path[:200]


def retry_after_seconds(value: str | None) -> float | None:
    """`Retry-After`: seconds, or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _int_header(headers: Mapping[str, str], name: str) -> int | None:
    value = headers.get(name, "").strip()
    return int(value) if value.isdigit() and len(value) <= 15 else None


def _origin(url: GitUrl) -> tuple[str, str, int]:
    """(scheme, host, port) of a parsed URL, the port spelled out."""
    return url.scheme, url.host, url.port or {"http": 80, "https": 443}.get(url.scheme, 0)


@dataclass(frozen=True)
class Host:
    """What the rest of gitreg asks of one kind of Git host; each host module defines one `HOST`."""

    name: str  # the `provider` of [[orgs]] entries and webhook metrics
    client: type[ForgeClient]
    # (group, full_name): is the repository one of the org's? (GitLab groups have subgroups.)
    owns: Callable[[str, str], bool]
    secret_key: str  # the [webhooks] key of this host's shared secret
    # (secret, raw body, headers): does the delivery carry the shared secret? (constant time)
    verify: Callable[[str, bytes, Mapping[str, str]], bool]
    refused: str  # what a delivery that fails `verify` is told
