"""The application factory: HTTP wired to the services of the composition root (gitreg/services).

`create_app` makes the `Services` for the config and role, runs them in one cleanup context (built
at startup, closed at cleanup), and gives the handlers the facades they ask under typed app keys
(keys.py); the routes are registered here, each wrapped by its declared rule (routing.py), the pages by `add_ui`.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from gitreg.config.model import Config
from gitreg.index.process import EarlyStart, Role, serve_role
from gitreg.observability.logs import ServerLogger
from gitreg.services.compose import Services
from gitreg.web.api.browse import browse_routes
from gitreg.web.api.modules import routes
from gitreg.web.api.oauth import oauth_routes
from gitreg.web.api.providers import provider_routes
from gitreg.web.api.usage import usage_routes
from gitreg.web.api.webhooks import webhook_routes
from gitreg.web.keys import (
    BROWSE,
    CACHE,
    CATALOG,
    CLOCK,
    CONFIG,
    DETAILS,
    GIT,
    GIT_POOL,
    IDENTITY,
    INDEX,
    INSTALLS,
    LIFECYCLE,
    METRICS,
    MIRRORS,
    ORGS,
    PROVENANCE,
    PROVIDERS,
    PUBLISHER,
    REGISTRY,
    SIGNER,
    USAGE,
)
from gitreg.web.pages.views import add_ui
from gitreg.web.routing import Routes
from gitreg.web.signing import UrlSigner

log = logging.getLogger(__name__)


def _serving(services: Services) -> Callable[[web.Application], AsyncIterator[None]]:
    """The cleanup context that runs `services` for the application, and hands the handlers their facades."""

    async def context(app: web.Application) -> AsyncIterator[None]:
        async with services.running():
            app[GIT_POOL] = services.pool
            app[GIT] = services.git
            app[CACHE] = services.cache
            app[ORGS] = services.orgs
            app[CATALOG] = services.catalog
            app[REGISTRY] = services.registry
            app[PUBLISHER] = services.publisher
            app[MIRRORS] = services.mirrors
            app[DETAILS] = services.details
            app[INDEX] = services.index
            app[BROWSE] = services.browse
            app[IDENTITY] = services.identities
            app[PROVIDERS] = services.providers
            app[INSTALLS] = services.installs
            app[USAGE] = services.usage
            app[PROVENANCE] = services.provenance
            yield

    return context


async def _stopping(app: web.Application) -> None:
    """on_shutdown runs before in-flight requests finish: /readyz says 503 from here on."""
    app[LIFECYCLE].down()


def create_app(
    config: Config,
    clock: Callable[[], float] = time.monotonic,
    role: Role | None = None,
    wall_clock: Callable[[], float] = time.time,
    early: EarlyStart | None = None,
) -> web.Application:
    """Build the aiohttp application for an already-validated config; `clock` is the tag cache's
    and the identities' (services.compose.Services), `wall_clock` (Unix time) the observed installs'.

    `role`: what `gitreg serve` runs (index.process.serve_role) unless given: Role.SERVE with the
    index on (the index process, indexer.py, builds it), Role.ALL with it off. `early`: that index
    process, started already (cli/server.py).
    """
    services = Services(config, role or serve_role(config), clock, wall_clock=wall_clock, early=early)
    app = web.Application(
        client_max_size=64 * 1024,
        # A request aiohttp's HTTP parser refuses is logged as one line, not an ERROR with a traceback.
        handler_args={"logger": ServerLogger(logging.getLogger("aiohttp.server"))},
    )
    app[CONFIG] = config
    app[CLOCK] = clock
    # Without a configured key (auth off: archive URLs need no signature) a random one will do.
    app[SIGNER] = UrlSigner(config.auth.signing_key or secrets.token_hex(32), config.auth.signed_url_ttl_seconds)
    app[METRICS] = services.metrics
    app[LIFECYCLE] = services.lifecycle
    app.cleanup_ctx.append(_serving(services))
    table = Routes(app, services.metrics, config.auth.enabled)  # each handler wrapped by its declared rule (routing.py)
    table.add(routes)
    table.add(usage_routes)  # before browse_routes: `.../{system}/consumers` is not a {version}
    table.add(browse_routes)  # after routes: `.../{system}/versions` must not become a {version}
    table.add(webhook_routes)
    table.add(oauth_routes)
    table.add(provider_routes)  # providers.v1 (web/api/providers.py)
    table.add(add_ui(app), page=True)
    table.add_unrouted()
    app.on_shutdown.append(_stopping)
    return app
