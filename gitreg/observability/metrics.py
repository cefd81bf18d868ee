"""Observability: `GET /metrics` (Prometheus text format) and `GET /readyz`.

Each application owns its own `CollectorRegistry` (no process-wide default registry: two
apps in one process, as in the tests, must not share or clash over counters). Labels are
bounded: the route label is the route *template* (`/v1/modules/{namespace}/...`), the method
one of METHODS or `other`, and the git host label is the host name only (never user info, a
path or a query: urls.host_label), capped at MAX_HOSTS distinct values.
"""

from __future__ import annotations

import os
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from gitreg.core import urls
from gitreg.core.errors import GitregError, Unauthorized, failure_kind
from gitreg.core.secrets import bearer_token, digest, same_secret
from gitreg.observability.collectors import (
    LATENCY_BUCKETS,
    MAX_HOSTS,
    CacheCollector,
    CredentialCounter,
    IdentityCollector,
    Latency,
    OrgCollector,
    PoolCollector,
    RequestCounter,
    RequestLatency,
    RequestStats,
    Watched,
)

if TYPE_CHECKING:
    from aiohttp import web  # (an annotation only: the index process imports no aiohttp server)

    from gitreg.forges.base import OrgStats
    from gitreg.git.pool import GitPool
    from gitreg.git.remote import TagList
    from gitreg.index.store import ModuleIndex
    from gitreg.orgs.service import OrgCatalog
    from gitreg.registry.declared import Declarations
    from gitreg.registry.tags import TagCache
    from gitreg.replicas.base import SharedState

ListTags = Callable[[str], "TagList"]

# git ls-remote duration buckets: a warm host answers in tens of milliseconds, a slow one times out.
GIT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
UNMATCHED_ROUTE = "unmatched"
# The method label's values: a client may send any token as a method (aiohttp's pure-Python
# parser passes it on), and each would otherwise become a time series of its own.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
OTHER_METHOD = "other"


class Lifecycle:
    """Readiness (`/readyz`'s one view): True once every service is up, False again as soon as
    shutdown begins; while ready, the state of the index and of the replicas' shared store."""

    def __init__(self) -> None:
        self.ready = False
        self.reason = "starting"
        self._parts: tuple[ModuleIndex, SharedState] | None = None  # what a ready answer reports

    def up(self, index: ModuleIndex, shared: SharedState) -> None:
        """Every service started (the last cleanup context): ready, reporting on these."""
        self._parts = (index, shared)
        self.ready, self.reason = True, "ready"

    def down(self) -> None:
        """Shutdown began, before any service closes: not ready any more."""
        self.ready, self.reason = False, "stopping"

    def report(self) -> dict[str, Any] | None:
        """The ready answer: the index's state (serving never waits for it) and the shared
        store's; None while not ready (`reason` says why)."""
        if not self.ready or self._parts is None:
            return None
        index, shared = self._parts
        return {
            "status": "ready",
            "index": {
                "complete": index.complete,
                "modules": len(index),
                "queued": index.queue_depth(),
                "age_seconds": round(index.age(), 1),
            },
            "shared": shared.status(),
            "pid": os.getpid(),
        }


