"""Git work is bounded and fair (issue 11, item 4), against real git over smart HTTP.

A host that stalls is a real `git http-backend` server in "slow" mode (it answers after a
minute, so git hangs until `[git] timeout_seconds`); the healthy host is another server.
The two are told apart by host name (`localhost` and `127.0.0.1`), as two Git hosts would be.
The in-process tests use aiohttp's test server, which cancels a handler whose client hung up,
as `gitreg serve` does (`handler_cancellation=True`); one test runs the real `gitreg serve`.
"""

from __future__ import annotations

import asyncio
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from gitreg.core.errors import Overloaded
from gitreg.git.pool import GitPool, Priority, Waiters
from gitreg.web.keys import CACHE, GIT_POOL
from tests.support.app import assert_error
from tests.support.app import make_config as _make_config
from tests.support.faults import alive, eventually, git_children, tagged_repo, write_config
from tests.support.githttp import GitHttpServer
from tests.support.process import GitregProcess

VERSIONS = "/v1/modules/{}/versions"


def make_config(modules: list[dict], **sections: object):
    """These tests watch the queue their requests make: no background index adding its own work."""
    return _make_config(modules, index={"enabled": False}, **sections)


@pytest.fixture
def stalling(tmp_path: Path) -> Iterator[GitHttpServer]:
    """A Git host that stalls: every request waits a minute (git gives up at its timeout first)."""
    (tmp_path / "stalling").mkdir()
    with GitHttpServer(tmp_path / "stalling") as server:
        server.mode, server.delay = "slow", 60
        yield server


@pytest.fixture
def healthy(tmp_path: Path) -> Iterator[GitHttpServer]:
    """A healthy Git host, without credentials."""
    (tmp_path / "healthy").mkdir()
    with GitHttpServer(tmp_path / "healthy") as server:
        yield server


def on_localhost(server: GitHttpServer, name: str) -> str:
    """`server`'s URL of `name` under the host name `localhost`: another host than 127.0.0.1."""
    return server.url(name).replace("127.0.0.1", "localhost", 1)


def infos_refs_order(server: GitHttpServer) -> list[str]:
    """The repositories whose refs git asked `server` for, in the order the answers went out."""
    return [
        r.path.split("/")[1].removesuffix(".git")
        for r in server.requests()
        if r.path.endswith("/info/refs") and r.status == 200
    ]


