"""Observability: `GET /metrics` (Prometheus text format) and `GET /readyz`.

Each application owns its own `CollectorRegistry` (no process-wide default registry: two
apps in one process, as in the tests, must not share or clash over counters). Labels are
bounded: the route label is the route *template* (`/v1/modules/{namespace}/...`), the method
one of METHODS or `other`, and the git host label is the host name only (never user info, a
path or a query: urls.host_label), capped at MAX_HOSTS distinct values.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, ClassVar

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from gitreg.core import urls
from gitreg.core.errors import GitregError, Unauthorized, failure_kind
from gitreg.core.secrets import digest, same_secret
from gitreg.git.pool import Priority

if TYPE_CHECKING:
    from gitreg.git.pool import GitPool
    from gitreg.git.remote import TagList
    from gitreg.orgs.catalog import OrgCatalog
    from gitreg.registry.tags import TagCache
    from gitreg.replicas.shared import SharedState

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ListTags = Callable[[str], "TagList"]

# Request latency buckets: the warm path answers in about a millisecond, a cold one waits for git.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
GIT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
MAX_HOSTS = 100
UNMATCHED_ROUTE = "unmatched"
# The method label's values: a client may send any token as a method (aiohttp's pure-Python
# parser passes it on), and each would otherwise become a time series of its own.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
OTHER_METHOD = "other"


class Lifecycle:
    """Readiness: True once every service is up, False again as soon as shutdown begins."""

    def __init__(self) -> None:
        self.ready = False
        self.reason = "starting"


class Metrics:
    """The application's metrics and the instruments that feed them."""

    content_type = CONTENT_TYPE_LATEST  # of render()'s output

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # Counted on every request: plain Python, read at scrape time (see _RequestStats).
        self._request_stats = _RequestStats()
        self.requests = _RequestCounter(self._request_stats)
        self.latency = _RequestLatency(self._request_stats)
        self.registry.register(self.requests)
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
        self._cache: TagCache | None = None
        self._shared: SharedState | None = None
        self._git_running: Callable[[], int] | None = None
        self.registry.register(_CacheCollector(self))
        self._orgs: OrgCatalog | None = None
        self.registry.register(_OrgCollector(self))
        self._hosts: set[str] = set()

    def watch_git(self, running: Callable[[], int]) -> None:
        """Report `running()` (git processes running now: calls to Git hosts and on gitreg's mirrors) at scrape time."""
        self._git_running = running

    def watch_orgs(self, orgs: OrgCatalog) -> None:
        """Expose each org's API calls, failures, rate-limit quota, modules and listing age (read at scrape time)."""
        self._orgs = orgs

    def watch_shared(self, shared: SharedState) -> None:
        """Expose the Redis connection's state (with `[cache] backend = "redis"`; nothing for memory)."""
        self._shared = shared

    def watch_cache(self, cache: TagCache) -> None:
        """Expose `cache.stats` and entry ages (read at scrape time, so the cache knows nothing of Prometheus)."""
        self._cache = cache

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
            latency = stats.latency[route] = _Latency()
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
        self.registry.register(_PoolCollector(pool))

    def webhook(self, provider: str, result: str) -> None:
        """Count one webhook delivery by its outcome."""
        self.webhooks.labels(provider, result).inc()

    def render(self) -> bytes:
        """The Prometheus text exposition of everything above."""
        return generate_latest(self.registry)


class _Latency:
    """One route's latency histogram: per-bucket (not cumulative) counts, the last one +Inf."""

    __slots__ = ("buckets", "created", "total")

    def __init__(self) -> None:
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)
        self.total = 0.0
        self.created = time.time()


class _RequestStats:
    """Request counts and latencies in plain dicts and lists.

    prometheus_client's Counter.inc and Histogram.observe take a lock and go through a few
    layers each call; for a warm request, answered in tens of microseconds, that showed in
    bench/warm_path.py. Requests are only counted on the event loop, and scrapes run there
    too, so nothing here needs a lock.
    """

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str, int], int] = {}
        self.created: dict[tuple[str, str, int], float] = {}
        self.latency: dict[str, _Latency] = {}


class _RequestCounter(Collector):
    """`gitreg_http_requests_total{route,method,status}`, as a prometheus Counter would expose it."""

    def __init__(self, stats: _RequestStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "gitreg_http_requests",
            "HTTP requests answered, by route template, method and status.",
            labels=["route", "method", "status"],
        )
        stats = self._stats
        for (route, method, status), count in list(stats.counts.items()):
            family.add_metric([route, method, str(status)], count, created=stats.created[(route, method, status)])
        yield family


