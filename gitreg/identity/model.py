"""A principal: one authenticated caller, of one credential kind, named for the access log."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

from gitreg.config.model import ForgeAuthConfig

# The credential kinds, as /metrics counts them (never by person: a name is unbounded).
CredentialKind = Literal["static", "forge", "login", "oidc"]


@dataclass(frozen=True)
class Principal:
    """Who a request comes from, and what decides what it may read.

    `static` and `oidc` read by `namespaces` (None: every namespace). `forge` and `login` read
    what the Git host `forge` says `host_token` can read, asked per repository and cached for
    the forge's `recheck_seconds`; `namespaces` is None for them.
    """

    kind: CredentialKind
    # For the access log: the static token's name, the host's username, or `oidc:<project>`.
    name: str
    namespaces: frozenset[str] | None = None
    forge: ForgeAuthConfig | None = None
    # forge: the token presented; login: the host's OAuth access token the issued token stands for.
    host_token: str | None = field(default=None, repr=False)


class LoginTokens(Protocol):
    """The registry tokens `terraform login` issued (identity/issued.py implements it)."""

    async def principal(self, presented: str) -> Principal | None:
        """The `login` principal an issued, unexpired, unrevoked token stands for (host token fresh), else None."""
        ...
