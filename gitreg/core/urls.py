"""Git URLs and scp-like addresses: one grammar, and every view of a URL gitreg needs.

`parse` is the one reader of a repository address; everything else here is derived from
its result, so config validation, webhook matching, `source` links, log masking, metric
host labels and `git::` download locations agree on what a URL is:

- `transport(url)`: the transport git would use (`ssh` for `user@host:path`), for
  `[git] protocols` and `[[credentials]]` checks;
- `host_path(url)`: `host/path` without user, port or `.git`, for webhook matching;
- `web_url(url)`: the repository's https page, never with user info, for `source` links;
- `host_label(url)`: the host alone, for metric labels;
- `origin_label(url)`: `host:port`, one Git service, for the git pool's per-host share;
- `mask(url)`: the URL with its user info (but an ssh login) masked as `***`, for logs and messages;
- `as_go_getter(url)`: the `git::` address go-getter (Terraform, OpenTofu) understands.

The grammar follows git's own (`connect.c`, `transport.c`): `scheme://...` is a URL (the
scheme `[A-Za-z0-9][A-Za-z0-9+.-]*`); `name::address` is a remote helper, which gitreg
never accepts; otherwise a colon before any slash makes an scp-like `[user@]host:path`,
which git reaches over ssh. Anything else (a local path, arbitrary text) is not a Git URL:
`parse` returns None and the views return their empty answer, never an exception.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

NOT_A_GIT_URL = "not a Git URL (expected https://, ssh://, git://, file:// or user@host:path)"

_URL_RE = re.compile(r"(?P<scheme>[A-Za-z0-9][A-Za-z0-9+.-]*)://(?P<rest>.*)", re.DOTALL)
_HELPER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9+.-]*::")
# scp-like: `[user@]host:path` with a DNS name or IPv4 address for host. Stricter than git
# (which hands any host to ssh): what we accept must rebuild into a clean ssh:// URL, and a
# host (or user) starting with `-` would be an option to ssh.
_SCP_RE = re.compile(
    r"(?:(?P<user>[A-Za-z0-9._~+][A-Za-z0-9._~+-]*)@)?(?P<host>[A-Za-z0-9][A-Za-z0-9._-]*):(?P<path>.*)", re.DOTALL
)
# Characters no host, user or path of a usable Git URL contains (git and curl would see
# something other than what Python's urlsplit, which drops tabs and newlines, sees).
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_BAD_HOST_RE = re.compile(r"[\x00-\x20\x7f/?#@\[\]\\]")
# The transports git knows by these names (git+ssh and ssh+git are ssh to git itself).
_SSH_SCHEMES = frozenset({"ssh", "git+ssh", "ssh+git"})
_WEB_SCHEMES = frozenset({"https", "http", "ssh", "git", "git+ssh", "ssh+git"})
# Remembered answers of host_path(): webhooks ask for the same few URLs on every delivery.
_HOST_PATH_CACHE = 65536


@dataclass(frozen=True)
class GitUrl:
    """A parsed repository address. `host` is lowercased and without IPv6 brackets; `path` as written."""

    scheme: str  # lowercased; "ssh" for an scp-like address
    host: str  # "" only for file://
    path: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    port: int | None = None
    query: str = ""
    fragment: str = ""
    is_scp: bool = False
    # The authority as written (user info, host, port), so masking changes nothing but the password.
    netloc: str = field(default="", repr=False)

    @property
    def transport(self) -> str:
        """The transport git uses: the scheme, with ssh's aliases (and scp-like) as `ssh`."""
        return "ssh" if self.scheme in _SSH_SCHEMES else self.scheme

    @property
    def bracketed_host(self) -> str:
        """The host as it goes into a URL (an IPv6 address in brackets)."""
        return f"[{self.host}]" if ":" in self.host else self.host


def parse(url: str) -> GitUrl | None:
    """The Git URL or scp-like address `url`, or None when git would not read it as one."""
    found = parse_or_reason(url)
    return found if isinstance(found, GitUrl) else None


