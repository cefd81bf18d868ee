"""The first view of a module: before the index listed it, while its details are read, and its place in lists."""

from __future__ import annotations

import asyncio
import calendar
import re
import time

import pytest

from gitreg.web.keys import ORGS, REGISTRY
from tests.support.app import assert_error, indexed, version_details
from tests.support.forges import FakeForge
from tests.support.index import get_json, make_config, module_repo, rules
from tests.support.orgs import API_TOKEN, org_config, post_github, until
from tests.support.repos import GitRepo
from tests.support.webhooks import WEBHOOKS

pytestmark = pytest.mark.slow  # real git over HTTP, held or slowed down on purpose


async def test_a_served_module_not_listed_yet_is_a_503_and_a_page_that_reloads_itself(serve_client, git_http, tmp_path):
    module_repo(tmp_path, "public-vnet")
    notag = GitRepo(tmp_path / "repos", "public-notag")
    notag.commit({"main.tf": "# m\n"})
    notag.tag("release-1")
    git_http.mode, git_http.delay = "slow", 1.5  # the index's ls-remote takes a while
    config = make_config(rules(git_http, ["vnet", "notag"]), git_http, storage={"path": str(tmp_path / "state")})
    client = await serve_client(config)
    resp = await client.get("/v1/modules/acme/vnet/aws")
    await assert_error(resp, 503, "acme/vnet/aws is being indexed", "ask again")
    assert resp.headers["Retry-After"] == "2"
    await assert_error(await client.get("/v1/modules/acme/vnet/aws/1.0.0"), 503, "being indexed")
    page = await client.get("/modules/acme/vnet/aws")
    text = await page.text()
    assert page.status == 503 and page.headers["Retry-After"] == "2" and page.content_type == "text/html"
    # It reloads itself through page.js (no meta refresh, which axe flags), and says so to people without it.
    assert '<body data-reload-after="2">' in text and "http-equiv" not in text
    assert re.search(
        r'role="status">Module acme/vnet/aws is being indexed.*<a href="/modules/acme/vnet/aws">Reload now</a>', text
    )
    await assert_error(await client.get("/v1/modules/acme/nothing/aws"), 404)  # no rule serves it
    git_http.mode = "ok"
    await indexed(client)
    assert (await client.get("/v1/modules/acme/vnet/aws")).status == 200
    assert (await client.get("/modules/acme/vnet/aws")).status == 200
    # Looked at and not listable: a 404 that says why, never "being indexed" forever.
    await assert_error(await client.get("/v1/modules/acme/notag/aws"), 404, "no SemVer tag yet")
    assert (await client.get("/modules/acme/notag/aws")).status == 404


async def test_tag_dates_come_with_the_details_fetch_and_newest_first_is_right_once_read(
    serve_client, git_http, tmp_path
):
    dates = {"alpha": "2024-01-05T10:00:00Z", "beta": "2026-03-01T10:00:00Z", "gamma": "2025-06-01T10:00:00Z"}
    for name, date in dates.items():
        repo = GitRepo(tmp_path / "repos", f"public-{name}")
        repo.commit({"README.md": f"# {name}\n\nZones and records.\n", "main.tf": "# m\n"}, date=date)
        repo.tag("v1.0.0")
    git_http.hold_fetches(filtered=False)  # listing (ls-remote) goes on; no commit can be fetched
    try:
        config = make_config(rules(git_http, list(dates)), git_http, storage={"path": str(tmp_path / "state")})
        client = await serve_client(config)
        started = time.monotonic()
        while len(listed := (await get_json(client, "/v1/modules"))["modules"]) < 3:
            assert time.monotonic() - started < 10, listed
            await asyncio.sleep(0.05)
        await asyncio.sleep(1)
        # Listed at the speed of ls-remote; no request of its own for a date (it comes with the details' fetch).
        assert all(m["published_at"] == "" for m in (await get_json(client, "/v1/modules"))["modules"])
        assert {r.path.split("/")[1] for r in git_http.requests() if r.method == "POST"} == {
            f"public-{n}.git" for n in dates
        }
        assert git_http.ref_listings() == 3  # one ls-remote each; the (held) details fetch lists no refs
    finally:
        git_http.release_fetches()
    await indexed(client)
    listed = (await get_json(client, "/v1/modules"))["modules"]
    assert {m["name"]: m["published_at"] for m in listed} == dates
    page = await (await client.get("/")).text()
    assert re.findall(r'href="/modules/acme/(\w+)/aws"', page) == ["beta", "gamma", "alpha"]


def org_repo(tmp_path, fake: FakeForge, name: str, date: str) -> None:
    """An org repository whose one commit and tag (lightweight: the commit's date) are of `date`, pushed then."""
    repo = GitRepo(tmp_path / "repos", f"terraform-aws-{name}")
    repo.commit({"README.md": f"# {name}\n\nA module.\n", "main.tf": "# m\n"}, date=date)
    repo.tag("v1.0.0")
    fake.add(f"terraform-aws-{name}", pushed=calendar.timegm(time.strptime(date, "%Y-%m-%dT%H:%M:%SZ")))


async def newest_first(client) -> list[str]:
    return re.findall(r'href="/modules/acme/(\w+)/aws"', await (await client.get("/")).text())


