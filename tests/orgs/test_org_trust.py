"""Org mode's trust model (#22): an address has one owner, org data stays on its host, webhooks are hints.

Hostile inputs come from the fake GitHub and GitLab APIs (tests/support/forges.py, shaped like
the real ones) and from signed webhook deliveries; behind them everything is real: bare
repositories over smart HTTP, the registry app, orgs.json on disk, `gitreg check --probe`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

import aiohttp
import pytest

from gitreg.core import urls
from gitreg.core.names import ModuleAddress
from gitreg.orgs.service import OrgCatalog
from gitreg.web.keys import ORGS
from tests.support.app import GIT_PASSWORD, assert_error, indexed, make_config
from tests.support.forges import FakeForge
from tests.support.orgs import (
    API_TOKEN,
    NEWCOMER,
    OWNER,
    VPC,
    module_repo,
    org_config,
    org_table,
    post_github,
    post_gitlab,
    served_by,
    until,
    versions_of,
    write_config,
)
from tests.support.process import run_gitreg
from tests.support.webhooks import WEBHOOKS, github_headers

# What `gitreg serve` builds with the index off, for the tests that read no list, search or details page.
OFF = {"enabled": False}


@pytest.fixture
async def github(git_http) -> AsyncIterator[FakeForge]:
    fake = await FakeForge("github", git_http, "acme-infra", token=API_TOKEN).start()
    yield fake
    await fake.close()


@pytest.fixture
async def gitlab(git_http) -> AsyncIterator[FakeForge]:
    fake = await FakeForge("gitlab", git_http, "acme", token=API_TOKEN).start()
    yield fake
    await fake.close()


# --- an address has one owner -------------------------------------------------------------------


@pytest.mark.slow
async def test_a_subgroup_newcomer_never_takes_over_an_address_until_its_owner_is_gone(
    serve_client, gitlab, git_http, tmp_path, caplog
):
    caplog.set_level(logging.WARNING)
    module_repo(tmp_path, "team-b-vpc", ("1.0.0",))
    module_repo(tmp_path, "newcomer-vpc", ("9.9.9",))
    gitlab.add("terraform-aws-vpc", subgroup="team-b", key="owner", repo="team-b-vpc")
    storage = {"path": str(tmp_path / "state")}
    config = org_config(gitlab, git_http, webhooks=WEBHOOKS, storage=storage, org={"refresh_seconds": 3600}, index=OFF)
    client = await serve_client(config)
    await until(client.app[ORGS].complete)
    assert served_by(client) == OWNER

    # The newcomer: an older project (a lower id, as one transferred in from elsewhere) whose path
    # sorts first. Neither its name nor its age takes the address from the repository holding it.
    gitlab.add("terraform-aws-vpc", subgroup="aaa-newcomer", key="newcomer", repo="newcomer-vpc", rid=7)
    assert await client.app[ORGS].enumerate(0)
    assert served_by(client) == OWNER
    assert await versions_of(client) == ["1.0.0"]
    ignored = dict(client.app[ORGS].report()[0].ignored)
    assert ignored[NEWCOMER].startswith(f"conflict: acme/vpc/aws is held by {OWNER}")
    conflicts = [r.getMessage() for r in caplog.records if "not served" in r.getMessage()]
    assert len(conflicts) == 1 and OWNER in conflicts[0] and NEWCOMER in conflicts[0]
    assert await client.app[ORGS].enumerate(0)  # logged once, not on every enumeration
    assert len([r for r in caplog.records if "not served" in r.getMessage()]) == 1
    metrics = await (await client.get("/metrics")).text()
    assert 'gitreg_org_address_conflicts{org="gitlab:acme"} 1.0' in metrics
    await client.close()

    # A restart (orgs.json) keeps the owner, though the newcomer is the older project.
    assert json.loads((tmp_path / "state" / "orgs.json").read_text())["owners"][0]["full_name"] == OWNER
    client = await serve_client(config)
    await until(client.app[ORGS].complete)
    assert await client.app[ORGS].enumerate(0)
    assert served_by(client) == OWNER
    assert await versions_of(client) == ["1.0.0"]

    # `gitreg check --probe` shows the conflict as the registry resolves it (owners from orgs.json).
    path = write_config(tmp_path, gitlab, git_http)
    result = await asyncio.to_thread(
        run_gitreg,
        "check",
        "--probe",
        "--config",
        str(path),
        env={"ORG_TOKEN": API_TOKEN, "GIT_PASSWORD": GIT_PASSWORD},
    )
    assert f"module acme/vpc/aws <- {OWNER}" in result.stdout, result.stdout + result.stderr
    assert f"ignored {NEWCOMER}: conflict: acme/vpc/aws is held by {OWNER}" in result.stdout

    # The owner is deleted (the API no longer lists it): the newcomer takes the address over.
    gitlab.remove("owner")
    assert await client.app[ORGS].enumerate(0)
    assert served_by(client) == NEWCOMER
    assert await versions_of(client) == ["9.9.9"]
    metrics = await (await client.get("/metrics")).text()
    assert 'gitreg_org_address_conflicts{org="gitlab:acme"} 0.0' in metrics


async def test_pages_and_owners_that_arrive_while_the_listing_is_combined_are_settled_with_it(git_http, tmp_path):
    # The combined listing is computed on a thread (held here: the catalog's one worker is busy)
    # while another org's first listing sends pages and another replica's owners arrive.
    first = await FakeForge("github", git_http, "acme-infra", token=API_TOKEN).start()
    second = await FakeForge("github", git_http, "acme-labs", token=API_TOKEN, max_per_page=1).start()
    workers = ThreadPoolExecutor(1)
    gate = threading.Event()
    try:
        for name in ("terraform-aws-vpc", "terraform-aws-dns"):
            first.add(name)
        for name in ("terraform-aws-vpc", "terraform-aws-iam", "terraform-aws-net"):
            second.add(name)
        tables = [org_table(first), org_table(second)]
        catalog = OrgCatalog(org_config(first, git_http, orgs=tables), None, workers)
        async with aiohttp.ClientSession() as session:
            catalog.open(session)
            assert await catalog.enumerate(0)
            assert served_by_catalog(catalog) == "acme-infra/terraform-aws-vpc"
            held = {address: (holder, since) for address, holder, since in catalog.owners.entries()}
            workers.submit(gate.wait)
            # Another replica held acme/dns/aws (the same repository) earlier: a rebuild, on the thread.
            catalog.adopt_owner("acme/dns/aws", held["acme/dns/aws"][0], held["acme/dns/aws"][1] - 1)
            await asyncio.sleep(0.05)
            # Meanwhile: a replica held acme/vpc/aws with acme-labs' repository before anyone here...
            labs = json.dumps(["github", second.api_url, "acme-labs", "acme-labs/terraform-aws-vpc"])
            catalog.adopt_owner("acme/vpc/aws", labs, held["acme/vpc/aws"][1] - 100)
            # ...and acme-labs' first listing sends its pages (the last one waits for the thread).
            listing = asyncio.ensure_future(catalog.enumerate(1))
            await until(lambda: len(second.requests()) == 3)
            assert catalog.get(ModuleAddress("acme", "iam", "aws")) is None  # taken once the rebuild is in
            gate.set()
            assert await listing
            await until(lambda: served_by_catalog(catalog) == "acme-labs/terraform-aws-vpc")
    finally:
        gate.set()
        workers.shutdown()
        await first.close()
        await second.close()
    # The earliest holder anywhere serves the address; every page's modules are listed.
    modules = {str(a): r.full_name for a, r in catalog.modules().items()}
    assert modules == {
        "acme/vpc/aws": "acme-labs/terraform-aws-vpc",
        "acme/dns/aws": "acme-infra/terraform-aws-dns",
        "acme/iam/aws": "acme-labs/terraform-aws-iam",
        "acme/net/aws": "acme-labs/terraform-aws-net",
    }
    assert dict(catalog.report()[0].ignored)["acme-infra/terraform-aws-vpc"].startswith(
        "conflict: acme/vpc/aws is held by acme-labs/terraform-aws-vpc"
    )
    owners = {address: since for address, _, since in catalog.owners.entries()}
    assert owners["acme/dns/aws"] == held["acme/dns/aws"][1] - 1  # the owner adopted first is kept too


def served_by_catalog(catalog: OrgCatalog) -> str:
    repo = catalog.get(VPC)
    return repo.full_name if repo is not None else ""


async def test_two_orgs_of_one_provider_and_group_on_different_hosts_have_distinct_metric_labels(
    serve_client, git_http, tmp_path
):
    first = await FakeForge("github", git_http, "acme-infra", token=API_TOKEN).start()
    second = await FakeForge("github", git_http, "acme-infra", token=API_TOKEN).start()
    try:
        first.add("terraform-aws-vpc")
        second.add("terraform-aws-iam")
        tables = [
            {"provider": "github", "api_url": f.api_url, "group": "acme-infra", "namespace": ns, "token": API_TOKEN}
            for f, ns in ((first, "acme"), (second, "ghe"))
        ]
        client = await serve_client(org_config(first, git_http, orgs=tables, index=OFF))
        await until(client.app[ORGS].complete)
        metrics = await (await client.get("/metrics")).text()
        for fake in (first, second):
            host = fake.base_url.removeprefix("http://")
            assert f'gitreg_org_modules{{org="github:acme-infra@{host}"}} 1.0' in metrics
    finally:
        await first.close()
        await second.close()


# --- org data is bound to its host --------------------------------------------------------------


@pytest.mark.parametrize(
    ("clone_url", "reason"),
    [
        ("file:///{tmp}/repos/secret.git", "is not on the API's Git host"),
        ("https://evil.example/acme/secret.git", "is not on the API's Git host"),
        ("https://-oProxyCommand=x/acme/secret.git", "is not a Git URL gitreg accepts"),
    ],
)
async def test_a_clone_url_off_the_api_host_is_ignored_with_the_reason_and_never_served(
    serve_client, github, git_http, tmp_path, clone_url, reason
):
    module_repo(tmp_path, "secret")
    github.add("terraform-aws-vpc")
    github.update("terraform-aws-vpc", clone_url=clone_url.format(tmp=tmp_path))
    client = await serve_client(org_config(github, git_http, index=OFF))
    await until(client.app[ORGS].complete)
    await assert_error(await client.get("/v1/modules/acme/vpc/aws/versions"), 404)
    ignored = dict(client.app[ORGS].report()[0].ignored)
    assert reason in ignored["acme-infra/terraform-aws-vpc"]
    assert git_http.ref_advertisements("secret.git") == 0


async def test_a_clone_host_listed_in_clone_hosts_is_served(serve_client, github, git_http, tmp_path):
    module_repo(tmp_path, "terraform-aws-vpc")
    github.add("terraform-aws-vpc")
    config = org_config(github, git_http, org={"clone": "ssh"}, index=OFF)
    client = await serve_client(config)
    await until(client.app[ORGS].complete)
    ignored = dict(client.app[ORGS].report()[0].ignored)  # the fake's ssh URLs name github.com
    assert (
        "its ssh clone URL 'git@github.com:acme-infra/terraform-aws-vpc.git' is not on"
        in ignored["acme-infra/terraform-aws-vpc"]
    )
    await client.close()
    client = await serve_client(
        org_config(github, git_http, org={"clone": "ssh", "clone_hosts": ["GitHub.com"]}, index=OFF)
    )
    await until(client.app[ORGS].complete)
    assert client.app[ORGS].get(VPC) is not None


async def test_an_ssh_clone_url_whose_host_starts_with_a_dash_is_never_handed_to_clients(
    serve_client, github, git_http, tmp_path
):
    module_repo(tmp_path, "terraform-aws-vpc")
    github.add("terraform-aws-vpc")
    github.update("terraform-aws-vpc", ssh_url="ssh://-oProxyCommand=touch${IFS}pwned/acme-infra/vpc.git")
    client = await serve_client(
        org_config(github, git_http, org={"clone": "ssh", "clone_hosts": ["github.com"]}, index=OFF)
    )
    await until(client.app[ORGS].complete)
    resp = await client.get("/v1/modules/acme/vpc/aws/1.0.0/download")
    await assert_error(resp, 404)
    assert "-oProxyCommand" in dict(client.app[ORGS].report()[0].ignored)["acme-infra/terraform-aws-vpc"]


@pytest.mark.parametrize(
    "url",
    [
        "ssh://-oProxyCommand=x/acme/vpc.git",
        "ssh://-oProxyCommand=x@host/acme/vpc.git",
        "-oProxyCommand@host:acme/vpc.git",
        "host:-oProxyCommand=x",
        "https://-host/acme/vpc.git",
    ],
)
def test_a_host_user_or_path_starting_with_a_dash_is_not_a_git_url(url):
    assert urls.parse(url) is None
    assert urls.as_go_getter(url) == f"git::{url}"  # (never produced: every caller parses first)
    assert urls.web_url(url) == ""


@pytest.mark.slow
async def test_a_javascript_web_url_becomes_no_link(serve_client, github, git_http, tmp_path):
    module_repo(tmp_path, "terraform-aws-vpc")
    github.add("terraform-aws-vpc")
    github.update("terraform-aws-vpc", html_url="javascript:alert(document.cookie)")
    client = await serve_client(org_config(github, git_http))
    await until(client.app[ORGS].complete)
    assert client.app[ORGS].get(VPC).web_url == ""
    await indexed(client)
    page = await (await client.get("/modules/acme/vpc/aws")).text()
    assert "javascript:" not in page


async def test_pagination_links_outside_the_api_path_never_get_the_token(git_http, tmp_path):
    """GitHub Enterprise Server's API lives under /api/v3: a next link elsewhere on its host is not followed."""
    ghes = FakeForge("github", git_http, "acme-infra", token=API_TOKEN, max_per_page=1, api_path="/api/v3")
    fake = await ghes.start()
    try:
        fake.add("terraform-aws-vpc")
        fake.add("terraform-aws-dns")  # a second page, so the first has a next link
        fake.next_link = f"{fake.base_url}/elsewhere/repos?page=2"
        table = {"provider": "github", "api_url": fake.api_url, "group": "acme-infra", "namespace": "acme"}
        config = make_config([], orgs=[{**table, "token": API_TOKEN}])
        catalog = OrgCatalog(config, None)
        async with aiohttp.ClientSession() as session:
            catalog.open(session)
            assert not await catalog.enumerate(0)
        assert "not followed" in (catalog.report()[0].error or "")
        seen = [(r.path, r.headers.get("Authorization")) for r in fake.requests()]
        assert seen == [("/api/v3/orgs/acme-infra/repos", f"Bearer {API_TOKEN}")]
    finally:
        await fake.close()


