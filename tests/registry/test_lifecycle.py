"""Deprecation and revocation declared in Git (#35): a module's `.gitreg.toml` on the default branch.

The parsing of hostile files, then real repositories over git http-backend: the versions answer,
the download and archive answers (410), a push webhook, a monorepo path, the metrics, restarts.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any
from urllib.parse import urlsplit

import pytest

from gitreg.core.versions import select_versions
from gitreg.registry.lifecycle import MAX_ENTRIES, parse_declaration
from tests.support.app import assert_error, make_config
from tests.support.lifecycle import DECLARED, DEPRECATION, module_repo, rule
from tests.support.metrics import scrape, value
from tests.support.repos import GitRepo
from tests.support.webhooks import WEBHOOKS, fixture, pointed_at, post_github, post_gitlab


def versions_of(*tags: str):
    return select_versions(dict.fromkeys(tags, "a" * 40), "")


# --- parsing ----------------------------------------------------------------------------------


def test_a_good_file_declares_deprecated_and_revoked_versions():
    declared = parse_declaration(DECLARED.encode())
    assert declared.problem is None
    found = versions_of("v1.4.1", "v1.4.2", "v2.0.0")
    by = {tv.canonical: tv for tv in found.versions}
    rule = declared.deprecation(by["1.4.1"])
    assert rule is not None and rule.reason == "2.x moves to the new VPC layout"
    assert rule.link == "https://wiki.example.com/vpc-2"
    assert declared.deprecation(by["2.0.0"]) is None
    revoked = declared.revocation(by["1.4.2"])
    assert revoked is not None and "KMS" in revoked.reason
    assert [tv.canonical for tv in declared.served(found).versions] == ["2.0.0", "1.4.1"]


def test_an_empty_file_declares_nothing():
    declared = parse_declaration(b"# nothing retired yet\n")
    assert declared.problem is None and declared.empty


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (b"[[deprecated]\nversions = ", "not valid TOML"),
        (b'[[revoked]]\nversions = "~> banana"\nreason = "x"\n', "revoked[0].versions"),
        (b'[[revoked]]\nversions = "= 1.0.0"\n', "revoked[0].reason: missing"),
        (b'[[deprecated]]\nversions = "< 2"\nreason = "x"\nlink = "javascript:alert(1)"\n', "http(s)"),
        (b'[[deprecated]]\nversions = "< 2"\nreason = "x"\nlink = "file:///etc/passwd"\n', "http(s)"),
        (b'[[deprecated]]\nversions = "< 2"\nreason = "x"\nsurprise = 1\n', "unknown key"),
        (b'[deprecated]\nversions = "< 2"\n', "array of tables"),
        (b'revoke = "1.4.2"\n', "unknown key"),
        (b'[[revoked]]\nversions = 142\nreason = "x"\n', "revoked[0].versions"),
        (b"\xff\xfe not utf-8", "not UTF-8"),
        (b'[[revoked]]\nversions = "= 1.0.0"\nreason = "' + b"x" * 2000 + b'"\n', "longer than"),
        (b'[[revoked]]\nversions = "= 1.0.0"\nreason = "a\\u0000b"\n', "control characters"),
    ],
)
def test_a_malformed_file_declares_nothing_and_says_why(text, says):
    declared = parse_declaration(text)
    assert declared.empty
    assert declared.problem is not None and "declares nothing" in declared.problem
    assert says in declared.problem


def test_hostile_files_are_refused_quickly_whole():
    huge = b"# " + b"x" * (1 << 20)
    assert "larger than" in (parse_declaration(huge).problem or "")
    deep = b"a = " + b"[" * 20_000 + b"]" * 20_000
    assert parse_declaration(deep).problem is not None
    many = "".join(f'[[revoked]]\nversions = "= 1.0.{i}"\nreason = "r"\n' for i in range(MAX_ENTRIES + 1))
    assert f"more than {MAX_ENTRIES} entries" in (parse_declaration(many.encode()).problem or "")
    # One bad entry among good ones: nothing at all is declared, never half of the file.
    half = DECLARED + '[[revoked]]\nversions = "<= nope"\nreason = "x"\n'
    assert parse_declaration(half.encode()).empty


# --- a real repository over git http-backend ----------------------------------------------------


async def versions_answer(client, address: str = "demo/hello/null") -> list[dict[str, Any]]:
    resp = await client.get(f"/v1/modules/{address}/versions")
    assert resp.status == 200, await resp.text()
    return (await resp.json())["modules"][0]["versions"]


GITHUB_CLONE = "https://github.com/Codertocat/Hello-World.git"
GITLAB_CLONE = "git@gitlab.example.com:acme/platform/networking/terraform-aws-vpc.git"


@pytest.mark.slow  # real git over HTTP, more than a second under load
@pytest.mark.parametrize("download", ["git", "archive"])
async def test_versions_answer_leaves_revoked_out_and_marks_deprecated(serve_client, git_http, tmp_path, download):
    module_repo(tmp_path / "repos")
    config = make_config([rule(git_http.url("public.git"), download)], index={"enabled": False})
    client = await serve_client(config)
    assert await versions_answer(client) == [
        {"version": "2.0.0"},
        {"version": "1.4.1", "deprecation": DEPRECATION},
    ]
    # The default branch's commit came with the tags (one ref listing), its file by object name.
    assert git_http.ref_listings("public.git") == 1


@pytest.mark.slow  # real git over HTTP, a held fetch
async def test_a_host_slow_to_give_the_file_holds_the_first_answer_seconds_not_until_git_gives_up(
    serve_client, git_http, tmp_path
):
    module_repo(tmp_path / "repos")
    config = make_config([rule(git_http.url("public.git"), "git")], index={"enabled": False})
    client = await serve_client(config)
    git_http.hold_fetches()  # the tags are listed; the fetch of the default branch's commit waits
    try:
        started = time.monotonic()
        first = await versions_answer(client)
        assert time.monotonic() - started < 6  # FIRST_READ_WAIT (3 s), well under Terraform's 10 s
        assert [v["version"] for v in first] == ["2.0.0", "1.4.2", "1.4.1"]  # not read yet: nothing declared
    finally:
        git_http.release_fetches()
    for _ in range(100):  # the read went on; the next answers have it
        if await versions_answer(client) == [{"version": "2.0.0"}, {"version": "1.4.1", "deprecation": DEPRECATION}]:
            break
        await asyncio.sleep(0.1)
    assert await versions_answer(client) == [{"version": "2.0.0"}, {"version": "1.4.1", "deprecation": DEPRECATION}]


@pytest.mark.slow  # real git over HTTP, more than a second under load
@pytest.mark.parametrize("download", ["git", "archive"])
async def test_download_of_a_revoked_version_is_410_with_the_reason(serve_client, git_http, tmp_path, download):
    module_repo(tmp_path / "repos")
    client = await serve_client(make_config([rule(git_http.url("public.git"), download)], index={"enabled": False}))
    resp = await client.get("/v1/modules/demo/hello/null/1.4.2/download")
    await assert_error(resp, 410, "revoked", "leaks the KMS key ARN in an output")
    resp = await client.get("/v1/modules/demo/hello/null/1.4.1/download")
    assert resp.status == 200, await resp.text()  # deprecated: still installable
    samples = await scrape(client)
    assert value(samples, "gitreg_revoked_requests_total", module="demo/hello/null") == 1
    assert value(samples, "gitreg_deprecated_downloads_total", module="demo/hello/null") == 1


@pytest.mark.slow  # real git over HTTP, more than a second under load
async def test_revocation_wins_over_an_archive_already_built(serve_client, git_http, tmp_path):
    repo = module_repo(tmp_path / "repos", declared=None)
    client = await serve_client(
        make_config(
            [rule(git_http.url("public.git"), "archive")],
            cache={"ttl_seconds": 3600},
            webhooks=WEBHOOKS,
            index={"enabled": False},
        )
    )
    resp = await client.get("/v1/modules/demo/hello/null/1.4.2/download")
    assert resp.status == 200, await resp.text()
    archive = urlsplit(resp.headers["X-Terraform-Get"])._replace(scheme="", netloc="").geturl()
    resp = await client.get(archive)
    assert resp.status == 200  # built, pinned and served
    repo.commit({".gitreg.toml": DECLARED}, "revoke 1.4.2")
    payload = pointed_at(fixture("github-push-branch.json"), git_http.url("public.git"))
    resp = await post_github(client, payload)
    assert resp.status == 200, await resp.text()
    await _until_listed(client, ["2.0.0", "1.4.1"])
    resp = await client.get(archive)
    await assert_error(resp, 410, "leaks the KMS key ARN")
    resp = await client.head(archive)
    assert resp.status == 410


async def _until_listed(client, expected: list[str], tries: int = 100) -> None:
    import asyncio

    listed: list[str] = []
    for _ in range(tries):
        listed = [v["version"] for v in await versions_answer(client)]
        if listed == expected:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"listed {listed}, expected {expected}")


@pytest.mark.slow  # real git over HTTP, more than a second under load
@pytest.mark.parametrize("host", ["github", "gitlab"])
async def test_a_push_to_the_default_branch_serves_the_new_declaration(serve_client, git_http, tmp_path, host):
    repo = module_repo(tmp_path / "repos", declared=None)
    url = git_http.url("public.git")
    clone = GITHUB_CLONE if host == "github" else GITLAB_CLONE  # what the realistic payloads name
    config = make_config(
        [rule(url, "git", clone_url=clone)], cache={"ttl_seconds": 3600}, webhooks=WEBHOOKS, index={"enabled": False}
    )
    client = await serve_client(config)
    assert [v["version"] for v in await versions_answer(client)] == ["2.0.0", "1.4.2", "1.4.1"]
    repo.commit({".gitreg.toml": DECLARED}, "retire versions")
    assert (await push_main(client, host)).status == 200
    await _until_listed(client, ["2.0.0", "1.4.1"])
    # Taken back: the declaration follows the default branch, whatever it says now.
    repo.commit({".gitreg.toml": None}, "un-retire")
    assert (await push_main(client, host)).status == 200
    await _until_listed(client, ["2.0.0", "1.4.2", "1.4.1"])


async def push_main(client, host: str):
    """A push to `main` (the repository's default branch) as GitHub or GitLab delivers it."""
    if host == "github":
        return await post_github(client, fixture("github-push-branch.json"))
    return await post_gitlab(client, fixture("gitlab-push-branch.json"), event="Push Hook")


@pytest.mark.slow  # real git over HTTP, more than a second under load
async def test_a_monorepo_module_reads_the_file_in_its_path(serve_client, git_http, tmp_path):
    repo = GitRepo(tmp_path / "repos", "public")
    for version in ("1.4.1", "1.4.2", "2.0.0"):
        repo.commit({"modules/vpc/main.tf": f"# vpc {version}\n", "modules/dns/main.tf": f"# dns {version}\n"})
        repo.tag(f"vpc/v{version}")
        repo.tag(f"dns/v{version}")
    repo.commit(
        {"modules/vpc/.gitreg.toml": DECLARED, ".gitreg.toml": '[[revoked]]\nversions = ">= 0"\nreason = "root"\n'}
    )
    url = git_http.url("public.git")
    rules = [
        rule(url, "archive", name="vpc", path="modules/vpc", tag_prefix="vpc/"),
        rule(url, "git", name="dns", path="modules/dns", tag_prefix="dns/"),
    ]
    client = await serve_client(make_config(rules, index={"enabled": False}))
    assert await versions_answer(client, "demo/vpc/null") == [
        {"version": "2.0.0"},
        {"version": "1.4.1", "deprecation": DEPRECATION},
    ]
    # The root's file is not the dns module's: its folder has none.
    assert [v["version"] for v in await versions_answer(client, "demo/dns/null")] == ["2.0.0", "1.4.2", "1.4.1"]
    resp = await client.get("/v1/modules/demo/vpc/null/1.4.2/download")
    await assert_error(resp, 410, "leaks the KMS key ARN")


@pytest.mark.slow  # real git over HTTP, more than a second under load
async def test_a_malformed_file_is_reported_never_a_500_and_declares_nothing(serve_client, git_http, tmp_path):
    module_repo(tmp_path / "repos", declared='[[revoked]]\nversions = "= 1.4.2"\n')
    client = await serve_client(make_config([rule(git_http.url("public.git"), "git")], index={"enabled": False}))
    assert [v["version"] for v in await versions_answer(client)] == ["2.0.0", "1.4.2", "1.4.1"]
    resp = await client.get("/v1/modules/demo/hello/null/1.4.2/download")
    assert resp.status == 200


@pytest.mark.slow  # real git over HTTP, more than a second under load
async def test_latest_skips_a_revoked_newest_version(serve_client, git_http, tmp_path):
    module_repo(tmp_path / "repos", declared='[[revoked]]\nversions = "2.0.0"\nreason = "broken"\n')
    client = await serve_client(make_config([rule(git_http.url("public.git"), "git")], index={"enabled": False}))
    resp = await client.get("/v1/modules/demo/hello/null/download", allow_redirects=False)
    assert resp.status == 302
    assert resp.headers["Location"].endswith("/1.4.2/download")


@pytest.mark.slow  # real git over HTTP, more than a second under load
async def test_the_declaration_survives_a_restart_without_reading_the_file_again(serve_client, git_http, tmp_path):
    module_repo(tmp_path / "repos")
    config = make_config(
        [rule(git_http.url("public.git"), "git")], storage={"path": str(tmp_path / "storage")}, index={"enabled": False}
    )
    client = await serve_client(config)
    await versions_answer(client)
    await client.close()
    fetches = [r for r in git_http.requests() if r.path.endswith("git-upload-pack")]
    assert (tmp_path / "storage" / "declarations.json").is_file()
    client = await serve_client(config)
    assert [v["version"] for v in await versions_answer(client)] == ["2.0.0", "1.4.1"]
    again = [r for r in git_http.requests() if r.path.endswith("git-upload-pack")]
    assert len(again) == len(fetches) + 1  # the ref listing only: no fetch of the file
    stored = json.loads((tmp_path / "storage" / "declarations.json").read_text())
    assert stored["entries"][0][3]["revoked"][0]["versions"] == "= 1.4.2"
