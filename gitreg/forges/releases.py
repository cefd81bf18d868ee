"""A repository's releases as its Git host's API describes them, and their assets' bytes.

Provider-neutral: `Release` and `ReleaseAsset`, read from GitHub's "List releases" (drafts,
prereleases, assets with their API URL, size and `digest`) or GitLab's "List releases" (asset
links, generic-package links included). `release_pages` follows a listing's pages on the API's
own origin, as repository listings do; `open_asset` streams an asset's bytes: with the client's
token only toward the API's origin, and a redirect elsewhere (GitHub's presigned storage URL)
followed WITHOUT it (the storage refuses a second credential and must never see the token).
`storage_location` is where that first credential-free hop goes, for a client to fetch itself.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
from yarl import URL

from gitreg.core.urls import mask, parse
from gitreg.forges.base import USER_AGENT, ForgeClient, ForgeError, _origin
from gitreg.forges.records import Release, ReleaseAsset

# 20 pages of 100 releases: far beyond a provider's history; stops a `next` link going round in circles.
MAX_RELEASE_PAGES = 20
# A storage host may redirect again (a CDN); more than this is a loop.
MAX_REDIRECTS = 5
# An asset's first byte within this long, then at most this long between chunks.
ASSET_CONNECT_SECONDS = 15.0
ASSET_READ_SECONDS = 60.0
# A storage URL handed to a client is at most this long (presigned URLs are under 2 KiB).
MAX_LOCATION_CHARS = 8192
_REDIRECTS = (301, 302, 303, 307, 308)
_SHA256_RE = re.compile(r"sha256:[0-9a-f]{64}")


def text(item: dict[str, Any], key: str, limit: int = 1024) -> str | None:
    """A string field of at most `limit` characters, else None."""
    value = item.get(key)
    return value if isinstance(value, str) and 0 < len(value) <= limit else None


def asset_of(name: str | None, url: str | None, size: Any = None, digest: Any = None) -> ReleaseAsset | None:
    """A `ReleaseAsset` from a host's fields; None when the name or URL is missing."""
    if name is None or url is None or "/" in name:
        return None
    return ReleaseAsset(
        name=name,
        url=url,
        size=size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None,
        digest=digest if isinstance(digest, str) and _SHA256_RE.fullmatch(digest) else None,
    )


async def release_pages(client: ForgeClient, url: str, read: Callable[[Any], Release | None]) -> list[Release]:
    """Every release listed from `url` on, all pages (malformed items skipped); ForgeError when a page fails."""
    found: list[Release] = []
    seen: set[str] = set()
    next_url: str | None = url
    while next_url is not None:
        if next_url in seen or len(seen) >= MAX_RELEASE_PAGES:
            raise ForgeError(
                "error", f"{client.org.label}: the releases' page links go round or past {len(seen)} pages"
            )
        seen.add(next_url)
        data, headers = await client.get_json(next_url)
        if not isinstance(data, list):
            raise ForgeError("bad_json", f"{client.org.label}: the API answered releases that are not a JSON list")
        found.extend(r for r in map(read, data) if r is not None)
        next_url = client._next_page(next_url, headers)
    return found


def same_origin(client: ForgeClient, url: str) -> bool:
    """True when `url` is on the API's own origin (scheme, host, port) and carries no user info."""
    found = parse(url)
    return (
        found is not None
        and found.user is None
        and not found.is_scp
        and client._origin is not None
        and _origin(found) == client._origin
    )


