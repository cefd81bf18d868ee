"""`gitreg check --probe`: every org enumerated once, now, through its host's API."""

from __future__ import annotations

import aiohttp

from gitreg.config.model import Config
from gitreg.orgs.catalog import OrgCatalog
from gitreg.orgs.model import OrgReport


async def probe_orgs(config: Config) -> list[OrgReport]:
    """Enumerate every org once, now, without persisting anything (what each lists, and why not)."""
    catalog = OrgCatalog(config, None)
    await enumerate_orgs(config, catalog)
    return catalog.report()


async def enumerate_orgs(config: Config, catalog: OrgCatalog) -> None:
    """List every org of `catalog` (made with no path: nothing persisted) once, now."""
    async with aiohttp.ClientSession(trust_env=False) as session:
        catalog.open(session)
        for index in range(len(config.orgs)):
            await catalog.enumerate(index)
