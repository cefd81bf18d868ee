""" "Used by": a page sign-in through a fake Git host's OAuth, for the tests of who sees which consumers."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp

from tests.support.oauth import FakeOAuthHost


def path_of(url: str) -> str:
    """The path and query of `url` (where gitreg's own redirect lands, on the test client)."""
    parts = urlsplit(url)
    return parts.path + ("?" + parts.query if parts.query else "")


async def sign_in(client: Any, host: FakeOAuthHost, username: str, forge: int = 0) -> None:
    """`username` signs in on the pages with the `forge`-th `[[auth.forges]]` host (its consent page approved);
    the test client keeps the session cookie."""
    host.approver = username
    resp = await client.get(f"/login/with/{forge}", params={"next": "/"}, allow_redirects=False)
    assert resp.status == 302, await resp.text()
    async with aiohttp.ClientSession() as http:
        parts = urlsplit(resp.headers["Location"])
        form = {k: v[0] for k, v in parse_qs(parts.query).items()}
        async with http.post(f"{parts.scheme}://{parts.netloc}{parts.path}", data=form, allow_redirects=False) as back:
            assert back.status == 302
            landed = await client.get(path_of(back.headers["Location"]), allow_redirects=False)
    assert landed.status == 200 and f"Signed in as {username}" in await landed.text()
