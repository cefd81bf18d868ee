"""`[[auth.forges]]` and `[[auth.oidc]]`: the Git hosts and CI issuers whose identities open the registry.

Read from the `[auth]` table's reader (they are arrays of tables inside it), validated key by
key like every other section: URLs https unless `[git] protocols` allows http (tests run
fake hosts on plain HTTP), `recheck_seconds` finite and bounded, an OAuth client id only
with its secret, and OAuth only with `[auth] signing_key` (issued tokens' host credentials are
encrypted and sessions signed under keys derived from it).
"""

from __future__ import annotations

import re
from typing import Any

from gitreg.config.model import (
    MAX_RECHECK_SECONDS,
    MIN_RECHECK_SECONDS,
    ForgeAuthConfig,
    OidcConfig,
    Provider,
)
from gitreg.config.reader import TableReader, one_of, type_name
from gitreg.core import urls
from gitreg.core.names import NAME_RE

GITHUB_WEB = "https://github.com"
GITHUB_API = "https://api.github.com"
# A claim's name in `claims`: a JWT claim name as the CI systems spell them (namespace_path,
# repository_owner, ref_protected, job_workflow_ref ...).
_MAX_CLAIMS = 32


def _check_web_url(r: TableReader, key: str, url: str, protocols: tuple[str, ...]) -> str | None:
    """`url` without a trailing slash if it is an https (or, when allowed, http) URL with no user info or query."""
    found = urls.parse(url)
    allowed = ("https", "http") if "http" in protocols else ("https",)
    if found is None or found.is_scp or found.scheme not in allowed or not found.host:
        http = " (http:// only when [git] protocols allows http)" if "http" not in protocols else ""
        r.error(key, f"{url!r} must be an https:// URL{http}")
        return None
    if found.user is not None or found.password is not None:
        r.error(key, "must not contain user info")
        return None
    if found.query or found.fragment:
        r.error(key, "must not contain a query string or fragment")
        return None
    return url.rstrip("/")


def _same_host(url: str, api_url: str) -> bool:
    """True when api_url is on url's host (github.com's API is api.github.com)."""
    web, api = urls.parse(url), urls.parse(api_url)
    if web is None or api is None:
        return False
    return api.host == web.host or (web.host == "github.com" and api.host == "api.github.com")


def _default_api_url(provider: Provider, url: str) -> str:
    """GitHub.com's API is api.github.com; GitHub Enterprise Server's <url>/api/v3; GitLab's <url>/api/v4."""
    if provider == "github":
        return GITHUB_API if url == GITHUB_WEB else f"{url}/api/v3"
    return f"{url}/api/v4"


def _parse_forge(r: TableReader, protocols: tuple[str, ...]) -> ForgeAuthConfig | None:
    provider: Provider | None = one_of(r, "provider", r.str("provider", required=True), ("gitlab", "github"))
    raw_url = r.str("url", GITHUB_WEB if provider == "github" else None, required=provider != "github")
    url = _check_web_url(r, "url", raw_url, protocols) if raw_url is not None else None
    raw_api = r.str("api_url")
    api_url = _check_web_url(r, "api_url", raw_api, protocols) if raw_api is not None else None
    recheck = r.number(
        "recheck_seconds", ForgeAuthConfig.recheck_seconds, minimum=MIN_RECHECK_SECONDS, maximum=MAX_RECHECK_SECONDS
    )
    client_id = r.str("oauth_client_id") or None
    client_secret = r.str("oauth_client_secret") or None
    if client_id is not None and client_secret is None:
        r.error("oauth_client_id", "needs oauth_client_secret too (the OAuth application's secret)")
    if client_secret is not None and client_id is None:
        r.error("oauth_client_secret", "needs oauth_client_id too (the OAuth application's id)")
    token_days = r.number("token_days", ForgeAuthConfig.token_days, minimum=1 / 24, maximum=365.0)
    if url is not None and api_url is not None and not _same_host(url, api_url):
        # People's and jobs' own tokens go to api_url: never to a host other than the Git host's.
        r.error("api_url", f"{api_url!r} must be on the host of url ({url!r}); people's tokens are sent there")
    r.finish()
    if provider is None or url is None or (raw_api is not None and api_url is None):
        return None
    return ForgeAuthConfig(
        provider=provider,
        url=url,
        api_url=api_url or _default_api_url(provider, url),
        recheck_seconds=recheck,
        oauth_client_id=client_id,
        oauth_client_secret=client_secret,
        token_days=token_days,
    )


