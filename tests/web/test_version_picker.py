"""The module page's version picker: each version's date, read from the host for a module served from git."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from gitreg.web.keys import CACHE, REGISTRY
from tests.support.app import indexed_in_full
from tests.support.index import make_config, rules
from tests.support.repos import GitRepo

pytestmark = pytest.mark.slow  # real git over HTTP

PICKER = re.compile(r'<a href="/modules/acme/dated/aws/([^"]+)">[^<]*</a>[^\n]*?(?:<time datetime="([^"]+)">|</li>)')


async def picker_dates(client) -> dict[str, str]:
    resp = await client.get("/modules/acme/dated/aws")
    text = await resp.text()
    assert resp.status == 200, text
    picker = text[text.index('<ul class="versions"') : text.index("</ul>", text.index('<ul class="versions"'))]
    return {version: date[:10] for version, date in PICKER.findall(picker)}


def dated_repo(tmp_path) -> dict[str, str]:
    """A repository of lightweight and annotated tags of different dates: version -> the date the picker shows."""
    repo = GitRepo(tmp_path / "repos", "public-dated")
    repo.commit({"main.tf": "# one\n"}, date="2021-03-04T05:06:07Z")
    repo.tag("v1.0.0")  # lightweight: its commit's date
    repo.commit({"main.tf": "# two\n"}, date="2022-03-04T05:06:07Z")
    # Annotated: the tagger's date (2024), not its commit's (2022).
    repo.git("tag", "-a", "-m", "release", "v1.1.0", env={"GIT_COMMITTER_DATE": "2024-07-01T10:00:00Z"})
    repo.git("push", "--quiet", "origin", "refs/tags/v1.1.0")
    repo.commit({"main.tf": "# three\n"}, date="2023-03-04T05:06:07Z")
    repo.tag("v1.2.0", annotated=True, message="latest")  # tagged today
    repo.commit({"main.tf": "# four\n"}, date="2025-01-02T03:04:05Z")
    repo.tag("v2.0.0-rc.1")
    today = time.strftime("%Y-%m-%d", time.gmtime())
    return {"1.0.0": "2021-03-04", "1.1.0": "2024-07-01", "1.2.0": today, "2.0.0-rc.1": "2025-01-02"}


async def shown_once_read(client, expected: dict[str, str]) -> None:
    started = time.monotonic()
    while (shown := await picker_dates(client)) != expected:
        assert time.monotonic() - started < 15, shown
        await asyncio.sleep(0.1)


async def test_the_picker_shows_every_versions_date_once_read_from_the_host_without_listing_refs_again(
    serve_client, git_http, tmp_path
):
    expected = dated_repo(tmp_path)
    config = make_config(rules(git_http, ["dated"]), git_http, storage={"path": str(tmp_path / "state")})
    client = await indexed_in_full(await serve_client(config))
    listings, tag_lists = git_http.ref_listings("public-dated.git"), client.app[CACHE].stats.refreshes
    first = await picker_dates(client)  # the latest's date came with its details; the others are being read
    assert first == {**dict.fromkeys(expected, ""), "1.2.0": expected["1.2.0"]}  # the page did not wait for them
    await shown_once_read(client, expected)
    # Asked for by object name: the host did not list its refs again for the dates. (The serving
    # process lists them once for the page's .gitreg.toml, RegistryService.declared_for: it had no
    # tag list of the module, the index process listed it; each such listing is counted here.)
    await client.app[REGISTRY].declarations.settled()
    listed_by_the_tag_cache = client.app[CACHE].stats.refreshes - tag_lists
    assert git_http.ref_listings("public-dated.git") == listings + listed_by_the_tag_cache
    fetches = [r for r in git_http.requests() if r.method == "POST" and "public-dated" in r.path]
    for _ in range(3):  # read once: later views ask the host nothing
        assert await picker_dates(client) == expected
    assert [r for r in git_http.requests() if r.method == "POST" and "public-dated" in r.path] == fetches


async def test_a_host_speaking_protocol_v0_gives_the_dates_too(serve_client, git_http, tmp_path):
    # v0 sends only advertised objects: a tag object or a tagged commit is one (a tip).
    expected = dated_repo(tmp_path)
    git_http.protocol_v0 = True
    config = make_config(rules(git_http, ["dated"]), git_http, storage={"path": str(tmp_path / "state")})
    client = await indexed_in_full(await serve_client(config))
    await shown_once_read(client, expected)