# --- webhooks are hints -------------------------------------------------------------------------


async def test_a_signed_repository_event_with_a_foreign_clone_url_changes_nothing_the_api_does_not_say(
    serve_client, github, git_http, tmp_path
):
    module_repo(tmp_path, "terraform-aws-vpc")
    github.add("terraform-aws-vpc")
    storage = {"path": str(tmp_path / "state")}
    client = await serve_client(org_config(github, git_http, webhooks=WEBHOOKS, storage=storage, index=OFF))
    await until(client.app[ORGS].complete)
    real = client.app[ORGS].get(VPC).repository

    payload = github.github_repository_event("edited", "terraform-aws-vpc")
    payload["repository"]["clone_url"] = "https://evil.example/acme-infra/terraform-aws-vpc.git"
    resp = await post_github(client, payload, "repository")
    assert resp.status == 200, await resp.text()
    assert client.app[ORGS].get(VPC).repository == real  # the API's answer wins

    # A "created" event for a repository the API does not have adds nothing.
    payload = github.github_repository_event("created", "terraform-aws-vpc")
    payload["repository"].update(name="terraform-aws-iam", full_name="acme-infra/terraform-aws-iam")
    resp = await post_github(client, payload, "repository")
    assert resp.status == 200, await resp.text()
    assert list(client.app[ORGS].modules()) == [VPC]
    await client.app[ORGS].flush()
    assert "evil.example" not in (tmp_path / "state" / "orgs.json").read_text()


