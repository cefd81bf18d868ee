"""`[[providers]]`: Terraform providers served straight from a repository's releases.

Each table becomes a `ProviderRule`: the namespace, the type (or `*`), the repository (a web URL
of a GitHub or GitLab repository, `{type}` in it filled with the provider type) and `keys`, a
file of armored OpenPGP public keys that sign the releases' SHA256SUMS. The Git host's kind and
API root come from `provider` and `api_url` when given, else from the repository's host
(github.com, gitlab.com) or an `[[orgs]]`/`[[auth.forges]]` entry on that host.
"""

from __future__ import annotations

from gitreg.config.model import (
    DEFAULT_API_URLS,
    PROVIDER_TYPE_RE,
    ForgeAuthConfig,
    OrgConfig,
    Provider,
    ProviderRule,
)
from gitreg.config.orgs import check_api_url, provider_download
from gitreg.config.reader import TableReader, one_of
from gitreg.core import urls
from gitreg.core.names import NAME_RE

ARMOR_HEADER = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
MAX_KEYS_BYTES = 1024 * 1024  # a few keys are a few KiB
# The hosts whose API is known without any other entry.
KNOWN_HOSTS: dict[str, Provider] = {"github.com": "github", "gitlab.com": "gitlab"}


def _check_repository(r: TableReader, repository: str, any_type: bool) -> str | None:
    """The repository's host (lowercased), or None after recording what is wrong with it."""
    count = repository.count("{type}")
    if any_type and count != 1:
        r.error("repository", 'must contain {type} exactly once with type = "*"')
    if "{" in repository.replace("{type}", "") or "}" in repository.replace("{type}", ""):
        r.error("repository", "only {type} may appear in braces")
    found = urls.parse(repository.replace("{type}", "x"))
    if found is None or found.is_scp or found.scheme not in ("https", "http") or not found.host:
        r.error("repository", f"{repository!r} must be the repository's https:// URL on its Git host")
        return None
    if found.user is not None or found.password is not None:
        r.error("repository", "must not contain user info; gitreg's credential for the host is used")
    if found.query or found.fragment:
        r.error("repository", "must not contain a query string or fragment")
    if not found.path.strip("/").removesuffix(".git").count("/"):
        r.error("repository", f"{repository!r} must name a repository (owner/name or group/project)")
    return found.host.lower()


def _check_keys(r: TableReader, path: str, key: str = "keys") -> None:
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_KEYS_BYTES + 1)
    except OSError as e:
        r.error(key, f"cannot read {path!r}: {e.strerror}")
        return
    if len(text) > MAX_KEYS_BYTES or ARMOR_HEADER.encode() not in text:
        r.error(key, f"{path!r} holds no armored OpenPGP public key ({ARMOR_HEADER})")


def _host_api(
    host: str, orgs: tuple[OrgConfig, ...], forges: tuple[ForgeAuthConfig, ...]
) -> tuple[Provider, str] | None:
    """(provider, api_url) known for `host`: github.com, gitlab.com, or an org or forge entry there."""
    if host in KNOWN_HOSTS:
        return KNOWN_HOSTS[host], DEFAULT_API_URLS[KNOWN_HOSTS[host]]
    for provider, url, api in [(f.provider, f.url, f.api_url) for f in forges] + [
        (o.provider, o.api_url, o.api_url) for o in orgs
    ]:
        found = urls.parse(url)
        if found is not None and found.host.lower() == host:
            return provider, api
    return None


