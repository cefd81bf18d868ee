"""The configuration's model: frozen dataclasses, their defaults, and the bounds of their values.

What a valid config holds, stated once; `gitreg.config.parse` reads TOML into it and says
what is wrong with a file, key by key.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from typing import Literal

from gitreg.core.names import NAME_RE, SYSTEM_RE

PLACEHOLDERS = ("namespace", "name", "system")
DOWNLOAD_PLACEHOLDERS = ("namespace", "name", "system", "tag", "version", "sha")
DEFAULT_PROTOCOLS = ("https", "ssh", "git", "file")
KNOWN_PROTOCOLS = ("https", "http", "ssh", "git", "file")
# The keys that take one of a few words; read with reader.one_of, which returns the Literal.
Backend = Literal["memory", "redis"]
Ref = Literal["tag", "commit"]
Provider = Literal["gitlab", "github"]
Clone = Literal["https", "ssh"]
ProviderDownload = Literal["proxy", "redirect"]
# Upper bounds of the number keys. Every key has one, so no value can overflow a timer
# (threading.Timer raises OverflowError past about 292 years; nan never fires), turn a cache
# off by accident (`ttl_seconds = nan` compares false with everything), or reach an absurd size.
DAY = 86400.0
MAX_TIMEOUT = DAY  # a timeout past a day is a missing timeout
MAX_CACHE_SECONDS = 30 * DAY  # tag lists are re-read within a month even with webhooks


@dataclass(frozen=True)
class ServerConfig:
    """`[server]`: where to listen, and optional TLS."""

    host: str = "127.0.0.1"
    port: int = 8080
    tls_cert: str | None = None
    tls_key: str | None = None
    public_url: str | None = None
    # The host module sources name (`<registry_host>/ns/name/system`) on the pages' copy-ready
    # blocks, when Terraform reaches this registry by a name its CLI config maps (a `host` block:
    # `gitreg demo`'s registry.example.test); else public_url's host, else the browser's.
    registry_host: str | None = None
    # Addresses (IPs or CIDRs) of TLS-terminating proxies whose X-Forwarded-Proto and
    # X-Forwarded-Host are believed (the pages' same-origin check); from anyone else they are ignored.
    trusted_proxies: tuple[str, ...] = ()
    # A connection with no complete request (headers) for this long is closed: the header-read
    # timeout of a new connection and the keep-alive idle timeout between requests, in one timer.
    idle_timeout_seconds: float = 15.0


@dataclass(frozen=True)
class CacheConfig:
    """`[cache]`: how long a repository's tag list is reused, and what happens when it expires."""

    ttl_seconds: float = 300.0
    stale_seconds: float = 86400.0
    negative_ttl_seconds: float = 30.0
    error_retry_seconds: float = 5.0
    max_repositories: int = 10000
    refresh_ahead: bool = False
    # "memory": this process only. "redis": replicas share tag lists, invalidations, download
    # counts, moved-tag records and the index through Redis (gitreg/replicas/redis.py).
    backend: Backend = "memory"
    redis_url: str | None = field(default=None, repr=False)  # may hold a password
    redis_prefix: str = "gitreg:"


@dataclass(frozen=True)
class GitConfig:
    """`[git]`: how gitreg runs git against upstream hosts."""

    timeout_seconds: float = 30.0
    max_concurrency: int = 8
    max_queue: int = 256  # default_max_queue(max_concurrency) when unset
    max_per_host: int = 6  # default_max_per_host(max_concurrency) when unset
    protocols: tuple[str, ...] = DEFAULT_PROTOCOLS
    allow_moved_tags: bool = False


@dataclass(frozen=True)
class StorageConfig:
    """`[storage]`: gitreg's own files (mirrors, archives, moved-tag records, download counts)."""

    path: str = field(default_factory=lambda: default_storage_path())
    max_bytes: int = 5 * 1024**3


@dataclass(frozen=True)
class UiConfig:
    """`[ui]`: the module browser pages (`/`, `/modules/...`)."""

    enabled: bool = True
    title: str = "gitreg"


