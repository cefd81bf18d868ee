"""Org mode: every repository of a GitHub organization or GitLab group served as a module.

The GitHub and GitLab APIs are fakes (tests/support/forges.py: real pages, real rate-limit
headers); everything behind them is real: bare repositories, git over smart HTTP with
credentials, the registry app, and in the end-to-end test the real Terraform CLI.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gitreg.config.parse import parse_config
from gitreg.core.errors import ConfigError
from gitreg.core.names import ModuleAddress
from gitreg.forges.github import repository_event as github_repository_event
from gitreg.orgs.model import ARCHIVED, OrgChanges
from gitreg.orgs.service import OrgCatalog
from gitreg.web.keys import INDEX, ORGS
from tests.support.app import GIT_PASSWORD, GIT_USER, assert_error, indexed
from tests.support.forges import FakeForge
from tests.support.githttp import GitHttpServer
from tests.support.orgs import (
    API_TOKEN,
    VPC,
    github_tag_push,
    listed,
    module_repo,
    org_config,
    post_github,
    post_gitlab,
    until,
    versions_of,
    write_config,
)
from tests.support.process import GitregProcess, run_gitreg
from tests.support.repos import GitRepo
from tests.support.terraform import clean_env, cli_config
from tests.support.webhooks import WEBHOOKS

# What `gitreg serve` builds with the index off, for the tests that read no list, search, details or /readyz.
OFF = {"enabled": False}


@pytest.fixture
async def github(git_http) -> AsyncIterator[FakeForge]:
    fake = await FakeForge("github", git_http, "acme-infra", token=API_TOKEN, max_per_page=2).start()
    yield fake
    await fake.close()


@pytest.fixture
async def gitlab(git_http) -> AsyncIterator[FakeForge]:
    fake = await FakeForge("gitlab", git_http, "platform/terraform", token=API_TOKEN, max_per_page=2).start()
    yield fake
    await fake.close()


# --- enumeration: every page, both providers ---------------------------------------------------


async def test_github_org_listing_follows_every_page_of_link_headers(github, git_http, tmp_path):
    for name in ("terraform-aws-vpc", "terraform-aws-iam", "terraform-google-net", "docs", "terraform-aws-dns"):
        module_repo(tmp_path, name)
        github.add(name)
    catalog = await listed(org_config(github, git_http))
    assert sorted(map(str, catalog.modules())) == ["acme/dns/aws", "acme/iam/aws", "acme/net/google", "acme/vpc/aws"]
    report = catalog.report()[0]
    assert report.found == 5
    pages = github.requests("/repos")
    # Page 1 by the org's login, then GitHub's own next links (by org id), 2 repositories a page.
    assert [r.path for r in pages] == [
        "/orgs/acme-infra/repos",
        "/organizations/9919/repos",
        "/organizations/9919/repos",
    ]
    assert "per_page=100" in pages[0].query and "type=all" in pages[0].query
    assert [r.query.split("page=")[-1] for r in pages[1:]] == ["2", "3"]
    for r in pages:
        assert r.headers["Authorization"] == f"Bearer {API_TOKEN}"
        assert r.headers["Accept"] == "application/vnd.github+json"
        assert r.headers["X-GitHub-Api-Version"] == "2022-11-28"


@pytest.mark.parametrize("link_header", [True, False], ids=["link", "x-next-page"])
async def test_gitlab_group_listing_follows_every_page_and_includes_subgroups(git_http, tmp_path, link_header):
    fake = await FakeForge(
        "gitlab", git_http, "platform/terraform", token=API_TOKEN, max_per_page=2, link_header=link_header
    ).start()
    try:
        for name, subgroup in (
            ("terraform-aws-vpc", ""),
            ("terraform-aws-iam", "networking"),
            ("terraform-aws-dns", "networking/dns"),
            ("ansible-roles", ""),
        ):
            module_repo(tmp_path, name)
            fake.add(name, subgroup=subgroup)
        catalog = await listed(org_config(fake, git_http))
    finally:
        await fake.close()
    assert sorted(map(str, catalog.modules())) == ["acme/dns/aws", "acme/iam/aws", "acme/vpc/aws"]
    assert (
        catalog.get(ModuleAddress("acme", "dns", "aws")).full_name
        == "platform/terraform/networking/dns/terraform-aws-dns"
    )
    pages = fake.requests("/projects")
    assert len(pages) == 2
    assert all(r.path == "/api/v4/groups/platform%2Fterraform/projects" for r in pages)
    assert "include_subgroups=true" in pages[0].query and "per_page=100" in pages[0].query
    assert all(r.headers["PRIVATE-TOKEN"] == API_TOKEN for r in pages)


async def test_a_github_user_account_is_listed_through_the_users_endpoint(git_http, tmp_path):
    fake = await FakeForge("github", git_http, "octocat", max_per_page=1, user=True).start()
    try:
        for name in ("terraform-aws-vpc", "terraform-aws-iam"):
            module_repo(tmp_path, name)
            fake.add(name)
        catalog = await listed(org_config(fake, git_http, org={"token": ""}))
    finally:
        await fake.close()
    assert sorted(map(str, catalog.modules())) == ["acme/iam/aws", "acme/vpc/aws"]
    paths = [r.path for r in fake.requests()]
    assert paths[:2] == ["/orgs/octocat/repos", "/users/octocat/repos"]  # GitHub answers 404 for /orgs/<a user>
    assert all("Authorization" not in r.headers for r in fake.requests())  # no token configured, none sent


async def test_repositories_that_are_not_modules_are_ignored_with_the_reason(github, git_http, tmp_path):
    github.add("terraform-aws-vpc", topics=("terraform-module", "networking"), repo="terraform-aws-vpc")
    github.add("terraform-aws-old", topics=("terraform-module",), archived=True)
    github.add("terraform-aws-untagged-topic")
    github.add("website", topics=("terraform-module",))
    github.add("terraform-AWS-upper", topics=("terraform-module",))
    catalog = await listed(org_config(github, git_http, org={"topic": "terraform-module"}))
    report = catalog.report()[0]
    assert [repo.full_name for repo in report.modules] == ["acme-infra/terraform-aws-vpc"]
    assert dict(report.ignored) == {
        "acme-infra/terraform-aws-old": ARCHIVED,
        "acme-infra/terraform-aws-untagged-topic": "no topic 'terraform-module'",
        "acme-infra/website": "name does not match repository_pattern 'terraform-{system}-{name}'",
        "acme-infra/terraform-AWS-upper": "name does not match repository_pattern 'terraform-{system}-{name}'",
    }
    repo = catalog.get(VPC)
    assert repo.topics == ("terraform-module", "networking")
    assert repo.web_url == "https://github.com/acme-infra/terraform-aws-vpc"


async def test_archived_repositories_are_modules_with_include_archived(github, git_http, tmp_path):
    github.add("terraform-aws-old", archived=True)
    catalog = await listed(org_config(github, git_http, org={"include_archived": True}))
    assert catalog.get(ModuleAddress("acme", "old", "aws")).archived is True


async def test_a_custom_repository_pattern_names_the_modules(github, git_http, tmp_path):
    github.add("tf-network-azurerm")
    github.add("terraform-aws-vpc")
    catalog = await listed(org_config(github, git_http, org={"repository_pattern": "tf-{name}-{system}"}))
    assert list(catalog.modules()) == [ModuleAddress("acme", "network", "azurerm")]


# --- rate limits and failures: back off, never empty the listing --------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("provider", ["github", "gitlab"])
async def test_a_rate_limited_page_is_waited_out_then_the_listing_completes(git_http, tmp_path, provider):
    fake = await FakeForge(
        provider, git_http, "acme-infra" if provider == "github" else "platform", token=API_TOKEN, max_per_page=1
    ).start()
    try:
        for name in ("terraform-aws-vpc", "terraform-aws-iam"):
            fake.add(name)
        config = org_config(fake, git_http)
        catalog = OrgCatalog(config, None)
        async with aiohttp.ClientSession() as session:
            catalog.open(session)
            fake.rate_limit_next(1, seconds=1)
            started = time.monotonic()
            assert await catalog.enumerate(0)
            waited = time.monotonic() - started
    finally:
        await fake.close()
    statuses = [r.status for r in fake.requests()]
    assert statuses == [403 if provider == "github" else 429, 200, 200]  # one refusal, the same page again, the next
    assert waited >= 0.4  # it waited for the reset instead of asking again at once
    assert sorted(map(str, catalog.modules())) == ["acme/iam/aws", "acme/vpc/aws"]
    ((_, stats),) = catalog.stats()
    assert stats.failures == {"rate_limited": 1}
    assert stats.rate_remaining is not None and stats.rate_remaining > 0


async def test_a_rate_limit_past_the_wait_budget_keeps_the_last_listing_without_hammering(github, git_http, tmp_path):
    github.add("terraform-aws-vpc")
    config = org_config(github, git_http)
    catalog = OrgCatalog(config, None)
    async with aiohttp.ClientSession() as session:
        catalog.open(session)
        assert await catalog.enumerate(0)
        github.add("terraform-aws-iam")
        github.rate_limit_next(5, seconds=3600)
        github.reset_counters()
        started = time.monotonic()
        assert not await catalog.enumerate(0)
        assert time.monotonic() - started < 5  # no hour-long sleep inside the enumeration
    assert len(github.requests()) == 1  # refused once; not asked again
    assert list(catalog.modules()) == [VPC]  # the last good listing stays
    assert "rate limited" in catalog.report()[0].error


@pytest.mark.slow
async def test_when_the_api_is_down_the_last_listing_stays(github, git_http, tmp_path):
    github.add("terraform-aws-vpc")
    catalog = OrgCatalog(org_config(github, git_http), None)
    async with aiohttp.ClientSession() as session:
        catalog.open(session)
        assert await catalog.enumerate(0)
        github.mode = "down"
        assert not await catalog.enumerate(0)
    assert list(catalog.modules()) == [VPC]
    report = catalog.report()[0]
    assert report.found == 1 and "HTTP 503" in report.error
    ((_, stats),) = catalog.stats()
    assert stats.failures == {"error": 3}  # tried, then twice more after a pause, then gave up


# --- served through the app --------------------------------------------------------------------


async def test_versions_and_download_of_an_org_module_that_no_rule_names(serve_client, github, git_http, tmp_path):
    module_repo(tmp_path, "terraform-aws-vpc", ("1.0.0", "1.1.0", "2.0.0-rc.1"))
    github.add("terraform-aws-vpc")
    client = await serve_client(org_config(github, git_http, org={"download": "git"}, index=OFF))
    assert await versions_of(client) == ["2.0.0-rc.1", "1.1.0", "1.0.0"]
    resp = await client.get("/v1/modules/acme/vpc/aws/1.1.0/download")
    assert resp.status == 200, await resp.text()
    assert resp.headers["X-Terraform-Get"] == f"git::{git_http.url('terraform-aws-vpc.git')}?ref=v1.1.0"


async def test_clone_ssh_gives_clients_the_ssh_url(serve_client, github, git_http, tmp_path):
    module_repo(tmp_path, "terraform-aws-vpc")
    github.add("terraform-aws-vpc")
    # (The fake's ssh URLs name github.com, not the fake API's host: listed as a clone host.)
    client = await serve_client(
        org_config(github, git_http, org={"clone": "ssh", "clone_hosts": ["github.com"], "download": "git"}, index=OFF)
    )
    resp = await client.get("/v1/modules/acme/vpc/aws/1.0.0/download")
    assert resp.status == 200, await resp.text()
    # gitreg lists tags over https (with [[credentials]]); clients clone over ssh with their keys.
    assert resp.headers["X-Terraform-Get"] == "git::ssh://git@github.com/acme-infra/terraform-aws-vpc.git?ref=v1.0.0"
    assert git_http.ref_listings("terraform-aws-vpc.git") == 1


async def test_an_unknown_name_in_an_org_namespace_is_404_without_any_git_call(
    serve_client, github, git_http, tmp_path
):
    module_repo(tmp_path, "terraform-aws-vpc")
    module_repo(tmp_path, "terraform-aws-ghost")  # exists on the git host, but the org does not list it
    github.add("terraform-aws-vpc")
    wildcard = {"namespace": "acme", "repository": git_http.base_url + "/terraform-{system}-{name}.git"}
    # No index (off): what a background index would ask the host is not what these requests cause.
    client = await serve_client(org_config(github, git_http, modules=[wildcard], index=OFF))
    await until(client.app[ORGS].complete)
    git_http.reset_counters()
    for address in ("acme/ghost/aws", "acme/nothing/aws", "acme/vpc/google"):
        resp = await client.get(f"/v1/modules/{address}/versions")
        await assert_error(resp, 404, f"module {address} is not served by this registry", "github:acme-infra")
        resp = await client.get(f"/v1/modules/{address}/1.0.0/download")
        await assert_error(resp, 404)
    assert git_http.ref_advertisements() == 0
    assert git_http.requests() == []


async def test_an_explicit_rule_wins_over_the_org_module_of_the_same_address(serve_client, github, git_http, tmp_path):
    module_repo(tmp_path, "terraform-aws-vpc", ("1.0.0",))
    module_repo(tmp_path, "fork", ("9.0.0",))
    github.add("terraform-aws-vpc")
    explicit = {"namespace": "acme", "name": "vpc", "system": "aws", "repository": git_http.url("fork.git")}
    client = await serve_client(org_config(github, git_http, modules=[explicit], index=OFF))
    assert await versions_of(client) == ["9.0.0"]


async def test_other_namespaces_still_go_to_wildcard_rules(serve_client, github, git_http, tmp_path):
    module_repo(tmp_path, "terraform-aws-vpc", ("1.0.0",))
    module_repo(tmp_path, "terraform-aws-shared", ("3.0.0",))
    github.add("terraform-aws-vpc")
    wildcard = {"namespace": "other", "repository": git_http.base_url + "/terraform-{system}-{name}.git"}
    client = await serve_client(org_config(github, git_http, modules=[wildcard], index=OFF))
    assert await versions_of(client, "other/shared/aws") == ["3.0.0"]
    assert await versions_of(client) == ["1.0.0"]


@pytest.mark.slow
async def test_a_namespace_whose_org_cannot_be_listed_yet_answers_503_not_404(serve_client, github, git_http, tmp_path):
    module_repo(tmp_path, "terraform-aws-vpc")
    github.add("terraform-aws-vpc")
    github.mode = "down"
    client = await serve_client(org_config(github, git_http, index=OFF))
    resp = await client.get("/v1/modules/acme/vpc/aws/versions")
    await assert_error(resp, 503, "namespace acme", "not listed yet", "HTTP 503")
    assert git_http.ref_advertisements() == 0


# --- webhooks: repositories come and go at once --------------------------------------------------


async def test_a_created_repository_is_served_at_once_after_the_github_webhook(
    serve_client, github, git_http, tmp_path
):
    module_repo(tmp_path, "terraform-aws-vpc")
    github.add("terraform-aws-vpc")
    client = await serve_client(
        org_config(github, git_http, webhooks=WEBHOOKS, org={"refresh_seconds": 3600}, index=OFF)
    )
    await until(client.app[ORGS].complete)
    changes: list[OrgChanges] = []
    client.app[ORGS].on_change.connect(changes.append)
    await assert_error(await client.get("/v1/modules/acme/iam/aws/versions"), 404)

    module_repo(tmp_path, "terraform-aws-iam", ("0.1.0",))
    github.add("terraform-aws-iam")
    api_calls = len(github.requests())
    started = time.monotonic()
    resp = await post_github(client, github.github_repository_event("created", "terraform-aws-iam"), "repository")
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["result"] == "org_updated"
    assert await versions_of(client, "acme/iam/aws") == ["0.1.0"]  # the very next request, no waiting
    assert time.monotonic() - started < 5
    # The signed payload is a hint: the one repository it names is read again from the API, once.
    assert [r.path for r in github.requests()[api_calls:]] == ["/repos/acme-infra/terraform-aws-iam"]
    iam = ModuleAddress("acme", "iam", "aws")
    assert changes == [OrgChanges(added=frozenset({iam}), pushed=frozenset({iam}))]

    payload = github.github_repository_event("deleted", "terraform-aws-iam")
    github.remove("terraform-aws-iam")
    git_http.reset_counters()
    resp = await post_github(client, payload, "repository")
    assert resp.status == 200, await resp.text()
    await assert_error(await client.get("/v1/modules/acme/iam/aws/versions"), 404)
    assert git_http.ref_advertisements() == 0
    assert changes[-1] == OrgChanges(removed=frozenset({iam}))


async def test_renamed_and_archived_github_repositories_move_and_disappear(serve_client, github, git_http, tmp_path):
    module_repo(tmp_path, "terraform-aws-vpc")
    github.add("terraform-aws-vpc")
    client = await serve_client(org_config(github, git_http, webhooks=WEBHOOKS, index=OFF))
    await until(client.app[ORGS].complete)
    assert await versions_of(client) == ["1.1.0", "1.0.0"]

    github.rename("terraform-aws-vpc", "terraform-aws-network")
    payload = github.github_repository_event(
        "renamed", "terraform-aws-network", repository={"name": {"from": "terraform-aws-vpc"}}
    )
    resp = await post_github(client, payload, "repository")
    assert resp.status == 200, await resp.text()
    await assert_error(await client.get("/v1/modules/acme/vpc/aws/versions"), 404)
    assert await versions_of(client, "acme/network/aws") == ["1.1.0", "1.0.0"]

    github.update("terraform-aws-network", archived=True)  # the API says so: the webhook is a hint
    payload = github.github_repository_event("archived", "terraform-aws-network")
    resp = await post_github(client, payload, "repository")
    assert resp.status == 200
    await assert_error(await client.get("/v1/modules/acme/network/aws/versions"), 404)
    report = client.app[ORGS].report()[0]
    assert dict(report.ignored) == {"acme-infra/terraform-aws-network": ARCHIVED}


async def test_a_repository_event_of_another_org_changes_nothing(serve_client, github, git_http, tmp_path):
    github.add("terraform-aws-vpc")
    client = await serve_client(org_config(github, git_http, webhooks=WEBHOOKS, index=OFF))
    await until(client.app[ORGS].complete)
    payload = github.github_repository_event("deleted", "terraform-aws-vpc")
    payload["repository"]["full_name"] = "someone-else/terraform-aws-vpc"
    resp = await post_github(client, payload, "repository")
    assert resp.status == 202
    assert (await resp.json())["result"] == "unknown_org"
    assert list(client.app[ORGS].modules()) == [VPC]


async def test_a_gitlab_system_hook_rename_moves_the_module(serve_client, gitlab, git_http, tmp_path):
    module_repo(tmp_path, "terraform-aws-vpc")
    gitlab.add("terraform-aws-vpc", subgroup="networking")
    client = await serve_client(org_config(gitlab, git_http, webhooks=WEBHOOKS, index=OFF))
    await until(client.app[ORGS].complete)
    assert await versions_of(client) == ["1.1.0", "1.0.0"]
    gitlab.rename("terraform-aws-vpc", "terraform-aws-network")
    payload = gitlab.gitlab_system_hook(
        "project_rename",
        "terraform-aws-network",
        old_path_with_namespace="platform/terraform/networking/terraform-aws-vpc",
    )
    gitlab.reset_counters()
    resp = await post_gitlab(client, payload)
    assert resp.status == 200, await resp.text()
    await assert_error(await client.get("/v1/modules/acme/vpc/aws/versions"), 404)
    assert await versions_of(client, "acme/network/aws") == ["1.1.0", "1.0.0"]
    # System hooks carry no clone URL: gitreg asked the API for that one project, nothing more.
    assert [r.path for r in gitlab.requests()] == [f"/api/v4/projects/{payload['project_id']}"]


async def test_a_gitlab_project_destroy_hook_removes_the_module(serve_client, gitlab, git_http, tmp_path):
    gitlab.add("terraform-aws-vpc")
    client = await serve_client(org_config(gitlab, git_http, webhooks=WEBHOOKS, index=OFF))
    await until(client.app[ORGS].complete)
    gone = gitlab.remove("terraform-aws-vpc")
    resp = await post_gitlab(client, gitlab.gitlab_system_hook("project_destroy", "terraform-aws-vpc", project=gone))
    assert resp.status == 200, await resp.text()
    await assert_error(await client.get("/v1/modules/acme/vpc/aws/versions"), 404)


async def test_a_tag_webhook_refreshes_an_org_repository(serve_client, github, git_http, tmp_path):
    repo = module_repo(tmp_path, "terraform-aws-vpc", ("1.0.0",))
    github.add("terraform-aws-vpc")
    client = await serve_client(org_config(github, git_http, webhooks=WEBHOOKS, cache={"ttl_seconds": 3600}, index=OFF))
    assert await versions_of(client) == ["1.0.0"]
    changes: list[OrgChanges] = []
    client.app[ORGS].on_change.connect(changes.append)
    repo.tag("v1.2.0")
    assert await versions_of(client) == ["1.0.0"]  # cached for an hour
    resp = await post_github(client, github_tag_push("terraform-aws-vpc"), "push")
    assert resp.status == 200, await resp.text()
    assert await versions_of(client) == ["1.2.0", "1.0.0"]
    assert changes == [OrgChanges(pushed=frozenset({VPC}))]


@pytest.mark.slow
async def test_a_webhook_during_an_enumeration_is_not_undone_by_its_older_pages(github, git_http, tmp_path):
    github.add("terraform-aws-vpc")
    catalog = OrgCatalog(org_config(github, git_http), None)
    async with aiohttp.ClientSession() as session:
        catalog.open(session)
        assert await catalog.enumerate(0)
        github.delay = 1.0
        asked = github.started
        running = asyncio.ensure_future(catalog.enumerate(0))
        await until(lambda: github.started == asked + 1)  # the page is on its way, as the org was before
        github.add("terraform-aws-iam")
        event = github_repository_event(github.github_repository_event("created", "terraform-aws-iam"))
        assert await catalog.apply(event) == 1
        assert await running
    assert sorted(map(str, catalog.modules())) == ["acme/iam/aws", "acme/vpc/aws"]


async def test_a_malformed_repository_event_is_400_and_changes_nothing(serve_client, github, git_http, tmp_path):
    github.add("terraform-aws-vpc")
    client = await serve_client(org_config(github, git_http, webhooks=WEBHOOKS, index=OFF))
    await until(client.app[ORGS].complete)
    resp = await post_github(client, {"action": "deleted", "repository": {"name": "terraform-aws-vpc"}}, "repository")
    await assert_error(resp, 400, "repository payload")
    assert list(client.app[ORGS].modules()) == [VPC]


async def test_a_gitlab_project_pushed_within_its_throttle_window_is_looked_at_again(gitlab, git_http, tmp_path):
    # GitLab moves updated_at at most every 5 minutes per project: a second push soon after the
    # first leaves it as it was. A marker that recent at the last enumeration is not trusted.
    gitlab.add("terraform-aws-vpc", pushed=time.time() - 30)
    gitlab.add("terraform-aws-iam", pushed=time.time() - 7200)
    catalog = OrgCatalog(org_config(gitlab, git_http), None)
    changes: list[OrgChanges] = []
    catalog.on_change.connect(changes.append)
    async with aiohttp.ClientSession() as session:
        catalog.open(session)
        assert await catalog.enumerate(0)
        assert await catalog.enumerate(0)  # nothing moved
    assert changes[0].added == {VPC, ModuleAddress("acme", "iam", "aws")}
    assert changes[1:] == [OrgChanges(pushed=frozenset({VPC}))]


# --- restart: the persisted listing serves before the API answers --------------------------------


async def _listed_then_stopped(
    serve_client: Any, github: FakeForge, git_http: GitHttpServer, tmp_path: Path, **sections: Any
) -> Any:
    """An org of one module, enumerated by a gitreg that then stopped (its orgs.json under state/); the config."""
    module_repo(tmp_path, "terraform-aws-vpc")
    github.add("terraform-aws-vpc", description="The VPC")
    config = org_config(github, git_http, storage={"path": str(tmp_path / "state")}, **sections)
    first = await serve_client(config)
    await until(first.app[ORGS].complete)
    await first.close()
    return config


@pytest.mark.slow
async def test_after_a_restart_with_the_api_down_org_modules_are_still_served(serve_client, github, git_http, tmp_path):
    config = await _listed_then_stopped(serve_client, github, git_http, tmp_path, index=OFF)
    stored = (tmp_path / "state" / "orgs.json").read_text()
    assert "terraform-aws-vpc" in stored and API_TOKEN not in stored
    data = json.loads(stored)
    data["orgs"][0]["enumerated_at"] -= 86400  # a day old: enumerating it again is due at start
    (tmp_path / "state" / "orgs.json").write_text(json.dumps(data))

    github.mode = "down"
    github.reset_counters()
    second = await serve_client(config)
    orgs = second.app[ORGS]
    assert orgs.complete()  # loaded from the file before the API answered
    assert orgs.get(VPC).description == "The VPC"
    assert await versions_of(second) == ["1.1.0", "1.0.0"]
    await until(lambda: orgs.report()[0].error is not None)  # the API is down: the listing stays
    assert list(orgs.modules()) == [VPC]
    assert github.requests()  # it did try


@pytest.mark.slow
async def test_a_restart_with_a_current_listing_asks_the_api_nothing_until_the_next_refresh(
    serve_client, github, git_http, tmp_path
):
    config = await _listed_then_stopped(serve_client, github, git_http, tmp_path)

    github.reset_counters()
    second = await serve_client(config)  # refresh_seconds after the listing was made: not due yet
    assert await versions_of(second) == ["1.1.0", "1.0.0"]
    await indexed(second)
    await asyncio.sleep(0.5)
    assert github.requests() == []  # no API page spent on a restart (rate limits)
    github.add("terraform-aws-dns")
    assert await second.app[ORGS].enumerate(0)  # what the next refresh (or a webhook) does
    assert second.app[ORGS].report()[0].found == 2 and github.requests()


# --- metrics, secrets, config --------------------------------------------------------------------


@pytest.mark.slow
async def test_metrics_count_api_calls_rate_limits_and_modules_per_org(serve_client, github, git_http, tmp_path):
    github.add("terraform-aws-vpc")
    github.add("terraform-aws-iam")
    github.add("terraform-aws-dns")
    github.rate_limit_next(1, seconds=1)
    client = await serve_client(org_config(github, git_http, index=OFF))
    await until(client.app[ORGS].complete)
    text = await (await client.get("/metrics")).text()
    assert 'gitreg_org_api_calls_total{org="github:acme-infra"} 3.0' in text
    assert 'gitreg_org_api_failures_total{org="github:acme-infra",reason="rate_limited"} 1.0' in text
    assert 'gitreg_org_modules{org="github:acme-infra"} 3.0' in text
    assert 'gitreg_org_repositories{org="github:acme-infra"} 3.0' in text
    assert 'gitreg_org_rate_limit_remaining{org="github:acme-infra"}' in text
    assert 'gitreg_org_listing_age_seconds{org="github:acme-infra"}' in text


@pytest.mark.slow
async def test_the_api_token_never_appears_in_logs_reports_or_reprs(serve_client, github, git_http, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    github.add("terraform-aws-vpc")
    config = org_config(github, git_http, index=OFF)
    client = await serve_client(config)
    await until(client.app[ORGS].complete)
    github.mode = "down"
    client.app[ORGS].refresh_soon(0)
    await until(lambda: client.app[ORGS].report()[0].error is not None)
    shown = caplog.text + repr(config) + repr(client.app[ORGS].report()) + await (await client.get("/metrics")).text()
    assert API_TOKEN not in shown
    assert "org github:acme-infra: listing failed" in caplog.text


def test_repository_pattern_needs_name_and_system():
    base = {"provider": "github", "group": "acme", "namespace": "acme"}
    for pattern, message in [
        ("terraform-{name}", "must contain {system} exactly once"),
        ("{name}-{system}-{name}", "must contain {name} exactly once"),
        ("tf-{namespace}-{name}-{system}", "only {name} and {system} may appear in braces"),
        ("tf-{name}{system}", "need a separator"),
    ]:
        with pytest.raises(ConfigError) as info:
            parse_config({"orgs": [{**base, "repository_pattern": pattern}]}, {})
        assert any(p.startswith("orgs[0].repository_pattern: ") and message in p for p in info.value.problems), (
            info.value.problems
        )


def test_org_config_is_checked_key_by_key():
    with pytest.raises(ConfigError) as info:
        parse_config(
            {
                "orgs": [
                    {"provider": "bitbucket", "group": "x", "namespace": "acme"},
                    {"provider": "gitlab", "api_url": "ftp://gitlab.example.com", "group": "a//b", "namespace": "acme"},
                    {
                        "provider": "github",
                        "group": "acme",
                        "namespace": "acme",
                        "refresh_seconds": 1,
                        "clone": "git",
                        "download": "zip",
                        "include_archived": "yes",
                    },
                    {"provider": "github", "group": "ACME", "namespace": "other"},
                ]
            },
            {},
        )
    assert info.value.problems == [
        'orgs[0].provider: must be "gitlab" or "github", not \'bitbucket\'',
        "orgs[1].api_url: 'ftp://gitlab.example.com' must be an https:// URL like https://gitlab.example.com/api/v4",
        "orgs[1].group: 'a//b' is not a GitLab group path like 'platform/terraform'",
        'orgs[2].clone: must be "https" or "ssh", not \'git\'',
        'orgs[2].download: must be "git", "archive" or an https:// tarball URL template, not \'zip\'',
        "orgs[2].refresh_seconds: must be a number between 10 and 604800, not 1",
        "orgs[2].include_archived: must be true or false, not a string",
        "orgs[3].group: 'ACME' is already listed by orgs[2]",
    ]


def test_the_org_token_is_not_in_the_config_repr():
    config = parse_config(
        {"orgs": [{"provider": "gitlab", "group": "g", "namespace": "acme", "token": "${T}"}]},
        {"T": "glpat-very-secret"},
    )
    assert config.orgs[0].token == "glpat-very-secret"
    assert "glpat-very-secret" not in repr(config)
    assert config.orgs[0].api_url == "https://gitlab.com/api/v4"


# --- the CLI: check --probe, and serve with orgs only ---------------------------------------------


@pytest.mark.slow
def test_check_probe_lists_found_modules_and_ignored_repositories_per_org(git_http, tmp_path):
    fake = FakeForge("gitlab", git_http, "platform/terraform", token=API_TOKEN, max_per_page=2)
    module_repo(tmp_path, "terraform-aws-vpc", ("1.0.0", "1.2.0"))
    GitRepo(tmp_path / "repos", "terraform-aws-empty").commit({"main.tf": ""})
    with fake.in_thread():
        fake.add("terraform-aws-vpc")
        fake.add("terraform-aws-empty", subgroup="sandbox")
        fake.add("terraform-aws-legacy", archived=True)
        fake.add("handbook")
        config = write_config(tmp_path, fake, git_http)
        result = run_gitreg(
            "check", "--probe", "--config", str(config), env={"ORG_TOKEN": API_TOKEN, "GIT_PASSWORD": GIT_PASSWORD}
        )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "1 org(s)" in out
    assert f"org gitlab:platform/terraform ({fake.api_url}) -> namespace acme" in out
    assert "4 repositories found, 1 module(s), 3 ignored" in out
    assert "module acme/vpc/aws <- platform/terraform/terraform-aws-vpc" in out
    assert "versions (2): 1.2.0, 1.0.0" in out
    # A repository without a SemVer tag is ignored with the reason (not an error: exit 0 above).
    assert "module acme/empty/aws" not in out
    assert "ignored platform/terraform/sandbox/terraform-aws-empty: no SemVer tag" in out
    assert "ignored platform/terraform/terraform-aws-legacy: archived" in out
    assert "ignored platform/terraform/handbook: name does not match repository_pattern" in out
    assert API_TOKEN not in out + result.stderr


@pytest.mark.slow
def test_check_probe_reports_an_org_modules_malformed_gitreg_toml_and_what_a_good_one_declares(git_http, tmp_path):
    fake = FakeForge("gitlab", git_http, "platform/terraform", token=API_TOKEN)
    bad = module_repo(tmp_path, "terraform-aws-vpc", ("1.0.0", "1.2.0"))
    bad.commit({".gitreg.toml": '[[revoked]]\nversions = "~> banana"\nreason = "x"\n'})
    good = module_repo(tmp_path, "terraform-aws-iam", ("1.0.0", "1.1.0"))
    good.commit({".gitreg.toml": '[[revoked]]\nversions = "= 1.1.0"\nreason = "leaks"\n'})
    with fake.in_thread():
        fake.add("terraform-aws-vpc")
        fake.add("terraform-aws-iam")
        config = write_config(tmp_path, fake, git_http)
        result = run_gitreg(
            "check", "--probe", "--config", str(config), env={"ORG_TOKEN": API_TOKEN, "GIT_PASSWORD": GIT_PASSWORD}
        )
    out = result.stdout
    assert result.returncode == 1, out + result.stderr  # a malformed file fails the probe
    assert "ERROR: .gitreg.toml is malformed and declares nothing: revoked[0].versions" in out
    assert "revoked 1.1.0: leaks (not listed; its download answers 410)" in out
    assert "Traceback" not in result.stderr


# --- end to end: the real Terraform CLI installs an org module ------------------------------------


@pytest.mark.slow
def test_terraform_installs_an_org_module_that_no_modules_rule_names(terraform_client, git_http, tmp_path):
    module_repo(tmp_path, "terraform-aws-vpc", ("1.0.0", "1.1.0", "2.0.0"))
    fake = FakeForge("github", git_http, "acme-infra", token=API_TOKEN, max_per_page=1)
    with fake.in_thread():
        fake.add("terraform-aws-iam")
        fake.add("terraform-aws-vpc")
        config = write_config(tmp_path, fake, git_http)
        env = {"ORG_TOKEN": API_TOKEN, "GIT_PASSWORD": GIT_PASSWORD}
        with GitregProcess("--config", str(config), env=env) as server:
            work = tmp_path / "work"
            work.mkdir()
            (work / "main.tf").write_text(
                'module "vpc" {\n  source  = "registry.example.test/acme/vpc/aws"\n  version = "~> 1.0"\n}\n'
            )
            cli_config(tmp_path / "cli.tfrc", server.url)
            # Terraform clones with the same git credentials gitreg uses, from its own git config.
            (tmp_path / "home").mkdir()
            (tmp_path / "home" / ".git-credentials").write_text(
                git_http.base_url.replace("://", f"://{GIT_USER}:{GIT_PASSWORD}@") + "\n"
            )
            (tmp_path / "home" / ".gitconfig").write_text("[credential]\n\thelper = store\n")
            result = terraform_client.run(
                ["init", "-input=false", "-no-color"],
                cwd=work,
                env=clean_env(
                    tmp_path / "home",
                    TF_CLI_CONFIG_FILE=str(tmp_path / "cli.tfrc"),
                    GIT_CONFIG_GLOBAL=str(tmp_path / "home" / ".gitconfig"),
                ),
            )
        log = "".join(server.log)
        assert fake.requests("/repos"), "gitreg listed the org through the API"
    assert result.returncode == 0, f"{terraform_client.name} init failed:\n{result.stdout}\n{result.stderr}\n{log}"
    assert "Downloading registry.example.test/acme/vpc/aws 1.1.0 for vpc" in result.stdout
    installed = (work / ".terraform/modules/vpc/main.tf").read_text()
    assert 'value = "1.1.0"' in installed
    assert API_TOKEN not in log


# --- the index: org modules listed, searched, kept without git ------------------------------------


async def listed_names(client, url: str = "/v1/modules") -> list[str]:
    resp = await client.get(url)
    assert resp.status == 200, await resp.text()
    return ["/".join(m["id"].split("/")[:3]) for m in (await resp.json())["modules"]]


@pytest.mark.slow
async def test_org_modules_are_listed_and_searchable_by_description_and_topic(serve_client, github, git_http, tmp_path):
    module_repo(tmp_path, "terraform-aws-vpc")
    module_repo(tmp_path, "terraform-aws-dns")
    github.add("terraform-aws-vpc", description="Networks for every team", topics=("networking", "terraform-module"))
    github.add("terraform-aws-dns", description="Zones")
    client = await serve_client(org_config(github, git_http, storage={"path": str(tmp_path / "state")}))
    await until(client.app[ORGS].complete)
    await indexed(client)
    assert await listed_names(client) == ["acme/dns/aws", "acme/vpc/aws"]
    assert await listed_names(client, "/v1/modules/search?q=networking") == ["acme/vpc/aws"]  # a topic
    assert await listed_names(client, "/v1/modules/search?q=every%20team") == ["acme/vpc/aws"]  # the description
    resp = await client.get("/v1/modules/acme/vpc/aws")
    body = await resp.json()
    assert body["description"] == "Networks for every team"
    assert body["source"].startswith("https://github.com/")  # the repository's web page from the API


@pytest.mark.slow
async def test_a_created_repository_is_listed_within_a_second_of_the_webhook(serve_client, github, git_http, tmp_path):
    module_repo(tmp_path, "terraform-aws-vpc")
    github.add("terraform-aws-vpc")
    client = await serve_client(
        org_config(
            github,
            git_http,
            webhooks=WEBHOOKS,
            org={"refresh_seconds": 3600},
            storage={"path": str(tmp_path / "state")},
        )
    )
    await until(client.app[ORGS].complete)
    await indexed(client)
    module_repo(tmp_path, "terraform-aws-iam", ("0.1.0",))
    github.add("terraform-aws-iam")
    started = time.monotonic()
    resp = await post_github(client, github.github_repository_event("created", "terraform-aws-iam"), "repository")
    assert resp.status == 200, await resp.text()
    while "acme/iam/aws" not in await listed_names(client):
        assert time.monotonic() - started < 5, "the created repository was not listed"
        await asyncio.sleep(0.02)
    took = time.monotonic() - started
    logging.getLogger(__name__).info("listed %.3f s after the webhook", took)
    payload = github.github_repository_event("deleted", "terraform-aws-iam")
    github.remove("terraform-aws-iam")
    resp = await post_github(client, payload, "repository")
    assert resp.status == 200
    await indexed(client)
    # The index process reports what it dropped within its FEED_SECONDS (indexed() waits for what is listable).
    await until(lambda: client.app[INDEX].get(ModuleAddress("acme", "iam", "aws")) is None)
    assert await listed_names(client) == ["acme/vpc/aws"]


@pytest.mark.slow
async def test_an_org_refresh_where_nothing_changed_costs_no_git_and_a_restart_none_either(
    serve_client, github, git_http, tmp_path
):
    for name in ("terraform-aws-vpc", "terraform-aws-dns"):
        module_repo(tmp_path, name)
        github.add(name)
    config = org_config(github, git_http, storage={"path": str(tmp_path / "state")})
    client = await serve_client(config)
    orgs = client.app[ORGS]
    await until(orgs.complete)
    await indexed(client)
    git_http.reset_counters()
    api_calls = len(github.requests())
    assert await orgs.enumerate(0)  # what every refresh_seconds does
    await indexed(client)
    assert len(github.requests()) > api_calls  # the API pages were read...
    assert git_http.requests() == []  # ...and no repository was asked for its tags
    await client.close()

    git_http.reset_counters()
    restarted = await serve_client(config)
    assert await listed_names(restarted) == ["acme/dns/aws", "acme/vpc/aws"]  # at once, from disk
    assert await listed_names(restarted, "/v1/modules/search?q=vpc") == ["acme/vpc/aws"]
    assert (await restarted.get("/v1/modules/acme/vpc/aws")).status == 200
    await until(restarted.app[ORGS].complete)
    await indexed(restarted)
    assert git_http.requests() == []  # nothing changed: the index needed no git after the restart


async def readiness(client) -> dict[str, Any]:
    resp = await client.get("/readyz")
    assert resp.status == 200
    return (await resp.json())["index"]


@pytest.mark.slow
async def test_an_org_listed_for_the_first_time_is_served_and_listed_page_by_page(
    serve_client, github, git_http, tmp_path
):
    for name in ("terraform-aws-vpc", "terraform-aws-dns", "terraform-aws-iam"):  # pages of two: iam is on page 2
        module_repo(tmp_path, name)
        github.add(name)
    github.hold(2)  # the API takes its time over the second page
    client = await serve_client(org_config(github, git_http, storage={"path": str(tmp_path / "state")}))
    deadline = time.monotonic() + 10
    while await listed_names(client) != ["acme/dns/aws", "acme/vpc/aws"]:
        assert time.monotonic() < deadline, "the first page's modules were not listed while the second was awaited"
        await asyncio.sleep(0.05)
    assert await versions_of(client) == ["1.1.0", "1.0.0"]  # served from the first page
    assert not client.app[ORGS].complete()
    assert (await readiness(client))["complete"] is False  # the org is not listed yet: no first index
    # A name the pages read so far lack waits for the rest of the listing: not a 404.
    iam = asyncio.ensure_future(versions_of(client, "acme/iam/aws"))
    await asyncio.sleep(0.3)
    assert not iam.done()
    github.release()
    assert await asyncio.wait_for(iam, 10) == ["1.1.0", "1.0.0"]
    await until(client.app[ORGS].complete)
    await indexed(client)
    assert await listed_names(client) == ["acme/dns/aws", "acme/iam/aws", "acme/vpc/aws"]
    await until(lambda: client.app[INDEX].complete)  # the pass after the listing, within a second
    state = await readiness(client)
    assert state["complete"] is True and state["modules"] == 3


@pytest.mark.slow
async def test_with_its_org_listing_lost_and_the_api_down_the_index_keeps_its_modules(
    serve_client, github, git_http, tmp_path
):
    module_repo(tmp_path, "terraform-aws-vpc")
    github.add("terraform-aws-vpc")
    config = org_config(github, git_http, storage={"path": str(tmp_path / "state")})
    first = await serve_client(config)
    await until(lambda: first.app[INDEX].complete)
    await first.close()
    (tmp_path / "state" / "orgs.json").unlink()  # lost, or the org's api_url corrected: not listed any more
    github.mode = "down"
    restarted = await serve_client(config)
    await until(lambda: restarted.app[ORGS].report()[0].error is not None)  # the first listing failed
    await indexed(restarted)
    assert await listed_names(restarted) == ["acme/vpc/aws"]  # an API failure never empties the index
    github.mode = "ok"
    assert await restarted.app[ORGS].enumerate(0)
    await indexed(restarted)
    assert await listed_names(restarted) == ["acme/vpc/aws"]