async def test_a_forged_deleted_event_for_a_repository_the_api_still_returns_removes_nothing(
    serve_client, github, git_http, tmp_path
):
    module_repo(tmp_path, "terraform-aws-vpc")
    github.add("terraform-aws-vpc")
    client = await serve_client(org_config(github, git_http, webhooks=WEBHOOKS, index=OFF))
    await until(client.app[ORGS].complete)
    resp = await post_github(client, github.github_repository_event("deleted", "terraform-aws-vpc"), "repository")
    assert resp.status == 200, await resp.text()
    assert list(client.app[ORGS].modules()) == [VPC]
    assert await versions_of(client) == ["1.1.0", "1.0.0"]


async def test_a_gitlab_project_destroy_with_a_foreign_id_removes_nothing(serve_client, gitlab, git_http, tmp_path):
    module_repo(tmp_path, "terraform-aws-vpc")
    gitlab.add("terraform-aws-vpc")
    client = await serve_client(org_config(gitlab, git_http, webhooks=WEBHOOKS, index=OFF))
    await until(client.app[ORGS].complete)
    payload = gitlab.gitlab_system_hook("project_destroy", "terraform-aws-vpc")
    payload["project_id"] = 424242  # no such project: the API answers 404 for it, not for the path
    resp = await post_gitlab(client, payload)
    assert resp.status == 200, await resp.text()
    assert list(client.app[ORGS].modules()) == [VPC]


