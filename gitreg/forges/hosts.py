"""The Git hosts gitreg knows, by the name `[[orgs]] provider` gives them."""

from __future__ import annotations

import dataclasses

import aiohttp

from gitreg.config.model import ForgeAuthConfig, OrgConfig
from gitreg.forges import github, gitlab
from gitreg.forges.base import ForgeClient, Host, OrgStats

HOSTS: dict[str, Host] = {h.name: h for h in (github.HOST, gitlab.HOST)}


def host(provider: str) -> Host:
    """The host called `provider` (a config's provider, already validated)."""
    return HOSTS[provider]


def client_for(org: OrgConfig, session: aiohttp.ClientSession, stats: OrgStats | None = None) -> ForgeClient:
    """The API client for `org`'s provider."""
    return host(org.provider).client(org, session, stats)


def user_client(
    forge: ForgeAuthConfig,
    token: str,
    session: aiohttp.ClientSession,
    stats: OrgStats,
    org: OrgConfig | None = None,
) -> ForgeClient:
    """A client of `forge`'s API that asks with a person's or job's own `token` (never the org's).

    With `org`, it lists that org as the token sees it (the host returns only what it may see).
    """
    label = forge.label.split(":", 1)[1]
    base = org or OrgConfig(provider=forge.provider, api_url=forge.api_url, group=label, namespace="-")
    client = client_for(dataclasses.replace(base, token=token, refresh_seconds=forge.recheck_seconds), session, stats)
    client.as_user = True
    # A host saying "slow down" is not waited for on a person's request: identity/ backs off the whole
    # host and answers 503 with Retry-After meanwhile. A failing host is asked once per question, not
    # three times: what it answered (failure too) is kept by identity/answers.py, so a token costs one
    # call per host and window.
    client.rate_wait_budget = 0.0
    client.retry_delays = ()
    return client
