"""`gitreg check --probe --consumers ADDRESS`: the orgs listed and their repositories scanned once,
in this process, nothing persisted; the module's consumers printed as an administrator sees them.

Bounded: the orgs' own `max_repositories`, each git call's `[git] timeout_seconds`, each parse's
`[index] parse_seconds`, and PROBE_SECONDS for the whole scan.
"""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
from pathlib import Path

from gitreg.config.model import Config
from gitreg.config.rules import ResolvedModule
from gitreg.core.errors import BadRequest, GitregError, ModuleNotFound
from gitreg.core.names import ModuleAddress, parse_address
from gitreg.core.urls import origin_label
from gitreg.core.versions import select_versions
from gitreg.git.pool import GitPool, Priority
from gitreg.git.remote import GitAdapter
from gitreg.git.runner import GitRunner
from gitreg.orgs.probe import enumerate_orgs
from gitreg.orgs.service import OrgCatalog
from gitreg.registry.resolve import Resolver
from gitreg.usage.scan import PassStats
from gitreg.usage.service import Usage
from gitreg.usage.view import ConsumersView, consumers_view

PROBE_SECONDS = 900.0


@dataclasses.dataclass
class ConsumersProbe:
    """What the probe found: the view (everything shown), the pass's counts, and what went wrong."""

    view: ConsumersView | None
    stats: PassStats
    problem: str | None = None


async def consumers_report(config: Config, text: str) -> tuple[list[str], bool | None]:
    """The lines `gitreg check --probe --consumers TEXT` prints, and whether every repository was read
    (None: TEXT is not a module address; the one line says why)."""
    try:
        parts = text.split("/")
        if len(parts) != 3:
            raise BadRequest(f"--consumers {text[:200]!r}: expected NAMESPACE/NAME/SYSTEM")
        address = parse_address(*parts)
    except GitregError as e:
        return [e.message], None
    found = await probe_consumers(config, address)
    return report_lines(address, found), found.view is not None and not found.stats.failed


async def probe_consumers(config: Config, address: ModuleAddress) -> ConsumersProbe:
    """Scan every repository the orgs list, once, now: `address`'s consumers."""
    if not config.usage.hosts:
        return ConsumersProbe(None, PassStats(), "[usage] hosts is empty and [server] public_url is not set")
    if not config.orgs:
        return ConsumersProbe(None, PassStats(), "no [[orgs]]: there are no repositories to scan")
    config = dataclasses.replace(config, usage=dataclasses.replace(config.usage, scan=True))
    catalog = OrgCatalog(config, None)
    await enumerate_orgs(config, catalog)
    try:
        resolved: ResolvedModule | None = Resolver(config, catalog).resolve(address)
    except ModuleNotFound:
        resolved = None  # not served here: its consumers still are, with no versions to compare
    git = config.git
    pool = GitPool(git.max_concurrency, git.max_queue, git.max_per_host)
    with tempfile.TemporaryDirectory(prefix="gitreg-home-") as home, tempfile.TemporaryDirectory() as scratch:
        adapter = GitAdapter(GitRunner(git, config.credentials, home))
        usage = Usage(config, catalog.listings, catalog.complete, pool, adapter, None, scratch=Path(scratch))
        try:
            stats = await asyncio.wait_for(usage.scanner.refresh(complete=False), PROBE_SECONDS)
            versions: list[str] = []
            if resolved is not None:
                url = resolved.repository
                tags = await pool.run(adapter.ls_remote_tags, url, host=origin_label(url), priority=Priority.INSTALL)
                versions = [v.canonical for v in select_versions(tags.tags, resolved.rule.tag_prefix).versions]
        finally:
            await usage.workers.close()
            pool.shutdown()
            adapter.runner.kill_running()
    view = consumers_view(str(address), usage.consumers(str(address)), versions, lambda _: True)
    return ConsumersProbe(view, stats)


def report_lines(address: ModuleAddress, probe: ConsumersProbe) -> list[str]:
    """What `gitreg check --probe --consumers` prints."""
    if probe.view is None:
        return [f"{address}: consumers not scanned: {probe.problem}"]
    s, view = probe.stats, probe.view
    lines = [
        f"{address}: {view.total} module block(s) in {view.repositories} repositor(ies) call it"
        f" (scanned {s.repositories} repositories: {s.read} read, {s.failed} could not be read)"
        + (f"; latest {view.latest}" if view.latest else "")
    ]
    for row in view.shown:
        flags = [
            name
            for name, on in (
                ("not on the latest major", row.not_latest_major),
                ("allows a deprecated version", row.allows_deprecated),
                ("pinned to a revoked version", row.pinned_revoked),
            )
            if on
        ]
        allowed = row.newest_allowed or "no served version"
        lines.append(
            f"  {row.repository} {row.file}:{row.line} version {row.constraint or '(any)'!s} -> {allowed}"
            + (f" [{', '.join(flags)}]" if flags else "")
        )
    return lines
