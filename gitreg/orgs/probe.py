"""`gitreg check --probe`: every org enumerated once, now, through its host's API.

Address owners are read from the registry's orgs.json (never written), so a conflict shows the
way the running registry resolves it.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp

from gitreg.config.model import Config
from gitreg.orgs.model import OrgReport
from gitreg.orgs.service import OrgCatalog
from gitreg.orgs.store import FILE_NAME


async def probe_orgs(config: Config) -> list[OrgReport]:
    """Enumerate every org once, now, without persisting anything (what each lists, and why not)."""
    catalog = OrgCatalog(config, None)
    await enumerate_orgs(config, catalog)
    return catalog.report()


async def enumerate_orgs(config: Config, catalog: OrgCatalog) -> None:
    """List every org of `catalog` (made with no path: nothing persisted) once, now."""
    # A running registry's owners decide who serves a claimed address: the probe shows the same.
    await catalog.load_owners(Path(config.storage.path) / FILE_NAME)
    async with aiohttp.ClientSession(trust_env=False) as session:
        catalog.open(session)
        for index in range(len(config.orgs)):
            await catalog.enumerate(index)
