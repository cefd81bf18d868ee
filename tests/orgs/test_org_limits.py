"""Org listings a big, slow or hostile API sends: bounded, counted, and never stalling serving (#22).

The APIs are the fakes of tests/support/forges.py, told to misbehave (a page of megabytes, a
rate-limit reset decades ahead, a hostile `next` link); the rest is real.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from gitreg.forges import base
from gitreg.forges.base import ForgeError
from gitreg.forges.hosts import client_for
from gitreg.orgs.model import OrgState
from gitreg.orgs.refresh import MAX_BACKOFF_SECONDS, next_delay
from gitreg.web.keys import ORGS
from tests.support.forges import FakeForge
from tests.support.orgs import API_TOKEN, listed, module_repo, org_config, versions_of


@pytest.fixture
async def gitlab(git_http) -> AsyncIterator[FakeForge]:
    fake = await FakeForge("gitlab", git_http, "platform/terraform", token=API_TOKEN, max_per_page=2).start()
    yield fake
    await fake.close()


@pytest.fixture
async def github(git_http) -> AsyncIterator[FakeForge]:
    fake = await FakeForge("github", git_http, "acme-infra", token=API_TOKEN, max_per_page=2).start()
    yield fake
    await fake.close()


def _no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    assert not [r for r in caplog.records if r.exc_info], "an API failure was logged with a traceback"
    assert "Traceback" not in caplog.text


async def test_an_api_page_over_the_size_cap_is_a_counted_failure_read_once(
    github, git_http, tmp_path, monkeypatch, caplog
):
    monkeypatch.setattr(base, "MAX_PAGE_BYTES", 256 * 1024)  # the default is 8 MiB: a test page of 1 MiB is enough
    github.add("terraform-aws-vpc")
    github.add("terraform-aws-dns")
    github.item_padding = 512 * 1024
    catalog = await listed(org_config(github, git_http))
    report = catalog.report()[0]
    assert report.found is None and "larger than 262144 bytes" in (report.error or "")
    assert catalog.stats()[0][1].failures == {"too_large": 1}
    assert len(github.requests("/repos")) == 1  # not read again and again: it would be as large next time
    _no_traceback(caplog)


async def test_an_org_past_max_repositories_fails_with_a_clear_error_and_keeps_what_it_had(github, git_http, caplog):
    for name in ("vpc", "dns", "iam", "nat", "waf"):
        github.add(f"terraform-aws-{name}")
    config = org_config(github, git_http, org={"max_repositories": 3})
    catalog = await listed(config)
    report = catalog.report()[0]
    assert "more than max_repositories = 3" in (report.error or "")
    assert report.found is None and not catalog.complete()  # never presented as a complete listing
    assert len(catalog.modules()) == 2  # the pages before the cap are still served (a first listing)
    assert "more than max_repositories = 3" in caplog.text
    assert catalog.stats()[0][1].failures == {"too_many": 1}


async def test_a_rate_limit_reset_decades_ahead_backs_off_at_most_an_hour(github, git_http, caplog):
    github.add("terraform-aws-vpc")
    github.reset_at = int(time.time()) + 1_000_000_000
    github.rate_limit_next(5)
    config = org_config(github, git_http)
    state = OrgState(0, config.orgs[0])
    async with aiohttp.ClientSession() as session:
        state.client = client_for(state.config, session, state.stats)
        with pytest.raises(ForgeError):
            await state.client.list_repositories()
    state.failures = 1
    assert next_delay(state, ok=False) <= MAX_BACKOFF_SECONDS
    assert "trying again in 3600 s instead" in caplog.text  # the capped back-off is logged


@pytest.mark.parametrize(
    "link",
    [
        "http://user:pw@{host}/organizations/9919/repos?page=2",  # user info: aiohttp's ValueError before
        "http://{host}\\@evil.example/organizations/9919/repos?page=2",
        "http://u@{host}\\x/organizations/9919/repos?page=2",
    ],
)
async def test_a_next_link_with_user_info_or_a_backslash_is_a_counted_failure_without_traceback(
    github, git_http, caplog, link
):
    github.add("terraform-aws-vpc")
    github.add("terraform-aws-dns")
    github.add("terraform-aws-iam")
    github.next_link = link.format(host=github.base_url.removeprefix("http://"))
    catalog = await listed(org_config(github, git_http))
    assert "next-page link" in (catalog.report()[0].error or "")
    assert catalog.stats()[0][1].failures == {"error": 1}
    assert len(github.requests("/repos")) == 1
    assert "pw@" not in caplog.text
    _no_traceback(caplog)


async def test_the_token_never_goes_to_a_same_origin_link_outside_the_api_path(gitlab, git_http):
    gitlab.add("terraform-aws-vpc")
    gitlab.add("terraform-aws-dns")
    gitlab.add("terraform-aws-iam")
    gitlab.next_link = f"{gitlab.base_url}/elsewhere/projects?page=2"  # api_url is {base_url}/api/v4
    catalog = await listed(org_config(gitlab, git_http))
    assert [r for r in gitlab.requests("/elsewhere") if API_TOKEN in json.dumps(r.headers)] == []
    assert "not under" in (catalog.report()[0].error or "")
    assert catalog.stats()[0][1].failures == {"error": 1}


def _big_orgs_json(path: Path, fake: FakeForge, git_url: str, count: int) -> None:
    """An orgs.json of `count` repositories for `fake`'s org, listed a day ago."""
    records = (
        json.dumps(
            {
                "id": str(i),
                "name": f"terraform-aws-m{i}",
                "full_name": f"{fake.group}/terraform-aws-m{i}",
                "https_url": f"{git_url}m{i}.git",
                "ssh_url": "",
                "web_url": f"https://example.test/{fake.group}/terraform-aws-m{i}",
                "description": f"module {i} " + "words " * 40,
                "topics": ["terraform", "aws"],
                "archived": False,
                "pushed_at": "2026-01-01T00:00:00Z",
                "pushed_throttle": 0,
            }
        )
        for i in range(count)
    )
    head = {"provider": fake.provider, "api_url": fake.api_url, "group": fake.group, "enumerated_at": time.time()}
    org = json.dumps(head)[:-1] + ', "repositories": [' + ",".join(records) + "]}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"format": 1, "orgs": [' + org + "]}")


@pytest.mark.slow
async def test_a_restart_with_a_large_orgs_json_answers_while_it_is_still_loading(
    serve_client, github, git_http, tmp_path, caplog
):
    caplog.set_level(logging.INFO)
    # Versions only (the index off): what `gitreg serve` builds then, without 20,000 modules to index.
    config = org_config(github, git_http, storage={"path": str(tmp_path / "state")}, index={"enabled": False})
    module_repo(tmp_path, "m0")
    _big_orgs_json(tmp_path / "state" / "orgs.json", github, git_http.url(""), 20_000)
    github.mode = "down"
    client = await serve_client(config)
    orgs = client.app[ORGS]
    resp = await client.get("/healthz")
    assert resp.status == 200
    assert not orgs.complete()  # the port is open, and orgs.json is still being read
    # A request for an org module waits for the load (never a 404 meanwhile).
    assert await versions_of(client, "acme/m0/aws") == ["1.1.0", "1.0.0"]
    assert orgs.complete() and len(orgs.modules()) == 20_000