async def drain(tasks: list[asyncio.Future]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_full_git_queue_answers_503_with_retry_after_in_the_error_shape(serve_client, stalling):
    config = make_config(
        [{"namespace": "stall", "repository": on_localhost(stalling, "{name}.git")}],
        git={"timeout_seconds": 5, "max_concurrency": 1, "max_queue": 2},
    )
    client = await serve_client(config)
    pool = client.app[GIT_POOL]
    waiting = [asyncio.ensure_future(client.get(VERSIONS.format(f"stall/m{i}/null"))) for i in range(3)]
    await eventually(lambda: pool.queue_depth()[Priority.INSTALL] == 2, "one call running and two waiting")
    started = time.monotonic()
    resp = await client.get(VERSIONS.format("stall/m9/null"))
    await assert_error(resp, 503, "[git] max_queue = 2", "try again")
    assert resp.headers["Retry-After"] == "5"
    assert time.monotonic() - started < 2  # refused at once, not after the stalled call's timeout
    assert stalling.ref_advertisements("m9.git") == 0
    assert pool.rejected[Priority.INSTALL] == 1
    await drain(waiting)


@pytest.mark.slow
async def test_a_shared_fetch_is_dropped_only_when_every_waiter_has_gone(serve_client, stalling, healthy, tmp_path):
    tagged_repo(tmp_path / "healthy", "x", "v1.0.0")
    config = make_config(
        [
            {"namespace": "demo", "name": "busy", "system": "null", "repository": on_localhost(stalling, "busy.git")},
            {"namespace": "demo", "name": "x", "system": "null", "repository": healthy.url("x.git")},
        ],
        git={"timeout_seconds": 3, "max_concurrency": 1},
    )
    client = await serve_client(config)
    pool, cache = client.app[GIT_POOL], client.app[CACHE]
    busy = asyncio.ensure_future(client.get(VERSIONS.format("demo/busy/null")))
    await eventually(lambda: sum(pool.running().values()) == 1, "the stalled call holding the only slot")
    first, second = (asyncio.ensure_future(client.get(VERSIONS.format("demo/x/null"))) for _ in range(2))
    await eventually(
        lambda: cache.stats.coalesced == 1 and pool.queue_depth()[Priority.INSTALL] == 1,
        "two requests waiting for one queued call",
    )
    await drain([first])
    await asyncio.sleep(0.2)
    assert pool.queue_depth()[Priority.INSTALL] == 1  # one waiter is left: the call stays
    await drain([second])
    await eventually(lambda: pool.queue_depth()[Priority.INSTALL] == 0, "the call dropped with its last waiter")
    assert pool.abandoned[Priority.INSTALL] == 1
    assert (await busy).status == 504  # the slot frees at the stalled call's timeout...
    await asyncio.sleep(0.3)
    assert healthy.ref_advertisements("x.git") == 0  # ...and the dropped call never reached git
    resp = await client.get(VERSIONS.format("demo/x/null"))  # a new request starts a new call
    assert resp.status == 200, await resp.text()


@pytest.mark.slow
async def test_install_work_goes_before_background_work_and_a_joining_request_raises_its_priority(
    serve_client, stalling, healthy, tmp_path
):
    for name in ("b1", "b2", "inst"):
        tagged_repo(tmp_path / "healthy", name, "v1.0.0")
    config = make_config(
        [
            {"namespace": "demo", "name": "busy", "system": "null", "repository": on_localhost(stalling, "busy.git")},
            {"namespace": "demo", "repository": healthy.url("{name}.git")},
        ],
        git={"timeout_seconds": 2, "max_concurrency": 1},
    )
    client = await serve_client(config)
    pool, cache = client.app[GIT_POOL], client.app[CACHE]
    busy = asyncio.ensure_future(client.get(VERSIONS.format("demo/busy/null")))
    await eventually(lambda: sum(pool.running().values()) == 1, "the stalled call holding the only slot")
    # Background refreshes (what a webhook or refresh-ahead starts) queue first...
    for name in ("b1", "b2"):
        cache.refresh_in_background(healthy.url(f"{name}.git"))
    await eventually(lambda: pool.queue_depth()[Priority.BACKGROUND] == 2, "two background refreshes waiting")
    # ...a request joining b1 and hanging up leaves it background (the refresh still waits for it)...
    joined = asyncio.ensure_future(client.get(VERSIONS.format("demo/b1/null")))
    await eventually(lambda: pool.queue_depth()[Priority.INSTALL] == 1, "b1 raised to install")
    await drain([joined])
    await eventually(lambda: pool.queue_depth()[Priority.BACKGROUND] == 2, "b1 back to background, still queued")
    # ...then terraform init asks for inst, and for b2 (raising the queued refresh of b2).
    inst = asyncio.ensure_future(client.get(VERSIONS.format("demo/inst/null")))
    await eventually(lambda: pool.queue_depth()[Priority.INSTALL] == 1, "inst waiting")
    b2 = asyncio.ensure_future(client.get(VERSIONS.format("demo/b2/null")))
    await eventually(lambda: pool.queue_depth()[Priority.INSTALL] == 2, "b2 raised to install")
    assert (await busy).status == 504
    assert [(await t).status for t in (inst, b2)] == [200, 200]
    await eventually(lambda: "b1" in infos_refs_order(healthy), "the background refresh of b1 done")
    # b2 queued before inst, so among install work it goes first; b1 (background) goes last (after the
    # install requests' reads of their .gitreg.toml, #35: hence each repository's first request).
    assert list(dict.fromkeys(infos_refs_order(healthy))) == ["b2", "inst", "b1"]


async def test_a_stalling_host_does_not_delay_a_cold_request_to_another_host(serve_client, stalling, healthy, tmp_path):
    tagged_repo(tmp_path / "healthy", "other", "v1.0.0")
    # The defaults: 8 slots, at most 6 for one host.
    config = make_config(
        [
            {"namespace": "stall", "repository": on_localhost(stalling, "{name}.git")},
            {"namespace": "demo", "name": "other", "system": "null", "repository": healthy.url("other.git")},
        ],
        git={"timeout_seconds": 5},
    )
    # Normal latency is tens of milliseconds; behind the stalled host it was the 5 s timeout or more.
    await _other_module_answers_beside_stalled_calls(await serve_client(config), 20, "localhost")


@pytest.mark.slow
async def test_requests_whose_clients_hung_up_never_reach_git(healthy, tmp_path):
    healthy.mode, healthy.delay = "slow", 1.0  # a slow host: work queues up behind it
    config = write_config(
        tmp_path / "gitreg.toml",
        f"""
[git]
protocols = ["http"]
timeout_seconds = 10
[storage]
path = "{tmp_path / "state"}"
[[modules]]
namespace = "scoped"
repository = "{healthy.url("{name}.git")}"
""",
    )
    with GitregProcess("--config", str(config)) as server:
        # 40 unknown names in a wildcard namespace; every client gives up after 0.3 s.
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=0.3)) as session:

            async def abandoned(i: int) -> None:
                try:
                    async with session.get(server.url + VERSIONS.format(f"scoped/typo{i}/null")) as resp:
                        await resp.read()
                except TimeoutError:
                    pass

            await asyncio.gather(*(abandoned(i) for i in range(40)))
        async with aiohttp.ClientSession() as session:

            async def settled() -> str:
                async with session.get(server.url + "/metrics") as resp:
                    return await resp.text()

            for _ in range(150):  # until nothing waits or runs any more (a bound, not a timer)
                text = await settled()
                waiting = sum(
                    float(v)
                    for v in re.findall(r"^gitreg_git_(?:queue_depth|running)\{.*\} (\S+)$", text, re.MULTILINE)
                )
                if waiting == 0 and "gitreg_git_queue_depth" in text:
                    break
                await asyncio.sleep(0.1)
            abandoned_total = sum(
                float(v) for v in re.findall(r"^gitreg_git_abandoned_total\{.*\} (\S+)$", text, re.MULTILINE)
            )
        await asyncio.sleep(1.5)  # a call started late would have reached the host by now
    calls = healthy.ref_advertisements()
    # Before: 40 git calls, one per abandoned request. Now only those that started at once (6 for one host).
    assert calls <= 8, calls
    assert abandoned_total >= 40 - calls