def parse_or_reason(url: str) -> GitUrl | str:
    """Like `parse`, but for text that is not a Git URL the reason, e.g. `not a valid URL: ...`."""
    if not url:
        return NOT_A_GIT_URL
    m = _URL_RE.match(url)
    if m is not None:
        return _parse_url(url, m.group("scheme").lower())
    if _HELPER_RE.match(url):
        return NOT_A_GIT_URL  # `ext::...` and other remote helpers run commands: never
    colon, slash = url.find(":"), url.find("/")
    if colon < 0 or (0 <= slash < colon):
        return NOT_A_GIT_URL  # a local path
    m = _SCP_RE.fullmatch(url)
    path = m.group("path") if m is not None else ""
    if m is None or path.startswith(("//", ":", "-")) or _CONTROL_RE.search(path):
        return NOT_A_GIT_URL  # (a path starting with `-` would be an option to the remote git)
    host = m.group("host").lower()
    user = m.group("user")
    netloc = f"{user}@{m.group('host')}" if user is not None else m.group("host")
    return GitUrl("ssh", host, path, user=user, is_scp=True, netloc=netloc)


def _parse_url(url: str, scheme: str) -> GitUrl | str:
    if _CONTROL_RE.search(url):  # a space may be in a path (git takes it); nothing else unprintable
        return "not a valid URL: it contains a control character"
    try:
        parts = urlsplit(url)
    except ValueError as e:
        return f"not a valid URL: {e}"
    netloc = parts.netloc
    userinfo, at, hostport = netloc.rpartition("@")
    user = password = None
    if at:
        user, colon, pw = userinfo.partition(":")
        password = pw if colon else None
    if hostport.startswith("["):
        host, bracket, after = hostport[1:].partition("]")
        if not bracket or not re.fullmatch(r"[0-9A-Fa-f:.]+", host):
            return "not a valid URL: Invalid IPv6 URL"
        if after and not after.startswith(":"):
            return f"not a valid URL: {after!r} after the IPv6 address"
        port_text = after[1:]
    else:
        host, _, port_text = hostport.partition(":")
    port = None
    if port_text:
        if not port_text.isascii() or not port_text.isdigit() or int(port_text) > 65535:
            return f"not a valid URL: Port {port_text[:20]!r} is not a number from 0 to 65535"
        port = int(port_text)
    if _BAD_HOST_RE.search(host) or (not host and scheme != "file"):
        return "not a valid URL: no usable host"
    if host.startswith("-") or (user or "").startswith("-"):
        # ssh would read `-oProxyCommand=...` as an option: never. (A URL's path starts with `/`.)
        return "not a valid URL: a host or user starting with '-'"
    return GitUrl(
        scheme,
        host.lower(),
        parts.path,
        user=user,
        password=password,
        port=port,
        query=parts.query,
        fragment=parts.fragment,
        netloc=netloc,
    )


def transport(url: str) -> str | None:
    """The transport git would use for `url` (`ssh` for scp-like `host:path`); None when not a Git URL."""
    found = parse(url)
    return found.transport if found is not None else None


@functools.lru_cache(maxsize=_HOST_PATH_CACHE)
def host_path(url: str) -> str | None:
    """`host/path` of a Git URL, lowercased, without `.git`, user, port or trailing slashes.

    `https://GitHub.com/Acme/VPC.git/`, `git@github.com:acme/vpc.git`,
    `ssh://git@github.com:22/acme/vpc` and `https://github.com/acme/vpc` are one repository.
    Hosts and (on GitHub and GitLab) paths are case-insensitive, so case is dropped; a
    false match costs one extra `git ls-remote`, a missed one a stale version.
    """
    found = parse(url.strip())
    if found is None:
        return None
    host = "file:" if found.scheme == "file" else found.host
    path = re.sub(r"/+", "/", found.path).strip("/").removesuffix(".git").rstrip("/")
    if not host or not path:
        return None
    return f"{host}/{path.lower()}"


def web_url(url: str) -> str:
    """The repository's web page: https for http(s)/ssh/scp/git addresses, no `.git`, no user info; "" if none."""
    found = parse(url)
    if found is None or found.scheme not in _WEB_SCHEMES or not found.host:
        return ""  # file:// and the like have no web page
    # An ssh or git port is not the web server's port; an http(s) one is.
    web = found.scheme in ("https", "http")
    scheme = found.scheme if web else "https"
    netloc = found.bracketed_host + (f":{found.port}" if web and found.port else "")
    path = found.path.strip("/").removesuffix(".git").removesuffix("/")
    return f"{scheme}://{netloc}/{path}" if path else f"{scheme}://{netloc}"


def host_label(url: str) -> str:
    """The host of a repository URL for a metric label: no user, port or path; `local` for file://."""
    found = parse(url)
    if found is None:
        return "unknown"
    if found.scheme == "file":
        return "local"
    return found.host or "unknown"