@contextlib.asynccontextmanager
async def open_asset(
    client: ForgeClient, asset: ReleaseAsset, headers: dict[str, str]
) -> AsyncIterator[aiohttp.ClientResponse]:
    """The asset's 200 answer, its body not yet read (read it as a stream); ForgeError otherwise.

    `headers` (with the token) go only to the API's origin; every redirect is followed by hand,
    and a hop elsewhere carries no credential at all.
    """
    url = asset.url
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=ASSET_CONNECT_SECONDS, sock_read=ASSET_READ_SECONDS)
    for _ in range(MAX_REDIRECTS + 1):
        sent = headers if same_origin(client, url) else {"User-Agent": USER_AGENT}
        try:
            resp = await client.session.get(
                URL(url, encoded=True), headers=sent, allow_redirects=False, timeout=timeout
            )
        except (aiohttp.ClientError, TimeoutError) as e:
            raise ForgeError(
                "error", f"{client.org.label}: cannot fetch asset {asset.name}: {type(e).__name__}"
            ) from None
        if resp.status in _REDIRECTS:
            resp.release()
            hop = _next_hop(url, resp)
            if hop is None:
                break
            url = hop
            continue
        if resp.status != 200:
            resp.release()
            raise _refused(client, asset, resp.status, url)
        try:
            yield resp
        finally:
            resp.release()
        return
    raise ForgeError("error", f"{client.org.label}: asset {asset.name}: too many or bad redirects")


def _next_hop(url: str, resp: aiohttp.ClientResponse) -> str | None:
    """The absolute http(s) URL a redirect answer to `url` points to; None when it names none."""
    try:
        hop = str(URL(url, encoded=True).join(URL(resp.headers.get("Location", ""), encoded=True)))
    except ValueError:
        return None
    return hop if hop.startswith(("https://", "http://")) else None


def _refused(client: ForgeClient, asset: ReleaseAsset, status: int, url: str) -> ForgeError:
    reason = "unauthorized" if status in (401, 403) else "not_found" if status == 404 else "error"
    return ForgeError(reason, f"{client.org.label}: asset {asset.name} answered HTTP {status} at {mask(url)[:200]}")


def _handed_out(client: ForgeClient, url: str) -> bool:
    """True when a client may be sent to `url`: fetched with no credential (not the API's origin, no
    user info), http(s), of a sane length."""
    found = parse(url)
    return (
        found is not None
        and found.user is None
        and found.scheme in ("https", "http")
        and len(url) <= MAX_LOCATION_CHARS
        and not same_origin(client, url)
    )


async def storage_location(client: ForgeClient, asset: ReleaseAsset, headers: dict[str, str]) -> str | None:
    """Where a client can fetch `asset` itself, with no credential: the first URL on the way to its
    bytes that is off the API's origin (the asset's own URL, else where the host's redirects lead:
    GitHub's presigned, short-lived storage URL; GitLab's object storage behind a release link and
    its package URL), redirects within the origin followed with `headers` as `open_asset` does.
    None when the host answers the bytes itself on its origin (they need the token: the bytes pass
    through gitreg instead). ForgeError when the host refuses or cannot be reached."""
    url = asset.url
    seconds = ASSET_CONNECT_SECONDS + ASSET_READ_SECONDS
    timeout = aiohttp.ClientTimeout(total=seconds, sock_connect=ASSET_CONNECT_SECONDS)
    for _ in range(MAX_REDIRECTS + 1):
        if not same_origin(client, url):
            return url if _handed_out(client, url) else None
        try:
            async with client.session.get(
                URL(url, encoded=True), headers=headers, allow_redirects=False, timeout=timeout
            ) as resp:
                if resp.status not in _REDIRECTS and resp.status != 200:
                    raise _refused(client, asset, resp.status, url)
                hop = _next_hop(url, resp) if resp.status in _REDIRECTS else None
        except (aiohttp.ClientError, TimeoutError) as e:
            raise ForgeError(
                "error", f"{client.org.label}: cannot fetch asset {asset.name}: {type(e).__name__}"
            ) from None
        if hop is None:  # the bytes themselves (the connection is closed unread), or a bad redirect
            return None
        url = hop
    return None


async def read_asset(client: ForgeClient, asset: ReleaseAsset, headers: dict[str, str], limit: int) -> bytes:
    """A small asset's bytes (SHA256SUMS, its signature, the manifest); ForgeError past `limit` bytes."""
    async with open_asset(client, asset, headers) as resp:
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.content.iter_chunked(64 * 1024):
            size += len(chunk)
            if size > limit:
                raise ForgeError("too_large", f"{client.org.label}: asset {asset.name} is larger than {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
