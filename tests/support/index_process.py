"""What the index process builds, for the tests of the index builder itself; a version's details
once `gitreg serve`'s index process has read them.

`python -m gitreg.indexer` (gitreg/indexer.py) runs the services of Role.INDEX from the Seed the
serving process sends (its config without secrets, index.process.index_config): no HTTP
application, no port. `index_services(config)` builds the same services in the test's process,
with the IndexSide that applies the serving process's commands (a Want: someone asked for a
version's details), so a test can look at the builder's own counters (details builds, scratch
fetches, parse workers) that the serving process of `gitreg serve` never has.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from gitreg.config.model import Config
from gitreg.core.names import ModuleAddress
from gitreg.index.child import IndexSide
from gitreg.index.model import IndexEntry
from gitreg.index.process import Role, index_config
from gitreg.index.protocol import Seed, Want
from gitreg.services.compose import Services
from tests.support.app import indexed
from tests.support.index import get_json, names


@dataclass
class Indexer:
    """The index process's services and its side of the pipe."""

    services: Services
    side: IndexSide

    def want(self, address: ModuleAddress, version: str) -> None:
        """What the serving process says when someone asks for details it has not got."""
        self.side.apply(Want(address, version))

    async def settled(self, timeout: float = 30.0) -> None:
        """Wait until nothing is waiting to be indexed."""
        await self.services.index.settled(timeout)

    def entry(self, address: ModuleAddress) -> IndexEntry:
        """The module's index entry (listed)."""
        entry = self.services.index.get(address)
        assert entry is not None, f"{address} is not listed"
        return entry


@contextlib.asynccontextmanager
async def index_services(config: Config) -> AsyncIterator[Indexer]:
    """The services `python -m gitreg.indexer` runs for `config`, closed at the end as it closes them."""
    seed = Seed(index_config(config), logging.getLogger().getEffectiveLevel(), False)
    async with Services(seed.config, Role.INDEX, seed=seed).running() as services:
        side = IndexSide(seed, services.index, services.catalog, services.orgs, services.cache, services.registry)
        yield Indexer(services, side)


async def read_details(client, url: str, timeout: float = 30.0, **kwargs):
    """GET a version's details until they answer: while the index process reads them (asked by
    the first GET), a 503 "being read" (Retry-After). The serving process hears that they were
    read only from the index process's next report (every FEED_SECONDS): until then its index may
    say settled with the read still to come, so one ask after `indexed` may still be a 503."""
    deadline = time.monotonic() + timeout
    while (resp := await client.get(url, **kwargs)).status == 503:
        assert resp.headers["Retry-After"] == "2"
        assert "being read" in (await resp.json())["errors"][0]
        assert time.monotonic() < deadline, f"{url}: the details were not read"
        await indexed(client)
        await asyncio.sleep(0.05)
    return resp


async def until_listed(client, expected: list[str], timeout: float = 10.0) -> None:
    """Wait until /v1/modules lists the modules named `expected`: a change the serving process
    tells the index process of (a tag list it fetched) is indexed there, and reaches the serving
    process with the index process's next report (`indexed` may return before it)."""
    deadline = time.monotonic() + timeout
    while (listed := names(await get_json(client, "/v1/modules"))) != expected:
        assert time.monotonic() < deadline, f"listed {listed}, not {expected}"
        await asyncio.sleep(0.05)
