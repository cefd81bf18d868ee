"""Storage stays within `[storage] max_bytes`, failed clones are remembered, pinned commits survive gc.

Real bare repositories, real git (over smart HTTP where a host has to fail), real aiohttp.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import shutil
import subprocess
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gitreg.web.keys import MIRRORS
from tests.support.app import assert_error
from tests.support.archives import file_text, mono_repo, mono_rule, stored_bytes
from tests.support.githttp import GitHttpServer
from tests.support.process import GitregProcess
from tests.support.repos import GitRepo
from tests.support.storage import archive_rule, make_config, wait_until

MIB = 1024 * 1024


def hex_blob(seed: int, chars: int) -> str:
    """Text that compresses to about half its length (random hex digits), the same for a seed."""
    return random.Random(seed).randbytes(-(-chars // 2)).hex()[:chars]


def git_in(repository: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run git in a repository gitreg owns (a mirror), as an operator would."""
    return subprocess.run(["git", *args], cwd=repository, capture_output=True, text=True, check=check)


# --- one bound over mirrors and archives ------------------------------------------------------


@pytest.mark.slow
async def test_mirrors_and_archives_together_stay_under_max_bytes(serve_client, tmp_path):
    # Three repositories: each mirror ~0.35 MiB and each archive ~0.35 MiB. The archives alone
    # fit in 1 MiB; with their mirrors they do not.
    repos = []
    for i in range(3):
        repo = GitRepo(tmp_path / "repos", f"r{i}")
        repo.commit({"main.tf": f"# r{i}\n", "blob.txt": hex_blob(i, 650_000)})
        repo.tag("v1.0.0")
        repos.append(repo)
    store = tmp_path / "store"
    client = await serve_client(
        make_config(
            [archive_rule(f"r{i}", r.url) for i, r in enumerate(repos)], storage={"path": str(store), "max_bytes": MIB}
        )
    )
    for rounds in range(2):  # the second round rebuilds what was evicted
        for i in range(3):
            resp = await client.get(f"/v1/modules/demo/r{i}/null/1.0.0/archive.tar.gz")
            assert resp.status == 200, await resp.text()
            assert file_text(await resp.read(), "main.tf") == f"# r{i}\n"
            assert stored_bytes(store) <= MIB, f"round {rounds}, repository {i}"
    metrics = await (await client.get("/metrics")).text()
    assert "gitreg_mirror_bytes" in metrics and "gitreg_mirrors" in metrics


async def test_an_archive_larger_than_max_bytes_is_refused_with_507_and_never_kept(serve_client, tmp_path, caplog):
    # Six copies of one blob: the mirror holds it once (~0.4 MiB), the archive six times (~2.3 MiB).
    blob = hex_blob(1, 700_000)
    repo = GitRepo(tmp_path / "repos", "copies")
    repo.commit({"main.tf": "# copies\n", **{f"copy{i}.txt": blob for i in range(6)}})
    repo.tag("v1.0.0")
    store = tmp_path / "store"
    client = await serve_client(
        make_config([archive_rule("copies", repo.url)], storage={"path": str(store), "max_bytes": MIB})
    )
    caplog.set_level(logging.INFO, "gitreg")
    resp = await client.get("/v1/modules/demo/copies/null/1.0.0/download")
    await assert_error(resp, 507, "larger than [storage] max_bytes", "1.0 MiB", 'download = "git"')
    resp = await client.get("/v1/modules/demo/copies/null/1.0.0/archive.tar.gz")
    await assert_error(resp, 507, "larger than [storage] max_bytes")
    assert list((store / "archives").iterdir()) == []  # not kept, not even a temporary file
    assert stored_bytes(store) <= MIB
    # the refusal is remembered: the archive is not built again for each request
    builds = [r for r in caplog.records if r.getMessage().startswith("building the archive")]
    assert len(builds) == 1