class _RequestLatency(Collector):
    """`gitreg_http_request_duration_seconds{route}`, as a prometheus Histogram would expose it."""

    NAME = "gitreg_http_request_duration_seconds"

    def __init__(self, stats: _RequestStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(
            self.NAME, "Time to answer an HTTP request, by route template.", labels=["route"]
        )
        for route, latency in list(self._stats.latency.items()):
            cumulative, buckets = 0, []
            for bound, count in zip((*LATENCY_BUCKETS, float("inf")), latency.buckets, strict=False):
                cumulative += count
                # prometheus_client does not annotate floatToGoString (its "+Inf" and "0.005" labels).
                buckets.append((floatToGoString(bound), cumulative))  # type: ignore[no-untyped-call]
            family.add_metric([route], buckets, sum_value=latency.total)
            family.samples.append(Sample(f"{self.NAME}_created", {"route": route}, latency.created))
        yield family


class _CacheCollector(Collector):
    """Reads the tag cache's counters at scrape time."""

    # CacheStats field -> (metric name, help)
    COUNTERS: ClassVar[dict[str, tuple[str, str]]] = {
        "hits": ("gitreg_cache_hits", "Tag lists served fresh from the cache."),
        "misses": ("gitreg_cache_misses", "Requests that needed an upstream git call (started or joined)."),
        "coalesced": ("gitreg_cache_coalesced_waits", "Requests that waited for a git call another request started."),
        "stale_served": ("gitreg_cache_stale_served", "Expired tag lists served (refresh failed, or refresh-ahead)."),
        "negative_hits": ("gitreg_cache_negative_hits", "'Repository not found' answered from the cache."),
        "refreshes": ("gitreg_cache_refreshes", "Upstream tag list refreshes started."),
        "refresh_failures": ("gitreg_cache_refresh_failures", "Upstream tag list refreshes that failed."),
        "invalidations": ("gitreg_cache_invalidations", "Cache invalidations (webhooks)."),
        "evictions": ("gitreg_cache_evictions", "Tag lists dropped by [cache] max_repositories."),
        "errors_served": (
            "gitreg_cache_errors_served",
            "Upstream failures answered again without a git call ([cache] error_retry_seconds).",
        ),
    }

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        # Resources that must come back down after a burst (bench/load.py reads them).
        try:
            tasks = len(asyncio.all_tasks())
        except RuntimeError:  # collected outside the event loop
            tasks = None
        if tasks is not None:
            yield GaugeMetricFamily(
                "gitreg_event_loop_tasks", "asyncio tasks alive (requests, refreshes, builds).", value=tasks
            )
        if self._metrics._git_running is not None:
            yield GaugeMetricFamily(
                "gitreg_git_processes",
                "git processes running now (calls to Git hosts, and on gitreg's mirrors: archives, details).",
                value=self._metrics._git_running(),
            )
        yield from _shared_metrics(self._metrics._shared)
        cache = self._metrics._cache
        if cache is None:
            return
        for field, (name, help_text) in self.COUNTERS.items():
            yield CounterMetricFamily(name, help_text, value=getattr(cache.stats, field))
        yield GaugeMetricFamily("gitreg_cache_repositories", "Repositories with a cached tag list.", value=len(cache))
        yield GaugeMetricFamily(
            "gitreg_cache_oldest_served_age_seconds",
            "The largest age (since fetched from git) a cached tag list had when it was last served.",
            value=cache.oldest_served_age(),
        )
        yield GaugeMetricFamily(
            "gitreg_cache_oldest_entry_age_seconds",
            "Seconds since the oldest cached tag list was fetched.",
            value=cache.oldest_age(),
        )


class _OrgCollector(Collector):
    """Reads the org catalog's per-org counters at scrape time; the label is the org as configured
    (`provider:group`), so there are as many label values as `[[orgs]]` entries."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        orgs = self._metrics._orgs
        calls = CounterMetricFamily(
            "gitreg_org_api_calls", "REST API calls made to list an org's repositories.", labels=["org"]
        )
        failures = CounterMetricFamily(
            "gitreg_org_api_failures",
            "Failed or rate-limited org API calls, by reason "
            "(rate_limited, timeout, error, not_found, unauthorized, bad_json).",
            labels=["org", "reason"],
        )
        remaining = GaugeMetricFamily(
            "gitreg_org_rate_limit_remaining",
            "API calls left in the current rate-limit window, as the host last said.",
            labels=["org"],
        )
        modules = GaugeMetricFamily("gitreg_org_modules", "Modules the org's listing serves.", labels=["org"])
        repositories = GaugeMetricFamily(
            "gitreg_org_repositories", "Repositories in the org's listing.", labels=["org"]
        )
        age = GaugeMetricFamily(
            "gitreg_org_listing_age_seconds",
            "Seconds since the org was last listed successfully (+Inf: never).",
            labels=["org"],
        )
        now = time.time()
        # The families are exposed without orgs too (no samples): dashboards and alerts can be set up first.
        for org, stats in orgs.stats() if orgs is not None else ():
            label = org.label[:100]
            calls.add_metric([label], stats.calls)
            for reason, count in sorted(stats.failures.items()):
                failures.add_metric([label, reason], count)
            if stats.rate_remaining is not None:
                remaining.add_metric([label], stats.rate_remaining)
            modules.add_metric([label], stats.modules)
            repositories.add_metric([label], stats.repositories)
            age.add_metric([label], now - stats.last_success if stats.last_success is not None else float("inf"))
        yield from (calls, failures, remaining, modules, repositories, age)


class _PoolCollector(Collector):
    """Reads the git pool's queue and counters at scrape time."""

    def __init__(self, pool: GitPool) -> None:
        self._pool = pool

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        pool = self._pool
        depth = GaugeMetricFamily(
            "gitreg_git_queue_depth", "git calls waiting for a slot, by priority.", labels=["priority"]
        )
        running = GaugeMetricFamily("gitreg_git_running", "git calls running now, by priority.", labels=["priority"])
        rejected = CounterMetricFamily(
            "gitreg_git_rejected",
            "git calls refused because the queue was full ([git] max_queue), by priority.",
            labels=["priority"],
        )
        abandoned = CounterMetricFamily(
            "gitreg_git_abandoned",
            "git calls dropped before they started because nobody waited for them any more, by priority.",
            labels=["priority"],
        )
        queued, busy = pool.queue_depth(), pool.running()
        for p in Priority:
            name = p.name.lower()
            depth.add_metric([name], queued[p])
            running.add_metric([name], busy[p])
            rejected.add_metric([name], pool.rejected[p])
            abandoned.add_metric([name], pool.abandoned[p])
        yield from (depth, running, rejected, abandoned)
        per_host = GaugeMetricFamily(
            "gitreg_git_running_per_host", "git calls running now, by host ([git] max_per_host).", labels=["host"]
        )
        hosts = sorted(pool.running_per_host().items(), key=lambda item: -item[1])
        for host, count in hosts[:MAX_HOSTS]:
            per_host.add_metric([host], count)
        if len(hosts) > MAX_HOSTS:
            per_host.add_metric(["other"], sum(count for _, count in hosts[MAX_HOSTS:]))
        yield per_host


def _shared_metrics(shared: SharedState | None) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
    """`gitreg_redis_up` and how tag lists were loaded, with the Redis backend (never its URL)."""
    from gitreg.replicas.shared import RedisShared

    up = GaugeMetricFamily(
        "gitreg_redis_up", "1 while Redis answers; 0 while this replica serves from its own memory.", labels=[]
    )
    leader = GaugeMetricFamily(
        "gitreg_index_leader", "1 while this replica builds the index (holds the lease, or Redis is down).", labels=[]
    )
    errors = CounterMetricFamily("gitreg_redis_errors", "Redis commands or connections that failed.", labels=[])
    loads = CounterMetricFamily(
        "gitreg_shared_tag_loads",
        "Tag cache misses by how they were answered: shared (Redis had it), led (this replica "
        "ran git under the lock), waited (another replica ran git), local (Redis down).",
        labels=["result"],
    )
    # With the memory backend the families are there without samples (dashboards can be set up first).
    if isinstance(shared, RedisShared):
        up.add_metric([], 1 if shared.up else 0)
        leader.add_metric([], 1 if shared.leading() else 0)
        errors.add_metric([], shared.errors)
        for result, count in shared.tag_loads.items():
            loads.add_metric([result], count)
    yield from (up, leader, errors, loads)


def route_label(request: web.Request) -> str:
    """The route template that served the request, never the raw path (bounded cardinality)."""
    route = request.match_info.route
    resource = route.resource if route is not None else None
    if resource is None:
        return UNMATCHED_ROUTE
    return resource.canonical


def metrics_middleware(metrics: Metrics) -> Middleware:
    """The outermost middleware: times every request and counts it by route and final status."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as e:  # redirects (3xx) are raised, not returned
            status = e.status
            raise
        except asyncio.CancelledError:
            status = 499  # the client went away (nginx's convention)
            raise
        finally:
            method = request.method if request.method in METHODS else OTHER_METHOD
            metrics.observe_request(route_label(request), method, status, time.perf_counter() - started)

    return middleware


def check_metrics_token(request: web.Request, token: str | None) -> None:
    """`[auth] metrics_token`, when set, as `Authorization: Bearer <token>` (constant-time)."""
    if token is None:
        return
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not same_secret(presented, digest(token)):
        raise Unauthorized("GET /metrics needs 'Authorization: Bearer <[auth] metrics_token>'")
