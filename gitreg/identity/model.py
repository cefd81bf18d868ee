"""A principal: one authenticated caller, of one credential kind, named for the access log."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, Protocol

from gitreg.config.model import ForgeAuthConfig
from gitreg.core.urls import parse

# The credential kinds, as /metrics counts them (never by person: a name is unbounded).
CredentialKind = Literal["static", "forge", "login", "oidc"]
# What a username may hold in logs and pages: anything else becomes `_` (the host's answer is hostile).
_NAME_UNSAFE_RE = re.compile(r"[^A-Za-z0-9._@:+/-]")


def safe_name(name: str) -> str:
    """A host's username (or a claim) as logs and pages show it: printable, no spaces or quotes, bounded."""
    return _NAME_UNSAFE_RE.sub("_", name)[:100] or "_"


def host_of(url: str) -> str:
    """The host name of an `[[auth.forges]]` url ("" when it has none)."""
    found = parse(url)
    return found.host if found is not None else ""


def person(username: str, forge: ForgeAuthConfig) -> str:
    """One name per person whatever credential they present (their host's token, a `terraform login`
    token, a page session): `alice@gitlab.example.com`, the username made safe."""
    return f"{safe_name(username)}@{host_of(forge.url)}"


@dataclass(frozen=True)
class CiJob:
    """The CI job an `oidc` principal stands for, as its verified token names it (an observed install's who)."""

    project: str  # GitLab's `project_path`, GitHub's `repository` (else `sub`), made safe (`safe_name`)
    repository: str | None  # its clone URL when the issuer is a configured Git host's (for "can read"), else None


@dataclass(frozen=True)
class Principal:
    """Who a request comes from, and what decides what it may read.

    `static` and `oidc` read by `namespaces` (None: every namespace). `forge` and `login` read
    what the Git host `forge` says `host_token` can read, asked per repository and cached for
    the forge's `recheck_seconds`; `namespaces` is None for them.
    """

    kind: CredentialKind
    # For the access log: the static token's name, `<username>@<host>` (`person`), or `oidc:<project>`.
    name: str
    namespaces: frozenset[str] | None = None
    forge: ForgeAuthConfig | None = None
    # forge: the token presented; login: the host's OAuth access token the issued token stands for.
    host_token: str | None = field(default=None, repr=False)
    # oidc: the job's project and repository (observed installs, gitreg/usage/installs.py); else None.
    job: CiJob | None = None


class LoginTokens(Protocol):
    """The registry tokens `terraform login` issued (identity/issued.py implements it)."""

    async def principal(self, presented: str) -> Principal | None:
        """The `login` principal an issued, unexpired, unrevoked token stands for (host token fresh), else None."""
        ...