@pytest.mark.slow
async def test_an_archive_being_sent_is_not_evicted_under_it(serve_client, tmp_path):
    # Two versions, each archive ~0.6 MiB (six copies of its own blob); the mirror ~0.25 MiB.
    # The mirror and one archive fit in 1 MiB; two archives do not.
    repo = GitRepo(tmp_path / "repos", "two")
    for i in range(2):
        blob = hex_blob(10 + i, 180_000)
        repo.commit({"main.tf": f"# {i}\n", **{f"copy{j}.txt": blob for j in range(6)}})
        repo.tag(f"v1.{i}.0")
    store = tmp_path / "store"
    client = await serve_client(
        make_config([archive_rule("two", repo.url)], storage={"path": str(store), "max_bytes": MIB})
    )
    first, second = ("/v1/modules/demo/two/null/1.0.0/archive.tar.gz", "/v1/modules/demo/two/null/1.1.0/archive.tar.gz")
    assert (await client.get(first)).status == 200
    archives = store / "archives"
    [first_file] = list(archives.glob("*.tar.gz"))
    # The server is slow to open files (its default executor, where aiohttp opens them, is
    # busy): the response of `first` is on its way, its file not opened yet.
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
    gate = threading.Event()
    loop.run_in_executor(None, gate.wait)
    try:
        sending = asyncio.ensure_future(client.get(first))
        await asyncio.sleep(0.5)
        # Meanwhile the other version is built, and storage is over its bound.
        building = asyncio.ensure_future(client.get(second))
        assert await wait_until(lambda: len(list(archives.glob("*.tar.gz"))) == 2 or not first_file.exists())
        await asyncio.sleep(0.5)  # whatever eviction follows the build has run
    finally:
        gate.set()
    resp = await sending
    assert resp.status == 200  # not a 404: the archive being sent was not deleted under it
    assert file_text(await resp.read(), "main.tf") == "# 0\n"
    resp = await building
    assert resp.status == 200 and file_text(await resp.read(), "main.tf") == "# 1\n"
    # Once sent, it is no longer in use, and storage goes back under its bound.
    assert await wait_until(lambda: stored_bytes(store) <= MIB)
    assert not first_file.exists()


async def test_a_mirror_in_use_is_not_evicted(serve_client, tmp_path):
    small = GitRepo(tmp_path / "repos", "small")
    small_sha = small.commit({"main.tf": "# small\n", "blob.txt": hex_blob(3, 700_000)})  # mirror ~0.4 MiB
    small.tag("v1.0.0")
    big = GitRepo(tmp_path / "repos", "big")
    blob = hex_blob(4, 200_000)
    big.commit({"main.tf": "# big\n", **{f"copy{j}.txt": blob for j in range(6)}})  # archive ~0.65 MiB
    big.tag("v1.0.0")
    store = tmp_path / "store"
    client = await serve_client(
        make_config(
            [archive_rule("small", small.url), archive_rule("big", big.url)],
            storage={"path": str(store), "max_bytes": MIB},
        )
    )
    mirrors = client.app[MIRRORS]
    async with mirrors.use(small.url, small_sha) as mirror:  # what module details do while they read it
        resp = await client.get("/v1/modules/demo/big/null/1.0.0/archive.tar.gz")
        assert resp.status == 200 and file_text(await resp.read(), "main.tf") == "# big\n"
        # over the bound, and the least recently used entry is this mirror: kept while in use
        assert mirror.is_dir()
        assert git_in(mirror, "cat-file", "-e", f"{small_sha}^{{commit}}", check=False).returncode == 0
    assert await wait_until(lambda: not mirror.exists())  # removed once released
    assert stored_bytes(store) <= MIB


async def test_mirror_locks_are_dropped_when_nobody_waits(serve_client, tmp_path):
    repos = [mono_repo(tmp_path / "repos", f"m{i}") for i in range(3)]
    rules = [mono_rule(r.url, name=f"n{i}") for i, r in enumerate(repos)]
    client = await serve_client(make_config(rules))
    urls = [f"/v1/modules/acme/n{i}/aws/1.1.0/archive.tar.gz" for i in range(3)] * 4
    responses = await asyncio.gather(*(client.get(u) for u in urls))
    assert [r.status for r in responses] == [200] * len(urls)
    mirrors = client.app[MIRRORS]
    assert mirrors.fetches == 3
    assert mirrors._locks == {}  # one lock per repository while used, none left afterwards


# --- failed clones are remembered ---------------------------------------------------------------


