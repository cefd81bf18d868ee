"""Typed keys for the state an application owns (no module-level singletons)."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from gitreg.config.model import Config
from gitreg.git.pool import GitPool
from gitreg.git.remote import GitAdapter
from gitreg.index.details import DetailsService
from gitreg.index.process import IndexProcess, Role, Seed
from gitreg.index.store import ModuleIndex
from gitreg.observability.metrics import Lifecycle, Metrics
from gitreg.orgs.catalog import OrgCatalog
from gitreg.registry.catalog import Catalog
from gitreg.registry.service import Registry
from gitreg.registry.tags import TagCache
from gitreg.replicas.shared import SharedState
from gitreg.storage.archives import ArchiveStore
from gitreg.storage.mirrors import MirrorStore
from gitreg.web.auth import TokenChecker
from gitreg.web.signing import UrlSigner

CONFIG = web.AppKey("config", Config)
GIT_POOL = web.AppKey("git_pool", GitPool)
GIT = web.AppKey("git", GitAdapter)
CACHE = web.AppKey("cache", TagCache)
REGISTRY = web.AppKey("registry", Registry)
AUTH = web.AppKey("auth", TokenChecker)
MIRRORS = web.AppKey("mirrors", MirrorStore)
CATALOG = web.AppKey("catalog", Catalog)
DETAILS = web.AppKey("details", DetailsService)
INDEX = web.AppKey("index", ModuleIndex)
METRICS = web.AppKey("metrics", Metrics)
LIFECYCLE = web.AppKey("lifecycle", Lifecycle)
ARCHIVES = web.AppKey("archives", ArchiveStore)
SIGNER = web.AppKey("signer", UrlSigner)
# What replicas share (Redis), or this process alone (memory): see shared.py.
SHARED = web.AppKey("shared", SharedState)
# What the tag cache measures ages and TTLs with (time.monotonic; tests inject their own).
CLOCK: web.AppKey[Callable[[], float]] = web.AppKey("clock")
ORGS = web.AppKey("orgs", OrgCatalog)
# What this application does (indexer.Role): all of it, serve with an index process, or be one.
ROLE = web.AppKey("role", Role)
SEED = web.AppKey("seed", Seed)  # the index process's start (Role.INDEX only)
INDEX_PROCESS = web.AppKey("index_process", IndexProcess)  # Role.SERVE only