@dataclass(frozen=True)
class IndexConfig:
    """`[index]`: the background index that list, search, details and pages answer from."""

    # Off: no background git at all, and nothing is listed (a registry only for `terraform init`).
    enabled: bool = True
    # Wall-clock budget for parsing one module version's files (README description, .tf files).
    # A read that runs out of it is not kept: it is read again later, with back-off.
    parse_seconds: float = 20.0


@dataclass(frozen=True)
class UsageConfig:
    """`[usage]`: "Used by", the `module` blocks of the orgs' repositories that call this registry's modules."""

    # On: the `.tf` files on the default branch of every repository the [[orgs]] enumerate are read.
    scan: bool = False
    # Hosts consumers write in `source` (lowercase, `host` or `host:port`); default: public_url's host.
    hosts: tuple[str, ...] = ()


@dataclass(frozen=True)
class WebhooksConfig:
    """`[webhooks]`: shared secrets of the GitHub and GitLab webhooks; unset disables one."""

    github_secret: str | None = field(default=None, repr=False)
    gitlab_token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class TokenConfig:
    """One registry token, optionally limited to namespaces; `token` may be `sha256:<hex>`."""

    token: str = field(repr=False)
    namespaces: tuple[str, ...] | None = None


# `[[auth.forges]] recheck_seconds`: how long a "can read" answer of the Git host is trusted.
MIN_RECHECK_SECONDS = 10.0
MAX_RECHECK_SECONDS = 3600.0


@dataclass(frozen=True)
class ForgeAuthConfig:
    """One `[[auth.forges]]` entry: a Git host whose tokens, OAuth sign-in and "can read" answers open modules."""

    provider: Provider
    # The host's web URL (OAuth's authorize and token pages live there), without a trailing slash.
    url: str
    # The host's REST API, without a trailing slash (GitLab: <url>/api/v4; GitHub: https://api.github.com).
    api_url: str
    recheck_seconds: float = 300.0
    oauth_client_id: str | None = None
    oauth_client_secret: str | None = field(default=None, repr=False)
    # Lifetime of the registry tokens `terraform login` issues for this host.
    token_days: float = 30.0

    @property
    def oauth(self) -> bool:
        """True when `terraform login` and "Sign in with ..." are offered for this host."""
        return self.oauth_client_id is not None and self.oauth_client_secret is not None

    @property
    def label(self) -> str:
        """How logs, metrics, pages and issued tokens name this host (no secret): `gitlab:gitlab.example.com`."""
        return f"{self.provider}:{self.url.split('://', 1)[-1]}"


@dataclass(frozen=True)
class OidcConfig:
    """One `[[auth.oidc]]` entry: CI jobs of this issuer present its signed ID token as the registry token."""

    issuer: str
    audience: str
    # What a matching job may read; None: every namespace.
    namespaces: tuple[str, ...] | None = None
    # Every listed claim must match its glob (identity/oidc.py's `claim_matches`: `*` never crosses
    # an `@`, `\` escapes), e.g. {"namespace_path": "platform/*"}; `{ exact = ... }` is kept escaped.
    claims: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class AuthConfig:
    """`[auth]`: registry tokens, Git hosts and CI issuers; none of them means the registry is open."""

    tokens: tuple[TokenConfig, ...] = field(default=(), repr=False)
    forges: tuple[ForgeAuthConfig, ...] = ()
    oidc: tuple[OidcConfig, ...] = ()
    metrics_token: str | None = field(default=None, repr=False)
    signing_key: str | None = field(default=None, repr=False)
    # How long a signed archive URL stays valid (Terraform fetches it right after the lookup).
    signed_url_ttl_seconds: float = 600.0

    @property
    def enabled(self) -> bool:
        """True when `/v1/...` requests need a bearer token (of any kind)."""
        return bool(self.tokens or self.forges or self.oidc)


@dataclass(frozen=True)
class SigningConfig:
    """`[signing]`; no keys at all means no version is ever "signed"."""

    allowed_signers: str | None = None
    openpgp_keys: str | None = None
    require: bool = False

    @property
    def keys(self) -> tuple[str, ...]:
        """The configured key files (their contents decide every verdict)."""
        return tuple(path for path in (self.allowed_signers, self.openpgp_keys) if path)


