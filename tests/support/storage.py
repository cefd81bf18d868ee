"""Storage: an archive rule, a config with storage, index.json entries."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitreg.config.model import Config
from tests.support.app import make_config as _make_config


def make_config(modules: list[dict[str, object]], **sections: object) -> Config:
    """These tests hold the storage bound to what their requests build: no background index
    mirroring modules for their details at the same time (a mirror in use may pass the bound)."""
    return _make_config(modules, index={"enabled": False}, **sections)


def archive_rule(name: str, url: str, **extra: object) -> dict[str, object]:
    return {"namespace": "demo", "name": name, "system": "null", "repository": url, "download": "archive", **extra}


async def wait_until(condition, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        await asyncio.sleep(0.05)
    return condition()


def entry(name: str, versions: list[object], latest: object) -> dict[str, object]:
    return {
        "address": f"acme/{name}/aws",
        "repository": f"https://git.example/{name}.git",
        "versions": [[v, f"v{v}", "a" * 40] for v in versions],
        "latest": latest,
        "description": name,
    }


@contextlib.contextmanager
def small_disk(path: Path, size: str = "2m") -> Iterator[Path]:
    """A tmpfs of `size` mounted at `path`, unmounted after the block."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(disk: Path, leave: int = 0) -> Path:
    """Write a file until the disk is full but for `leave` bytes; the file (remove it to free the space)."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:
        with pytest.raises(OSError, match="No space left") as full:  # noqa: PT012 - writing until the disk refuses is the point
            while True:
                f.write(b"\0" * 4096)
        assert full.value.errno == errno.ENOSPC
        f.truncate(max(0, f.tell() - leave))
    return filler