def _parse_claims(r: TableReader) -> tuple[tuple[str, str], ...]:
    """`claims`: claim = glob, or claim = { exact = "value" } (kept as a glob whose `*`, `?` and `\\`
    are escaped: identity/oidc.py's `claim_matches` reads both)."""
    value: Any = r.raw("claims", False)
    if value is None:
        return ()
    if not isinstance(value, dict):
        r.error("claims", f"must be a table of claim = glob, not {type_name(value)}")
        return ()
    if len(value) > _MAX_CLAIMS:
        r.error("claims", f"has more than {_MAX_CLAIMS} claims")
        return ()
    out = []
    for name, glob in value.items():
        exact = isinstance(glob, dict) and set(glob) == {"exact"}
        written = glob["exact"] if exact else glob
        if not isinstance(written, str) or not written:
            r.error(
                f"claims.{name}",
                f'must be a non-empty string (a glob) or {{ exact = "value" }}, not {type_name(written)}',
            )
            continue
        expanded = r.expand(f"claims.{name}", written, None)
        if expanded is None:
            continue
        if exact:
            expanded = re.sub(r"([*?\\])", r"\\\1", expanded)
        elif re.search(r"(?<!\\)(?:\\\\)*\\$", expanded):
            r.error(f"claims.{name}", "ends with a lone \\ (it makes the next character literal)")
            continue
        out.append((str(name), expanded))
    return tuple(out)


def _parse_oidc(r: TableReader, protocols: tuple[str, ...]) -> OidcConfig | None:
    raw_issuer = r.str("issuer", required=True)
    # `iss` is compared with the issuer exactly as written: no trailing slash is added or dropped.
    issuer = raw_issuer if raw_issuer is not None and _check_web_url(r, "issuer", raw_issuer, protocols) else None
    audience = r.str("audience", required=True)
    if audience is not None and not audience.strip():
        r.error("audience", "must not be empty: it is the `aud` the CI job asks its token for")
        audience = None
    namespaces: tuple[str, ...] | None = None
    if r.raw("namespaces", False) is not None:
        namespaces = r.str_list("namespaces")
        for ns in namespaces:
            if not NAME_RE.fullmatch(ns):
                r.error("namespaces", f"{ns[:64]!r} is not a valid namespace")
    claims = _parse_claims(r)
    r.finish()
    if issuer is None or audience is None:
        return None
    return OidcConfig(issuer=issuer, audience=audience, namespaces=namespaces, claims=claims)


def parse_identities(
    a: TableReader, protocols: tuple[str, ...], signing_key: str | None
) -> tuple[tuple[ForgeAuthConfig, ...], tuple[OidcConfig, ...]]:
    """`[[auth.forges]]` and `[[auth.oidc]]` of the `[auth]` table `a`."""
    forges: list[ForgeAuthConfig] = []
    for i, table in enumerate(a.table_list("forges")):
        forge = _parse_forge(TableReader(table, a.key(f"forges[{i}]"), a.problems, a.env), protocols)
        if forge is None:
            continue
        if any(f.url == forge.url for f in forges):
            a.error(f"forges[{i}].url", f"{forge.url!r} is configured twice")
            continue
        if forge.oauth and signing_key is None:
            a.error(
                f"forges[{i}].oauth_client_id",
                "needs [auth] signing_key: issued tokens and sign-in sessions are protected with keys derived from it",
            )
        forges.append(forge)
    issuers: list[OidcConfig] = []
    for i, table in enumerate(a.table_list("oidc")):
        entry = _parse_oidc(TableReader(table, a.key(f"oidc[{i}]"), a.problems, a.env), protocols)
        if entry is None:
            continue
        if any(o.issuer == entry.issuer for o in issuers):
            a.error(f"oidc[{i}].issuer", f"{entry.issuer!r} is configured twice")
            continue
        issuers.append(entry)
    return tuple(forges), tuple(issuers)
