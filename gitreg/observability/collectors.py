"""Prometheus collectors: each reads one part of gitreg at scrape time, which knows nothing of Prometheus.

The request counters are plain dicts filled on the event loop (`RequestStats`, fed by
metrics.Metrics.observe_request) and exposed here as prometheus_client's Counter and Histogram
would expose them; everything else is read from the object it describes (the tag cache, the
shared state, the git pool, the org catalog, the archive store, the index) when scraped.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar
from urllib.parse import urlsplit

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from gitreg.git.pool import Priority

if TYPE_CHECKING:
    from gitreg.forges.base import OrgStats
    from gitreg.git.pool import GitPool
    from gitreg.index.store import ModuleIndex
    from gitreg.orgs.service import OrgCatalog
    from gitreg.registry.tags import TagCache
    from gitreg.replicas.base import SharedState
    from gitreg.storage.archives import ArchiveStore
    from gitreg.storage.pins import TagPins

# Request latency buckets: the warm path answers in about a millisecond, a cold one waits for git.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Distinct values of a host label (upstream git calls, git running per host); the rest is "other".
MAX_HOSTS = 100


@dataclass
class Watched:
    """What the application gave metrics.Metrics to watch (its watch_* methods), read at scrape time."""

    cache: TagCache | None = None
    shared: SharedState | None = None
    git_running: Callable[[], int] | None = None
    orgs: OrgCatalog | None = None


class Latency:
    """One route's latency histogram: per-bucket (not cumulative) counts, the last one +Inf."""

    __slots__ = ("buckets", "created", "total")

    def __init__(self) -> None:
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)
        self.total = 0.0
        self.created = time.time()


class RequestStats:
    """Request counts and latencies in plain dicts and lists.

    prometheus_client's Counter.inc and Histogram.observe take a lock and go through a few
    layers each call; for a warm request, answered in tens of microseconds, that showed in
    bench/warm_path.py. Requests are only counted on the event loop, and scrapes run there
    too, so nothing here needs a lock.
    """

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str, int], int] = {}
        self.created: dict[tuple[str, str, int], float] = {}
        self.latency: dict[str, Latency] = {}


class RequestCounter(Collector):
    """`gitreg_http_requests_total{route,method,status}`, as a prometheus Counter would expose it."""

    def __init__(self, stats: RequestStats) -> None:
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


class CredentialCounter(Collector):
    """`gitreg_requests_by_credential_total{kind}`: requests by the kind of credential that opened them.

    Kinds only (static, forge, login, oidc, none), never a person: a username is unbounded.
    """

    KINDS = ("static", "forge", "login", "oidc", "none")

    def __init__(self) -> None:
        self.counts = dict.fromkeys(self.KINDS, 0)
        self.created = time.time()

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "gitreg_requests_by_credential",
            "HTTP requests answered, by the kind of credential the caller presented (none: no credential checked).",
            labels=["kind"],
        )
        for kind, count in self.counts.items():
            family.add_metric([kind], count, created=self.created)
        yield family


class IdentityCollector(Collector):
    """`gitreg_identity_api_calls_total{host}` and `..._failures_total{host,reason}`: the calls made
    with people's and jobs' own tokens (Git hosts) and to the CI issuers, one label value per
    configured `[[auth.forges]]` host (and `oidc`)."""

    def __init__(self, source: Callable[[], list[tuple[str, OrgStats]]]) -> None:
        self._source = source

    def collect(self) -> Iterator[CounterMetricFamily]:
        calls = CounterMetricFamily(
            "gitreg_identity_api_calls",
            "API calls asking a Git host who a token is, what it can read or see (or a CI issuer for its keys).",
            labels=["host"],
        )
        failures = CounterMetricFamily(
            "gitreg_identity_api_failures",
            "Failed identity API calls and answers that refused the token, by reason.",
            labels=["host", "reason"],
        )
        for host, stats in self._source():
            calls.add_metric([host], stats.calls)
            for reason, count in sorted(stats.failures.items()):
                failures.add_metric([host, reason], count)
        yield calls
        yield failures


class RequestLatency(Collector):
    """`gitreg_http_request_duration_seconds{route}`, as a prometheus Histogram would expose it."""

    NAME = "gitreg_http_request_duration_seconds"

    def __init__(self, stats: RequestStats) -> None:
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


class CacheCollector(Collector):
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

    def __init__(self, watched: Watched) -> None:
        self._watched = watched

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
        git_running = self._watched.git_running
        if git_running is not None:
            yield GaugeMetricFamily(
                "gitreg_git_processes",
                "git processes running now (calls to Git hosts, and on gitreg's mirrors: archives, details).",
                value=git_running(),
            )
        yield from _shared_metrics(self._watched.shared)
        cache = self._watched.cache
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


