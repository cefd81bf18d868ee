"""The only module that runs git. Blocking: callers run it in the app's bounded executor.

Hardening, in one place:
- credentials reach git through its environment (`GIT_CONFIG_COUNT`/`KEY`/`VALUE` with
  `http.<url>.extraHeader`), never argv or a URL;
- system and global git config are ignored and `HOME` is gitreg's own, so an operator's
  `~/.gitconfig` (`url.insteadOf`, credential helpers) cannot change what runs;
- only the configured transports are allowed (`GIT_ALLOW_PROTOCOL`: no `ext::`);
- nothing prompts (`GIT_TERMINAL_PROMPT=0`, ssh `BatchMode`), and every call has a timeout
  that kills the process (GitPython's `kill_after_timeout`).
"""

from __future__ import annotations

import base64
import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import git

from .config import Credential, GitConfig
from .errors import ModuleNotFound, UpstreamTimeout, UpstreamUnavailable

log = logging.getLogger(__name__)

# Upstream stderr lines that mean "this repository is not there" rather than "the host failed".
_NOT_FOUND = re.compile(
    r"repository .* not found|not found|does not appear to be a git repository|"
    r"no such file or directory|could not read from remote repository|HTTP 404",
    re.IGNORECASE,
)
_AUTH_FAILED = re.compile(
    r"authentication failed|HTTP 401|HTTP 403|could not read Username|terminal prompts disabled|Permission denied",
    re.IGNORECASE,
)
_SHA_RE = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# A repository with this many tag lines is refused rather than held in memory.
MAX_REFS = 200_000


def mask_url(url: str) -> str:
    """The URL with any user-info password replaced, for logs and messages."""
    if "://" not in url:
        return url
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass(frozen=True)
class TagList:
    """The tags of one repository: tag name -> commit SHA (annotated tags peeled)."""

    tags: Mapping[str, str]
    fetched_at: float
    # What the hot path derives from these tags (versions per tag_prefix), computed once per fetch.
    derived: dict[object, object] = field(default_factory=dict, compare=False, repr=False)


class GitAdapter:
    """Runs git for gitreg with a hardened, credential-carrying environment."""

    def __init__(self, config: GitConfig, credentials: tuple[Credential, ...], home: str) -> None:
        self.config = config
        self.credentials = credentials
        # An empty HOME of our own: no ~/.gitconfig, ~/.netrc or ~/.ssh/config of the operator.
        self._home = home
        self._git = git.cmd.Git()

    def environment(self, url: str) -> dict[str, str]:
        """The environment for one git call against `url`, with its credential if one applies."""
        env = {
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ASKPASS": "",
            "SSH_ASKPASS": "",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "HOME": self._home,
            "XDG_CONFIG_HOME": self._home,
            "GIT_ALLOW_PROTOCOL": ":".join(self.config.protocols),
            "GIT_PROTOCOL_FROM_USER": "0",
            "GIT_SSH_COMMAND": os.environ.get("GIT_SSH_COMMAND", "ssh -o BatchMode=yes"),
            "GIT_CONFIG_COUNT": "0",
        }
        cred = self.credential_for(url)
        if cred is not None:
            token = base64.b64encode(f"{cred.username}:{cred.password}".encode()).decode()
            env.update(
                GIT_CONFIG_COUNT="1",
                GIT_CONFIG_KEY_0=f"http.{cred.url}.extraHeader",
                GIT_CONFIG_VALUE_0=f"Authorization: Basic {token}",
            )
        return env

    def credential_for(self, url: str) -> Credential | None:
        """The most specific `[[credentials]]` entry whose URL prefix covers `url`."""
        best: Credential | None = None
        for cred in self.credentials:
            prefix = cred.url if cred.url.endswith("/") else cred.url + "/"
            if (url.startswith(prefix) or url == cred.url.rstrip("/")) and (best is None or len(cred.url) > len(best.url)):
                best = cred
        return best

    def ls_remote_tags(self, url: str) -> TagList:
        """List a repository's tags with `git ls-remote`; no clone is needed."""
        started = time.monotonic()
        timeout = self.config.timeout_seconds
        try:
            out = self._git.execute(
                ["git", "ls-remote", "--tags", "--end-of-options", url],
                env=self.environment(url),
                kill_after_timeout=timeout,
                with_extended_output=False,
                stdout_as_string=True,
            )
        except git.GitCommandError as e:
            raise self._classify(url, e, time.monotonic() - started) from None
        except git.GitCommandNotFound:
            raise UpstreamUnavailable("git is not installed on the registry server") from None
        return TagList(parse_ls_remote(str(out), url), time.time())

    def _classify(self, url: str, e: git.GitCommandError, elapsed: float) -> Exception:
        stderr = _text(e.stderr)
        shown = mask_url(url)
        if elapsed >= self.config.timeout_seconds * 0.95 or "did not complete in" in stderr:
            log.warning("git ls-remote %s timed out after %.1fs", shown, elapsed)
            return UpstreamTimeout(
                f"the Git host did not answer within {self.config.timeout_seconds:g}s for {shown}; "
                "try again later or raise [git] timeout_seconds"
            )
        detail = _last_line(stderr)
        log.warning("git ls-remote %s failed (exit %s): %s", shown, e.status, detail)
        if _AUTH_FAILED.search(stderr):
            return UpstreamUnavailable(
                f"the Git host refused gitreg's credentials for {shown}; check [[credentials]] on the registry server"
            )
        if _NOT_FOUND.search(stderr):
            return ModuleNotFound(f"repository {shown} does not exist upstream (or gitreg may not read it)")
        return UpstreamUnavailable(f"could not list tags of {shown}: {detail or 'git failed'}")