async def test_a_replayed_delivery_is_answered_and_does_nothing(serve_client, github, gitlab, git_http, tmp_path):
    module_repo(tmp_path, "terraform-aws-vpc")
    github.add("terraform-aws-vpc")
    client = await serve_client(org_config(github, git_http, webhooks=WEBHOOKS, index=OFF))
    await until(client.app[ORGS].complete)
    body = json.dumps(github.github_repository_event("edited", "terraform-aws-vpc")).encode()
    headers = github_headers(body, "repository", delivery="a5b9c3d0-0000-11ef-8000-000000000001")
    first = await client.post("/webhooks/github", data=body, headers=headers)
    assert first.status == 200, await first.text()
    calls = len(github.requests())
    replay = await client.post("/webhooks/github", data=body, headers=headers)
    assert replay.status == 202
    assert (await replay.json())["result"] == "duplicate"
    assert len(github.requests()) == calls  # nothing done again: not even an API call

    # Without a delivery header (GitLab before X-Gitlab-Event-UUID), the body is its identity.
    gitlab.add("terraform-aws-vpc")
    gitlab_body = json.dumps(gitlab.gitlab_system_hook("project_update", "terraform-aws-vpc")).encode()
    gitlab_headers = {"X-Gitlab-Event": "System Hook", "X-Gitlab-Token": WEBHOOKS["gitlab_token"]}
    answers = [await client.post("/webhooks/gitlab", data=gitlab_body, headers=gitlab_headers) for _ in range(2)]
    assert [(await a.json())["result"] for a in answers][1] == "duplicate"


