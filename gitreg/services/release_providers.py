"""The providers served from releases (`[[providers]]`), as the serving process runs them.

Built by compose.Services for the serving process only, and imported there when it does: the index
process never serves a provider, so its start does not import them (#33).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path

import aiohttp

from gitreg.config.model import Config
from gitreg.git.mirror import MirrorGit
from gitreg.git.pool import GitPool
from gitreg.git.remote import GitAdapter
from gitreg.providers.hashstore import HashStore
from gitreg.providers.packages import DIRECTORY as PACKAGES_DIRECTORY
from gitreg.providers.packages import PackageFiles
from gitreg.providers.readme import ReleaseReadmes
from gitreg.providers.service import Providers
from gitreg.registry.tags import TagCache
from gitreg.services.provider_hashes import WorkerHasher
from gitreg.storage.budget import StorageBudget
from gitreg.storage.mirrors import MirrorStore


@contextlib.asynccontextmanager
async def running_providers(
    config: Config,
    storage: Path,
    budget: StorageBudget,
    cache: TagCache,
    mirrors: MirrorStore,
    git: GitAdapter,
    pool: GitPool,
    clock: Callable[[], float],
    repository_names: Callable[[], list[tuple[str, str]]],
) -> AsyncIterator[Providers]:
    """Providers with their keys imported, and a session of their own toward the Git hosts (bytes
    passed on as they come: no decompression); stopped at the end."""
    sessions: list[aiohttp.ClientSession] = []

    def session() -> aiohttp.ClientSession:
        if not sessions:
            sessions.append(aiohttp.ClientSession(auto_decompress=False, trust_env=False, read_bufsize=1 << 20))
        return sessions[0]

    hasher = WorkerHasher()  # the packages' `h1:` hashes, computed in parse workers
    hashes = HashStore(storage, hasher)
    packages = PackageFiles(storage / PACKAGES_DIRECTORY, budget)  # verified zips, in the budget

    async def tag_shas(url: str) -> Mapping[str, str]:
        return (await cache.get(url)).tags

    readmes = ReleaseReadmes(tag_shas, mirrors, MirrorGit(git), pool)  # READMEs at release tags
    providers = Providers(config, session, clock, hashes, packages, repository_names, readmes)
    await providers.start()
    try:
        yield providers
    finally:
        await providers.aclose()  # its packages' fetches stopped, its GNUPGHOMEs removed
        await hasher.close()
        for opened in sessions:
            await opened.close()
