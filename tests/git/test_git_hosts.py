"""What a Git host answers over HTTP, and what gitreg makes of it (issue 11, items 1 and 3).

Two real smart-HTTP git servers (tests/support/githttp.py) and the real git: a host that
redirects gitreg to another host never gets that other host to see the first host's
credential (gitreg follows no redirect and says where it pointed); a host that answers
something other than git's smart protocol (an SSO page, a proxy's error page, JSON, an empty
or cut-short body) is a 502 "did not answer with the git protocol", never an empty version
list, and a warm cache keeps serving the last good list; a 403 to a request without
credentials says that credentials are missing.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitreg.web.keys import CACHE
from tests.support.app import GIT_PASSWORD, GIT_USER, assert_error, make_config
from tests.support.faults import tagged_repo
from tests.support.githttp import GitHttpServer
from tests.support.process import run_gitreg

VERSIONS = "/v1/modules/demo/hello/null/versions"
BASIC = "Basic " + base64.b64encode(f"{GIT_USER}:{GIT_PASSWORD}".encode()).decode()
SECRETS = (GIT_PASSWORD, BASIC.removeprefix("Basic "))
ADVERTISEMENT = "application/x-git-upload-pack-advertisement"


@pytest.fixture
def other_host(tmp_path: Path) -> Iterator[GitHttpServer]:
    """A second smart-HTTP host, without authentication, with its own `private.git` (tag v9.9.9)."""
    tagged_repo(tmp_path / "other-repos", "private", "v9.9.9")
    with GitHttpServer(tmp_path / "other-repos") as server:
        yield server


def host_config(git_http: GitHttpServer, tmp_path: Path, with_credentials: bool = True, **cache: float):
    """demo/hello/null from `private.git` (v1.0.0, v1.1.0) on `git_http`, with its credential."""
    tagged_repo(tmp_path / "repos", "private", "v1.0.0", "v1.1.0")
    credentials = [{"url": git_http.base_url + "/", "username": GIT_USER, "password": GIT_PASSWORD}]
    return make_config(
        [{"namespace": "demo", "name": "hello", "system": "null", "repository": git_http.url("private.git")}],
        credentials=credentials if with_credentials else [],
        git={"timeout_seconds": 5},
        cache=cache,
        index={"enabled": False},  # the host's requests counted here are the tag cache's alone
    )


async def versions(client) -> list[str]:
    resp = await client.get(VERSIONS)
    assert resp.status == 200, await resp.text()
    return [v["version"] for v in (await resp.json())["modules"][0]["versions"]]


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text


# -- item 1: a credential never leaves its host -----------------------------------------------------


async def test_a_redirect_to_another_host_is_a_502_naming_it_and_the_credential_never_reaches_it(
    serve_client, git_http, other_host, tmp_path, caplog
):
    client = await serve_client(host_config(git_http, tmp_path, error_retry_seconds=0))
    git_http.mode, git_http.redirect_to = "redirect", other_host.base_url
    text = await assert_error(
        await client.get(VERSIONS), 502, "redirected gitreg to", other_host.base_url, git_http.url("private.git")
    )
    # Before: git followed the 302, served the other host's v9.9.9, and its POST to the other
    # host carried this host's `Authorization: Basic ...` (git sends extraHeader everywhere).
    assert "9.9.9" not in text
    assert other_host.requests() == []  # not even asked, with or without the credential
    assert git_http.authorizations() == [("GET", "/private.git/info/refs", BASIC)]
    assert_no_secret(text, caplog.text)
    # The same host, not redirecting: both of git's requests (the ref advertisement and
    # protocol v2's POST) carry the credential, so the recording above could have seen a leak.
    git_http.mode = "ok"
    git_http.reset_counters()
    assert await versions(client) == ["1.1.0", "1.0.0"]
    recorded = git_http.authorizations()
    assert recorded[:2] == [
        ("GET", "/private.git/info/refs", BASIC),
        ("POST", "/private.git/git-upload-pack", BASIC),
    ]
    assert {auth for _, _, auth in recorded} == {BASIC}  # the fetch of its .gitreg.toml too (#35)


async def test_a_redirect_with_a_warm_cache_keeps_serving_the_configured_hosts_versions(
    serve_client, git_http, other_host, tmp_path
):
    client = await serve_client(host_config(git_http, tmp_path, ttl_seconds=0.2, stale_seconds=60))
    assert await versions(client) == ["1.1.0", "1.0.0"]
    git_http.mode, git_http.redirect_to = "redirect", other_host.base_url
    await asyncio.sleep(0.25)  # expired
    assert await versions(client) == ["1.1.0", "1.0.0"]  # before: the other host's 9.9.9
    assert client.app[CACHE].stats.refresh_failures == 1
    assert other_host.requests() == []


async def test_a_redirect_with_a_cold_cache_and_without_credentials_is_refused_too(
    serve_client, git_http, other_host, tmp_path
):
    # With no credential at stake, following would still serve another host's tags under this
    # module's name: one rule, a redirect is never followed.
    client = await serve_client(host_config(git_http, tmp_path, with_credentials=False))
    git_http.mode, git_http.redirect_to = "redirect", other_host.base_url
    await assert_error(await client.get(VERSIONS), 502, f"redirected gitreg to {other_host.base_url}/private.git")
    assert other_host.requests() == []


def test_check_probe_reports_the_redirect_and_the_other_host_sees_nothing(git_http, other_host, tmp_path):
    tagged_repo(tmp_path / "repos", "private", "v1.0.0")
    config = tmp_path / "gitreg.toml"
    config.write_text(f"""