class Metrics:
    """The application's metrics and the instruments that feed them."""

    content_type = CONTENT_TYPE_LATEST  # of render()'s output

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # Counted on every request: plain Python, read at scrape time (see collectors.RequestStats).
        self._request_stats = RequestStats()
        self.requests = RequestCounter(self._request_stats)
        self.latency = RequestLatency(self._request_stats)
        self.registry.register(self.requests)
        self.credentials = CredentialCounter()
        self.registry.register(self.credentials)
        self.registry.register(self.latency)
        self.git_calls = Counter(
            "gitreg_upstream_git_calls",
            "git ls-remote calls to upstream hosts.",
            ["host"],
            registry=self.registry,
        )
        self.git_failures = Counter(
            "gitreg_upstream_git_failures",
            "Failed git ls-remote calls, by host and reason (timeout, not_found, error).",
            ["host", "reason"],
            registry=self.registry,
        )
        self.git_duration = Histogram(
            "gitreg_upstream_git_duration_seconds",
            "Duration of git ls-remote calls, by host.",
            ["host"],
            buckets=GIT_BUCKETS,
            registry=self.registry,
        )
        self.webhooks = Counter(
            "gitreg_webhook_events",
            "Webhook deliveries, by provider and result.",
            ["provider", "result"],
            registry=self.registry,
        )
        self._watched = Watched()
        self.registry.register(CacheCollector(self._watched))
        self.registry.register(OrgCollector(self._watched))
        self._hosts: set[str] = set()

    def watch_git(self, running: Callable[[], int]) -> None:
        """Report `running()` (git processes running now: calls to Git hosts and on gitreg's mirrors) at scrape time."""
        self._watched.git_running = running

    def watch_orgs(self, orgs: OrgCatalog) -> None:
        """Expose each org's API calls, failures, rate-limit quota, modules and listing age (read at scrape time)."""
        self._watched.orgs = orgs

    def watch_shared(self, shared: SharedState) -> None:
        """Expose the Redis connection's state (with `[cache] backend = "redis"`; nothing for memory)."""
        self._watched.shared = shared

    def watch_identities(self, source: Callable[[], list[tuple[str, OrgStats]]]) -> None:
        """Expose the identity API calls (`source()`: (host label, its counters)) at scrape time."""
        self.registry.register(IdentityCollector(source))

    def watch_declarations(self, declarations: Declarations) -> None:
        """Expose the downloads of deprecated versions and the requests for revoked ones, by module."""
        self.registry.register(_LifecycleCollector(declarations))

    def watch_cache(self, cache: TagCache) -> None:
        """Expose `cache.stats` and entry ages (read at scrape time, so the cache knows nothing of Prometheus)."""
        self._watched.cache = cache

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        """Count one answered request (on the event loop)."""
        stats = self._request_stats
        key = (route, method, status)
        if key in stats.counts:
            stats.counts[key] += 1
        else:
            stats.counts[key] = 1
            stats.created.setdefault(key, time.time())
        latency = stats.latency.get(route)
        if latency is None:
            latency = stats.latency[route] = Latency()
        latency.buckets[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        latency.total += seconds

    def _host_label(self, url: str) -> str:
        host = urls.host_label(url)
        if host not in self._hosts:
            if len(self._hosts) >= MAX_HOSTS:
                return "other"
            self._hosts.add(host)
        return host

    def instrument_ls_remote(self, list_tags: ListTags) -> ListTags:
        """Wrap the blocking tag lister: count calls, failures and duration per host.

        Counted in the git pool's thread, when git really runs: a call dropped from the
        queue (its client hung up) is no git call.
        """

        def instrumented(url: str) -> TagList:
            host = self._host_label(url)
            self.git_calls.labels(host).inc()
            started = time.monotonic()
            try:
                return list_tags(url)
            except GitregError as e:
                reason = failure_kind(e)
                self.git_failures.labels(host, reason).inc()
                raise
            except Exception:
                self.git_failures.labels(host, "error").inc()
                raise
            finally:
                self.git_duration.labels(host).observe(time.monotonic() - started)

        return instrumented

    def watch_pool(self, pool: GitPool) -> None:
        """Expose the git pool's queue, running jobs and refusals (read at scrape time)."""
        self.registry.register(PoolCollector(pool))

    def webhook(self, provider: str, result: str) -> None:
        """Count one webhook delivery by its outcome."""
        self.webhooks.labels(provider, result).inc()

    def render(self) -> bytes:
        """The Prometheus text exposition of everything above."""
        return generate_latest(self.registry)


_DEPRECATED_HELP = "Download answers for versions .gitreg.toml deprecates, by module."
_REVOKED_HELP = "Download and archive requests for versions .gitreg.toml revokes (410), by module."


class _LifecycleCollector(Collector):
    """`gitreg_deprecated_downloads_total{module}` and `gitreg_revoked_requests_total{module}` (by module
    only, never by who asked; the labels bounded by declared.MAX_LABELS), read at scrape time."""

    def __init__(self, declarations: Declarations) -> None:
        self._declarations = declarations

    def collect(self) -> Iterator[CounterMetricFamily]:
        found = self._declarations
        for name, help_text, counts in (
            (
                "gitreg_deprecated_downloads",
                "Download answers for versions .gitreg.toml deprecates, by module.",
                found.deprecated_downloads,
            ),
            (
                "gitreg_revoked_requests",
                "Download and archive requests for versions .gitreg.toml revokes (410), by module.",
                found.revoked_requests,
            ),
        ):
            family = CounterMetricFamily(name, help_text, labels=["module"])
            for module, count in sorted(counts.counts.items()):
                family.add_metric([module], count)
            yield family


def check_metrics_token(request: web.Request, token: str | None) -> None:
    """`[auth] metrics_token`, when set, as `Authorization: Bearer <token>` (constant-time)."""
    if token is None:
        return
    if not same_secret(bearer_token(request.headers.get("Authorization")), digest(token)):
        raise Unauthorized("GET /metrics needs 'Authorization: Bearer <[auth] metrics_token>'")
