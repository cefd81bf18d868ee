"""Bare mirrors of served repositories under `[storage] path`, for archives and module details.

A mirror is created in a temporary directory and renamed into place only when its first
fetch succeeded, so a crash never leaves a half-made mirror that looks complete. It is
fetched again only when a commit we need is missing (the tag list changed).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shutil
import uuid
from pathlib import Path

from .git_adapter import MirrorGit, mask_url
from .gitpool import GitPool
from .urls import host_label as git_host

log = logging.getLogger(__name__)


class MirrorStore:
    """One bare mirror per repository URL, created and updated under a per-URL lock."""

    def __init__(self, root: Path, git: MirrorGit, pool: GitPool) -> None:
        self.root = root
        self.git = git
        self.pool = pool
        self._locks: dict[str, asyncio.Lock] = {}
        self.fetches = 0

    def prepare(self) -> None:
        """Create the directory and remove what a crash may have left (temp mirrors, git lock files)."""
        self.root.mkdir(parents=True, exist_ok=True)
        for entry in self.root.iterdir():
            if entry.name.startswith("tmp-"):
                shutil.rmtree(entry, ignore_errors=True)
            elif entry.suffix == ".git":
                for lock in entry.rglob("*.lock"):
                    lock.unlink(missing_ok=True)
                # A killed fetch's half-written pack or object: never referenced, only disk used.
                for partial in (*entry.glob("objects/pack/tmp_*"), *entry.glob("objects/??/tmp_obj_*")):
                    partial.unlink(missing_ok=True)

    def path_for(self, url: str) -> Path:
        """Where the mirror of `url` lives (a hash: URLs are not file names)."""
        return self.root / (hashlib.sha256(url.encode()).hexdigest()[:40] + ".git")

    async def ensure(self, url: str, sha: str) -> Path:
        """The mirror of `url`, holding commit `sha` (cloned or fetched as needed)."""
        path = self.path_for(url)
        host = git_host(url)
        if path.is_dir() and await self.pool.run(self.git.has_commit, str(path), sha, host=host):
            return path
        lock = self._locks.setdefault(url, asyncio.Lock())
        async with lock:
            if path.is_dir():
                if not await self.pool.run(self.git.has_commit, str(path), sha, host=host):
                    log.info("fetching tags of %s into its mirror", mask_url(url))
                    self.fetches += 1
                    await self.pool.run(self.git.fetch_tags, str(path), url, host=host)
            else:
                log.info("creating a mirror of %s", mask_url(url))
                self.fetches += 1
                tmp = self.root / f"tmp-{uuid.uuid4().hex}"
                try:
                    await self.pool.run(self.git.init, str(tmp), host=host)
                    await self.pool.run(self.git.fetch_tags, str(tmp), url, host=host)
                    os.replace(tmp, path)
                finally:
                    if tmp.exists():
                        shutil.rmtree(tmp, ignore_errors=True)
        return path
