"""The tag cache against a real smart-HTTP git server: coalescing, stale-if-error, timeouts,
refresh-ahead, negative caching and the LRU bound, as a client of the registry sees them."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from gitreg.web.keys import CACHE
from tests.support.app import GIT_PASSWORD, GIT_USER, assert_error, served_app
from tests.support.app import make_config as _make_config
from tests.support.repos import GitRepo


def make_config(modules: list[dict], **sections: object):
    """These tests count the cache's own git calls: no background index adding its own."""
    return _make_config(modules, index={"enabled": False}, **sections)


class Clock:
    """The tag cache's clock, moved by hand: TTLs pass without the test sleeping."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def clocked_client(aiohttp_client, clock):
    """Start a test client for what `gitreg serve` builds from `config`, its tag cache reading `clock`."""

    async def make(config):
        return await aiohttp_client(served_app(config, clock))

    return make


def rule(url: str) -> dict:
    return {"namespace": "demo", "name": "hello", "system": "null", "repository": url}


def public_repo(tmp_path: Path, name: str = "public") -> GitRepo:
    r = GitRepo(tmp_path / "repos", name)
    r.commit({"main.tf": "# module\n"})
    r.tag("v1.0.0")
    return r


async def versions_of(client, address: str = "demo/hello/null") -> list[str]:
    resp = await client.get(f"/v1/modules/{address}/versions")
    assert resp.status == 200, await resp.text()
    return [v["version"] for v in (await resp.json())["modules"][0]["versions"]]


async def settle(cache, refreshes: int) -> None:
    """Wait (bounded) until `refreshes` upstream calls were made and none is running."""
    for _ in range(500):
        if cache.stats.refreshes >= refreshes and not cache._inflight:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"expected {refreshes} refreshes, saw {cache.stats.refreshes}")


async def test_100_concurrent_cold_requests_make_exactly_one_ref_advertisement(serve_client, git_http, tmp_path):
    public_repo(tmp_path)
    client = await serve_client(make_config([rule(git_http.url("public.git"))]))
    results = await asyncio.gather(*(client.get("/v1/modules/demo/hello/null/versions") for _ in range(100)))
    assert [r.status for r in results] == [200] * 100
    assert {tuple(v["version"] for v in (await r.json())["modules"][0]["versions"]) for r in results} == {("1.0.0",)}
    # One ref listing (and one fetch of the default branch's .gitreg.toml by object name: no listing, #35).
    assert git_http.ref_listings("public.git") == 1
    assert git_http.ref_advertisements("public.git") == 2
    stats = client.app[CACHE].stats
    assert (stats.refreshes, stats.misses, stats.coalesced) == (1, 100, 99)


async def test_git_host_down_serves_last_good_versions_within_stale_seconds_then_a_clear_502(
    clocked_client, clock, git_http, tmp_path
):
    public_repo(tmp_path)
    config = make_config(
        [rule(git_http.url("public.git"))],
        cache={"ttl_seconds": 300, "stale_seconds": 3600, "negative_ttl_seconds": 30, "error_retry_seconds": 5},
    )
    client = await clocked_client(config)
    assert await versions_of(client) == ["1.0.0"]
    git_http.mode = "down"
    clock.advance(301)  # expired, inside stale_seconds
    assert await versions_of(client) == ["1.0.0"]
    assert client.app[CACHE].stats.stale_served == 1
    assert client.app[CACHE].stats.refresh_failures == 1
    clock.advance(3600)  # past stale_seconds
    text = await assert_error(await client.get("/v1/modules/demo/hello/null/versions"), 502, "public.git")
    assert "could not list tags" in text
    git_http.mode = "ok"
    assert (await client.get("/v1/modules/demo/hello/null/versions")).status == 502  # within error_retry_seconds
    clock.advance(6)  # past the retry back-off: the host is asked again and recovers
    assert await versions_of(client) == ["1.0.0"]


async def test_a_failed_refresh_backs_off_instead_of_asking_a_down_host_on_every_request(
    clocked_client, clock, git_http, tmp_path
):
    public_repo(tmp_path)
    config = make_config([rule(git_http.url("public.git"))], cache={"ttl_seconds": 300, "negative_ttl_seconds": 60})
    client = await clocked_client(config)
    await versions_of(client)
    before = git_http.ref_advertisements("public.git")  # the tags, and the default branch's .gitreg.toml (#35)
    git_http.mode = "error"
    clock.advance(301)
    for _ in range(10):
        assert await versions_of(client) == ["1.0.0"]
    assert git_http.ref_advertisements("public.git") == before + 1  # one failed refresh
    assert client.app[CACHE].stats.stale_served == 10


async def test_a_failing_host_with_nothing_cached_is_asked_once_per_error_retry_seconds(
    clocked_client, clock, git_http, tmp_path
):
    # CI fleets retry a failed `terraform init`: with nothing cached to serve, every retry
    # used to be one more git call to a host that is already failing.
    public_repo(tmp_path)
    config = make_config([rule(git_http.url("public.git"))], cache={"error_retry_seconds": 5})
    client = await clocked_client(config)
    git_http.mode = "error"
    for _ in range(20):
        text = await assert_error(await client.get("/v1/modules/demo/hello/null/versions"), 502, "public.git")
        assert "could not list tags of" in text and "returned error: 500" in text
    assert git_http.ref_advertisements("public.git") == 1  # counted in every mode, failing ones too
    assert client.app[CACHE].stats.errors_served == 19
    git_http.mode = "ok"
    clock.advance(4.9)
    assert (await client.get("/v1/modules/demo/hello/null/versions")).status == 502  # still inside the window
    clock.advance(0.2)
    assert await versions_of(client) == ["1.0.0"]  # asked again, and the host is back


async def test_a_webhook_clears_a_remembered_failure(serve_client, git_http, tmp_path):
    public_repo(tmp_path)
    client = await serve_client(make_config([rule(git_http.url("public.git"))], cache={"error_retry_seconds": 60}))
    git_http.mode = "down"
    await assert_error(await client.get("/v1/modules/demo/hello/null/versions"), 502, "public.git")
    git_http.mode = "ok"
    await assert_error(await client.get("/v1/modules/demo/hello/null/versions"), 502, "public.git")
    assert client.app[CACHE].invalidate(git_http.url("public.git"))  # what a webhook delivery does
    assert await versions_of(client) == ["1.0.0"]


async def test_not_found_for_a_repository_that_was_there_serves_the_last_good_list(
    clocked_client, clock, git_http, tmp_path
):
    # "Repository not found" from GitHub also means "token revoked": do not turn a day of
    # stale-if-error into an outage of 404s.
    repo = public_repo(tmp_path)
    config = make_config([rule(git_http.url("public.git"))], cache={"ttl_seconds": 300})
    client = await clocked_client(config)
    assert await versions_of(client) == ["1.0.0"]
    repo.bare.rename(repo.bare.with_name("moved.git"))
    clock.advance(301)
    assert await versions_of(client) == ["1.0.0"]
    assert client.app[CACHE].stats.stale_served == 1


def _processes_mentioning(needle: str) -> list[str]:
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmdline:
            out.append(cmdline)
    return out


def _git_descendants(root: int) -> dict[int, str]:
    """pid -> command line of the git processes under `root` (ls-remote and its git-remote-http helper)."""
    children: dict[int, list[int]] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(pid))
    found: dict[int, str] = {}
    todo = list(children.get(root, []))
    while todo:
        child = todo.pop()
        todo.extend(children.get(child, []))
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "ls-remote" in cmdline or "remote-http" in cmdline:
            found[child] = cmdline
    return found


@pytest.mark.slow
async def test_hung_git_is_killed_at_the_timeout_and_leaves_no_git_process_behind(serve_client, git_http, tmp_path):
    public_repo(tmp_path)
    url = git_http.url("public.git")
    client = await serve_client(make_config([rule(url)], git={"timeout_seconds": 1}))
    before = _git_descendants(os.getpid())
    git_http.mode, git_http.delay = "slow", 60  # git waits far longer than the timeout
    request = asyncio.ensure_future(client.get("/v1/modules/demo/hello/null/versions"))
    new: dict[int, str] = {}
    for _ in range(100):
        await asyncio.sleep(0.02)
        new = {pid: c for pid, c in _git_descendants(os.getpid()).items() if pid not in before}
        if new:
            break
    assert any("ls-remote" in c and url in c for c in new.values()), "saw no git process to wait on"
    # The host holds the request for 60 s; only a git killed at the 1 s timeout (with its
    # git-remote-http helper, which otherwise keeps the pipes open) answers within this bound.
    resp = await asyncio.wait_for(request, 8)
    await assert_error(resp, 504, "did not answer within 1s")

    # Orphans (a killed parent's git-remote-http) leave the process tree; look for the URL anywhere.
    def left() -> set[int]:
        return set(_git_descendants(os.getpid())) - set(before)

    for _ in range(100):
        if not left() and not _processes_mentioning(git_http.base_url):
            break
        await asyncio.sleep(0.02)
    assert left() == set()
    assert _processes_mentioning(git_http.base_url) == []


@pytest.mark.slow
async def test_refresh_ahead_serves_the_expired_list_at_once_and_refreshes_once(
    clocked_client, clock, git_http, tmp_path
):
    repo = public_repo(tmp_path)
    config = make_config([rule(git_http.url("public.git"))], cache={"ttl_seconds": 300, "refresh_ahead": True})
    client = await clocked_client(config)
    assert await versions_of(client) == ["1.0.0"]
    repo.tag("v1.1.0")
    clock.advance(301)
    git_http.mode, git_http.delay = "slow", 0.4  # the refresh takes a while; nobody waits for it
    results = await asyncio.gather(*(versions_of(client) for _ in range(10)))
    assert results == [["1.0.0"]] * 10  # all answered from the expired list, before git finished
    cache = client.app[CACHE]
    assert cache.stats.stale_served == 10
    await settle(cache, 2)
    assert git_http.ref_listings("public.git") == 2  # one background refresh for all ten
    assert await versions_of(client) == ["1.1.0", "1.0.0"]


async def test_negative_results_are_cached_so_a_typo_makes_one_git_call(clocked_client, clock, git_http, tmp_path):
    credentials = [{"url": git_http.base_url + "/", "username": GIT_USER, "password": GIT_PASSWORD}]
    config = make_config(
        [{"namespace": "acme", "repository": git_http.base_url + "/{name}.git"}],
        credentials=credentials,
        cache={"negative_ttl_seconds": 30},
    )
    client = await clocked_client(config)
    for _ in range(5):
        await assert_error(await client.get("/v1/modules/acme/typo/aws/versions"), 404, "does not exist upstream")
    assert git_http.ref_advertisements("typo.git") == 1
    assert client.app[CACHE].stats.negative_hits == 4
    clock.advance(31)  # remembered only briefly: a repository created later is found
    public_repo(tmp_path, "typo")
    assert await versions_of(client, "acme/typo/aws") == ["1.0.0"]


async def test_lru_keeps_at_most_max_repositories_and_evicts_the_least_recently_used(serve_client, git_http, tmp_path):
    for name in ("a", "b", "c"):
        public_repo(tmp_path, name)
    credentials = [{"url": git_http.base_url + "/", "username": GIT_USER, "password": GIT_PASSWORD}]
    config = make_config(
        [{"namespace": "acme", "repository": git_http.base_url + "/{name}.git"}],
        credentials=credentials,
        cache={"max_repositories": 2},
    )
    client = await serve_client(config)
    cache = client.app[CACHE]
    for name in ("a", "b", "c"):  # a is evicted
        assert await versions_of(client, f"acme/{name}/aws") == ["1.0.0"]
    assert len(cache) == 2 and cache.stats.evictions == 1
    assert await versions_of(client, "acme/b/aws") == ["1.0.0"]  # still cached: no git call
    assert git_http.ref_listings("b.git") == 1
    assert await versions_of(client, "acme/a/aws") == ["1.0.0"]  # fetched again, evicts c (least recent)
    assert git_http.ref_listings("a.git") == 2  # its .gitreg.toml not read again: same commit
    assert await versions_of(client, "acme/b/aws") == ["1.0.0"]
    assert git_http.ref_listings("b.git") == 1
    assert len(cache) == 2


async def test_a_flood_of_typos_does_not_evict_good_tag_lists(serve_client, git_http, tmp_path):
    public_repo(tmp_path, "good")
    credentials = [{"url": git_http.base_url + "/", "username": GIT_USER, "password": GIT_PASSWORD}]
    config = make_config(
        [{"namespace": "acme", "repository": git_http.base_url + "/{name}.git"}],
        credentials=credentials,
        cache={"max_repositories": 1},
    )
    client = await serve_client(config)
    assert await versions_of(client, "acme/good/aws") == ["1.0.0"]
    for i in range(3):
        await assert_error(await client.get(f"/v1/modules/acme/typo{i}/aws/versions"), 404)
    assert await versions_of(client, "acme/good/aws") == ["1.0.0"]
    assert git_http.ref_listings("good.git") == 1


async def test_invalidation_during_an_upstream_call_is_followed_by_one_more_refresh(serve_client, git_http, tmp_path):
    public_repo(tmp_path)
    url = git_http.url("public.git")
    client = await serve_client(make_config([rule(url)], cache={"ttl_seconds": 3600}))
    cache = client.app[CACHE]
    git_http.mode, git_http.delay = "slow", 0.5
    request = asyncio.ensure_future(versions_of(client))
    for _ in range(100):
        if git_http.ref_advertisements("public.git"):
            break
        await asyncio.sleep(0.01)
    assert cache.invalidate(url)  # a webhook while ls-remote runs: its answer may miss the new tag
    git_http.mode = "ok"
    assert await request == ["1.0.0"]
    await settle(cache, 2)
    assert git_http.ref_listings("public.git") == 2
    assert await versions_of(client) == ["1.0.0"]
    assert git_http.ref_listings("public.git") == 2  # and the second answer is fresh for the TTL


async def test_invalidating_never_extends_how_long_a_stale_list_is_served(clocked_client, clock, git_http, tmp_path):
    public_repo(tmp_path)
    url = git_http.url("public.git")
    config = make_config([rule(url)], cache={"ttl_seconds": 300, "stale_seconds": 600, "negative_ttl_seconds": 30})
    client = await clocked_client(config)
    await versions_of(client)
    git_http.mode = "error"
    clock.advance(901)  # past ttl + stale_seconds
    client.app[CACHE].invalidate(url)  # e.g. a webhook while the host is down
    await assert_error(await client.get("/v1/modules/demo/hello/null/versions"), 502)