class OrgCollector(Collector):
    """Reads the org catalog's per-org counters at scrape time; the label is the org as configured
    (`provider:group`, with `@<api host>` when two orgs share it), so there are as many label
    values as `[[orgs]]` entries."""

    def __init__(self, watched: Watched) -> None:
        self._watched = watched

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        orgs = self._watched.orgs
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
        conflicts = GaugeMetricFamily(
            "gitreg_org_address_conflicts",
            "Repositories of the org not served because another repository holds their module address.",
            labels=["org"],
        )
        adopted = CounterMetricFamily(
            "gitreg_org_owners_adopted",
            "Owners of the org's module addresses taken from another replica (through Redis) that held them first.",
            labels=["org"],
        )
        now = time.time()
        listed = orgs.stats() if orgs is not None else []
        shared = Counter(org.label for org, _ in listed)
        # The families are exposed without orgs too (no samples): dashboards and alerts can be set up first.
        for org, stats in listed:
            # Two orgs of one provider:group on different hosts (GitHub and a GHE) keep apart by host.
            label = (org.label if shared[org.label] == 1 else f"{org.label}@{urlsplit(org.api_url).netloc}")[:100]
            calls.add_metric([label], stats.calls)
            for reason, count in sorted(stats.failures.items()):
                failures.add_metric([label, reason], count)
            if stats.rate_remaining is not None:
                remaining.add_metric([label], stats.rate_remaining)
            modules.add_metric([label], stats.modules)
            repositories.add_metric([label], stats.repositories)
            age.add_metric([label], now - stats.last_success if stats.last_success is not None else float("inf"))
            conflicts.add_metric([label], stats.conflicts)
            adopted.add_metric([label], stats.owners_adopted)
        yield from (calls, failures, remaining, modules, repositories, age, conflicts, adopted)


class PoolCollector(Collector):
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
    up = GaugeMetricFamily(
        "gitreg_redis_up", "1 while Redis answers; 0 while this replica serves from its own memory.", labels=[]
    )
    leader = GaugeMetricFamily(
        "gitreg_index_leader", "1 while this replica builds the index (holds the lease, or Redis is down).", labels=[]
    )
    errors = CounterMetricFamily("gitreg_redis_errors", "Redis commands or connections that failed.", labels=[])
    bad = CounterMetricFamily(
        "gitreg_redis_bad_values",
        "Values read from Redis that gitreg never writes (a tag list with a non-commit id, a download "
        "count that is not a count), ignored; counted at each read.",
        labels=[],
    )
    loads = CounterMetricFamily(
        "gitreg_shared_tag_loads",
        "Tag cache misses by how they were answered: shared (Redis had it), led (this replica "
        "ran git under the lock), waited (another replica ran git), local (Redis down).",
        labels=["result"],
    )
    # With the memory backend the families are there without samples (dashboards can be set up first).
    if shared is not None and shared.is_shared:
        up.add_metric([], 1 if shared.up else 0)
        leader.add_metric([], 1 if shared.leading() else 0)
        errors.add_metric([], shared.errors)
        bad.add_metric([], shared.bad_values)
        for result, count in shared.tag_loads.items():
            loads.add_metric([result], count)
    yield from (up, leader, errors, bad, loads)


class ArchiveCollector(Collector):
    """Prometheus view of the archive store and moved tags (read at scrape time)."""

    def __init__(self, store: ArchiveStore, pins: TagPins) -> None:
        self.store = store
        self.pins = pins

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        yield CounterMetricFamily(
            "gitreg_moved_tags",
            "Tags found pointing at another commit than the one first served.",
            value=self.pins.moved_total,
        )
        yield CounterMetricFamily("gitreg_archive_builds", "Archives built (archive mode).", value=self.store.builds)
        yield GaugeMetricFamily("gitreg_archive_bytes", "Bytes of archives on disk.", value=self.store.total_bytes)
        yield GaugeMetricFamily("gitreg_archives", "Archives on disk.", value=self.store.count)
        mirrors, mirror_bytes = self.store.budget.usage("mirror")
        yield GaugeMetricFamily(
            "gitreg_mirror_bytes",
            "Bytes of bare mirrors on disk (with the archives, under [storage] max_bytes).",
            value=mirror_bytes,
        )
        yield GaugeMetricFamily("gitreg_mirrors", "Bare mirrors on disk.", value=mirrors)


class IndexCollector(Collector):
    """Prometheus view of the index (read at scrape time)."""

    def __init__(self, index: ModuleIndex, process_starts: Callable[[], int] | None = None) -> None:
        self.index = index
        self.process_starts = process_starts  # gitreg serve: how many index processes were started

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        index = self.index
        yield GaugeMetricFamily("gitreg_index_modules", "Modules listed by the index.", value=len(index))
        yield GaugeMetricFamily(
            "gitreg_index_complete",
            "1 once every listable module was indexed at least once.",
            value=1 if index.complete else 0,
        )
        yield GaugeMetricFamily(
            "gitreg_index_age_seconds", "Seconds since the index's last complete pass.", value=index.age()
        )
        yield GaugeMetricFamily(
            "gitreg_index_queue_depth", "Modules waiting to be (re)indexed.", value=index.queue_depth()
        )
        yield CounterMetricFamily(
            "gitreg_index_failures", "Indexing attempts that failed (the last state stays).", value=index.stats.failures
        )
        yield CounterMetricFamily(
            "gitreg_index_process_starts",
            "Index processes started: 1, and one more for each that died and was replaced (0: no index process).",
            value=self.process_starts() if self.process_starts is not None else 0,
        )
