"""One deadline per request for everything identity waits on (Terraform gives a request 10 s).

A fake GitLab whose endpoints answer slowly (`FakeForge.stall`): a `terraform login` token whose
host grant must be renewed, then asked whether it can read the module; a person's listing for the
pages and the API's list. Each request is answered (200, or a 503 naming the host with
Retry-After) within REQUEST_SECONDS and a little, never held by the sum of the calls' own caps.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from gitreg.identity.deadline import REQUEST_SECONDS
from tests.support.app import indexed, make_config
from tests.support.oauth import CLIENT_ID, CLIENT_SECRET, FakeOAuthHost, consent, git_host, login, path_of

SIGNING_KEY = "d" * 40
# What the rest of a request may add to its identity budget on a loaded 2-core machine (Terraform: 10 s).
SLACK_SECONDS = 1.0


@pytest.fixture
def gitlab(tmp_path: Path) -> Iterator[FakeOAuthHost]:
    """A GitLab whose host tokens live 61.5 s: gitreg renews one a minute before, 1.5 s after its issue."""
    with git_host("gitlab", tmp_path / "gitlab", token_seconds=61.5) as fake:
        yield fake


def config(tmp_path: Path, fake: FakeOAuthHost, **sections: Any) -> Any:
    forge = {
        "provider": fake.provider,
        "url": fake.base_url,
        "api_url": fake.api_url,
        "oauth_client_id": CLIENT_ID,
        "oauth_client_secret": CLIENT_SECRET,
    }
    return make_config(
        fake.rules(),
        storage={"path": str(tmp_path / "state")},
        auth={"signing_key": SIGNING_KEY, "forges": [forge]},
        **sections,
    )


def host(fake: FakeOAuthHost) -> str:
    """The host name a 503 names."""
    return urlsplit(fake.base_url).hostname or ""


async def timed(call: Any) -> tuple[Any, float]:
    started = time.monotonic()
    resp = await call
    return resp, time.monotonic() - started


@pytest.mark.slow  # waits out a renewal and a stalled can-read (about 11 s)
async def test_a_slow_renewal_and_a_slow_can_read_together_answer_within_one_budget(serve_client, tmp_path, gitlab):
    # A versions answer only: what `gitreg serve` builds with the index off.
    client = await serve_client(config(tmp_path, gitlab, index={"enabled": False}))
    token = await login(client)
    headers = {"Authorization": f"Bearer {token}"}
    await asyncio.sleep(1.6)  # the host token is due for renewal
    gitlab.token_seconds = 7200  # (the renewed one lives 2 hours: the retry renews nothing)
    gitlab.forge.reset_counters()
    gitlab.forge.stall("POST", "/oauth/token", 5)  # the renewal: answered after 5 s (its own cap: 8 s)
    gitlab.forge.stall("GET", "/api/v4/projects/", 6)  # can-read: after 6 s (its own cap: 8 s)
    resp, took = await timed(client.get("/v1/modules/demo/hello/null/versions", headers=headers))
    # Was 200 after 11 s (5 s renewing, then 6 s asking): Terraform had given up at 10 s.
    assert took < REQUEST_SECONDS + SLACK_SECONDS, took
    assert resp.status == 503, await resp.text()
    message = (await resp.json())["errors"][0]
    assert f"Git host {host(gitlab)}" in message and "can read" in message, message
    assert 1 <= int(resp.headers["Retry-After"]) <= 10
    assert gitlab.refreshes == 1  # the renewal was done and kept
    await asyncio.sleep(11.5 - took)  # the question went on: its answer is kept for the retry
    resp, took = await timed(client.get("/v1/modules/demo/hello/null/versions", headers=headers))
    assert resp.status == 200 and took < 1, (took, await resp.text())
    assert gitlab.refreshes == 1 and len(gitlab.forge.requests("/api/v4/projects/")) == 1  # nothing asked twice


@pytest.mark.slow  # a person's listing stalled past the budget (about 10 s)
async def test_a_page_whose_listing_stalls_answers_within_the_budget_then_serves_the_retry(
    serve_client, tmp_path, gitlab
):
    gitlab.token_seconds = 7200  # no renewal in this one
    client = await serve_client(config(tmp_path, gitlab))
    resp = await client.get("/login/with/0", params={"next": "/"}, allow_redirects=False)
    landed = await client.get(path_of(await consent(resp.headers["Location"])), allow_redirects=False)
    assert landed.status == 200, await landed.text()
    gitlab.forge.reset_counters()
    # The person's listing (GET /projects?membership=true) answers after 10 s: a page waited up to 60 s.
    gitlab.forge.stall("GET", "/api/v4/projects", REQUEST_SECONDS + 2)
    page, took = await timed(client.get("/"))
    assert took < REQUEST_SECONDS + SLACK_SECONDS, took
    text = await page.text()
    assert page.status == 503 and f"Git host {host(gitlab)}" in text, text  # a page naming the host, no 500
    assert 1 <= int(page.headers["Retry-After"]) <= 10
    await indexed(client)  # the page lists what the index has (built while the listing stalled)
    again, took = await timed(client.get("/"))  # the listing went on: the retry gets it when it arrives
    text = await again.text()
    assert again.status == 200 and took < REQUEST_SECONDS + SLACK_SECONDS, (took, text)
    assert "hello" in text and "secret" not in text  # alice's view
    assert len(gitlab.forge.requests("/api/v4/projects")) == 1  # one listing for both requests