def test_clone_hosts_must_be_host_names():
    from gitreg.config.parse import parse_config
    from gitreg.core.errors import ConfigError

    base = {"provider": "github", "group": "acme", "namespace": "acme"}
    with pytest.raises(ConfigError, match=r"orgs\[0\]\.clone_hosts: '-evil' is not a host name"):
        parse_config({"orgs": [{**base, "clone_hosts": ["-evil"]}]}, {})
    with pytest.raises(ConfigError, match=r"clone_hosts: 'https://git.example.com' is not a host name"):
        parse_config({"orgs": [{**base, "clone_hosts": ["https://git.example.com"]}]}, {})
    config = parse_config({"orgs": [{**base, "clone_hosts": ["Git.Example.com"]}]}, {})
    assert config.orgs[0].clone_hosts == ("git.example.com",)


async def test_an_orgs_json_from_before_owners_still_loads_and_gains_them(serve_client, github, git_http, tmp_path):
    module_repo(tmp_path, "terraform-aws-vpc")
    github.add("terraform-aws-vpc")
    config = org_config(
        github, git_http, storage={"path": str(tmp_path / "state")}, org={"refresh_seconds": 3600}, index=OFF
    )
    client = await serve_client(config)
    await until(client.app[ORGS].complete)
    await client.close()
    stored = tmp_path / "state" / "orgs.json"
    data = json.loads(stored.read_text())
    del data["owners"]  # as gitreg wrote it before #22
    stored.write_text(json.dumps(data))

    github.mode = "down"
    client = await serve_client(config)
    assert client.app[ORGS].complete()
    assert await versions_of(client) == ["1.1.0", "1.0.0"]
    await client.app[ORGS].flush()
    owners = json.loads(stored.read_text())["owners"]
    assert [(o["address"], o["full_name"]) for o in owners] == [("acme/vpc/aws", "acme-infra/terraform-aws-vpc")]