@dataclass(frozen=True)
class ModuleRule:
    """One `[[modules]]` entry; None in namespace/name/system matches anything."""

    repository: str
    namespace: str | None = None
    name: str | None = None
    system: str | None = None
    path: str = ""
    tag_prefix: str = ""
    clone_url: str | None = None
    ref: Ref = "tag"
    # "archive" (the default): a pinned commit, a sha256 the CLI verifies, no Git credentials on the
    # clients; "git": clients clone the tag themselves (see docs/archives.md, what git mode gives up).
    download: str = "archive"
    # git mode: `&depth=1` in the location (a shallow clone of the tag). Off by default:
    # Checkov 3.3.30 and tfmodcache 0.1.0 misread any query after `ref` and skip the module.
    shallow: bool = False
    verified: bool = False
    # For a tarball URL template: the wrapper directory inside the tarball (a template too);
    # None means "infer it for GitHub and GitLab URLs, else the files are at the root".
    archive_root: str | None = None
    # True/False: whether only signed versions are served; None: [signing] require decides.
    require_signed: bool | None = None

    @property
    def specificity(self) -> int:
        """How many of namespace/name/system the rule fixes."""
        return sum(v is not None for v in (self.namespace, self.name, self.system))

    @property
    def explicit(self) -> bool:
        """True when the rule names exactly one module."""
        return self.namespace is not None and self.name is not None and self.system is not None

    @property
    def pattern(self) -> str:
        """The addresses the rule serves, as messages show them: `acme/*/aws`."""
        return f"{self.namespace or '*'}/{self.name or '*'}/{self.system or '*'}"


@dataclass(frozen=True)
class Credential:
    """One `[[credentials]]` entry, applied to repositories under `url`."""

    url: str
    username: str
    password: str = field(repr=False)


def credential_for(credentials: tuple[Credential, ...], url: str) -> Credential | None:
    """The most specific `[[credentials]]` entry whose URL prefix covers `url`."""
    best: Credential | None = None
    for cred in credentials:
        prefix = cred.url if cred.url.endswith("/") else cred.url + "/"
        if (url.startswith(prefix) or url == cred.url.rstrip("/")) and (best is None or len(cred.url) > len(best.url)):
            best = cred
    return best


DEFAULT_REPOSITORY_PATTERN = "terraform-{system}-{name}"
DEFAULT_API_URLS = {"github": "https://api.github.com", "gitlab": "https://gitlab.com/api/v4"}
# An org listing costs one API call per 100 repositories: more often than this hammers the
# host (GitHub allows 5,000 calls an hour); less often than this leaves the listing stale.
MIN_REFRESH_SECONDS = 10.0
MAX_REFRESH_SECONDS = 7 * 86400.0


@dataclass(frozen=True)
class OrgConfig:
    """One `[[orgs]]` entry: a GitLab group or GitHub organization whose repositories are modules."""

    provider: Provider
    api_url: str
    group: str
    namespace: str
    token: str | None = field(default=None, repr=False)
    repository_pattern: str = DEFAULT_REPOSITORY_PATTERN
    topic: str | None = None
    clone: Clone = "https"
    download: str = "archive"  # as ModuleRule.download
    refresh_seconds: float = 600.0
    include_archived: bool = False
    # Hosts besides the API's own whose clone URLs the API may name (lowercased host names).
    clone_hosts: tuple[str, ...] = ()
    # A listing with more repositories fails (the last good one stays): a runaway or hostile API
    # cannot grow the listing, orgs.json and the index without bound.
    max_repositories: int = 10_000
    # Repositories named terraform-provider-{type} directly in the group serve provider
    # namespace/type from their releases, signed by one of `provider_keys` (a [[providers]] rule).
    providers: bool = False
    provider_keys: str | None = None
    provider_download: ProviderDownload = "proxy"  # as ProviderRule.download
    require_signed: bool | None = None  # as ModuleRule.require_signed

    @property
    def pattern(self) -> re.Pattern[str]:
        """`repository_pattern` as an anchored regex with `name` and `system` groups."""
        return compile_repository_pattern(self.repository_pattern)

    @property
    def label(self) -> str:
        """How logs, metrics and reports name the org (no token, no URL)."""
        return f"{self.provider}:{self.group}"