@pytest.mark.slow
async def test_sigterm_with_git_calls_queued_starts_none_of_them_and_leaves_no_git_running(stalling, tmp_path):
    config = write_config(
        tmp_path / "gitreg.toml",
        f"""
[git]
protocols = ["http"]
timeout_seconds = 30
[storage]
path = "{tmp_path / "state"}"
[[modules]]
namespace = "stall"
repository = "{stalling.url("{name}.git")}"
""",
    )
    server = GitregProcess("--config", str(config)).start()
    try:
        pid = server.proc.pid
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:

            async def ask(i: int) -> int:
                try:
                    async with session.get(server.url + VERSIONS.format(f"stall/m{i}/null")) as resp:
                        return resp.status
                except aiohttp.ClientError:
                    return 0

            requests = [asyncio.ensure_future(ask(i)) for i in range(20)]
            await eventually(lambda: stalling.ref_advertisements() == 6, "6 calls stalled (one host's share)")
            await eventually(lambda: sum("ls-remote" in c for c in git_children(pid).values()) == 6, "6 git running")
            children = git_children(pid)
            server.proc.send_signal(signal.SIGTERM)
            # In-flight requests keep their grace period (aiohttp waits for them twice 10 s).
            exit_code = await asyncio.to_thread(server.proc.wait, 40)
            await asyncio.gather(*requests)
    finally:
        server.stop()
    assert exit_code == 0
    assert not alive(children)
    assert not git_children(pid)
    assert stalling.ref_advertisements() == 6  # the 14 queued calls never started


# -- the pool on its own (no git involved: blocking functions that wait for an event) -----


def blocker(release: threading.Event, value: str) -> str:
    release.wait(10)
    return value


async def test_a_full_queue_refuses_background_work_before_install_work():
    pool = GitPool(max_concurrency=1, max_queue=2, max_per_host=1)
    release = threading.Event()
    try:
        running = asyncio.ensure_future(pool.run(blocker, release, "running", host="h", priority=Priority.INSTALL))
        await asyncio.sleep(0)
        background = [
            asyncio.ensure_future(pool.run(blocker, release, f"bg{i}", host="h", priority=Priority.BACKGROUND))
            for i in range(2)
        ]
        await asyncio.sleep(0)
        install = [
            asyncio.ensure_future(pool.run(blocker, release, f"in{i}", host="h", priority=Priority.INSTALL))
            for i in range(2)
        ]
        await asyncio.sleep(0)
        assert pool.queue_depth() == {Priority.INSTALL: 2, Priority.BROWSE: 0, Priority.BACKGROUND: 0}
        with pytest.raises(Overloaded):  # nothing of lower priority is left to make room
            await pool.run(blocker, release, "refused", host="h", priority=Priority.INSTALL)
        release.set()
        assert [await t for t in (running, *install)] == ["running", "in0", "in1"]
        for task in background:
            with pytest.raises(Overloaded):
                await task
        assert pool.rejected == [1, 0, 2]
    finally:
        release.set()
        pool.close()
        pool.shutdown()


