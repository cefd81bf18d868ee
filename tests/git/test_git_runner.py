"""Every git process goes through one runner: timed, in its own process group, counted, killed at shutdown.

Git commands on gitreg's own mirrors (module details, archives) once ran through another
path that /metrics did not count and shutdown did not stop. Here a real `git archive` on the
mirror hangs in a real helper process (a smudge filter the tree asks for, as repository
content may), and an operator's view of it is checked: the gauge counts it, shutdown and
the timeout end it with its helper, and nothing is left running.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gitreg.web.app import create_app
from gitreg.web.keys import MIRRORS
from tests.support.app import assert_error, make_config
from tests.support.repos import GitRepo

MARKER = "gitreg-runner-test-sleep"


def slow_repo(tmp_path: Path) -> GitRepo:
    """A module whose .tf files pass through a `slow` filter when a mirror with that filter exports them."""
    repo = GitRepo(tmp_path / "repos", "slow")
    repo.commit({".gitattributes": "*.tf filter=slow\n", "main.tf": "# v1\n"})
    repo.tag("v1.0.0")
    repo.commit({"main.tf": "# v2\n"})
    repo.tag("v1.1.0")
    return repo


def helpers_running() -> list[int]:
    """pids of the filter's processes (found by the marker in their command line)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if MARKER in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(pid))
            except OSError:
                continue
    return found


async def git_processes(client) -> float:
    text = await (await client.get("/metrics")).text()
    return next(
        s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == "gitreg_git_processes"
    )


async def start_hanging_details(aiohttp_client, tmp_path: Path, timeout: float):
    """An app whose mirror makes `git archive` of v1.1.0 hang in a helper; the details request for it, started."""
    slow_repo(tmp_path)
    # Archive mode, no background index: only the requests below run git on the mirror.
    rule = {
        "namespace": "demo",
        "name": "slow",
        "system": "null",
        "repository": (tmp_path / "repos" / "slow.git").as_uri(),
        "download": "archive",
    }
    client = await aiohttp_client(
        create_app(
            make_config(
                [rule],
                git={"timeout_seconds": timeout},
                index={"enabled": False},
                storage={"path": str(tmp_path / "state")},
            )
        )
    )
    assert (await client.get("/v1/modules/demo/slow/null/1.0.0/archive.tar.gz")).status == 200  # creates the mirror
    mirror = next(client.app[MIRRORS].root.glob("*.git"))
    # The helper is a grandchild of gitreg (git -> sh -> python), as git-remote-http or ssh are.
    helper = f"{sys.executable} -c 'import time; time.sleep(60)' {MARKER}"
    # Set up before the request under test starts: nothing else runs on the loop meanwhile.
    subprocess.run(["git", "-C", str(mirror), "config", "filter.slow.smudge", helper], check=True)  # noqa: ASYNC221
    request = asyncio.ensure_future(client.get("/v1/modules/demo/slow/null/1.1.0/archive.tar.gz"))
    for _ in range(200):
        if helpers_running():
            break
        await asyncio.sleep(0.05)
    assert helpers_running(), "git archive's helper never started"
    return client, request


async def wait_until_gone() -> list[int]:
    for _ in range(100):
        if not helpers_running():
            return []
        await asyncio.sleep(0.05)
    return helpers_running()


async def test_a_git_command_on_a_mirror_is_counted_and_killed_with_its_helper_at_shutdown(aiohttp_client, tmp_path):
    client, request = await start_hanging_details(aiohttp_client, tmp_path, timeout=60)
    assert await git_processes(client) == 1  # the mirror's git archive is one of gitreg's git processes
    await client.close()  # shutdown: what still runs serves nobody
    assert await wait_until_gone() == [], "the helper outlived shutdown"
    request.cancel()
    await asyncio.gather(request, return_exceptions=True)


async def test_git_runs_in_gitreg_s_session_in_a_process_group_of_its_own(aiohttp_client, tmp_path):
    """Its own group: killed as a group, helpers included. gitreg's session: on Linux a session is
    a scheduling group of its own (autogroup), and git in one would take a whole share of the
    CPU beside gitreg's event loop, whatever the niceness of background git."""
    client, request = await start_hanging_details(aiohttp_client, tmp_path, timeout=60)
    helpers = helpers_running()
    assert {os.getsid(pid) for pid in helpers} == {os.getsid(0)}
    [group] = {os.getpgid(pid) for pid in helpers}
    assert group != os.getpgid(0)
    await client.close()
    assert await wait_until_gone() == []
    request.cancel()
    await asyncio.gather(request, return_exceptions=True)


@pytest.mark.slow
async def test_a_hanging_git_command_on_a_mirror_ends_at_the_timeout_with_its_helper(aiohttp_client, tmp_path):
    client, request = await start_hanging_details(aiohttp_client, tmp_path, timeout=2)
    resp = await asyncio.wait_for(request, 20)
    await assert_error(resp, 504, "timeout_seconds")
    assert await wait_until_gone() == [], "the helper outlived its git"
    assert await git_processes(client) == 0
