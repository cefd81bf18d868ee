"""A provider zip's first download: the download answer starts fetching the zip into the kept store,
and a zip request arriving meanwhile follows that one fetch as it grows (gitreg/providers/fetches.py)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest

from gitreg.web.keys import PROVIDERS
from tests.support.app import make_config
from tests.support.forges import FakeForge, releasing_github
from tests.support.releases import SigningKey, goreleaser_assets

GH_TOKEN = "ghp_providerprefetchreader01"
REPO = "terraform-provider-widget"
NAME = "terraform-provider-widget_1.0.0_linux_amd64.zip"


@pytest.fixture
async def forge(git_http) -> AsyncIterator[FakeForge]:
    async with releasing_github(git_http, GH_TOKEN) as fake:
        yield fake


async def started(serve_client, forge: FakeForge, release_key: SigningKey, tmp_path: Path, payload: int):
    """A gitreg serving release v1.0.0 of acme/widget (its zips `payload` random bytes large): the client,
    the files, and how many times the Git host was asked for the linux_amd64 zip."""
    files = goreleaser_assets("widget", "1.0.0", release_key, payload=payload)
    release = forge.add_release(REPO, "v1.0.0", files)
    asset = next(urlsplit(a["url"]).path for a in release["assets"] if a["name"] == NAME)
    rule = {
        "namespace": "acme",
        "type": "*",
        "repository": f"{forge.base_url}/acme/terraform-provider-{{type}}",
        "keys": str(release_key.write(tmp_path / "keys.asc")),
    }
    org = {"provider": "github", "api_url": forge.api_url, "group": "acme", "namespace": "acme", "token": GH_TOKEN}
    config = make_config(
        [], providers=[rule], orgs=[org], index={"enabled": False}, storage={"path": str(tmp_path / "st")}
    )
    client = await serve_client(config)
    return client, files, lambda: len(forge.requests(asset))


async def download_answer(client) -> str:
    resp = await client.get("/v1/providers/acme/widget/1.0.0/download/linux/amd64")
    assert resp.status == 200, await resp.text()
    url = urlsplit((await resp.json())["download_url"])
    return f"{url.path}?{url.query}"


async def until(check, seconds: float = 10.0) -> None:
    for _ in range(int(seconds / 0.02)):
        if check():
            return
        await asyncio.sleep(0.02)
    assert check()


async def test_a_download_answer_fetches_its_zip_once_and_the_zip_request_then_needs_no_host_request(
    serve_client, forge, release_key, tmp_path
):
    client, files, fetches = await started(serve_client, forge, release_key, tmp_path, payload=300_000)
    kept = tmp_path / "st" / "providers" / f"{hashlib.sha256(files[NAME]).hexdigest()}.zip"
    signed = await download_answer(client)
    await until(kept.is_file)  # fetched without anyone asking for the zip yet
    assert fetches() == 1
    resp = await client.get(signed)
    assert resp.status == 200 and await resp.read() == files[NAME]
    await download_answer(client)  # asked again: kept, nothing fetched
    assert (await (await client.get(signed)).read()) == files[NAME]
    assert fetches() == 1 and client.app[PROVIDERS].fetches.started == 1


async def test_zip_requests_during_a_prefetch_share_its_one_fetch_and_get_bytes_before_it_ends(
    serve_client, forge, release_key, tmp_path
):
    client, files, fetches = await started(serve_client, forge, release_key, tmp_path, payload=3_000_000)
    forge.storage.hold_at = 2_000_000  # the host sends this much, then waits
    shasum = hashlib.sha256(files[NAME]).hexdigest()
    signed = await download_answer(client)
    fetches_ = client.app[PROVIDERS].fetches
    await until(lambda: (f := fetches_.running(shasum)) is not None and f.released > 600_000)
    first, second = await asyncio.gather(client.get(signed), client.get(signed))
    assert first.status == second.status == 200
    # The first bytes arrive while the host still holds the rest back.
    heads = await asyncio.wait_for(
        asyncio.gather(first.content.readexactly(600_000), second.content.readexactly(600_000)), 10
    )
    assert heads == [files[NAME][:600_000]] * 2
    forge.storage.go.set()
    rests = await asyncio.gather(first.read(), second.read())
    assert [heads[0] + rests[0], heads[1] + rests[1]] == [files[NAME]] * 2
    assert fetches() == 1 and fetches_.started == 1


async def test_a_zip_tampered_with_is_cut_short_when_its_prefetch_ends_and_nothing_is_kept(
    serve_client, forge, release_key, tmp_path
):
    client, files, fetches = await started(serve_client, forge, release_key, tmp_path, payload=3_000_000)
    data = files[NAME]
    forge.replace_asset(REPO, "v1.0.0", NAME, data[:-1] + bytes([data[-1] ^ 1]))
    forge.storage.hold_at = 2_000_000
    shasum = hashlib.sha256(data).hexdigest()
    signed = await download_answer(client)
    fetches_ = client.app[PROVIDERS].fetches
    await until(lambda: (f := fetches_.running(shasum)) is not None and f.released > 0)
    resp = await client.get(signed)
    assert resp.status == 200
    assert await resp.content.readexactly(200_000) == data[:200_000]
    forge.storage.go.set()
    with pytest.raises(aiohttp.ClientPayloadError):
        await resp.read()
    await until(lambda: fetches_.running(shasum) is None)
    assert list((tmp_path / "st" / "providers").iterdir()) == []  # nothing kept, no temporary file left
    assert fetches() == 1


async def test_a_host_failing_half_way_through_a_prefetch_cuts_its_followers_and_is_not_remembered(
    serve_client, forge, release_key, tmp_path
):
    client, files, fetches = await started(serve_client, forge, release_key, tmp_path, payload=3_000_000)
    forge.storage.hold_at, forge.storage.cut = 2_000_000, True
    shasum = hashlib.sha256(files[NAME]).hexdigest()
    signed = await download_answer(client)
    fetches_ = client.app[PROVIDERS].fetches
    await until(lambda: (f := fetches_.running(shasum)) is not None and f.released > 0)
    resp = await client.get(signed)
    assert resp.status == 200
    assert await resp.content.readexactly(200_000) == files[NAME][:200_000]
    forge.storage.go.set()  # ... and the host drops the connection
    with pytest.raises(aiohttp.ClientPayloadError):
        await resp.read()
    await until(lambda: fetches_.running(shasum) is None)
    assert list((tmp_path / "st" / "providers").iterdir()) == []
    again = await client.get(signed)  # the failure is not remembered: fetched again, whole
    assert again.status == 200 and await again.read() == files[NAME]
    assert fetches() == 2
    kept = tmp_path / "st" / "providers" / f"{shasum}.zip"
    assert kept.read_bytes() == files[NAME]


async def test_a_client_hanging_up_during_a_prefetch_leaves_it_to_finish_and_keep_the_zip(
    serve_client, forge, release_key, tmp_path
):
    client, files, fetches = await started(serve_client, forge, release_key, tmp_path, payload=3_000_000)
    forge.storage.hold_at = 2_000_000
    shasum = hashlib.sha256(files[NAME]).hexdigest()
    signed = await download_answer(client)
    fetches_ = client.app[PROVIDERS].fetches
    await until(lambda: (f := fetches_.running(shasum)) is not None and f.released > 0)
    resp = await client.get(signed)
    assert await resp.content.readexactly(100_000) == files[NAME][:100_000]
    resp.close()  # the client goes away mid-download
    forge.storage.go.set()
    kept = tmp_path / "st" / "providers" / f"{shasum}.zip"
    await until(kept.is_file)
    assert kept.read_bytes() == files[NAME]
    assert await (await client.get(signed)).read() == files[NAME]  # from disk
    assert fetches() == 1
    assert [p.name for p in kept.parent.iterdir()] == [kept.name]  # no temporary file left
