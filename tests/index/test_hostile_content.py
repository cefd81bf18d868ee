"""Hostile repository content: a README or `.tf` file pushed to a tag can never freeze the server.

Each test serves a real bare repository through what `gitreg serve` builds and keeps asking
`/healthz` while the module's details are being built (by its index process); the tests of the
index builder itself build what the index process builds (tests/support/index_process.py). On
the old main, two backtracking regular expressions ran in a worker thread and held the GIL:
80 KB of `[` in a README froze every request for 26 s, a 60 KB heredoc for 12 s. Parsing now
runs in worker processes, within a wall-clock budget per module.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

import pytest

from gitreg.core.names import ModuleAddress
from gitreg.index.declarations import MAX_TF_BYTES
from gitreg.index.model import DetailsPending
from gitreg.web.pages.views import READMES
from tests.support.app import indexed, make_config
from tests.support.index_process import index_services
from tests.support.repos import GitRepo

VPC = ModuleAddress("acme", "vpc", "aws")
SLOWEST_HEALTHZ = 1.0  # seconds; generous (a healthy answer takes milliseconds)

HOSTILE_README = (
    "[" * 80_000  # quadratic in the old link pattern: 26 s
    + "\n\n"
    + "[[a](" * 4_000
    + "\n\n"
    + "*_a" * 5_000
    + "\n\n"
    + "a|b\n-|-\n"
    + "x\n" * 5_000
    + "\n\n"
    + "- a\n  - b\n" * 2_000
    + "\n\n"
    + "[x]: /u\n" * 2_000
)
HEREDOC_NEAR_MISS = (  # 60 KB of spaces before the closing marker: the old heredoc pattern took 12 s
    'variable "banner" {\n  type        = string\n  description = <<EOT\n' + " " * 60_000 + "x\nEOT\n}\n"
)
DEEP_NESTING = "locals {\n  a = " + "[" * 5_000 + "]" * 5_000 + "\n}\n"
# Ordinary declarations, 512 KB of them: python-hcl2 needs about 10 s for this file.
SLOW_TF = ('variable "v" {\n  default = 1\n}\n' * (MAX_TF_BYTES // 32))[:MAX_TF_BYTES]


def rule(url: str) -> dict:
    return {"namespace": "acme", "name": "vpc", "system": "aws", "repository": url}


async def healthz_latencies(client, pending: asyncio.Task) -> list[float]:
    """Ask /healthz over and over until `pending` is done; how long each answer took."""
    latencies = []
    while not pending.done():
        started = time.perf_counter()
        resp = await client.get("/healthz")
        await resp.read()
        assert resp.status == 200
        latencies.append(time.perf_counter() - started)
        await asyncio.sleep(0.02)
    return latencies


async def details_while_probing(client, url: str) -> tuple[dict, list[float], float]:
    """Probe /healthz while the index builds the details, then GET `url`: its body, the probe
    latencies, and how long the build took."""
    started = time.perf_counter()
    pending = asyncio.ensure_future(indexed(client))
    latencies = await healthz_latencies(client, pending)
    await pending
    took = time.perf_counter() - started
    resp = await client.get(url)
    assert resp.status == 200, await resp.text()
    return await resp.json(), latencies, took


@pytest.mark.slow
async def test_healthz_answers_quickly_while_a_hostile_readme_and_tf_files_are_read(serve_client, tmp_path: Path):
    repo = GitRepo(tmp_path / "repos", "hostile")
    repo.commit(
        {
            "README.md": HOSTILE_README,
            "main.tf": HEREDOC_NEAR_MISS,
            "deep.tf": DEEP_NESTING,
            "modules/inner/README.md": "[" * 80_000,
            "modules/inner/main.tf": HEREDOC_NEAR_MISS,
        }
    )
    repo.tag("v1.0.0")
    client = await serve_client(make_config([rule(repo.url)], storage={"path": str(tmp_path / "state")}))
    body, latencies, _ = await details_while_probing(client, "/v1/modules/acme/vpc/aws/1.0.0")
    assert latencies and max(latencies) < SLOWEST_HEALTHZ, latencies
    root = body["root"]
    assert body["description"].startswith("[[[[") and len(body["description"]) <= 303  # literal text, cut
    assert root["readme"] == HOSTILE_README
    assert [(i["name"], i["description"]) for i in root["inputs"]] == [("banner", " " * 60_000 + "x")]
    assert [n.split(":")[0] for n in root["notes"]] == ["deep.tf"] and "nested too deeply" in root["notes"][0]
    inner = body["submodules"][0]
    assert inner["path"] == "modules/inner" and [i["name"] for i in inner["inputs"]] == ["banner"]


def slow_repo(tmp_path: Path) -> GitRepo:
    """A module whose 512 KB variables file takes python-hcl2 about 10 s."""
    repo = GitRepo(tmp_path / "repos", "slow")
    repo.commit(
        {
            "README.md": "# vpc\n\nA VPC with a very large variables file.\n",
            "a_variables.tf": 'variable "name" { type = string }\n',
            "b_huge.tf": SLOW_TF,
            "c_outputs.tf": 'output "id" { value = "x" }\n',
            "modules/inner/main.tf": 'variable "inner" {}\n',
        }
    )
    repo.tag("v1.0.0")
    return repo


@pytest.mark.slow
async def test_parsing_longer_than_the_budget_is_not_kept_while_healthz_stays_fast(serve_client, tmp_path: Path):
    repo = slow_repo(tmp_path)
    storage = tmp_path / "state"
    client = await serve_client(
        make_config([rule(repo.url)], storage={"path": str(storage)}, index={"parse_seconds": 1})
    )
    started = time.perf_counter()
    pending = asyncio.ensure_future(indexed(client))
    latencies = await healthz_latencies(client, pending)
    await pending
    assert latencies and max(latencies) < SLOWEST_HEALTHZ, latencies
    assert time.perf_counter() - started < 8  # the budget cut the ~10 s parse short
    # A read cut short is not the module's details: "being read" (503), nothing on disk (and the
    # index process does not read it again before its back-off is over: the test below).
    for _ in range(3):
        resp = await client.get("/v1/modules/acme/vpc/aws/1.0.0")
        assert resp.status == 503 and "being read" in (await resp.json())["errors"][0]
    await indexed(client)
    assert not list((storage / "details").glob("*.json"))


@pytest.mark.slow
async def test_a_read_cut_short_is_not_started_again_before_its_back_off_is_over(tmp_path: Path):
    # The index builder itself: what the index process builds (it reads the details).
    repo = slow_repo(tmp_path)
    storage = tmp_path / "state"
    config = make_config([rule(repo.url)], storage={"path": str(storage)}, index={"parse_seconds": 1})
    async with index_services(config) as indexer:
        await indexer.settled()  # the budget cut the parse short
        for _ in range(3):  # asked for again (each 503 "being read" passes the ask on)
            indexer.want(VPC, "1.0.0")
            await indexer.settled()
        assert not list((storage / "details").glob("*.json"))
        assert indexer.services.details.builds == 1


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_parse_workers_stop_with_the_index_process_even_in_the_middle_of_a_parse(tmp_path: Path, caplog):
    repo = GitRepo(tmp_path / "repos", "slow")
    repo.commit({"README.md": "A module.\n", "main.tf": SLOW_TF})
    repo.tag("v1.0.0")
    # What the index process builds: its parse workers read the details.
    async with index_services(make_config([rule(repo.url)], storage={"path": str(tmp_path / "state")})) as indexer:
        details = indexer.services.details
        pending = asyncio.ensure_future(indexer.settled())  # the index builds the details
        for _ in range(200):  # the worker is parsing main.tf once the description has come back
            if details.workers.pids() and details.builds:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        pids = details.workers.pids()
        assert pids and all(alive(pid) for pid in pids)
        started = time.perf_counter()
        await details.close()  # what the services' cleanup does at the end
        assert time.perf_counter() - started < 2
        assert not any(alive(pid) for pid in pids)  # killed and reaped, not left parsing for seconds
        await pending  # the build in flight still ends, keeping nothing: it was cut short
        # Stopping is not a failure: no warning (a Ctrl-C right after an install printed "a parse worker
        # stopped while reading main.tf: exit code -9").
        assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        entry = indexer.entry(VPC)
        with pytest.raises(DetailsPending, match="being read"):  # the API's 503
            await indexer.services.index.read.stored_details(entry, entry.latest)
        assert not list((tmp_path / "state" / "details").glob("*.json"))


async def test_the_index_process_cleanup_stops_its_parse_workers(tmp_path: Path):
    repo = GitRepo(tmp_path / "repos", "plain")
    repo.commit({"main.tf": 'variable "x" {}\n'})
    repo.tag("v1.0.0")
    # What the index process builds: its parse workers read the details.
    async with index_services(make_config([rule(repo.url)], storage={"path": str(tmp_path / "state")})) as indexer:
        await indexer.settled()
        entry = indexer.entry(VPC)
        assert (await indexer.services.index.read.stored_details(entry, entry.latest)).root  # the API's 200
        pids = indexer.services.details.workers.pids()
        assert pids and all(alive(pid) for pid in pids)  # kept for the next build
        for pid in pids:
            # At a lower priority that takes effect: in gitreg's session (on Linux a session of its own
            # is a scheduling group of its own, with a whole share of the CPU whatever its niceness),
            # in a process group of its own (a Ctrl-C in the terminal is for gitreg).
            assert os.getpriority(os.PRIO_PROCESS, pid) == os.getpriority(os.PRIO_PROCESS, 0) + 10
            assert os.getsid(pid) == os.getsid(0) and os.getpgid(pid) == pid
    assert not any(alive(pid) for pid in pids)


@pytest.mark.slow  # over a second (tests/ --durations)
async def test_a_hostile_readme_page_view_never_blocks_healthz_and_shows_a_note(serve_client, tmp_path: Path):
    # 256 KB of `![` took 10.9 s to render on the event loop, on every view of the page.
    repo = GitRepo(tmp_path / "repos", "readme-bang")
    repo.commit(
        {
            "README.md": "![" * 128_000,
            "main.tf": 'variable "name" {}\n',
            "modules/inner/README.md": "![a](" * 52_000,
            "modules/inner/main.tf": 'variable "inner" {}\n',
        }
    )
    repo.tag("v1.0.0")
    client = await serve_client(make_config([rule(repo.url)], storage={"path": str(tmp_path / "state")}))
    await indexed(client)
    readmes = client.app[READMES]
    readmes.seconds = 1.0  # the default (3 s) would make this test slower
    page = asyncio.ensure_future(client.get("/modules/acme/vpc/aws"))
    latencies = await healthz_latencies(client, page)
    assert latencies and max(latencies) < SLOWEST_HEALTHZ, latencies
    resp = await page
    text = await resp.text()
    assert resp.status == 200 and text.count("README too large or too complex to show") == 2
    assert 'variable "inner"' not in text and "inner" in text  # the rest of the page is there
    # Remembered per commit: the next view costs no render.
    renders = readmes.renders
    started = time.perf_counter()
    again = await client.get("/modules/acme/vpc/aws/1.0.0")
    assert "README too large or too complex to show" in await again.text()
    assert readmes.renders == renders and time.perf_counter() - started < SLOWEST_HEALTHZ


@pytest.mark.slow
async def test_an_ordinary_readme_is_rendered_once_per_commit(serve_client, tmp_path: Path):
    repo = GitRepo(tmp_path / "repos", "plain")
    repo.commit({"README.md": "# vpc\n\nA *VPC* module. [guide](docs/guide.md)\n", "main.tf": 'variable "n" {}\n'})
    repo.tag("v1.0.0")
    client = await indexed(await serve_client(make_config([rule(repo.url)], storage={"path": str(tmp_path / "state")})))
    for _ in range(3):
        text = await (await client.get("/modules/acme/vpc/aws")).text()
        assert "<em>VPC</em>" in text
    assert client.app[READMES].renders == 1