async def test_work_shared_by_waiters_runs_at_their_best_priority_and_in_arrival_order_within_it():
    pool = GitPool(max_concurrency=1, max_queue=10, max_per_host=1)
    release = threading.Event()
    order: list[str] = []

    def record(name: str) -> str:
        order.append(name)
        return name

    try:
        first = asyncio.ensure_future(pool.run(blocker, release, "first", host="h", priority=Priority.INSTALL))
        await asyncio.sleep(0)
        shared = Waiters()
        shared.join(Priority.BACKGROUND)
        jobs = [
            asyncio.ensure_future(pool.run(record, "shared", host="h", waiters=shared)),
            asyncio.ensure_future(pool.run(record, "browse", host="h", priority=Priority.BROWSE)),
            asyncio.ensure_future(pool.run(record, "install", host="h", priority=Priority.INSTALL)),
        ]
        await asyncio.sleep(0)
        shared.join(Priority.INSTALL)  # a request joins the queued background work
        release.set()
        await asyncio.gather(first, *jobs)
        assert order == ["shared", "install", "browse"]
    finally:
        release.set()
        pool.close()
        pool.shutdown()


def test_pool_sizes_have_documented_defaults_and_are_checked():
    from gitreg.config.parse import parse_config
    from gitreg.core.errors import ConfigError

    git = parse_config({"git": {"max_concurrency": 16}}, {}).git
    assert (git.max_queue, git.max_per_host) == (512, 12)  # 32 per slot; all but a quarter for one host
    assert parse_config({"git": {"max_concurrency": 1}}, {}).git.max_per_host == 1
    with pytest.raises(ConfigError) as info:
        parse_config({"git": {"max_concurrency": 4, "max_per_host": 5, "max_queue": 0}}, {})
    assert info.value.problems == [
        "git.max_per_host: must be at most [git] max_concurrency (4), not 5",
        "git.max_queue: must be between 1 and 100000, not 0",
    ]


async def test_a_stalling_git_service_does_not_delay_another_on_the_same_machine(
    serve_client, stalling, healthy, tmp_path
):
    # Both on 127.0.0.1, on two ports: two Git services, two shares of the pool.
    tagged_repo(tmp_path / "healthy", "other", "v1.0.0")
    config = make_config(
        [
            {"namespace": "stall", "repository": stalling.url("{name}.git")},
            {"namespace": "demo", "name": "other", "system": "null", "repository": healthy.url("other.git")},
        ],
        git={"timeout_seconds": 5},
    )
    # Behind the other port's share it waited for the 5 s timeout or more (3 s in the probe).
    await _other_module_answers_beside_stalled_calls(await serve_client(config), 40, "127.0.0.1")


def test_a_git_service_is_its_host_and_port_whatever_the_url_says_around_them():
    from gitreg.core.urls import origin_host, origin_label

    assert origin_label("https://git.example.com/a.git") == "git.example.com:443"
    assert origin_label("https://bot@Git.Example.com:443/b.git") == "git.example.com:443"
    assert origin_label("http://git.example.com:8080/a.git") == "git.example.com:8080"
    assert origin_label("git@git.example.com:a/b.git") == "git.example.com:22"
    assert origin_label("ssh://git@[::1]:2222/a.git") == "[::1]:2222"
    assert origin_label("file:///srv/a.git") == "local"
    assert origin_label("not a url") == "unknown"
    hosts = [origin_host(o) for o in ("[::1]:2222", "git.example.com:22", "local")]
    assert hosts == ["::1", "git.example.com", "local"]


async def _other_module_answers_beside_stalled_calls(client, stalled_count: int, stalled_host: str) -> None:
    """`stalled_count` requests stall on `stalled_host` (6 running, the rest queued); then
    demo/other/null, on another Git service, answers 200 within 2.5 s."""
    pool = client.app[GIT_POOL]
    stalled = [asyncio.ensure_future(client.get(VERSIONS.format(f"stall/m{i}/null"))) for i in range(stalled_count)]
    await eventually(
        lambda: (
            pool.running_per_host().get(stalled_host) == 6 and sum(pool.queue_depth().values()) == stalled_count - 6
        ),
        f"6 stalled calls running and {stalled_count - 6} waiting",
    )
    started = time.monotonic()
    resp = await client.get(VERSIONS.format("demo/other/null"))
    elapsed = time.monotonic() - started
    assert resp.status == 200, await resp.text()
    assert elapsed < 2.5, elapsed
    await drain(stalled)
