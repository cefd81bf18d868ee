"""A repository webhook patches one org's listing (orgs/patch.py, #22): what it leaves is what an
enumeration finds.

A webhook settles only the addresses it touches (a 230,000-module org is not combined again), so
these check that the outcome is the same as a full enumeration's: the module set, each address's
owner, conflicts (logged once, counted), ignored repositories, and the repositories a tag push
names. The GitHub and GitLab APIs are the fakes of tests/support/forges.py; git is real.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from gitreg.core import urls
from gitreg.forges.gitlab import repository_event as gitlab_repository_event
from gitreg.orgs.model import ARCHIVED
from gitreg.orgs.service import OrgCatalog
from gitreg.web.keys import ORGS
from tests.support.app import assert_error
from tests.support.forges import FakeForge
from tests.support.orgs import (
    API_TOKEN,
    VPC,
    github_tag_push,
    module_repo,
    org_config,
    post_github,
    post_gitlab,
    until,
    versions_of,
)
from tests.support.webhooks import WEBHOOKS

OWNER = "acme/team-b/terraform-aws-vpc"
NEWCOMER = "acme/aaa-newcomer/terraform-aws-vpc"


@pytest.fixture
async def gitlab(git_http) -> AsyncIterator[FakeForge]:
    fake = await FakeForge("gitlab", git_http, "acme", token=API_TOKEN).start()
    yield fake
    await fake.close()


def state(catalog: OrgCatalog) -> dict[str, Any]:
    """Everything a user sees of an org listing: modules and their repositories, owners, what is
    ignored and why, the counts, and which modules a push to each repository concerns."""
    report = catalog.report()[0]
    stats = catalog.stats()[0][1]
    served = {str(a): repo for a, repo in catalog.modules().items()}
    pushed = {repo.full_name: sorted(map(str, catalog.notify_pushed([repo.repository]))) for repo in served.values()}
    named = {repo.full_name: catalog.repositories_named([repo.web_url], urls.host_path) for repo in served.values()}
    return {
        "modules": {address: repo.full_name for address, repo in served.items()},
        "owners": sorted((address, holder) for address, holder, _ in catalog.owners.entries()),
        "ignored": dict(report.ignored),
        "found": report.found,
        "counts": (stats.repositories, stats.modules, stats.conflicts),
        "pushed": pushed,
        "named": named,
    }


async def test_a_run_of_webhooks_leaves_the_listing_an_enumeration_finds(gitlab, git_http, tmp_path):
    for name in ("terraform-aws-vpc", "terraform-aws-dns", "terraform-aws-iam"):
        gitlab.add(name, subgroup="team-b", key=name if name != "terraform-aws-vpc" else "owner")
    config = org_config(gitlab, git_http)
    hooked, enumerated = OrgCatalog(config, None), OrgCatalog(config, None)
    old_dns = "acme/team-b/terraform-aws-dns"
    steps = [
        # A newcomer in another subgroup claims the owner's address (an older project: a lower id).
        (
            lambda: gitlab.add("terraform-aws-vpc", subgroup="aaa-newcomer", key="newcomer", rid=7),
            "project_create",
            "newcomer",
            {},
        ),
        (lambda: None, "project_update", "newcomer", {}),  # nothing changed: the same again
        (
            lambda: gitlab.rename("terraform-aws-dns", "terraform-aws-network"),
            "project_rename",
            "terraform-aws-network",
            {"old_path_with_namespace": old_dns},
        ),
        (lambda: gitlab.add("docs", subgroup="team-b"), "project_create", "docs", {}),  # not a module
        (lambda: gitlab.update("terraform-aws-iam", archived=True), "project_update", "terraform-aws-iam", {}),
        (lambda: gitlab.update("terraform-aws-iam", archived=False), "project_update", "terraform-aws-iam", {}),
        # The owner is deleted: the newcomer takes its address over.
        (lambda: gitlab.remove("owner"), "project_destroy", "owner", {}),
        (lambda: gitlab.remove("newcomer"), "project_destroy", "newcomer", {}),
    ]
    seen: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as session:
        hooked.open(session)
        enumerated.open(session)
        assert await hooked.enumerate(0) and await enumerated.enumerate(0)
        for act, hook, name, extra in steps:
            gone = act()
            payload = gitlab.gitlab_system_hook(
                hook, name, project=gone if hook == "project_destroy" else None, **extra
            )
            event = gitlab_repository_event(payload)
            assert event is not None
            assert await hooked.apply(event) == 1
            assert await enumerated.enumerate(0)
            assert state(hooked) == state(enumerated), hook
            seen.append(state(hooked))
        # After all of them, an enumeration of the patched catalog changes no module.
        changes: list[Any] = []
        hooked.on_change.connect(changes.append)
        assert await hooked.enumerate(0)
        # (GitLab's recently updated projects are only looked at again: "pushed", GitLab's throttle.)
        assert not any(c.added or c.changed or c.removed for c in changes)
        assert state(hooked) == seen[-1]

    # What the steps did, as a user sees it.
    assert seen[0]["modules"]["acme/vpc/aws"] == OWNER
    assert seen[0]["ignored"][NEWCOMER].startswith(f"conflict: acme/vpc/aws is held by {OWNER}")
    assert seen[0]["counts"] == (4, 3, 1)
    assert "acme/dns/aws" not in seen[2]["modules"]
    assert seen[2]["modules"]["acme/network/aws"] == "acme/team-b/terraform-aws-network"
    assert seen[3]["ignored"]["acme/team-b/docs"].startswith("name does not match")
    assert seen[4]["ignored"]["acme/team-b/terraform-aws-iam"] == ARCHIVED
    assert "acme/iam/aws" not in seen[4]["modules"] and "acme/iam/aws" in seen[5]["modules"]
    assert seen[6]["modules"]["acme/vpc/aws"] == NEWCOMER
    assert (NEWCOMER not in seen[6]["ignored"]) and seen[6]["counts"][2] == 0
    assert "acme/vpc/aws" not in seen[7]["modules"]
    assert "acme/vpc/aws" not in dict(seen[7]["owners"])


async def test_a_newcomer_created_by_webhook_is_a_conflict_logged_once_until_the_owner_is_deleted(
    serve_client, gitlab, git_http, tmp_path, caplog
):
    caplog.set_level(logging.INFO)
    module_repo(tmp_path, "team-b-vpc", ("1.0.0",))
    module_repo(tmp_path, "newcomer-vpc", ("9.9.9",))
    gitlab.add("terraform-aws-vpc", subgroup="team-b", key="owner", repo="team-b-vpc")
    storage = {"path": str(tmp_path / "state")}
    config = org_config(
        gitlab, git_http, webhooks=WEBHOOKS, storage=storage, org={"refresh_seconds": 3600}, index={"enabled": False}
    )
    client = await serve_client(config)
    await until(client.app[ORGS].complete)
    assert await versions_of(client) == ["1.0.0"]

    gitlab.add("terraform-aws-vpc", subgroup="aaa-newcomer", key="newcomer", repo="newcomer-vpc", rid=7)
    for hook in ("project_create", "project_update"):
        resp = await post_gitlab(client, gitlab.gitlab_system_hook(hook, "newcomer"))
        assert resp.status == 200, await resp.text()
        assert await versions_of(client) == ["1.0.0"]
    conflicts = [r.getMessage() for r in caplog.records if "not served" in r.getMessage()]
    assert len(conflicts) == 1 and NEWCOMER in conflicts[0] and OWNER in conflicts[0]
    metrics = await (await client.get("/metrics")).text()
    assert 'gitreg_org_address_conflicts{org="gitlab:acme"} 1.0' in metrics

    gone = gitlab.remove("owner")
    resp = await post_gitlab(client, gitlab.gitlab_system_hook("project_destroy", "owner", project=gone))
    assert resp.status == 200, await resp.text()
    assert await versions_of(client) == ["9.9.9"]
    assert any(f"its owner {OWNER} is gone" in r.getMessage() for r in caplog.records)
    metrics = await (await client.get("/metrics")).text()
    assert 'gitreg_org_address_conflicts{org="gitlab:acme"} 0.0' in metrics
    await client.close()  # (within the webhook's write delay: the shutdown writes orgs.json)

    # A restart keeps the new owner (orgs.json), with the API down.
    await gitlab.close()
    client = await serve_client(config)
    await until(client.app[ORGS].complete)
    assert client.app[ORGS].get(VPC).full_name == NEWCOMER
    assert [holder for address, holder, _ in client.app[ORGS].owners.entries() if address == str(VPC)] == [
        f'["gitlab", "{gitlab.api_url}", "acme", "{NEWCOMER}"]'
    ]


async def test_a_tag_push_reaches_a_repository_a_webhook_added_and_no_longer_one_it_removed(
    serve_client, git_http, tmp_path
):
    github = await FakeForge("github", git_http, "acme-infra", token=API_TOKEN).start()
    try:
        module_repo(tmp_path, "terraform-aws-vpc", ("1.0.0",))
        github.add("terraform-aws-vpc")
        config = org_config(github, git_http, webhooks=WEBHOOKS, cache={"ttl_seconds": 3600}, index={"enabled": False})
        client = await serve_client(config)
        await until(client.app[ORGS].complete)
        resp = await post_github(client, github_tag_push("terraform-aws-vpc"), "push")
        assert (await resp.json())["result"] == "refreshing"  # (the push index is built now)

        iam = module_repo(tmp_path, "terraform-aws-iam", ("0.1.0",))
        github.add("terraform-aws-iam")
        resp = await post_github(client, github.github_repository_event("created", "terraform-aws-iam"), "repository")
        assert resp.status == 200, await resp.text()
        assert await versions_of(client, "acme/iam/aws") == ["0.1.0"]
        iam.tag("v0.2.0")
        resp = await post_github(client, github_tag_push("terraform-aws-iam"), "push")
        assert (await resp.json())["result"] == "refreshing"
        assert await versions_of(client, "acme/iam/aws") == ["0.2.0", "0.1.0"]

        payload = github.github_repository_event("deleted", "terraform-aws-iam")
        github.remove("terraform-aws-iam")
        resp = await post_github(client, payload, "repository")
        assert resp.status == 200, await resp.text()
        await assert_error(await client.get("/v1/modules/acme/iam/aws/versions"), 404)
        resp = await post_github(client, github_tag_push("terraform-aws-iam"), "push")
        assert resp.status == 202 and (await resp.json())["result"] == "unknown_repository"
    finally:
        await github.close()
