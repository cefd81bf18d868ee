"""Domain exceptions, raised deep and shaped into HTTP responses in one place (web/routing.py)."""

from __future__ import annotations

import errno


class GitregError(Exception):
    """Base of every error gitreg turns into a JSON error response."""

    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequest(GitregError):
    """The request itself is malformed (a path segment or query value)."""

    status = 400


class Unauthorized(GitregError):
    """No or a wrong registry token."""

    status = 401


class Forbidden(GitregError):
    """A valid token, but not for this namespace."""

    status = 403


class ModuleNotFound(GitregError):
    """No rule serves the module, or its repository does not exist upstream."""

    status = 404


class VersionNotFound(GitregError):
    """The module exists but has no such version."""

    status = 404


class VersionRevoked(GitregError):
    """The version is revoked by the module's `.gitreg.toml`: 410 Gone, with the reason."""

    status = 410


class UpstreamUnavailable(GitregError):
    """The Git host failed (down, refused credentials, answered garbage)."""

    status = 502


class UpstreamTimeout(UpstreamUnavailable):
    """The Git host did not answer within `[git] timeout_seconds`."""

    status = 504


class Overloaded(GitregError):
    """gitreg cannot take this work now (git queue full, out of file descriptors or processes)."""

    status = 503

    def __init__(self, message: str, retry_after: int = 5) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class IdentityUnavailable(Overloaded):
    """The Git host or CI issuer that vouches for a token cannot answer now, and no answer of it is
    still trusted: a 503 with Retry-After naming the host, never a 401 (the token may well be good)."""


class StorageFull(GitregError):
    """What a request needs gitreg to keep on disk is larger than `[storage] max_bytes` by itself.

    507 Insufficient Storage: the server cannot store what the request needs, and retrying
    does not help until the operator raises the bound (or serves the module another way).
    """

    status = 507


class DiskFull(GitregError):
    """The disk under `[storage] path` is full (ENOSPC) or over quota (EDQUOT).

    507 like StorageFull, but passing: never remembered as a key's answer, so serving
    recovers by itself once space is freed. Build it with `disk_full`, which names the path.
    """

    status = 507


def disk_full(path: object, what: str) -> DiskFull:
    """The error for `what` gitreg could not write under the storage path `path` (a full disk)."""
    return DiskFull(
        f"[storage] path {path} is full (no space left on device): gitreg could not write {what}; "
        "it serves again by itself once space is freed on the registry server"
    )


def failure_kind(e: GitregError) -> str:
    """How a failed git call is counted and shared: `not_found`, `timeout` or `error`."""
    if isinstance(e, ModuleNotFound):
        return "not_found"
    if isinstance(e, UpstreamTimeout):
        return "timeout"
    return "error"


class ConfigError(Exception):
    """The configuration is invalid; `problems` lists every `key.path: reason`."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


# The errno of an OSError that means "out of file descriptors, processes or memory": the
# server is overloaded (an Overloaded, 503), not broken. EAGAIN is fork() at RLIMIT_NPROC.
OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM, errno.ENOBUFS})
# The errno of an OSError that means "the disk is full": a DiskFull (507), not a bug.
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


class NotSigned(GitregError):
    """A version that must be signed (`[signing] require`, `require_signed`) and is not, by a trusted key.

    403: the tag exists (not a 404) and nothing is wrong with the server (not a 5xx); the registry's
    policy refuses it, and a signed tag or a key added to `[signing]` makes it served.
    """

    status = 403
