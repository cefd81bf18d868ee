"""The real `gitreg serve` process stopped gracefully (SIGTERM) and killed (SIGKILL, a crash).

SIGTERM: requests in flight get their answer (a slow git host's versions, or the timeout's
504), git processes still running are killed, and the exit status is 0. SIGKILL while
gitreg writes under `[storage] path` (catalog.json, a mirror being made or fetched): the
restarted server serves only complete data and removes what the crash left.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import aiohttp
import pytest

from tests.support.faults import alive, eventually, get, git_children, tagged_repo, write_config
from tests.support.githttp import GitHttpServer
from tests.support.process import GitregProcess

# Left out of the fast subset (`-m "not slow"`): real gitreg processes, stopped with signals.
pytestmark = pytest.mark.slow

VERSIONS = "/v1/modules/demo/{}/null/versions"


def config_text(tmp_path: Path, modules: dict[str, str], git: str = "", cache: str = "", rule: str = "") -> str:
    """A TOML config: explicit demo/<name>/null rules, storage in tmp_path, http allowed.

    No background index: these tests watch the git processes their own requests start.
    """
    rules = "".join(
        f'[[modules]]\nnamespace = "demo"\nname = "{name}"\nsystem = "null"\nrepository = "{url}"\n{rule}\n'
        for name, url in modules.items()
    )
    return (
        f'[git]\nprotocols = ["http", "file"]\n{git}\n[cache]\n{cache}\n[index]\nenabled = false\n'
        f'[storage]\npath = "{tmp_path / "state"}"\n{rules}'
    )


async def get_archive(session: aiohttp.ClientSession, url: str) -> tuple[int, bytes]:
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=30)) as resp:
        return resp.status, await resp.read()


def wait_exit(server: GitregProcess, seconds: float) -> int:
    assert server.proc is not None
    try:
        return server.proc.wait(seconds)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"gitreg still running {seconds}s after SIGTERM:\n" + "".join(server.log)) from None


async def test_sigterm_answers_requests_in_flight_then_kills_git_and_exits_0(git_http, tmp_path):
    tagged_repo(tmp_path / "repos", "public", "v1.0.0")
    tagged_repo(tmp_path / "hung-repos", "public", "v2.0.0")
    git_http.mode, git_http.delay = "slow", 1.0  # answers after a second: finishes during shutdown
    with GitHttpServer(tmp_path / "hung-repos") as hung:
        hung.mode, hung.delay = "slow", 60  # never answers: the 3 s timeout does
        config = write_config(
            tmp_path / "gitreg.toml",
            config_text(
                tmp_path,
                {"slow": git_http.url("public.git"), "hung": hung.url("public.git")},
                git="timeout_seconds = 3",
            ),
        )
        server = GitregProcess("--config", str(config)).start()
        try:
            pid = server.proc.pid
            async with aiohttp.ClientSession() as session:
                slow = asyncio.ensure_future(get(session, server.url + VERSIONS.format("slow")))
                stuck = asyncio.ensure_future(get(session, server.url + VERSIONS.format("hung")))
                await eventually(
                    lambda: sum("ls-remote" in c for c in git_children(pid).values()) == 2,
                    "both requests waiting on git",
                )
                children = git_children(pid)
                server.proc.send_signal(signal.SIGTERM)
                status, body = await asyncio.wait_for(slow, 10)
                assert status == 200 and body["modules"][0]["versions"] == [{"version": "1.0.0"}], body
                status, body = await asyncio.wait_for(stuck, 10)
                assert status == 504 and "did not answer within 3s" in body["errors"][0], body
                try:  # no new work once stopping: the listener is closed (or /readyz says 503)
                    ready, _ = await get(session, server.url + "/readyz")
                except aiohttp.ClientError:
                    ready = None
                assert ready != 200
            assert wait_exit(server, 15) == 0
        finally:
            server.stop()
    assert not alive(children)
    assert "shutting down" in "".join(server.log)


async def test_sigterm_kills_a_hung_background_git_at_once_instead_of_waiting_for_its_timeout(git_http, tmp_path):
    tagged_repo(tmp_path / "repos", "public", "v1.0.0")
    config = write_config(
        tmp_path / "gitreg.toml",
        config_text(
            tmp_path,
            {"hello": git_http.url("public.git")},
            git="timeout_seconds = 30",
            cache="ttl_seconds = 0.3\nrefresh_ahead = true",
        ),
    )
    server = GitregProcess("--config", str(config)).start()
    try:
        pid = server.proc.pid
        async with aiohttp.ClientSession() as session:
            assert (await get(session, server.url + VERSIONS.format("hello")))[0] == 200
            await asyncio.sleep(0.4)  # expired: the next request is answered at once, refreshed behind
            git_http.mode, git_http.delay = "slow", 60
            assert (await get(session, server.url + VERSIONS.format("hello")))[0] == 200
            await eventually(
                lambda: any("ls-remote" in c for c in git_children(pid).values()), "the background refresh running git"
            )
            children = git_children(pid)
        server.proc.send_signal(signal.SIGTERM)
        # Nobody waits for that git: shutdown kills it rather than waiting up to the 30 s timeout.
        assert wait_exit(server, 10) == 0
    finally:
        server.stop()
    assert not alive(children)
    assert "stopped 1 running git process" in "".join(server.log)


# -- SIGKILL while writing catalog.json ------------------------------------------------------


def _stopped(pid: int) -> bool:
    """True once the process is frozen by SIGSTOP (or has already exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "tTZX"
    except OSError:
        return True


def kill_during_catalog_write(proc: subprocess.Popen, storage: Path) -> bool:
    """SIGTERM (whose shutdown writes catalog.json), then freeze gitreg again and again until
    it is caught with the catalog's temp file open, and SIGKILL it there. False when the write
    finished before it could be caught."""
    proc.send_signal(signal.SIGTERM)
    while proc.poll() is None:
        os.kill(proc.pid, signal.SIGSTOP)
        while not _stopped(proc.pid):
            time.sleep(0.0001)
        if list(storage.glob(".catalog-*.tmp")):
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            return True
        os.kill(proc.pid, signal.SIGCONT)
        time.sleep(0.001)
    return False


async def test_sigkill_while_writing_the_catalog_keeps_the_last_complete_one_and_cleans_up(tmp_path):
    tagged_repo(tmp_path / "repos", "vpc", "v1.0.0")
    storage = tmp_path / "state"
    storage.mkdir()
    # A big catalog (a busy wildcard registry) makes each write take milliseconds: long enough
    # to catch gitreg in the middle of one.
    catalog = {
        "format": 1,
        "modules": ["acme/vpc/null", *(f"acme/m{i:05d}/null" for i in range(49_999))],
        "downloads": {"acme/vpc/null": 7, **{f"acme/d{i:06d}/null": 1 for i in range(100_000)}},
    }
    (storage / "catalog.json").write_text(json.dumps(catalog))
    config = write_config(
        tmp_path / "gitreg.toml",
        f"""
[storage]
path = "{storage}"
[index]
enabled = false  # 50,000 remembered modules: the test is about the catalog, not indexing them
[[modules]]
namespace = "acme"
repository = "{(tmp_path / "repos").as_uri()}/{{name}}.git"
""",
    )
    caught = False
    for _ in range(5):
        with GitregProcess("--config", str(config)) as server:
            async with aiohttp.ClientSession() as session:
                for _ in range(3):
                    status, _ = await get(session, server.url + "/v1/modules/acme/vpc/null/1.0.0/download")
                    assert status == 200
            caught = kill_during_catalog_write(server.proc, storage)
        if caught:
            break
        # Not caught: the write completed, so the counts grew; that is complete data too.
        catalog = json.loads((storage / "catalog.json").read_text())
    assert caught, "gitreg was never caught in the middle of writing catalog.json"
    assert list(storage.glob(".catalog-*.tmp")), "the kill left no temp file"  # what a crash leaves
    assert json.loads((storage / "catalog.json").read_text()) == catalog  # untouched: still the last complete one
    (storage / ".catalog-planted.tmp").write_text('{"format": 1, "modules": ["acme/vpc/nu')  # and a torn one
    with GitregProcess("--config", str(config)) as server:
        async with aiohttp.ClientSession() as session:
            status, _ = await get(session, server.url + "/v1/modules/acme/vpc/null/1.0.0/download")
            assert status == 200
    assert not list(storage.glob(".catalog-*.tmp"))
    # The restarted server went on from the last complete catalog: one more download on top of it.
    assert (
        json.loads((storage / "catalog.json").read_text())["downloads"]["acme/vpc/null"]
        == catalog["downloads"]["acme/vpc/null"] + 1
    )
    assert not (storage / "catalog.json.damaged").exists()


# -- SIGKILL while making or updating a mirror -------------------------------------------------


async def test_sigkill_while_making_a_mirror_then_restart_serves_complete_mirrors_and_cleans_up(git_http, tmp_path):
    repo = tagged_repo(tmp_path / "repos", "public", "v1.0.0")
    # Archive mode: an archive request makes the mirror (with no index, nothing else does).
    config = write_config(
        tmp_path / "gitreg.toml",
        config_text(
            tmp_path, {"hello": git_http.url("public.git")}, git="timeout_seconds = 2", rule='download = "archive"'
        ),
    )
    mirrors = tmp_path / "state" / "mirrors"
    details = "/v1/modules/demo/hello/null/{}/archive.tar.gz"
    with GitregProcess("--config", str(config)) as server:
        pid = server.proc.pid
        async with aiohttp.ClientSession() as session:
            assert (await get(session, server.url + VERSIONS.format("hello")))[0] == 200
            git_http.mode, git_http.delay = "slow", 60  # the mirror's first fetch hangs
            pending = asyncio.ensure_future(get(session, server.url + details.format("1.0.0")))
            await eventually(lambda: any("fetch" in c for c in git_children(pid).values()), "the mirror's git fetch")
            orphans = git_children(pid)
            assert [p.name for p in mirrors.iterdir() if p.name.startswith("tmp-")]  # made in a temp dir
            server.proc.kill()
            server.proc.wait()
            pending.cancel()
    # Killed with gitreg, git's fetch lives on: it gives up by itself on a host sending nothing
    # (GIT_HTTP_LOW_SPEED_TIME = timeout_seconds) instead of holding a connection forever.
    await eventually(lambda: not alive(orphans), "the orphaned git fetch ending by itself", 15)
    left = [p.name for p in mirrors.iterdir()]
    assert left and all(name.startswith("tmp-") for name in left)  # a half-made mirror, never renamed
    (mirrors / "tmp-planted" / "objects").mkdir(parents=True)  # and another a crash could leave

    git_http.mode = "ok"
    with GitregProcess("--config", str(config)) as server:
        async with aiohttp.ClientSession() as session:
            status, body = await get_archive(session, server.url + details.format("1.0.0"))
            assert status == 200 and b"The public module." in gzip.decompress(body)
    [mirror] = mirrors.iterdir()  # the half-made ones are gone; the new one is complete
    assert mirror.suffix == ".git"

    # A fetch into that mirror killed half-way leaves lock files and a partial pack behind.
    repo.commit({"main.tf": 'output "hello" { value = "again" }\n'})
    repo.tag("v1.1.0")
    planted = [
        mirror / "refs" / "tags" / "v1.1.0.lock",
        mirror / "packed-refs.lock",
        mirror / "objects" / "pack" / "tmp_pack_Xq3zA1",
        mirror / "objects" / "4b" / "tmp_obj_Kd81Wz",
    ]
    for path in planted:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"PACK\x00\x00\x00\x02 half")
    with GitregProcess("--config", str(config)) as server:
        async with aiohttp.ClientSession() as session:
            status, body = await get_archive(session, server.url + details.format("1.1.0"))
    assert status == 200 and b'value = "again"' in gzip.decompress(body)  # fetched: no stale lock blocked the tag
    assert not [p for p in planted if p.exists()]