def broken_repo(root: Path) -> GitRepo:
    """Tags list fine (ls-remote), but a clone fails: a blob of the tagged commit is missing."""
    repo = GitRepo(root, "broken")
    repo.commit({"main.tf": "# broken\n"})
    repo.tag("v1.0.0")
    blob = subprocess.run(
        ["git", "rev-parse", "v1.0.0:main.tf"], cwd=repo.bare, capture_output=True, text=True, check=True
    ).stdout.strip()
    loose = repo.bare / "objects" / blob[:2] / blob[2:]
    assert loose.exists(), "expected a loose object (a small push is unpacked)"
    loose.unlink()
    return repo


@pytest.mark.slow
async def test_a_failed_clone_is_answered_again_without_a_new_clone(serve_client, tmp_path):
    broken_repo(tmp_path / "repos")
    with GitHttpServer(tmp_path / "repos") as host:
        config = make_config(
            [archive_rule("broken", host.url("broken.git"))],
            cache={"error_retry_seconds": 1.5},
            storage={"path": str(tmp_path / "store")},
        )
        client = await serve_client(config)
        url = "/v1/modules/demo/broken/null/1.0.0/archive.tar.gz"
        first = await assert_error(await client.get(url), 502)
        seen = len(host.requests())
        assert seen > 0
        # within error_retry_seconds: the same answer, and the host sees nothing
        for _ in range(3):
            assert await assert_error(await client.get(url), 502) == first
        await assert_error(await client.get("/v1/modules/demo/broken/null/1.0.0/download"), 502)
        assert len(host.requests()) == seen
        # after it, the clone is tried again
        await asyncio.sleep(1.6)
        await assert_error(await client.get(url), 502)
        assert len(host.requests()) > seen
    assert not list((tmp_path / "store" / "mirrors").iterdir())  # no half-made mirror left


# --- moved tags: the first-served commit stays reachable -----------------------------------------


async def test_a_moved_tags_first_commit_survives_git_gc_in_the_mirror(serve_client, tmp_path):
    repo = GitRepo(tmp_path / "repos", "moving")
    first = repo.commit({"main.tf": "# first\n"})
    repo.tag("v1.0.0")
    store = tmp_path / "store"
    config = make_config([archive_rule("moving", repo.url)], cache={"ttl_seconds": 0}, storage={"path": str(store)})
    client = await serve_client(config)
    old = "/v1/modules/demo/moving/null/1.0.0/archive.tar.gz"
    assert file_text(await (await client.get(old)).read(), "main.tf") == "# first\n"
    # History is rewritten and the tag force-pushed to a commit that does not descend from the
    # first one; a new version then makes gitreg fetch (--prune --force refs/tags/*).
    repo.git("checkout", "--quiet", "--orphan", "rewritten")
    repo.commit({"main.tf": "# second\n"})
    repo.tag("v1.0.0")
    repo.commit({"main.tf": "# third\n"})
    repo.tag("v1.1.0")
    resp = await client.get("/v1/modules/demo/moving/null/1.1.0/archive.tar.gz")
    assert file_text(await resp.read(), "main.tf") == "# third\n"
    mirror = client.app[MIRRORS].path_for(repo.url)
    await client.close()
    # git's gc in the mirror (what `gc --auto` does after enough fetches, here at once)
    git_in(mirror, "gc", "--quiet", "--prune=now")
    # The archive is built again (after a restart with its archive gone): still the first commit.
    for archive in (store / "archives").glob("*.tar.gz"):
        archive.unlink()
    client = await serve_client(config)
    resp = await client.get(old)
    assert resp.status == 200, await resp.text()
    assert file_text(await resp.read(), "main.tf") == "# first\n"
    # what kept it: a ref per pinned commit, outside the refs/tags/* that fetches prune
    pins = git_in(mirror, "for-each-ref", "--format=%(refname)", "refs/gitreg/pins/").stdout.split()
    assert f"refs/gitreg/pins/{first}" in pins


