"""Typed keys for the state an application owns (no module-level singletons).

Annotation-only: each key's type is an annotation (under `from __future__ import annotations`,
never evaluated at run time), so importing a handler does not import every service module.
The services import nothing from here; web/app.py sets them from the composition root's
Services (gitreg/services).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from gitreg.config.model import Config
    from gitreg.git.pool import GitPool
    from gitreg.git.remote import GitAdapter
    from gitreg.identity.door import Identities
    from gitreg.index.browse import BrowseService
    from gitreg.index.details import DetailsService
    from gitreg.index.store import ModuleIndex
    from gitreg.observability.metrics import Lifecycle, Metrics
    from gitreg.orgs.service import OrgCatalog
    from gitreg.providers.service import Providers
    from gitreg.registry.catalog import Catalog
    from gitreg.registry.provenance import Provenances
    from gitreg.registry.publish import Publisher
    from gitreg.registry.service import Registry
    from gitreg.registry.tags import TagCache
    from gitreg.storage.mirrors import MirrorStore
    from gitreg.usage.installs import Installs
    from gitreg.usage.service import Usage
    from gitreg.web.signing import UrlSigner

CONFIG: web.AppKey[Config] = web.AppKey("config")
GIT_POOL: web.AppKey[GitPool] = web.AppKey("git_pool")
GIT: web.AppKey[GitAdapter] = web.AppKey("git")
CACHE: web.AppKey[TagCache] = web.AppKey("cache")
# The registry protocol's facade (versions, downloads, archives): what /v1's install path calls.
REGISTRY: web.AppKey[Registry] = web.AppKey("registry")
# The browse API's facade (list, search, details): what the browsing endpoints call.
BROWSE: web.AppKey[BrowseService] = web.AppKey("browse")
# What a version's page and details say of its commit, archive sha256 and moved tag (registry/provenance.py).
PROVENANCE: web.AppKey[Provenances] = web.AppKey("provenance")
# "Repositories changed": a webhook here, or another replica through Redis.
PUBLISHER: web.AppKey[Publisher] = web.AppKey("publisher")
# The identity door (identity/door.py): who is calling (bearer or page session) and what they may
# read; also the `terraform login` and "Sign in with ..." flows (`logins`, when a host has OAuth).
IDENTITY: web.AppKey[Identities] = web.AppKey("identity")
MIRRORS: web.AppKey[MirrorStore] = web.AppKey("mirrors")
CATALOG: web.AppKey[Catalog] = web.AppKey("catalog")
DETAILS: web.AppKey[DetailsService] = web.AppKey("details")
INDEX: web.AppKey[ModuleIndex] = web.AppKey("index")
METRICS: web.AppKey[Metrics] = web.AppKey("metrics")
LIFECYCLE: web.AppKey[Lifecycle] = web.AppKey("lifecycle")
SIGNER: web.AppKey[UrlSigner] = web.AppKey("signer")
# What the tag cache measures ages and TTLs with (time.monotonic; tests inject their own).
CLOCK: web.AppKey[Callable[[], float]] = web.AppKey("clock")
ORGS: web.AppKey[OrgCatalog] = web.AppKey("orgs")
# Providers served from releases (`[[providers]]`): providers.v1 and the network mirror.
PROVIDERS: web.AppKey[Providers] = web.AppKey("providers")
# Observed CI installs (gitreg/usage/installs.py): recorded by the download answer, shown by "Used by".
INSTALLS: web.AppKey[Installs] = web.AppKey("installs")
# "Used by": the consumers of each module, as the usage scan found them (web/api/usage.py).
USAGE: web.AppKey[Usage] = web.AppKey("usage")