async def test_an_org_module_is_placed_newest_first_by_its_push_time_until_its_tag_date_is_read(
    serve_client, git_http, tmp_path
):
    fake = await FakeForge("github", git_http, "acme-infra", token=API_TOKEN).start()
    try:
        org_repo(tmp_path, fake, "anew1", "2026-11-20T10:00:00Z")
        org_repo(tmp_path, fake, "zold", "2020-05-01T10:00:00Z")
        client = await serve_client(org_config(fake, git_http, webhooks=WEBHOOKS))
        await until(client.app[ORGS].complete)
        await indexed(client)
        assert await newest_first(client) == ["anew1", "zold"]  # their tag dates, read with their details
        # A repository created today, listed while its details cannot be read yet: placed by the
        # push time the API gave, not after the module tagged in 2020 (it was: no date, last).
        git_http.hold_fetches()
        try:
            org_repo(tmp_path, fake, "anew2", "2026-11-25T10:00:00Z")
            created = fake.github_repository_event("created", "terraform-aws-anew2")
            resp = await post_github(client, created, "repository")
            assert resp.status == 200, await resp.text()
            started = time.monotonic()
            while len(listed := (await get_json(client, "/v1/modules"))["modules"]) < 3:
                assert time.monotonic() - started < 10, listed
                await asyncio.sleep(0.05)
            assert {m["name"]: m["published_at"] for m in listed}["anew2"] == ""  # the tag's date is not read yet
            assert await newest_first(client) == ["anew2", "anew1", "zold"]
        finally:
            git_http.release_fetches()
        await indexed(client)
        assert await newest_first(client) == ["anew2", "anew1", "zold"]
    finally:
        await fake.close()


async def test_the_first_index_asks_each_repository_for_its_refs_once_and_keeps_the_taggers_date(
    serve_client, git_http, tmp_path
):
    names = [f"m{i}" for i in range(6)]
    for i, n in enumerate(names):
        repo = GitRepo(tmp_path / "repos", f"public-{n}")
        repo.commit({"README.md": f"# {n}\n\nA module.\n", "main.tf": 'variable "x" {}\n'}, date="2020-02-03T04:05:06Z")
        for t in range(5):  # the latest (v1.4.0) annotated in the odd modules: tagged today, its commit in 2020
            repo.tag(f"v1.{t}.0", annotated=(t + i) % 2 == 1, message="release")
    config = make_config(rules(git_http, names), git_http, storage={"path": str(tmp_path / "state")})
    client = await indexed(await serve_client(config))
    listed = {m["name"]: m for m in (await get_json(client, "/v1/modules"))["modules"]}
    assert sorted(listed) == names and all(m["description"] for m in listed.values())
    today = time.strftime("%Y-%m-%d", time.gmtime())
    assert {n: m["published_at"][:10] for n, m in listed.items()} == {
        n: today if i % 2 else "2020-02-03" for i, n in enumerate(names)
    }
    # The tag list (ls-remote), then the latest tag's files and date: one shallow fetch asking for
    # the object ls-remote named (the tag object of an annotated tag), which lists no refs. Before,
    # the fetch asked for the tag by its name: the host listed its refs a second time.
    assert [git_http.ref_listings(f"public-{n}.git") for n in names] == [1] * len(names)


async def test_a_host_speaking_protocol_v0_gives_the_details_and_the_taggers_date_too(serve_client, git_http, tmp_path):
    git_http.protocol_v0 = True  # it sends only the objects it advertises (an annotated tag's own object is)
    repo = GitRepo(tmp_path / "repos", "public-old")
    repo.commit({"README.md": "# old\n\nAn old host.\n", "main.tf": "# m\n"}, date="2020-02-03T04:05:06Z")
    repo.tag("v1.0.0", annotated=True)
    config = make_config(rules(git_http, ["old"]), git_http, storage={"path": str(tmp_path / "state")})
    client = await indexed(await serve_client(config))
    (listed,) = (await get_json(client, "/v1/modules"))["modules"]
    assert listed["description"] == "An old host." and listed["published_at"][:4] != "2020"
    # The serving process reads its .gitreg.toml after a tag list of its own (#35): a client's.
    assert (await client.get("/v1/modules/acme/old/aws/versions")).status == 200
    await client.app[REGISTRY].declarations.settled()
    # With v0 every fetch starts with the refs: the index process's tag list and details; the
    # serving process's tag list and the default branch's file.
    assert git_http.ref_listings("public-old.git") == 4


async def test_a_version_whose_details_are_being_read_shows_its_own_header_and_a_reading_state(
    serve_client, git_http, tmp_path
):
    repo = module_repo(tmp_path, "public-vnet")
    repo.commit({"README.md": "# Virtual network\n\nVersion two, with IPv6.\n"})
    repo.tag("v2.0.0")
    config = make_config(rules(git_http, ["vnet"]), git_http, storage={"path": str(tmp_path / "state")})
    client = await indexed(await serve_client(config))
    git_http.hold_fetches()  # 1.0.0's details cannot be read while the page is looked at
    try:
        resp = await client.get("/modules/acme/vnet/aws/1.0.0")
        text = await resp.text()
    finally:
        git_http.release_fetches()
    assert resp.status == 200 and 'id="shown-version">1.0.0<' in text
    assert "Version two" not in text and "None found" not in text  # not the latest's, not "nothing"
    assert "being read" in text and '<body data-reload-after="2">' in text and "http-equiv" not in text
    assert re.search(r'role="status"[^>]*>The details of version 1.0.0 are being read.*>Reload now</a>', text)
    assert text.count("Being read from the repository.") == 7  # every section, not "No inputs."
    await version_details(client, "/v1/modules/acme/vnet/aws/1.0.0")  # read by the index process
    text = await (await client.get("/modules/acme/vnet/aws/1.0.0")).text()
    assert "Creates a virtual network" in text and "data-reload-after" not in text and "Reload now" not in text
