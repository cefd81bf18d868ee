"""A version's provenance (commit served, archive sha256, moved tag) for the details API and the pages."""

from __future__ import annotations

from aiohttp import web

from gitreg.index.details import ModuleDetails
from gitreg.index.model import IndexedVersion, IndexEntry
from gitreg.registry.provenance import Provenance
from gitreg.web.keys import PROVENANCE


async def version_provenance(
    request: web.Request, entry: IndexEntry, version: IndexedVersion, details: ModuleDetails | None
) -> Provenance:
    """What `request.app`'s registry says of `version` of `entry` now, with its `details` (None: not
    read yet); no git on this path."""
    read_sha256 = details.archive_sha256 if details is not None else None
    return await request.app[PROVENANCE].of(entry.address, version.tag, version.sha, read_sha256)
