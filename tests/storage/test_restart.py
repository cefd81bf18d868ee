"""A restart with a large storage and a persisted index serves at once, and still cleans up.

The mirrors an earlier run left are cleaned up (temp directories, stale locks, half-written
packs), measured and counted in `[storage] max_bytes` in the background after the port
opened; index.json is loaded strictly but fast. Real bare repositories, real git, real aiohttp.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest

from gitreg.core.names import ModuleAddress
from gitreg.index.store import ModuleIndex
from gitreg.storage.budget import StorageBudget
from gitreg.storage.files import tree_bytes
from gitreg.web.keys import MIRRORS, REGISTRY
from tests.support.archives import file_text
from tests.support.metrics import scrape, value
from tests.support.process import GitregProcess
from tests.support.repos import GitRepo
from tests.support.storage import archive_rule, entry, make_config, wait_until

# Enough mirrors that walking them all takes far longer than answering a few requests.
MANY = 400


def copies(source: Path, mirrors: Path, count: int) -> list[Path]:
    """`count` mirrors left by an earlier run (hard-linked copies of one bare repository), the
    first one least recently used (oldest mtime)."""
    mirrors.mkdir(parents=True, exist_ok=True)
    made = []
    for i in range(count):
        path = mirrors / f"{i:040x}.git"
        shutil.copytree(source, path, copy_function=os.link)
        made.append(path)
    return made


def age(paths: list[Path], base: float = 1_700_000_000) -> None:
    """Last used in list order (what eviction goes by: least recently used first)."""
    for i, path in enumerate(paths):
        os.utime(path, (base + i, base + i))


def hello_repo(tmp_path: Path) -> GitRepo:
    repo = GitRepo(tmp_path / "repos", "hello")
    repo.commit({"main.tf": 'output "hello" { value = "first" }\n'})
    repo.tag("v1.0.0")
    return repo


def stored_mirror_bytes(mirrors: Path) -> int:
    return sum(tree_bytes(str(p)) for p in mirrors.iterdir())


@pytest.mark.slow  # over a second (tests/ --durations)
async def test_a_restart_with_many_mirrors_serves_before_they_are_counted_then_cleans_up_and_keeps_the_bound(
    serve_client, tmp_path
):
    repo = hello_repo(tmp_path)
    store = tmp_path / "store"
    mirrors = store / "mirrors"
    left = copies(repo.bare, mirrors, MANY)
    one = tree_bytes(str(left[0]))
    # What a killed run leaves: a half-made mirror, and in the newest mirrors stale locks and a partial pack.
    (mirrors / "tmp-3f2a9c").mkdir()
    (mirrors / "tmp-3f2a9c" / "HEAD").write_text("ref: refs/heads/main\n")
    planted = []
    for path in left[-3:]:
        for name in ("packed-refs.lock", "refs/tags/v1.1.0.lock", "objects/pack/tmp_pack_Xq3zA1"):
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_bytes(b"PACK half")
            planted.append(path / name)
    age(left)
    keep = 100
    client = await serve_client(
        make_config([archive_rule("hello", repo.url)], storage={"path": str(store), "max_bytes": keep * one + one // 2})
    )

    # Serving at once: none of the mirrors is counted yet (the scan walks them after the port opened).
    samples = await scrape(client)
    assert value(samples, "gitreg_mirrors") == 0
    assert (await client.get("/healthz")).status == 200
    assert not client.app[MIRRORS].scanned.is_set()
    # (Asked after: its first answer also waits for a fetch of the default branch's .gitreg.toml, #35.)
    assert (await client.get("/v1/modules/demo/hello/null/versions")).status == 200

    # Then, in the background: the leftovers are gone and the bound is kept, least recently used first.
    await asyncio.wait_for(client.app[MIRRORS].scanned.wait(), 60)
    assert await wait_until(lambda: sorted(p.name for p in mirrors.iterdir()) == [p.name for p in left[-keep:]])
    assert not [p for p in planted if p.exists()]
    samples = await scrape(client)
    assert value(samples, "gitreg_mirrors") == keep
    assert value(samples, "gitreg_mirror_bytes") == stored_mirror_bytes(mirrors) == keep * one


@pytest.mark.slow
async def test_a_mirror_fetched_while_the_storage_scan_runs_is_counted_once(serve_client, tmp_path):
    repo = hello_repo(tmp_path)
    store = tmp_path / "store"
    config = make_config([archive_rule("hello", repo.url)], storage={"path": str(store)})
    first = await serve_client(config)
    assert (await first.get("/v1/modules/demo/hello/null/1.0.0/archive.tar.gz")).status == 200
    await first.close()
    [mirror] = (store / "mirrors").iterdir()
    copies(mirror, store / "mirrors", MANY)
    repo.commit({"main.tf": 'output "hello" { value = "second" }\n'})
    repo.tag("v1.1.0")

    client = await serve_client(config)
    # A new tag: its archive needs a fetch into the mirror the scan is going through.
    resp = await client.get("/v1/modules/demo/hello/null/1.1.0/archive.tar.gz")
    assert resp.status == 200 and file_text(await resp.read(), "main.tf") == 'output "hello" { value = "second" }\n'
    await asyncio.wait_for(client.app[MIRRORS].scanned.wait(), 60)
    await client.app[REGISTRY].declarations.settled()  # its .gitreg.toml read (#35) in a scratch tmp-* beside
    samples = await scrape(client)
    assert value(samples, "gitreg_mirrors") == MANY + 1
    assert value(samples, "gitreg_mirror_bytes") == stored_mirror_bytes(store / "mirrors")


async def test_a_path_on_disk_that_the_budget_already_counts_is_seeded_once():
    # The scan measured a mirror; a fetch meanwhile added it with its new size: one entry, the newer size.
    async def remove(path: str) -> None:
        raise AssertionError("nothing is over the bound")

    budget = StorageBudget(1 << 30)
    budget.add("/s/mirrors/a.git", 700, "mirror", remove)
    budget.seed([("/s/mirrors/a.git", 500, 1.0, "mirror", remove), ("/s/mirrors/b.git", 300, 2.0, "mirror", remove)])
    assert budget.total == 1000
    assert budget.usage("mirror") == (2, 1000)


async def test_seeds_merge_by_last_use_and_what_was_used_since_start_is_newest():
    # Archives are counted before the port opens, mirrors after: one least-recently-used order.
    removed: list[str] = []

    async def remove(path: str) -> None:
        removed.append(path)

    budget = StorageBudget(250)
    budget.seed([("archive-old", 100, 10.0, "archive", remove), ("archive-new", 100, 30.0, "archive", remove)])
    budget.add("mirror-made-now", 100, "mirror", remove)
    budget.seed([("mirror-old", 100, 5.0, "mirror", remove), ("mirror-mid", 100, 20.0, "mirror", remove)])
    await budget.evict()
    assert removed == ["mirror-old", "archive-old", "mirror-mid"]
    assert budget.total == 200


@pytest.mark.slow
def test_a_stop_while_the_storage_scan_runs_is_clean(tmp_path):
    repo = hello_repo(tmp_path)
    store = tmp_path / "store"
    copies(repo.bare, store / "mirrors", MANY)
    config = tmp_path / "gitreg.toml"
    config.write_text(
        f'[storage]\npath = "{store}"\n[index]\nenabled = false\n'
        f'[[modules]]\nnamespace = "demo"\nname = "hello"\nsystem = "null"\nrepository = "{repo.url}"\n'
        '[git]\nprotocols = ["file"]\n'
    )
    server = GitregProcess("--config", str(config)).start()
    assert server.stop() == 0
    log = "".join(server.log)
    assert "Traceback" not in log and "ERROR" not in log and "never retrieved" not in log, log


# --- index.json: strict and fast ------------------------------------------------------------------


def test_an_edited_index_file_never_lists_a_version_that_is_not_semver(tmp_path):
    bad = ["1.2", "01.2.3", "1.2.3\n", "v1.2.3", " 1.2.3", "1.2.3-", "1.2.3+", "1.2.3-01", "\u0661.2.3", "1.2.3.4", 7]
    entries = [entry("good", ["2.0.0-rc.1", "1.10.0+build.7", "1.2.3"], "1.10.0+build.7")]
    entries += [entry(f"bad{i}", ["1.0.0", version], "1.0.0") for i, version in enumerate(bad)]
    (tmp_path / "index.json").write_text(json.dumps({"format": 1, "complete": True, "entries": entries}))
    index = ModuleIndex(tmp_path, dict, lambda a: None, None, None, 60)  # type: ignore[arg-type]
    index.load()
    assert len(index) == 1
    good = index.get(ModuleAddress("acme", "good", "aws"))
    assert good is not None
    assert [v.canonical for v in good.versions] == ["2.0.0-rc.1", "1.10.0+build.7", "1.2.3"]
    assert good.latest.tag == "v1.10.0+build.7" and str(good.latest.tagged().version) == "1.10.0+build.7"
    assert good.latest == good.versions[1] and hash(good.latest) == hash(good.versions[1])
