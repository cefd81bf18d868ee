"""The Git hosts gitreg knows, by the name `[[orgs]] provider` gives them."""

from __future__ import annotations

import aiohttp

from gitreg.config.model import OrgConfig
from gitreg.forges import github, gitlab
from gitreg.forges.base import ForgeClient, Host, OrgStats

HOSTS: dict[str, Host] = {h.name: h for h in (github.HOST, gitlab.HOST)}


def host(provider: str) -> Host:
    """The host called `provider` (a config's provider, already validated)."""
    return HOSTS[provider]


def client_for(org: OrgConfig, session: aiohttp.ClientSession, stats: OrgStats | None = None) -> ForgeClient:
    """The API client for `org`'s provider."""
    return host(org.provider).client(org, session, stats)
