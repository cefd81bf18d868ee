"""Storage: an archive rule, a config with storage, index.json entries."""

from __future__ import annotations

import asyncio
import time

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
