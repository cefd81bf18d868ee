"""A module whose repository has no SemVer tag yet: reported, explained, and remembered like the others."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import pytest

from tests.support.app import GIT_PASSWORD, assert_error, indexed, make_config
from tests.support.forges import FakeForge
from tests.support.orgs import API_TOKEN, module_repo, write_config
from tests.support.process import GitregProcess
from tests.support.repos import GitRepo

NO_TAG = "no SemVer tag yet"


def untagged_repo(tmp_path, name: str) -> GitRepo:
    repo = GitRepo(tmp_path / "repos", name)
    repo.commit({"main.tf": "# not released yet\n"})
    repo.tag("latest")  # not a version
    return repo


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


async def test_a_rule_module_without_a_semver_tag_says_so_in_the_api_and_on_its_page(serve_client, tmp_path):
    repo = untagged_repo(tmp_path, "empty")
    client = await indexed(
        await serve_client(
            make_config(
                [{"namespace": "demo", "name": "empty", "system": "null", "repository": repo.url}],
                storage={"path": str(tmp_path / "state")},
            )
        )
    )
    await assert_error(await client.get("/v1/modules/demo/empty/null"), 404, f"module demo/empty/null has {NO_TAG}")
    page = await client.get("/modules/demo/empty/null")
    assert page.status == 404
    assert f"Module demo/empty/null has {NO_TAG}: it is listed once its repository has a tag like v1.0.0." in (
        await page.text()
    )
    # A module nothing serves is still "not listed".
    await assert_error(await client.get("/v1/modules/demo/other/null"), 404)
    assert NO_TAG not in await (await client.get("/modules/demo/other/null")).text()


@pytest.mark.slow
def test_an_org_repository_without_a_semver_tag_is_not_asked_again_after_a_restart(git_http, tmp_path):
    module_repo(tmp_path, "terraform-aws-vpc")
    untagged_repo(tmp_path, "terraform-aws-empty")
    module_repo(tmp_path, "rule")  # a [[modules]] rule's repository: listed again at every pass
    env = {"ORG_TOKEN": API_TOKEN, "GIT_PASSWORD": GIT_PASSWORD}
    fake = FakeForge("github", git_http, "acme-infra", token=API_TOKEN)
    with fake.in_thread():
        fake.add("terraform-aws-vpc")
        fake.add("terraform-aws-empty")
        config = write_config(tmp_path, fake, git_http)
        rule = '[[modules]]\nnamespace = "demo"\nname = "rule"\nsystem = "null"\n'
        rule += f'repository = "{git_http.url("rule.git")}"\n'
        config.write_text(config.read_text() + rule)
        with GitregProcess("--config", str(config), env=env) as first:
            first.wait_indexed()
            assert git_http.ref_advertisements("terraform-aws-empty.git") >= 1  # looked at once
            status, body = fetch(f"{first.url}/v1/modules/acme/empty/aws")
            assert status == 404 and NO_TAG in body, body
        git_http.reset_counters()
        with GitregProcess("--config", str(config), env=env) as restarted:
            # The index process's first pass after the restart has begun once the rule's repository is asked.
            deadline = time.monotonic() + 30
            while git_http.ref_advertisements("rule.git") == 0:
                assert time.monotonic() < deadline, "the index process made no pass"
                time.sleep(0.05)
            restarted.wait_indexed()
            time.sleep(1)  # a pass that would ask for it has had every chance to
            # Its push marker did not move: no ls-remote for it, as for the tagged one.
            assert git_http.ref_advertisements("terraform-aws-empty.git") == 0
            assert git_http.ref_advertisements("terraform-aws-vpc.git") == 0
            status, body = fetch(f"{restarted.url}/modules/acme/empty/aws")  # remembered in index.json
            assert status == 404 and f"Module acme/empty/aws has {NO_TAG}" in body, body