def parse_ls_remote(out: str, url: str = "") -> dict[str, str]:
    """Parse `git ls-remote --tags` output; peeled `^{}` lines win for annotated tags."""
    tags: dict[str, str] = {}
    peeled: dict[str, str] = {}
    for count, line in enumerate(out.splitlines()):
        if count >= MAX_REFS:
            raise UpstreamUnavailable(f"{mask_url(url)} has more than {MAX_REFS} tags; gitreg refuses to hold them")
        sha, sep, ref = line.partition("\t")
        if not sep or not _SHA_RE.fullmatch(sha) or not ref.startswith("refs/tags/"):
            if line.strip():
                raise UpstreamUnavailable(f"the Git host answered something that is not a ref list for {mask_url(url)}")
            continue
        name = ref[len("refs/tags/"):]
        if name.endswith("^{}"):
            peeled[name[:-3]] = sha
        else:
            tags[name] = sha
    tags.update((name, sha) for name, sha in peeled.items() if name in tags)
    return tags


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value or "")


def _last_line(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    line = lines[-1] if lines else ""
    line = line.removeprefix("stderr:").strip().strip("'").strip()
    return line[:300]


class MirrorGit:
    """Git commands on gitreg's own bare mirrors (archive mode, module details)."""

    def __init__(self, adapter: GitAdapter) -> None:
        self.adapter = adapter

    def _run(self, args: list[str], url: str, cwd: str, **kwargs: object) -> str:
        started = time.monotonic()
        try:
            out = git.cmd.Git(cwd).execute(
                args, env=self.adapter.environment(url), kill_after_timeout=self.adapter.config.timeout_seconds, **kwargs
            )
        except git.GitCommandError as e:
            raise self.adapter._classify(url, e, time.monotonic() - started) from None
        return out if isinstance(out, str) else ""

    def init(self, path: str) -> None:
        """Create an empty bare repository at `path`."""
        git.cmd.Git().execute(["git", "init", "--quiet", "--bare", "--end-of-options", path],
                              env=self.adapter.environment(""), kill_after_timeout=60)

    def fetch_tags(self, path: str, url: str) -> None:
        """Fetch every tag of `url` into the mirror at `path` (tags may move: force, prune)."""
        self._run(
            ["git", "fetch", "--quiet", "--force", "--prune", "--no-write-fetch-head", "--end-of-options", url,
             "+refs/tags/*:refs/tags/*"],
            url, path,
        )

    def has_commit(self, path: str, sha: str) -> bool:
        """True when the mirror at `path` holds commit `sha` (a validated SHA from ls-remote)."""
        if not _SHA_RE.fullmatch(sha):
            raise ValueError("not a commit SHA")
        try:
            git.cmd.Git(path).execute(["git", "cat-file", "-e", f"{sha}^{{commit}}"],
                                      env=self.adapter.environment(""), kill_after_timeout=30)
        except git.GitCommandError:
            return False
        return True

    def archive_tar(self, path: str, sha: str, subdir: str, out: object) -> None:
        """Write `git archive --format=tar <sha> [-- <subdir>]` to the binary stream `out`."""
        if not _SHA_RE.fullmatch(sha):
            raise ValueError("not a commit SHA")
        args = ["git", "archive", "--format=tar", sha]
        if subdir:
            args += ["--", subdir]
        try:
            git.cmd.Git(path).execute(args, env=self.adapter.environment(""),
                                      kill_after_timeout=self.adapter.config.timeout_seconds, output_stream=out)
        except git.GitCommandError as e:
            raise UpstreamUnavailable(f"could not build an archive of commit {sha[:12]}: {_last_line(_text(e.stderr))}") from None

    def tag_dates(self, path: str) -> dict[str, str]:
        """tag name -> ISO 8601 date (the tagger's date, or the commit's for a lightweight tag)."""
        out = git.cmd.Git(path).execute(
            ["git", "for-each-ref", "--format=%(refname:strip=2)%00%(creatordate:iso-strict)", "refs/tags"],
            env=self.adapter.environment(""), kill_after_timeout=60,
        )
        dates = {}
        for line in str(out).splitlines():
            name, _, date = line.partition("\0")
            if name and date:
                dates[name] = date
        return dates
