"""A full disk under `[storage] path`: a 507 naming the path, never a 500, and serving recovers by itself.

A real, small tmpfs is the storage path (mounting needs root: skipped otherwise).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.support.app import assert_error, make_config
from tests.support.repos import GitRepo
from tests.support.storage import fill, small_disk


def big_repo(base: Path) -> GitRepo:
    """A module with 600 KB of incompressible data: its mirror cannot land on a full disk."""
    repo = GitRepo(base, "big")
    repo.commit({"main.tf": 'output "x" { value = 1 }\n', "blob.txt": os.urandom(300_000).hex()})
    repo.tag("v1.0.0")
    return repo


# (how the module is served, bytes left free): with 64 KiB left the pin is recorded and the
# mirror's fetch (git's own writes) or the archive build is what meets the full disk.
@pytest.mark.parametrize(("download", "leave"), [("archive", 0), ("archive", 65536), ("git", 0)])
async def test_a_full_disk_is_a_507_naming_the_storage_path_and_serving_recovers_when_space_is_freed(
    download, leave, serve_client, tmp_path
):
    repo = big_repo(tmp_path / "repos")
    with small_disk(tmp_path / "disk") as disk:
        rule = {"namespace": "demo", "name": "big", "system": "null", "repository": repo.url, "download": download}
        if download == "git":
            rule["ref"] = "commit"  # the first-served commit is recorded in tagpins.jsonl
        config = make_config([rule], storage={"path": str(disk)}, index={"enabled": False})
        client = await serve_client(config)
        filler = fill(disk, leave)
        lookup = "/v1/modules/demo/big/null/1.0.0/download"
        archive = "/v1/modules/demo/big/null/1.0.0/archive.tar.gz"
        for path in (lookup, archive) if download == "archive" else (lookup,):
            for _ in range(2):  # the second time too: nothing is cached as broken, nothing is a 500
                await assert_error(await client.get(path), 507, f"[storage] path {disk} is full")
        assert (await client.get("/healthz")).status == 200
        filler.unlink()
        resp = await client.get(lookup)
        assert resp.status in (200, 204), await resp.text()
        if download == "archive":
            resp = await client.get(archive)
            assert resp.status == 200, await resp.text()


# Bytes left free when the first request comes: each step then meets the full disk at another
# point (the pin's line, `git init` of the mirror, its config, the fetch's pack, the archive).
# `git init` with ~8 KiB left failed with "failed to write new configuration file" (exit 128) and
# no word of the disk: a 502 "could not create a mirror repository" among the 507s.
SWEEP = (0, 2048, 4096, 6144, 8192, 10240, 12288, 16384, 24576, 32768, 49152, 98304)


@pytest.mark.slow  # one tmpfs per download mode, filled a dozen times
@pytest.mark.parametrize("download", ["archive", "git"])
async def test_every_step_that_meets_a_full_disk_answers_507_naming_the_storage_path(download, serve_client, tmp_path):
    repo = big_repo(tmp_path / "repos")
    rule = {"namespace": "demo", "name": "big", "system": "null", "repository": repo.url, "download": download}
    if download == "git":
        rule["ref"] = "commit"  # the first-served commit is recorded, and a mirror made
    lookup = "/v1/modules/demo/big/null/1.0.0/download"
    paths = (lookup, "/v1/modules/demo/big/null/1.0.0/archive.tar.gz") if download == "archive" else (lookup,)
    seen = set()
    with small_disk(tmp_path / "disk") as disk:
        config = make_config([rule], storage={"path": str(disk)}, index={"enabled": False})
        for leave in SWEEP:
            for entry in disk.iterdir():  # a fresh start: nothing stored yet
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
            client = await serve_client(config)
            filler = fill(disk, leave)
            for path in paths:
                resp = await client.get(path)
                seen.add(resp.status)
                if resp.status != 507:
                    assert resp.status in (200, 204), (leave, path, resp.status, await resp.text())
                    continue
                await assert_error(resp, 507, f"[storage] path {disk} is full")
            filler.unlink()
            for path in paths:  # serving recovers by itself
                resp = await client.get(path)
                assert resp.status in (200, 204), (leave, path, await resp.text())
            await client.close()
    assert 507 in seen