async def test_a_moved_tag_with_git_downloads_logs_that_clients_follow_the_tag(serve_client, tmp_path, caplog):
    repo = GitRepo(tmp_path / "repos", "moving")
    first = repo.commit({"main.tf": "# first\n"})
    repo.tag("v1.0.0")
    client = await serve_client(
        make_config(
            [{"namespace": "demo", "name": "moving", "system": "null", "repository": repo.url, "download": "git"}],
            cache={"ttl_seconds": 0},
        )
    )
    download = "/v1/modules/demo/moving/null/1.0.0/download"
    assert (await (await client.get(download)).json())["location"].endswith("?ref=v1.0.0")
    second = repo.commit({"main.tf": "# second\n"})
    repo.tag("v1.0.0")
    assert (await (await client.get(download)).json())["location"].endswith("?ref=v1.0.0")
    moved = [r.getMessage() for r in caplog.records if "moved" in r.getMessage()]
    assert len(moved) == 1 and first[:12] in moved[0] and second[:12] in moved[0]
    assert "clients follow the tag" in moved[0]
    assert "still serving the first commit" not in moved[0]
    assert "gitreg_moved_tags_total 1.0" in await (await client.get("/metrics")).text()


# --- tagpins.jsonl ------------------------------------------------------------------------------


def test_the_pin_record_is_compacted_when_loaded(tmp_path):
    from gitreg.storage.pins import TagPins

    path = tmp_path / "tagpins.jsonl"
    records = [
        ("file:///r.git", "v1.0.0", "a" * 40),
        ("file:///r.git", "v1.0.0", "b" * 40),
        ("file:///r.git", "v2.0.0", "c" * 40),
        ("file:///r.git", "v1.0.0", "d" * 40),
    ]
    path.write_text("".join(json.dumps({"repository": r, "tag": t, "sha": s}) + "\n" for r, t, s in records))
    pins = TagPins(path)
    assert len(pins) == 2
    assert pins.commits("file:///r.git") == {"d" * 40, "c" * 40}
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted((r["tag"], r["sha"]) for r in lines) == [("v1.0.0", "d" * 40), ("v2.0.0", "c" * 40)]
    assert not list(tmp_path.glob("*.tmp"))


async def test_the_pin_record_does_not_grow_forever_while_serving(tmp_path):
    from gitreg.storage.pins import TagPins

    path = tmp_path / "tagpins.jsonl"
    pins = TagPins(path)
    # A tag moved 600 times with allow_moved_tags: each move is a new record, superseding the last.
    for i in range(600):
        assert (
            await pins.pin("file:///r.git", "v1.0.0", f"{i:040x}", allow_moved=True, follows_tag=False) == f"{i:040x}"
        )
    await pins.pin("file:///r.git", "v2.0.0", "f" * 40, allow_moved=True, follows_tag=False)
    await pins.close()
    assert len(path.read_text().splitlines()) <= 300
    again = TagPins(path)
    assert again.commits("file:///r.git") == {f"{599:040x}", "f" * 40}


async def test_a_pin_keeps_its_time_across_restarts_and_only_an_earlier_pin_replaces_it(tmp_path):
    from gitreg.storage.pins import TagPins

    path = tmp_path / "tagpins.jsonl"
    pins = TagPins(path)
    await pins.pin("file:///r.git", "v1.0.0", "b" * 40, allow_moved=False, follows_tag=False, at=200.0)
    assert not pins.adopt("file:///r.git", "v1.0.0", "c" * 40, 300.0)  # later: ours stays
    assert not pins.adopt("file:///r.git", "v2.0.0", "c" * 40, 1.0)  # never served here: asked when it is
    assert pins.adopt("file:///r.git", "v1.0.0", "a" * 40, 100.0)  # earlier: taken, and written
    await pins.close()
    again = TagPins(path)
    assert again.entries() == [("file:///r.git", "v1.0.0", "a" * 40, 100.0)]
    # A tie goes to the smaller commit id, so every replica ends on the same one.
    assert not again.adopt("file:///r.git", "v1.0.0", "d" * 40, 100.0)


