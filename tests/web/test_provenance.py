"""A version's details API and page say which commit it serves, its archive's sha256 and whether its
tag moved, in archive and git modes (issue 35, "Tamper-evident by default")."""

from __future__ import annotations

import asyncio
import hashlib
import html
import re
import time
from pathlib import Path

import pytest

from gitreg.core.names import ModuleAddress
from gitreg.web.keys import INDEX
from tests.support.app import indexed_in_full, make_config, version_details
from tests.support.orgs import until
from tests.support.repos import GitRepo

DETAILS = "/v1/modules/demo/hello/null/1.0.0"
PAGE = "/modules/demo/hello/null/1.0.0"
DOWNLOAD = "/v1/modules/demo/hello/null/1.0.0/download"
HELLO = ModuleAddress("demo", "hello", "null")
RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def hello(tmp_path: Path) -> tuple[GitRepo, str]:
    repo = GitRepo(tmp_path / "repos", "hello")
    first = repo.commit({"main.tf": 'output "v" { value = "first" }\n'})
    repo.tag("v1.0.0")
    return repo, first


def rule(repo: GitRepo, download: str) -> dict[str, object]:
    return {"namespace": "demo", "name": "hello", "system": "null", "repository": repo.url, "download": download}


async def took_the_move(client, sha: str) -> None:
    """The index listed v1.0.0 at its new commit `sha`. With the index process `gitreg serve` runs, the
    serving process sends it the tag list the download fetched, and the queue depth `indexed` reads
    is the one the index process last reported: it may not have the move yet."""
    index = client.app[INDEX]
    await until(lambda: (entry := index.get(HELLO)) is not None and entry.latest.sha == sha, timeout=30)
    await indexed_in_full(client)


async def details(client) -> dict:
    resp = await version_details(client, DETAILS)
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def archive_sha256(client) -> str:
    """The details' archive_sha256: known with the details (hashed from the details read's `git archive`)."""
    body = await details(client)
    assert body["archive_sha256"] is not None
    return body["archive_sha256"]


async def archive_bytes(serve_client, repo: GitRepo, store: Path) -> bytes:
    """The archive of v1.0.0 as a registry serving `repo` in archive mode sends it."""
    # Only its archive is read: the index off.
    config = make_config([rule(repo, "archive")], storage={"path": str(store)}, index={"enabled": False})
    other = await serve_client(config)
    resp = await other.get("/v1/modules/demo/hello/null/1.0.0/archive.tar.gz")
    assert resp.status == 200
    return await resp.read()


@pytest.mark.parametrize("download", ["archive", "git"])
@pytest.mark.slow
async def test_details_and_page_show_the_commit_served_and_the_archives_sha256(serve_client, tmp_path, download):
    repo, first = hello(tmp_path)
    store = tmp_path / "store"
    client = await indexed_in_full(
        await serve_client(make_config([rule(repo, download)], storage={"path": str(store)}))
    )
    body = await details(client)
    assert body["commit"] == first
    assert body["moved"] is None
    digest = await archive_sha256(client)
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    if download == "archive":  # the very bytes Terraform is sent
        location = (await client.get(DOWNLOAD)).headers["X-Terraform-Get"]
        assert f"checksum=sha256:{digest}" in location
        served = await (await client.get("/v1/modules/demo/hello/null/1.0.0/archive.tar.gz")).read()
        assert hashlib.sha256(served).hexdigest() == digest
    else:  # the archive gitreg would serve: what the same registry in archive mode serves
        assert not (store / "archives").exists() or not list((store / "archives").iterdir())  # none built
        served = await archive_bytes(serve_client, repo, tmp_path / "other-store")
        assert hashlib.sha256(served).hexdigest() == digest
    page = await client.get(PAGE)
    assert page.status == 200
    text = await page.text()
    assert f'<code class="commit" id="served-commit">{first}</code>' in text
    assert f'<code class="commit" id="archive-sha256">{digest}</code>' in text
    assert 'id="moved-tag"' not in text


@pytest.mark.slow
async def test_a_module_that_no_archive_can_hold_has_a_null_archive_sha256_and_no_error(serve_client, tmp_path):
    repo, first = hello(tmp_path)
    sub = GitRepo(tmp_path / "repos", "sub")
    sub.commit({"x.tf": "# x\n"})
    repo.git("-c", "protocol.file.allow=always", "submodule", "add", "--quiet", sub.url, "vendor")
    repo.commit({}, "add a submodule")
    repo.tag("v1.0.0")  # now with a submodule: no archive can hold it
    config = make_config([rule(repo, "git")], storage={"path": str(tmp_path / "store")})
    client = await indexed_in_full(await serve_client(config))
    body = await details(client)
    assert body["archive_sha256"] is None and body["commit"] == repo.head() != first
    page = await client.get(PAGE)
    assert page.status == 200 and "not known yet" in await page.text()


@pytest.mark.parametrize("download", ["archive", "git"])
@pytest.mark.slow
async def test_a_moved_tag_is_shown_with_its_first_and_current_commit_and_when_it_was_noticed(
    serve_client, tmp_path, download
):
    repo, first = hello(tmp_path)
    config = make_config([rule(repo, download)], cache={"ttl_seconds": 0}, storage={"path": str(tmp_path / "store")})
    client = await indexed_in_full(await serve_client(config))
    assert (await client.get(DOWNLOAD)).status == 200  # served once: first commit pinned
    before = time.time()
    second = repo.commit({"main.tf": 'output "v" { value = "second" }\n'})
    repo.tag("v1.0.0")  # force-moved
    assert (await client.get(DOWNLOAD)).status == 200  # the tag list is read again: the move is noticed
    await took_the_move(client, second)
    body = await details(client)
    moved = body["moved"]
    assert moved is not None
    assert (moved["first_commit"], moved["current_commit"]) == (first, second)
    assert RFC3339.fullmatch(moved["noticed"])
    noticed = time.mktime(time.strptime(moved["noticed"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    assert before - 2 <= noticed <= time.time() + 2
    # archive mode keeps serving the first commit; git mode's clients follow the tag
    assert body["commit"] == (first if download == "archive" else second)
    text = html.unescape(await (await client.get(PAGE)).text())
    assert 'id="moved-tag"' in text
    assert first in text and second in text and moved["noticed"] in text


@pytest.mark.slow
async def test_a_moved_tag_is_remembered_across_a_restart_with_when_it_was_first_noticed(serve_client, tmp_path):
    repo, first = hello(tmp_path)
    store = tmp_path / "store"
    config = make_config([rule(repo, "archive")], cache={"ttl_seconds": 0}, storage={"path": str(store)})
    client = await indexed_in_full(await serve_client(config))
    assert (await client.get(DOWNLOAD)).status == 200
    second = repo.commit({"main.tf": 'output "v" { value = "second" }\n'})
    repo.tag("v1.0.0")
    assert (await client.get(DOWNLOAD)).status == 200
    await took_the_move(client, second)
    noticed = (await details(client))["moved"]["noticed"]
    await client.close()
    await asyncio.sleep(1.1)  # a record made again now would carry another second
    restarted = await indexed_in_full(await serve_client(config))
    moved = (await details(restarted))["moved"]
    assert moved == {"first_commit": first, "current_commit": second, "noticed": noticed}