[git]
protocols = ["http"]
timeout_seconds = 5
[[credentials]]
url = "{git_http.base_url}/"
username = "{GIT_USER}"
password = "${{GIT_PASSWORD}}"
[[modules]]
namespace = "demo"
name = "hello"
system = "null"
repository = "{git_http.url("private.git")}"
""")
    git_http.mode, git_http.redirect_to = "redirect", other_host.base_url
    result = run_gitreg("check", "--probe", "--config", str(config), env={"GIT_PASSWORD": GIT_PASSWORD}, cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"ERROR: the Git host redirected gitreg to {other_host.base_url}/private.git" in result.stdout
    assert other_host.requests() == []
    assert_no_secret(result.stdout, result.stderr)


# -- item 3: an answer that is not git is an error, never "no versions" ----------------------------

HTML = {"Content-Type": "text/html; charset=utf-8"}
# (status, headers, body) of every request, and what the 502 must say besides the repository.
NOT_GIT = {
    # git fell back to the dumb protocol and, finding no newline, no refs: 200 with no versions.
    "an SSO page without a final newline": ((200, HTML, b"<html><body>Sign in</body></html>"), "text/html"),
    "a JSON error": ((200, {"Content-Type": "application/json"}, b'{"message": "login required"}'), "application/json"),
    "an empty HTML page": ((200, HTML, b""), "text/html"),
    "an empty answer without a content type": ((200, {}, b""), "no content type"),
    # git's dumb protocol parsed these lines as the repository's refs: 200 with version 6.6.6.
    "a dumb-protocol ref list": (
        (200, {"Content-Type": "text/plain"}, b"1234567890123456789012345678901234567890\trefs/tags/v6.6.6\n"),
        "text/plain",
    ),
    # These were 502s already, with git's words ("info/refs not valid"): kept as they are.
    "an SSO page ending in a newline": ((200, HTML, b"<html><body>Sign in</body></html>\n"), "text/html"),
    # git's content type, but not git's pkt-line framing: "could not list tags of" before.
    "git's content type with an empty body": ((200, {"Content-Type": ADVERTISEMENT}, b""), "ended before"),
    "git's content type with a service line and no refs": (
        (200, {"Content-Type": ADVERTISEMENT}, b"001e# service=git-upload-pack\n0000"),
        "ended before",
    ),
}


@pytest.mark.parametrize("case", NOT_GIT)
async def test_an_answer_that_is_not_git_is_a_502_and_never_an_empty_version_list(
    case, serve_client, git_http, tmp_path, caplog
):
    answer, says = NOT_GIT[case]
    client = await serve_client(host_config(git_http, tmp_path))
    git_http.mode, git_http.answer = "answer", answer
    text = await assert_error(
        await client.get(VERSIONS),
        502,
        "the Git host did not answer with the git protocol for",
        git_http.url("private.git"),
        says,
    )
    assert all(c.isprintable() for c in text)
    assert_no_secret(text, caplog.text)


async def test_an_html_answer_to_the_ref_listing_post_is_a_502(serve_client, git_http, tmp_path):
    # The ref advertisement is git's; protocol v2's POST (which lists the refs) gets the page.
    client = await serve_client(host_config(git_http, tmp_path))
    git_http.mode, git_http.answer_path = "answer", "/git-upload-pack"
    git_http.answer = (200, HTML, b"<html><body>Sign in</body></html>")
    await assert_error(
        await client.get(VERSIONS),
        502,
        "did not answer with the git protocol",
        "text/html instead of application/x-git-upload-pack-result",
    )


async def test_a_host_turning_to_an_sso_page_keeps_the_last_good_versions_served(serve_client, git_http, tmp_path):
    client = await serve_client(host_config(git_http, tmp_path, ttl_seconds=0.2, stale_seconds=60))
    assert await versions(client) == ["1.1.0", "1.0.0"]
    asked = git_http.ref_advertisements("private.git")  # the tags, and the default branch's .gitreg.toml (#35)
    git_http.mode, git_http.answer = "answer", NOT_GIT["an SSO page without a final newline"][0]
    await asyncio.sleep(0.25)  # expired
    # Before: the page became "no tags", replaced the good list and was served as no versions.
    assert await versions(client) == ["1.1.0", "1.0.0"]
    stats = client.app[CACHE].stats
    assert (stats.stale_served, stats.refresh_failures) == (1, 1)
    assert git_http.ref_advertisements("private.git") == asked + 1  # the host was asked, and failed


@pytest.mark.parametrize("body", [(HTML, b"<html>Forbidden</html>"), ({"Content-Type": "text/plain"}, b"forbidden\n")])
async def test_a_403_without_credentials_says_credentials_are_missing(body, serve_client, git_http, tmp_path):
    client = await serve_client(host_config(git_http, tmp_path, with_credentials=False))
    git_http.mode, git_http.answer = "answer", (403, *body)
    await assert_error(
        await client.get(VERSIONS),
        502,
        f"the Git host refused access without credentials to {git_http.url('private.git')}",
        "add [[credentials]]",
    )


async def test_a_403_to_the_credentials_says_they_were_refused(serve_client, git_http, tmp_path):
    client = await serve_client(host_config(git_http, tmp_path))
    git_http.mode, git_http.answer = "answer", (403, {"Content-Type": "text/plain"}, b"forbidden\n")
    await assert_error(await client.get(VERSIONS), 502, "the Git host refused gitreg's credentials for")
