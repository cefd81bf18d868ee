"""A read of module details cut short (parse workers stopped, the budget run out) is never kept as the details."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.support.app import GIT_PASSWORD, GIT_USER, indexed, make_config
from tests.support.repos import GitRepo

pytestmark = pytest.mark.slow  # real git over HTTP, real parse workers stopped on purpose

HANDLER = b"gitreg.index.declarations:parse_request"  # the details' parse workers (not the pages' renderers)
MAIN_TF = (
    'variable "cidr" {\n  type = string\n}\n\nvariable "zones" {\n  default = 3\n}\n\noutput "id" {\n  value = "x"\n}\n'
)
URL = "/v1/modules/acme/vpc/aws/1.0.0"


def vpc_repo(tmp_path: Path) -> GitRepo:
    repo = GitRepo(tmp_path / "repos", "vpc")
    repo.commit({"README.md": "# vpc\n\nA network for the tests.\n", "main.tf": MAIN_TF})
    repo.tag("v1.0.0")
    return repo


def config_for(git_http, tmp_path: Path, parse_seconds: float):
    return make_config(
        [{"namespace": "acme", "name": "vpc", "system": "aws", "repository": git_http.url("vpc.git")}],
        credentials=[{"url": git_http.base_url + "/", "username": GIT_USER, "password": GIT_PASSWORD}],
        storage={"path": str(tmp_path / "state")},
        index={"parse_seconds": parse_seconds},
    )


def parse_workers() -> list[int]:
    """The details parse workers (processes running HANDLER) of this process's index process."""
    parents, handlers = {}, []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                parents[int(entry)] = int(f.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if HANDLER in argv:
            handlers.append(int(entry))
    return [pid for pid in handlers if parents.get(parents.get(pid, 0)) == os.getpid()]  # our child's children


async def stop_the_workers_during_the_first_read(client, git_http) -> list[int]:
    """With the first read's fetch held, stop every parse worker (started meanwhile), then let the read go on."""
    started = time.monotonic()
    while not (stopped := parse_workers()):
        assert time.monotonic() - started < 20, "no parse worker started for the first read"
        await asyncio.sleep(0.05)
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    git_http.release_fetches()
    return stopped


def resume(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):  # killed at the end of its budget
            os.kill(pid, signal.SIGCONT)


def stored(tmp_path: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in (tmp_path / "state" / "details").glob("*.json")]


async def full_details(client, seconds: float) -> dict:
    """Ask for the details (the page and the API) until they answer; meanwhile they must say "being read"."""
    await indexed(client)  # listed (until then the module itself is "being indexed")
    started = time.monotonic()
    while True:
        resp = await client.get(URL)
        if resp.status == 200:
            body = await resp.json()
            # The details are answered from disk once the index process wrote them; the latest
            # version's description is its index entry's, which comes with the index process's
            # next report (up to FEED_SECONDS later).
            if body["description"]:
                return body
        else:
            assert resp.status == 503 and "being read" in (await resp.json())["errors"][0]
            page = await (await client.get("/modules/acme/vpc/aws/1.0.0")).text()
            if "Being read from the repository." not in page:  # the read ended between the two asks
                assert 'Inputs <span class="n">(2)</span>' in page, page  # whole: cidr and zones
            else:
                assert "Inputs <span" not in page, page
        assert time.monotonic() - started < seconds, "the details were not read again"
        await asyncio.sleep(0.5 if resp.status == 503 else 0.05)


def assert_complete(body: dict) -> None:
    root = body["root"]
    assert body["description"] == "A network for the tests."
    assert [i["name"] for i in root["inputs"]] == ["cidr", "zones"] and [o["name"] for o in root["outputs"]] == ["id"]
    assert root["notes"] == []


async def test_details_cut_short_by_stopped_parse_workers_are_read_again_without_a_restart(
    serve_client, git_http, tmp_path
):
    vpc_repo(tmp_path)
    git_http.hold_fetches()
    client = await serve_client(config_for(git_http, tmp_path, parse_seconds=1))
    stopped = await stop_the_workers_during_the_first_read(client, git_http)
    try:
        await asyncio.sleep(3)  # the budget (1 s) runs out while the workers are stopped
        assert stored(tmp_path) == []  # nothing transient on disk
        resp = await client.get(URL)
        assert resp.status == 503 and "being read" in (await resp.json())["errors"][0]
    finally:
        resume(stopped)
    assert_complete(await full_details(client, seconds=30))
    [kept] = stored(tmp_path)
    assert kept["root"]["notes"] == [] and [i["name"] for i in kept["root"]["inputs"]] == ["cidr", "zones"]
    page = await (await client.get("/modules/acme/vpc/aws")).text()
    assert "Being read from the repository." not in page and "cidr" in page


async def test_details_cut_short_before_a_restart_are_read_after_it(serve_client, git_http, tmp_path):
    vpc_repo(tmp_path)
    git_http.hold_fetches()
    client = await serve_client(config_for(git_http, tmp_path, parse_seconds=1))
    stopped = await stop_the_workers_during_the_first_read(client, git_http)
    try:
        await asyncio.sleep(3)
        await client.close()  # gitreg stops with the read cut short
    finally:
        resume(stopped)
    assert stored(tmp_path) == []
    again = await serve_client(config_for(git_http, tmp_path, parse_seconds=20))
    assert_complete(await full_details(again, seconds=30))


async def test_details_an_earlier_gitreg_kept_with_a_cut_short_note_are_read_again(serve_client, git_http, tmp_path):
    vpc_repo(tmp_path)
    client = await serve_client(config_for(git_http, tmp_path, parse_seconds=20))
    assert_complete(await full_details(client, seconds=30))
    await client.close()
    # What gitreg 0.1 wrote when the parse ran out of its budget: no inputs, a note, kept forever.
    [path] = (tmp_path / "state" / "details").glob("*.json")
    old = json.loads(path.read_text())
    old["root"].update(inputs=[], outputs=[], notes=["main.tf: not shown: parsing took longer than 20 s"])
    path.write_text(json.dumps(old))
    again = await serve_client(config_for(git_http, tmp_path, parse_seconds=20))
    assert_complete(await full_details(again, seconds=30))
    assert json.loads(path.read_text())["root"]["notes"] == []  # read again, once: the new file has no such note


async def test_details_kept_without_the_archive_sha256_are_read_again(serve_client, git_http, tmp_path):
    vpc_repo(tmp_path)
    client = await serve_client(config_for(git_http, tmp_path, parse_seconds=20))
    assert_complete(await full_details(client, seconds=30))
    await client.close()
    # What gitreg wrote before details kept the archive's SHA-256: no such key at all.
    [path] = (tmp_path / "state" / "details").glob("*.json")
    old = json.loads(path.read_text())
    sha = old.pop("archive_sha256")
    assert isinstance(sha, str) and len(sha) == 64
    path.write_text(json.dumps(old))
    again = await serve_client(config_for(git_http, tmp_path, parse_seconds=20))
    assert_complete(await full_details(again, seconds=30))
    assert json.loads(path.read_text())["archive_sha256"] == sha  # read again, once, with the same archive