# The port a transport uses when the URL names none: `https://h` and `https://h:443` are one service.
_DEFAULT_PORTS = {"https": 443, "http": 80, "ssh": 22, "git": 9418}


def origin_label(url: str) -> str:
    """The Git service a repository URL reaches, `host:port` (the transport's port when none is
    written), for the git pool's share per host: two services on one machine (two ports) are two
    shares, so one that stalls does not hold the other's. `local` for file://."""
    found = parse(url)
    if found is None or (found.scheme != "file" and not found.host):
        return "unknown"
    if found.scheme == "file":
        return "local"
    host = f"[{found.host}]" if ":" in found.host else found.host
    return f"{host}:{found.port or _DEFAULT_PORTS.get(found.transport, 0)}"


def origin_host(origin: str) -> str:
    """The host of an `origin_label` (as `host_label` gives it), for metric labels."""
    head, sep, _ = origin.rpartition(":")
    return head.strip("[]") if sep and head else origin


_MASK_RE = re.compile(r"(?<=://).*@", re.DOTALL)
# A login name (at most 32 characters, e.g. `git`, `bot`): it says whose keys or credential to use
# and is no secret. Anything else in user info may be a token: longer, or with a Git host's token
# prefix (GitHub `ghp_`/`gho_`/`ghu_`/`ghs_`/`ghr_`/`github_pat_`, GitLab `gl...-`).
_PLAIN_USER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
_TOKEN_PREFIX_RE = re.compile(r"(gh[pousr]_|github_pat_|gl[a-z]{2,6}-)", re.IGNORECASE)
MASKED = "***"


def has_plain_user(found: GitUrl) -> bool:
    """Whether `found` has no user info but an ssh login name (`git@host:path`): nothing to hide."""
    if found.password is not None:
        return False
    return not found.user or is_ssh_login(found.scheme, found.user)


def is_ssh_login(scheme: str, userinfo: str) -> bool:
    """Whether `userinfo` before a `scheme://` URL's `@` is a plain login name (`git`, `bot`): shown in
    logs and kept in download locations. A token written as the user name (longer, or with a Git
    host's token prefix) is not: it is masked, refused by `gitreg check` and never handed out."""
    del scheme  # a login name is no secret over any transport; a token is one over every transport
    return _PLAIN_USER_RE.fullmatch(userinfo) is not None and _TOKEN_PREFIX_RE.match(userinfo) is None


def mask(url: str) -> str:
    """`url` with its user info masked (`***:***@`, `***@`, `:***@`), for logs and messages.

    A token is as often written as the user name (`https://ghp_x@host/...`) as as a password, so
    both go; only an ssh login name (`git@`) stays. Nothing else changes, except that an
    scp-like address whose user is masked is shown as the ssh:// URL it means. Text that is not
    a valid URL but looks like one loses everything between `://` and its last `@`.
    """
    found = parse(url)
    if found is None:
        return _MASK_RE.sub(MASKED + "@", url) if "://" in url else url
    if has_plain_user(found):
        return url
    userinfo, _, hostport = found.netloc.rpartition("@")
    if found.is_scp:
        return f"ssh://{MASKED}@{found.bracketed_host}/{found.path.lstrip('/')}"
    start = url.index("://") + 3
    return url[:start] + f"{masked_userinfo(userinfo)}@{hostport}" + url[start + len(found.netloc) :]


def masked_userinfo(userinfo: str) -> str:
    """`user[:password]` with each part that is there as `***`: `***`, `***:***` or `:***` (no user)."""
    user, colon, _ = userinfo.partition(":")
    return (MASKED if user else "") + (f":{MASKED}" if colon else "")


def as_go_getter(url: str) -> str:
    """`git::<url>`, the address go-getter's git getter takes; scp-like `user@host:path` becomes ssh://.

    User info but an ssh login is left out: it may be a token (an API's clone URL), and clients
    bring their own credentials.
    """
    found = parse(url)
    if found is None:
        return f"git::{url}"
    plain = has_plain_user(found)
    if found.is_scp:
        user = f"{found.user}@" if found.user is not None and plain else ""
        url = f"ssh://{user}{found.bracketed_host}/{found.path.lstrip('/')}"
    elif not plain:
        start = url.index("://") + 3
        url = url[:start] + found.netloc.rpartition("@")[2] + url[start + len(found.netloc) :]
    return f"git::{url}"