def parse_provider(
    r: TableReader, orgs: tuple[OrgConfig, ...], forges: tuple[ForgeAuthConfig, ...]
) -> ProviderRule | None:
    """One `[[providers]]` table; None when a required key is missing or wrong."""
    namespace = r.str("namespace", required=True)
    if namespace is not None and not NAME_RE.fullmatch(namespace):
        r.error("namespace", f"{namespace!r} is not a valid namespace: expected 1-64 letters, digits, '-' or '_'")
    type_ = r.str("type", required=True)
    if type_ is not None and type_ != "*" and not PROVIDER_TYPE_RE.fullmatch(type_):
        r.error("type", f'{type_!r} is not a provider type (lowercase letters, digits and "-") nor "*"')
    repository = r.str("repository", required=True)
    host = _check_repository(r, repository, type_ == "*") if repository is not None else None
    keys = r.str("keys", required=True)
    if keys is not None:
        _check_keys(r, keys)
    provider: Provider | None = one_of(r, "provider", r.str("provider"), ("github", "gitlab"))
    api_url = r.str("api_url")
    if api_url is not None:
        api_url = api_url.rstrip("/")
        check_api_url(r, api_url)
    download = provider_download(r, "download")
    known = _host_api(host, orgs, forges) if host is not None else None
    if known is not None:
        provider = provider or known[0]
        api_url = api_url or (known[1] if provider == known[0] else None)
    if host is not None and (provider is None or api_url is None):
        r.error("api_url", f"the Git host of {host!r} is not known: set provider and api_url")
    r.finish()
    if namespace is None or type_ is None or repository is None or keys is None:
        return None
    if provider is None or api_url is None:
        return None
    return ProviderRule(
        namespace=namespace,
        repository=repository.rstrip("/"),
        keys=keys,
        type=None if type_ == "*" else type_,
        provider=provider,
        api_url=api_url,
        download=download,
    )


def web_root(org: OrgConfig) -> str:
    """The Git host's web URL of an org's API: https://github.com for api.github.com, else the API's
    URL without `/api/v3` (GitHub Enterprise Server) or `/api/v4` (GitLab)."""
    if org.api_url == DEFAULT_API_URLS["github"]:
        return "https://github.com"
    return org.api_url.removesuffix("/api/v3").removesuffix("/api/v4")


def org_rules(orgs: tuple[OrgConfig, ...]) -> list[ProviderRule]:
    """The provider rule of each org with `providers = true`: its terraform-provider-{type} repositories."""
    return [
        ProviderRule(
            namespace=org.namespace,
            repository=f"{web_root(org)}/{org.group}/terraform-provider-{{type}}",
            keys=org.provider_keys,
            provider=org.provider,
            api_url=org.api_url,
            download=org.provider_download,
        )
        for org in orgs
        if org.providers and org.provider_keys is not None
    ]


def parse_providers(
    root: TableReader, orgs: tuple[OrgConfig, ...], forges: tuple[ForgeAuthConfig, ...], unsigned: bool
) -> list[ProviderRule]:
    """`[[providers]]`, each (namespace, type) once; `unsigned`: registry auth without [auth] signing_key."""
    rules: list[ProviderRule] = []
    seen: dict[tuple[str, str], int] = {}
    for i, table in enumerate(root.table_list("providers")):
        rule = parse_provider(TableReader(table, f"providers[{i}]", root.problems, root.env), orgs, forges)
        if rule is None:
            continue
        key = (rule.namespace.lower(), rule.type or "*")
        if key in seen:
            root.problems.append(f"providers[{i}]: {key[0]}/{key[1]} is already served by providers[{seen[key]}]")
        seen.setdefault(key, i)
        rules.append(rule)
    for i, org in enumerate(orgs):
        if org.providers and org.provider_keys is not None:
            _check_keys(TableReader({}, f"orgs[{i}]", root.problems, root.env), org.provider_keys, "provider_keys")
    for rule in org_rules(orgs):  # after the explicit rules: one of theirs for the namespace wins
        if (rule.namespace.lower(), "*") not in seen:
            seen[(rule.namespace.lower(), "*")] = -1
            rules.append(rule)
    if unsigned and rules:
        root.problems.append(
            "providers: registry auth ([auth] tokens, forges or oidc) needs [auth] signing_key, which signs the "
            "package URLs Terraform fetches without its token"
        )
    return rules