@functools.lru_cache(maxsize=256)
def compile_repository_pattern(pattern: str) -> re.Pattern[str]:
    """`terraform-{system}-{name}` -> an anchored regex; {name} and {system} follow the registry grammar."""
    parts = re.split(r"(\{name\}|\{system\})", pattern)
    groups = {"{name}": f"(?P<name>{NAME_RE.pattern})", "{system}": f"(?P<system>{SYSTEM_RE.pattern})"}
    return re.compile(r"\A" + "".join(groups.get(part) or re.escape(part) for part in parts) + r"\Z", re.ASCII)


# A Terraform provider type: lowercase letters, digits and '-' inside (tfaddr's rule, lowercased).
PROVIDER_TYPE_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?", re.ASCII)


@dataclass(frozen=True)
class ProviderRule:
    """One `[[providers]]` entry: providers `namespace/type` served from a repository's releases."""

    namespace: str
    # The repository's web URL, `{type}` filled with the provider type (required when type is "*").
    repository: str
    # The file of armored OpenPGP public keys that sign the releases' SHA256SUMS.
    keys: str
    # None: any type ("*").
    type: str | None = None
    # The Git host's kind and REST API root: inferred for github.com and gitlab.com, or from an
    # [[orgs]] or [[auth.forges]] entry on the repository's host.
    provider: Provider = "github"
    api_url: str = "https://api.github.com"
    # How a zip reaches the client: "proxy" (the default): through gitreg, verified and kept on disk
    # (later downloads from disk, one host request per zip); "redirect": a 302 to the short-lived
    # storage URL the host's asset API redirects to (the bytes never pass through gitreg; one API
    # request per download; clients must reach the host's storage).
    download: ProviderDownload = "proxy"

    def repository_for(self, type_: str) -> str:
        """The repository URL serving provider type `type_`."""
        return self.repository.replace("{type}", type_)


@dataclass(frozen=True)
class Config:
    """The whole, validated configuration."""

    server: ServerConfig = ServerConfig()
    cache: CacheConfig = CacheConfig()
    git: GitConfig = GitConfig()
    auth: AuthConfig = AuthConfig()
    storage: StorageConfig = field(default_factory=lambda: StorageConfig())
    webhooks: WebhooksConfig = WebhooksConfig()
    index: IndexConfig = IndexConfig()
    ui: UiConfig = UiConfig()
    modules: tuple[ModuleRule, ...] = ()
    credentials: tuple[Credential, ...] = field(default=(), repr=False)
    source: str | None = None
    orgs: tuple[OrgConfig, ...] = ()
    providers: tuple[ProviderRule, ...] = ()
    usage: UsageConfig = UsageConfig()
    signing: SigningConfig = SigningConfig()


def default_storage_path() -> str:
    """`$XDG_STATE_HOME/gitreg`, else `~/.local/state/gitreg`."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "gitreg")


def default_max_per_host(max_concurrency: int) -> int:
    """`[git] max_per_host` when unset: all but a quarter of the pool (6 of 8), at least 1.

    One host (the usual single GitLab or GitHub org) still gets most of the pool, and a host
    that stalls leaves the other quarter to every other host.
    """
    return max(1, max_concurrency - max(1, max_concurrency // 4))


def default_max_queue(max_concurrency: int) -> int:
    """`[git] max_queue` when unset: 32 waiting jobs per slot (256 for 8 slots).

    At about 0.3 s per `ls-remote` to a hosted Git service that is 10 s of queue: the
    registry client's timeout (TF_REGISTRY_CLIENT_TIMEOUT). Work queued longer than that is
    waited for by nobody.
    """
    return 32 * max_concurrency
