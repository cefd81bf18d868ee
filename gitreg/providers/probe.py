"""`gitreg check --probe` for providers: each `[[providers]]` rule's releases read and verified, as a
request would, with every release not served and why."""

from __future__ import annotations

import time
from dataclasses import dataclass

import aiohttp

from gitreg.config.model import Config
from gitreg.core.errors import GitregError
from gitreg.providers.release import ProviderVersion, Refusal
from gitreg.providers.service import Providers


@dataclass(frozen=True)
class ProviderReport:
    """What a probe of `namespace/type` found: the repository, versions served, releases refused, or an error."""

    namespace: str
    type: str
    repository: str
    versions: tuple[ProviderVersion, ...] = ()
    refused: tuple[Refusal, ...] = ()
    error: str | None = None


async def probe_providers(config: Config, only: tuple[str, str] | None = None) -> list[ProviderReport]:
    """Probe every rule with a fixed type (or only `namespace/type`); a `*` rule needs `only`."""
    async with aiohttp.ClientSession(auto_decompress=False, trust_env=False) as session:
        providers = Providers(config, lambda: session, time.monotonic)
        await providers.start()  # (a keys file gpg cannot read: each release says so)
        try:
            wanted = [only] if only is not None else [(r.namespace, r.type) for r in config.providers if r.type]
            return [await _probe(providers, namespace, type_) for namespace, type_ in wanted]
        finally:
            providers.close()


async def _probe(providers: Providers, namespace: str, type_: str) -> ProviderReport:
    try:
        source = providers.source(namespace, type_)
    except GitregError as e:
        return ProviderReport(namespace, type_, "", error=e.message)
    try:
        listing = await providers.listing(namespace, type_)
    except GitregError as e:
        return ProviderReport(namespace, type_, source.repository, error=e.message)
    return ProviderReport(namespace, type_, source.repository, listing.versions, listing.refused)