@pytest.mark.slow
def test_a_stalled_pin_write_does_not_freeze_the_server(tmp_path):
    repo = GitRepo(tmp_path / "repos", "hello")
    repo.commit({"main.tf": "# hello\n"})
    repo.tag("v1.0.0")
    store = tmp_path / "store"
    config = tmp_path / "gitreg.toml"
    config.write_text(
        f'[storage]\npath = "{store}"\n[index]\nenabled = false\n'  # it reads no index: no index process
        f'[[modules]]\nnamespace = "demo"\nname = "hello"\nsystem = "null"\nrepository = "{repo.url}"\n'
        'download = "git"\n'  # the pin is written in the background (clients follow the tag)
    )
    with GitregProcess("--config", str(config)) as server:
        # A pin record that cannot be written (a named pipe nobody reads: opening it for writing
        # waits, as a stalled disk would).
        os.mkfifo(store / "tagpins.jsonl")
        reader = None
        try:
            with urllib.request.urlopen(f"{server.url}/v1/modules/demo/hello/null/1.0.0/download", timeout=10) as r:
                assert json.load(r)["location"].endswith("?ref=v1.0.0")
            started = time.monotonic()
            with urllib.request.urlopen(f"{server.url}/healthz", timeout=5) as r:
                assert r.status == 200
            assert time.monotonic() - started < 2
        finally:
            reader = os.open(store / "tagpins.jsonl", os.O_RDONLY | os.O_NONBLOCK)  # let the write finish
            server.stop()
            os.close(reader)


async def test_file_work_after_the_file_executor_closed_runs_inline_without_a_traceback(tmp_path):
    # At shutdown a cancelled mirror fetch's cleanup (removing its half-made temp mirror) can run
    # after the app's file executor has closed: it must still happen, and raise nothing.
    from concurrent.futures import ThreadPoolExecutor

    from gitreg.storage.files import run_file_work

    leftover = tmp_path / "tmp-half-made"
    leftover.mkdir()
    executor = ThreadPoolExecutor(max_workers=1)
    executor.shutdown(wait=True)
    await run_file_work(executor, shutil.rmtree, str(leftover))
    assert not leftover.exists()
    assert await run_file_work(executor, len, "four") == 4


async def test_a_state_file_is_written_only_when_changed_and_a_damaged_one_is_set_aside_once(tmp_path, caplog):
    # catalog.json, index.json and orgs.json are one StateFile each: what one does, all do.
    from gitreg.storage.state import StateFile

    path = tmp_path / "state.json"
    state = {"n": 1}
    written: list[str] = []

    async def told(text: str) -> None:
        written.append(text)

    def snapshot():
        data = {"format": 2, **state}  # copied on the loop, encoded off it
        return lambda: json.dumps(data)

    file = StateFile(path, 2, ".state-", snapshot, unreadable="starting empty")
    file.on_written.connect(told)
    assert await file.load() is None  # no file yet: no state, nothing logged
    assert await file.flush() is None and not path.exists()  # nothing changed: nothing written
    file.mark_dirty()
    async with file.flushing(0.01):
        state["n"] = 2
    assert json.loads(path.read_text()) == {"format": 2, "n": 2} and file.writes == 1 and len(written) == 1
    assert await file.load() == {"format": 2, "n": 2}
    assert file.parse('{"format": 1, "n": 3}') is None and file.parse("{not json") is None

    (tmp_path / ".state-x.tmp").write_text("half")  # a write a crash cut short
    path.write_text('{"format": 2, "n": ')
    caplog.set_level(logging.WARNING, "gitreg")
    assert file.read() is None
    assert (tmp_path / "state.json.damaged").exists() and not path.exists()
    assert not (tmp_path / ".state-x.tmp").exists()
    assert [r.getMessage() for r in caplog.records].count(
        f"{path} could not be read (JSONDecodeError); starting empty, the old file is state.json.damaged"
    ) == 1
    assert file.read() is None  # set aside: the next start finds no file, and logs nothing
    assert len(caplog.records) == 1


async def test_a_state_file_flush_cancelled_during_its_write_still_leaves_the_file_written(tmp_path):
    # Shutdown cancels the flush loop; a write already on its way must land, and the last flush
    # must not find the file marked written while it is not (orgs.json was missing after a restart).
    from gitreg.storage.state import StateFile

    count = {"n": 0}

    def snapshot():
        data = {"format": 1, "n": count["n"]}

        def encode() -> str:
            time.sleep(0.3)  # a large document: the write takes a while
            return json.dumps(data)

        return encode

    state = StateFile(tmp_path / "state.json", 1, ".state-", snapshot, unreadable="starting empty")
    count["n"] = 1
    state.mark_dirty()
    flush = asyncio.ensure_future(state.flush())
    await asyncio.sleep(0.05)
    flush.cancel()
    with pytest.raises(asyncio.CancelledError):
        await flush
    await state.flush()
    assert json.loads((tmp_path / "state.json").read_text()) == {"format": 1, "n": 1}
