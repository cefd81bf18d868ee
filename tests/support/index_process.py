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

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from gitreg.config.model import Config
from gitreg.core.names import ModuleAddress
from gitreg.index.child import IndexSide
from gitreg.index.model import IndexEntry
from gitreg.index.process import Role, index_config
from gitreg.index.protocol import Seed, Want
from gitreg.services.compose import Services


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
