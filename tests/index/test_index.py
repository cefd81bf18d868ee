"""The module index: list, search and details answer from memory and disk, never from git."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path

import pytest

from gitreg.web.keys import INDEX
from tests.support.app import assert_error, indexed, until_listed, version_details
from tests.support.index import get_json, make_config, module_repo, names, rules
from tests.support.repos import GitRepo
from tests.support.webhooks import WEBHOOKS, pointed_at, post_github
from tests.support.webhooks import fixture as webhook_fixture


@pytest.mark.slow
async def test_browsing_a_settled_index_runs_no_git_at_all(serve_client, git_http, tmp_path):
    for n in ("vnet", "dns"):
        module_repo(tmp_path, f"public-{n}")
    client = await indexed(
        await serve_client(
            make_config(rules(git_http, ["vnet", "dns"]), git_http, storage={"path": str(tmp_path / "state")})
        )
    )
    git_http.reset_counters()
    for url in (
        "/v1/modules",
        "/v1/modules/acme",
        "/v1/modules/search?q=vnet",
        "/v1/modules/acme/vnet",
        "/v1/modules/acme/vnet/aws",
        "/v1/modules/acme/vnet/aws/1.0.0",
    ):
        await get_json(client, url)
    assert git_http.requests() == []  # not one request reached the Git host


@pytest.mark.slow
async def test_search_finds_readme_words_and_ranks_names_first(serve_client, git_http, tmp_path):
    module_repo(tmp_path, "public-vnet")
    module_repo(tmp_path, "public-bastion", "# Bastion\n\nA jump host.\n")
    client = await indexed(
        await serve_client(
            make_config(rules(git_http, ["vnet", "bastion"]), git_http, storage={"path": str(tmp_path / "state")})
        )
    )
    # "bastion" is the second module's name and a word deep in the first one's README.
    assert names(await get_json(client, "/v1/modules/search?q=bastion")) == ["bastion", "vnet"]
    assert names(await get_json(client, "/v1/modules/search?q=nat%20gateway")) == ["vnet"]
    assert names(await get_json(client, "/v1/modules/search?q=no-such-word")) == []
    vnet = await get_json(client, "/v1/modules/acme/vnet/aws")
    assert vnet["description"] == "Creates a virtual network with peering and flow logs."


@pytest.mark.slow
async def test_a_tag_webhook_shows_the_new_version_in_lists_within_a_second(serve_client, git_http, tmp_path):
    repo = module_repo(tmp_path, "public-vnet")
    config = make_config(
        rules(git_http, ["vnet"]),
        git_http,
        cache={"ttl_seconds": 3600},
        webhooks=WEBHOOKS,
        storage={"path": str(tmp_path / "state")},
    )
    client = await indexed(await serve_client(config))
    assert (await get_json(client, "/v1/modules"))["modules"][0]["version"] == "1.0.0"
    repo.commit({"README.md": "# Virtual network\n\nNow with IPv6.\n"})
    repo.tag("v1.1.0")
    started = time.monotonic()
    resp = await post_github(
        client, pointed_at(webhook_fixture("github-push-tag.json"), git_http.url("public-vnet.git"))
    )
    assert resp.status == 200
    while (await get_json(client, "/v1/modules"))["modules"][0]["version"] != "1.1.0":
        assert time.monotonic() - started < 5, "the new tag was not listed"
        await asyncio.sleep(0.02)
    listed = await get_json(client, "/v1/modules/acme/vnet/aws")
    assert listed["versions"] == ["1.1.0", "1.0.0"] and listed["description"] == "Now with IPv6."


@pytest.mark.slow
async def test_a_restart_serves_list_search_and_details_from_disk_with_the_git_host_down(
    serve_client, git_http, tmp_path
):
    module_repo(tmp_path, "public-vnet")
    module_repo(tmp_path, "public-dns", "# DNS\n\nRecords.\n")
    state = tmp_path / "state"
    config = make_config(rules(git_http, ["vnet", "dns"]), git_http, storage={"path": str(state)})
    client = await indexed(await serve_client(config))
    before = await get_json(client, "/v1/modules/acme/vnet/aws")
    await client.close()  # shutdown writes index.json
    saved = json.loads((state / "index.json").read_text())
    assert sorted(e["address"] for e in saved["entries"]) == ["acme/dns/aws", "acme/vnet/aws"]
    assert not [p for p in state.iterdir() if p.name.endswith(".tmp")]  # written atomically

    git_http.mode = "down"
    shutil.rmtree(state / "mirrors")  # no mirror to read details from: they must come from disk
    git_http.reset_counters()
    restarted = await serve_client(config)
    assert names(await get_json(restarted, "/v1/modules")) == ["dns", "vnet"]  # at once, not after a pass
    assert names(await get_json(restarted, "/v1/modules/search?q=zones")) == ["vnet"]
    assert await get_json(restarted, "/v1/modules/acme/vnet/aws") == before
    assert (await restarted.get("/readyz")).status == 200
    await asyncio.sleep(0.3)  # the background pass fails against the down host...
    assert names(await get_json(restarted, "/v1/modules")) == ["dns", "vnet"]  # ...and changes nothing


@pytest.mark.slow
async def test_a_damaged_index_file_is_set_aside_and_built_again(serve_client, git_http, tmp_path):
    module_repo(tmp_path, "public-vnet")
    state = tmp_path / "state"
    state.mkdir()
    (state / "index.json").write_text('{"format": 1, "entries": [')
    client = await indexed(
        await serve_client(make_config(rules(git_http, ["vnet"]), git_http, storage={"path": str(state)}))
    )
    assert names(await get_json(client, "/v1/modules")) == ["vnet"]
    assert (state / "index.json.damaged").exists()


@pytest.mark.slow
async def test_an_index_file_nested_too_deep_to_parse_is_set_aside_and_named_in_the_log(
    serve_client, git_http, tmp_path, caplog
):
    module_repo(tmp_path, "public-vnet")
    state = tmp_path / "state"
    state.mkdir()
    (state / "index.json").write_text("[" * 100_000)  # json.loads raises RecursionError, not ValueError
    client = await indexed(
        await serve_client(make_config(rules(git_http, ["vnet"]), git_http, storage={"path": str(state)}))
    )
    assert names(await get_json(client, "/v1/modules")) == ["vnet"]
    assert (state / "index.json.damaged").exists()
    assert "the old file is index.json.damaged" in caplog.text


@pytest.mark.slow
async def test_a_module_whose_tags_disappear_drops_out_of_the_index(serve_client, tmp_path):
    repo = GitRepo(tmp_path / "repos", "vnet")
    repo.commit({"main.tf": "# v\n"})
    repo.tag("v1.0.0")
    config = make_config(
        [{"namespace": "acme", "name": "vnet", "system": "aws", "repository": repo.url}],
        cache={"ttl_seconds": 0.1},
        storage={"path": str(tmp_path / "state")},
    )
    client = await indexed(await serve_client(config))
    assert names(await get_json(client, "/v1/modules")) == ["vnet"]
    repo.delete_tag("v1.0.0")
    await asyncio.sleep(0.2)
    await client.get("/v1/modules/acme/vnet/aws/versions")  # the cache fetches: no SemVer tag any more
    await until_listed(client, [])  # the index process is told, and indexes it again
    await assert_error(await client.get("/v1/modules/acme/vnet/aws"), 404, "no SemVer tag yet")


async def test_with_the_index_disabled_nothing_is_listed_and_no_background_git_runs(serve_client, git_http, tmp_path):
    module_repo(tmp_path, "public-vnet")
    client = await serve_client(
        make_config(
            rules(git_http, ["vnet"]), git_http, index={"enabled": False}, storage={"path": str(tmp_path / "state")}
        )
    )
    await asyncio.sleep(0.3)
    assert git_http.requests() == []
    assert names(await get_json(client, "/v1/modules")) == []
    assert (await get_json(client, "/v1/modules/acme/vnet/aws/versions"))["modules"][0]["versions"] == [
        {"version": "1.0.0"}
    ]
    assert client.app[INDEX].complete is False


@pytest.mark.slow
async def test_new_modules_are_listed_with_their_versions_before_their_details_are_built(
    serve_client, git_http, tmp_path
):
    for n in ("vnet", "dns", "nat"):
        module_repo(tmp_path, f"public-{n}")
    git_http.hold_fetches()  # the mirrors that details are read from cannot be cloned; ls-remote answers
    try:
        client = await serve_client(
            make_config(rules(git_http, ["vnet", "dns", "nat"]), git_http, storage={"path": str(tmp_path / "state")})
        )
        started = time.monotonic()
        while names(await get_json(client, "/v1/modules")) != ["dns", "nat", "vnet"]:
            assert time.monotonic() - started < 8, "new modules were not listed until their details were built"
            await asyncio.sleep(0.05)
        listed = (await get_json(client, "/v1/modules"))["modules"]
        assert [m["version"] for m in listed] == ["1.0.0"] * 3
        assert names(await get_json(client, "/v1/modules/search?q=zones")) == []  # a README word: not read yet
        assert (await get_json(client, "/readyz"))["index"]["queued"] > 0  # the details are still to come
    finally:
        git_http.release_fetches()
    await indexed(client)
    assert names(await get_json(client, "/v1/modules/search?q=zones")) == ["dns", "nat", "vnet"]
    vnet = await get_json(client, "/v1/modules/acme/vnet/aws")
    assert vnet["description"] == "Creates a virtual network with peering and flow logs."


@pytest.mark.slow
async def test_readyz_says_complete_only_once_every_modules_details_are_in(serve_client, git_http, tmp_path):
    # The README: `complete` once each module was indexed. Listed with its versions while its
    # details are still to be read is not indexed yet (it said complete with 469 of 507 queued).
    for n in ("vnet", "dns", "nat"):
        module_repo(tmp_path, f"public-{n}")
    git_http.hold_fetches()  # details come from a fetch of the tag: held; ls-remote answers
    try:
        client = await serve_client(
            make_config(rules(git_http, ["vnet", "dns", "nat"]), git_http, storage={"path": str(tmp_path / "state")})
        )
        started = time.monotonic()
        while names(await get_json(client, "/v1/modules")) != ["dns", "nat", "vnet"]:
            assert time.monotonic() - started < 8, "the modules were not listed"
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # time for the pass to (wrongly) end
        state = (await get_json(client, "/readyz"))["index"]
        assert state["queued"] > 0 and state["complete"] is False, state
    finally:
        git_http.release_fetches()
    await indexed(client)
    state = (await get_json(client, "/readyz"))["index"]
    assert state["complete"] is True and state["queued"] == 0, state


@pytest.mark.slow
async def test_an_older_versions_details_are_read_in_the_background_never_inside_the_request(
    serve_client, git_http, tmp_path
):
    repo = module_repo(tmp_path, "public-vnet")
    repo.commit({"README.md": "# Virtual network\n\nVersion two.\n"})
    repo.tag("v2.0.0")
    client = await indexed(
        await serve_client(make_config(rules(git_http, ["vnet"]), git_http, storage={"path": str(tmp_path / "state")}))
    )
    git_http.reset_counters()
    started = time.monotonic()
    resp = await client.get("/v1/modules/acme/vnet/aws/1.0.0")
    await assert_error(resp, 503, "being read", "ask again")
    assert resp.headers["Retry-After"] == "2"
    assert time.monotonic() - started < 1  # answered at once, not after a git call
    old = await (await version_details(client, "/v1/modules/acme/vnet/aws/1.0.0")).json()
    assert old["version"] == "1.0.0" and old["description"] == "Creates a virtual network with peering and flow logs."
    # Read with one shallow fetch of that tag's object (capabilities, fetch: no ls-refs), after the answer.
    assert [(r.method, r.path.rsplit("/", 1)[-1]) for r in git_http.requests()] == [
        ("GET", "refs"),
        ("POST", "git-upload-pack"),
    ]


def _git_niceness(marker: str) -> list[int]:
    """The niceness of each running git process (and helper) whose command line contains `marker`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        if argv and b"git" in argv[0] and any(marker.encode() in a for a in argv):
            found.append(int(stat.rsplit(")", 1)[1].split()[16]))  # field 19: nice
    return found


async def _processes(marker: str) -> list[int]:
    for _ in range(200):
        if found := _git_niceness(marker):
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"no git process for {marker} appeared")


@pytest.mark.slow
async def test_background_git_yields_the_cpu_and_install_git_does_not(serve_client, git_http, tmp_path):
    module_repo(tmp_path, "public-vnet")
    module_repo(tmp_path, "public-dns")
    git_http.hold_fetches()  # the index's details fetch of vnet waits: its git processes can be looked at
    try:
        client = await serve_client(
            make_config(rules(git_http, ["vnet"]), git_http, storage={"path": str(tmp_path / "state")})
        )
        background = await _processes("public-vnet.git")
        assert set(background) == {10}, background  # the fetch and its remote helper, niced
    finally:
        git_http.release_fetches()
    await indexed(client)
    git_http.mode, git_http.delay = "slow", 1.0  # an install request's ls-remote waits: look at it
    other = await serve_client(make_config(rules(git_http, ["dns"]), git_http, index={"enabled": False}))
    install = asyncio.ensure_future(other.get("/v1/modules/acme/dns/aws/versions"))
    foreground = await _processes("public-dns.git")
    assert set(foreground) == {0}, foreground
    assert (await install).status == 200
