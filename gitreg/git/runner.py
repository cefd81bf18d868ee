"""The only module that runs git. Blocking: callers run it in the app's bounded executor.

Hardening, in one place:
- credentials reach git through its environment (`GIT_CONFIG_COUNT`/`KEY`/`VALUE` with
  `http.<url>.extraHeader`), never argv or a URL;
- git follows no HTTP redirect (`http.followRedirects=false`): git attaches the extraHeader to
  every request of the process, so a redirect followed would carry the credential to whatever
  host the redirect names. A redirect is an error naming its target instead;
- over HTTP, git traces the headers of its requests and answers (`GIT_TRACE_CURL`, no data,
  `Authorization` redacted) into its stderr, so gitreg sees where a redirect pointed and what
  content type each answer had: an answer that is not git's smart protocol (an SSO page, a
  proxy's error page) is an error, not the "no tags" git's dumb-protocol fallback makes of it;
- system and global git config are ignored and `HOME` is gitreg's own, so an operator's
  `~/.gitconfig` (`url.insteadOf`, credential helpers) cannot change what runs;
- only the configured transports are allowed (`GIT_ALLOW_PROTOCOL`: no `ext::`);
- nothing prompts (`GIT_TERMINAL_PROMPT=0`, ssh `BatchMode`);
- every git process, whether it talks to a Git host (`ls-remote`, `fetch`) or reads gitreg's
  own mirrors (`archive`, `cat-file`, `for-each-ref`, `init`), is started by one runner
  (`GitAdapter._spawn`): in its own process group, so a timeout, an oversized answer or
  shutdown kills git *and* its helpers (`git-remote-http`, `ssh`, `index-pack`) at once and
  nothing is left behind even when git itself had exited; timed; counted (`running()`, the
  `gitreg_git_processes` gauge); killed at shutdown. (GitPython's `execute` was used for the
  mirror commands before: its `kill_after_timeout` kills git alone, not its helpers, and its
  processes were neither counted nor stopped at shutdown. gitreg used nothing else of it, so
  the runner here is the one way, and GitPython is no longer a dependency.)
  curl and ssh also give up by themselves on a host that stalls (`GIT_HTTP_LOW_SPEED_*`,
  `ConnectTimeout`/`ServerAliveInterval`), which matters for git processes that outlive a
  gitreg killed with SIGKILL;
- `ls-remote` output is read line by line and refused beyond MAX_REFS tags or
  MAX_OUTPUT_BYTES, instead of being read whole into memory first.
"""

from __future__ import annotations

import base64
import contextlib
import heapq
import itertools
import logging
import math
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import BinaryIO, NamedTuple, TypeVar, cast
from urllib.parse import urljoin, urlsplit

from gitreg.config.model import Credential, GitConfig
from gitreg.core import urls
from gitreg.core.errors import (
    OUT_OF_RESOURCES,
    GitregError,
    ModuleNotFound,
    Overloaded,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from gitreg.git.pool import RUNNING_AS, Priority

log = logging.getLogger(__name__)
T = TypeVar("T")

# Upstream stderr that means "this repository is not there" rather than "the host failed":
# git's HTTP 404 (`repository '<url>/' not found`), GitHub/Bitbucket (`Repository not found`),
# GitLab over ssh (`The project you were looking for could not be found`), a missing local or
# remote path. Never ssh's "Could not read from remote repository": git prints it after EVERY
# ssh failure (connection refused, unknown host...), which would cache a down host as a 404.
_NOT_FOUND = re.compile(
    r"repository '[^']*' not found|repository not found|does not appear to be a git repository|"
    r"project you were looking for could not be found|repository does not exist|HTTP 404",
    re.IGNORECASE,
)
_AUTH_FAILED = re.compile(
    r"authentication failed|HTTP 401|HTTP 403|returned error: 40[13]\b|could not read Username|"
    r"terminal prompts disabled|"
    r"Permission denied",
    re.IGNORECASE,
)
# curl's low-speed abort and ssh's ConnectTimeout: the host stalled, like a timeout.
_STALLED = re.compile(r"operation too slow|operation timed out|connection timed out", re.IGNORECASE)
# The host answered, but not with git's smart protocol (an HTML page, a proxy's error, noise).
_NOT_GIT = re.compile(
    r"protocol error|bad line length|not valid: is this a git repository|invalid server response|"
    r"unexpected (?:flush|packet)|expected flush",
    re.IGNORECASE,
)
# What git says when an answer with git's content type ends before the protocol does (a host
# sending an empty or cut-short body); a network failure says more (curl's reason, "RPC failed").
_CUT_SHORT = re.compile(r"remote end hung up unexpectedly|could not read from remote repository", re.IGNORECASE)
_CURL_FAILED = re.compile(r"RPC failed|unable to access|curl \d+|early EOF", re.IGNORECASE)
_STATUS_LINE = re.compile(r"HTTP/[\d.]+ (\d{3})\b", re.IGNORECASE)
_REDIRECTED = re.compile(r"returned error: 3\d\d\b")
# A line of git's GIT_TRACE_CURL output ("15:00:53.893252 http.c:684  => Send header: ..."),
# kept apart from git's own messages: header values are the host's words, not git's.
_TRACE_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d+ \S+:\d+ +(=>|<=|==) ([^:,]*)[:,] ?(.*)$")
# What a smart-HTTP host answers to git's two requests (anything else made git fall back to
# the dumb protocol, which turns an HTML page into "no tags", or is not git at all).
_GIT_CONTENT_TYPES = {
    "/info/refs": "application/x-git-upload-pack-advertisement",
    "/git-upload-pack": "application/x-git-upload-pack-result",
}
# What git adds after any ssh failure; the line before it says what happened.
_BOILERPLATE = re.compile(
    r"could not read from remote repository|make sure you have the correct access rights|^and the repository exists",
    re.IGNORECASE,
)
_SHA_RE = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_USERINFO_RE = re.compile(r"(?<=://)[^/@\s']+@")
# Bounds on one `ls-remote` answer: beyond either, git is killed and the repository refused,
# so a host advertising millions of tags cannot exhaust the server's memory. 200,000 tag
# lines (an annotated tag takes two) or 32 MiB: far above real repositories.
MAX_REFS = 200_000
MAX_OUTPUT_BYTES = 32 * 1024 * 1024
# `nice` of git run for background work (as the parse workers): install requests go first for the CPU too.
BACKGROUND_NICENESS = 10
_MAX_LINE = 64 * 1024  # git's pkt-line limit is 65520 bytes: no ref line is longer
_MAX_STDERR = 64 * 1024
# curl gives up on a transfer slower than this many bytes per second for [git] timeout_seconds.
LOW_SPEED_LIMIT = 1000


# Kept for callers of the old name (cli, cache, mirrors, archives, tagpins); the one implementation is urls.mask.
mask_url = urls.mask


def _overloaded(reason: str) -> Overloaded:
    """The 503 for git that cannot start now (out of file descriptors, processes or memory), logged once."""
    log.warning("cannot start git: %s; answering 503 until resources free up", reason)
    return Overloaded(
        f"gitreg is out of file descriptors or processes to run git ({reason}); try again in a few seconds"
    )


@dataclass(frozen=True)
class TagList:
    """The tags of one repository: tag name -> commit SHA (annotated tags peeled)."""

    tags: Mapping[str, str]
    # Seconds the list had been fetched before this process got it (from another replica, via Redis).
    age: float = field(default=0.0, compare=False)


class _GitRun:
    """One git process in its own process group, killed as a group.

    A process group, not a session of its own: on Linux each session is a scheduling group of its
    own (autogroup), which would give every git process a whole share of the CPU beside gitreg
    and leave the niceness of background git without effect. Nothing git runs reads the
    terminal (GIT_TERMINAL_PROMPT=0, ssh BatchMode, stdin /dev/null).

    The group is killed only while git is not yet reaped: until then its pid, hence the group
    id, cannot be reused, so the kill never hits an unrelated process.
    """

    def __init__(
        self, args: list[str], env: dict[str, str], cwd: str | None, stdout: int, stdin: BinaryIO | None = None
    ) -> None:
        # Owned by this run: closed on a failed start below, or once git is reaped (stderr_text).
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - outlives this method
        try:
            self.proc = subprocess.Popen(
                args,
                cwd=cwd,
                env=env,
                stdin=stdin if stdin is not None else subprocess.DEVNULL,
                stdout=stdout,
                stderr=self.stderr,
                process_group=0,
            )
        except BaseException:
            self.stderr.close()
            raise
        if RUNNING_AS.get() is Priority.BACKGROUND:
            # Background git (the org index, details, refreshes) yields the CPU to the event loop
            # serving `terraform init`: its whole process group, helpers it starts included.
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PGRP, self.proc.pid, BACKGROUND_NICENESS)
        self.killed: str | None = None  # why gitreg killed it: "timeout", "too_large", "shutdown"
        self.error_text = ""  # the end of git's stderr, once finished (without GIT_TRACE_CURL lines)
        self.trace: list[tuple[str, str, str]] = []  # GIT_TRACE_CURL lines: (direction, kind, text)
        self._lock = threading.Lock()
        self._reaped = False

    def kill(self, reason: str) -> None:
        """SIGKILL git and every process it started (they share its process group)."""
        with self._lock:
            if self._reaped:
                return
            if self.killed is None:
                self.killed = reason
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def finish(self) -> int:
        """Wait for git to exit, kill whatever it left running in its group, reap it; the exit status."""
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        with contextlib.suppress(ChildProcessError):
            os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
        with self._lock:
            # A helper that outlived git (git-remote-http, ssh) would hold the host's connection.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self._reaped = True
        status = self.proc.wait()
        with self.stderr:
            self.stderr.seek(0, os.SEEK_END)
            self.stderr.seek(max(0, self.stderr.tell() - _MAX_STDERR))  # only git's last words matter
            text = self.stderr.read().decode("utf-8", "replace")
        lines = []
        for line in text.splitlines():
            traced = _TRACE_LINE.match(line)
            if traced:
                self.trace.append((traced[1], traced[2], traced[3]))
            else:
                lines.append(line)
        self.error_text = "\n".join(lines)
        return status


class _Watchdog:
    """Kills each git run still going at its deadline: one thread for all of them.

    (A `threading.Timer` per git call started and stopped a thread for every call, hundreds a
    second while an org is indexed, each start a round of GIL hand-offs with the event loop.)
    The thread runs while a deadline is armed and ends when none is.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._deadlines: list[tuple[float, int]] = []  # heap of (monotonic deadline, number)
        self._runs: dict[int, _GitRun] = {}  # armed, by number
        self._numbers = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, run: _GitRun, seconds: float) -> int:
        """Kill `run` ("timeout") in `seconds` unless disarmed; its number. RuntimeError: no thread."""
        with self._cond:
            number = next(self._numbers)
            if self._thread is None:
                thread = threading.Thread(target=self._watch, name="gitreg-git-watchdog", daemon=True)
                thread.start()  # before anything is recorded: a failed start leaves nothing armed
                self._thread = thread
            heapq.heappush(self._deadlines, (time.monotonic() + seconds, number))
            self._runs[number] = run
            if self._deadlines[0][1] == number:  # sooner than what the thread waits for (else no wake-up)
                self._cond.notify()
        return number

    def disarm(self, number: int) -> None:
        """The run finished: no kill."""
        with self._cond:
            self._runs.pop(number, None)

    def _watch(self) -> None:
        with self._cond:
            while self._runs:
                while self._deadlines and self._deadlines[0][1] not in self._runs:
                    heapq.heappop(self._deadlines)  # disarmed
                deadline, number = self._deadlines[0]
                left = deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                heapq.heappop(self._deadlines)
                run = self._runs.pop(number)
                self._cond.release()
                try:
                    run.kill("timeout")
                finally:
                    self._cond.acquire()
            self._deadlines.clear()
            self._thread = None


class GitAdapter:
    """Runs git for gitreg with a hardened, credential-carrying environment."""

    def __init__(self, config: GitConfig, credentials: tuple[Credential, ...], home: str) -> None:
        self.config = config
        self.credentials = credentials
        # An empty HOME of our own: no ~/.gitconfig, ~/.netrc or ~/.ssh/config of the operator.
        self._home = home
        self._running: set[_GitRun] = set()
        self._running_lock = threading.Lock()
        self._watchdog = _Watchdog()
        self._closed = False

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
            "GIT_SSH_COMMAND": os.environ.get("GIT_SSH_COMMAND", self._ssh_command()),
            # A stalled transfer ends by itself, even in a git that outlived a killed gitreg.
            "GIT_HTTP_LOW_SPEED_LIMIT": str(LOW_SPEED_LIMIT),
            "GIT_HTTP_LOW_SPEED_TIME": str(self._stall_seconds()),
            # Never follow a redirect (see the module docstring); also disables dumb-HTTP alternates.
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "http.followRedirects",
            "GIT_CONFIG_VALUE_0": "false",
            # Headers only, credentials redacted (whatever gitreg's own environment says): read
            # by _http_answers to see redirects and answers that are not git.
            "GIT_TRACE_CURL": "1" if url.startswith(("http://", "https://")) else "0",
            "GIT_TRACE_CURL_NO_DATA": "1",
            "GIT_TRACE_REDACT": "1",
            # `git -c` settings inherited from gitreg's own environment do not apply either,
            "GIT_CONFIG_PARAMETERS": "",
            # nor the config of a repository gitreg happens to be started in (see _spawn's cwd).
            "GIT_CEILING_DIRECTORIES": os.path.dirname(os.path.abspath(self._home)),
        }
        cred = self.credential_for(url)
        if cred is not None:
            token = base64.b64encode(f"{cred.username}:{cred.password}".encode()).decode()
            env.update(
                GIT_CONFIG_COUNT="2",
                GIT_CONFIG_KEY_1=f"http.{cred.url}.extraHeader",
                GIT_CONFIG_VALUE_1=f"Authorization: Basic {token}",
            )
        return env

    def _scrub(self, text: str) -> str:
        """`text` (the host's words) with any configured Git password or Basic token in it masked."""
        for cred in self.credentials:
            token = base64.b64encode(f"{cred.username}:{cred.password}".encode()).decode()
            for secret in (token, cred.password):
                if len(secret) >= 4:  # a shorter one would mask letters of every word
                    text = text.replace(secret, "***")
        return text

    def _stall_seconds(self) -> int:
        return max(1, math.ceil(self.config.timeout_seconds))

    def _ssh_command(self) -> str:
        # BatchMode: never prompt. ConnectTimeout and keep-alives: a host that stops answering
        # is given up on after about timeout_seconds, as curl does with the low-speed limit.
        stall = self._stall_seconds()
        alive = max(1, math.ceil(stall / 3))
        return f"ssh -o BatchMode=yes -o ConnectTimeout={stall} -o ServerAliveInterval={alive} -o ServerAliveCountMax=3"

    def credential_for(self, url: str) -> Credential | None:
        """The most specific `[[credentials]]` entry whose URL prefix covers `url`."""
        best: Credential | None = None
        for cred in self.credentials:
            prefix = cred.url if cred.url.endswith("/") else cred.url + "/"
            if (url.startswith(prefix) or url == cred.url.rstrip("/")) and (
                best is None or len(cred.url) > len(best.url)
            ):
                best = cred
        return best

    @contextlib.contextmanager
    def _spawn(
        self,
        args: list[str],
        url: str,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: BinaryIO | None = None,
    ) -> Iterator[_GitRun]:
        """The one way gitreg starts git: against `url` (credentials) or its own repositories (url "").

        In its own process group, killed with its helpers at `timeout` (default [git]
        timeout_seconds) or shutdown, counted in running(); on leaving, all of it is gone.
        """
        if self._closed:
            raise UpstreamUnavailable("gitreg is shutting down; try again")
        env = {**os.environ, "LC_ALL": "C", "LANGUAGE": "C", **self.environment(url)}  # English errors to classify
        try:
            # Not the server's working directory: a repository there would lend git its config.
            run = _GitRun(args, env, cwd or self._home, subprocess.PIPE, stdin)
        except FileNotFoundError:
            raise UpstreamUnavailable("git is not installed on the registry server") from None
        except OSError as e:
            if e.errno not in OUT_OF_RESOURCES:
                raise
            raise _overloaded(e.strerror or str(e)) from None
        armed: int | None = None
        with self._running_lock:
            self._running.add(run)
            closed = self._closed
        if closed:  # shutdown began while this one started: kill_running() may have missed it
            run.kill("shutdown")
        try:
            try:
                armed = self._watchdog.arm(run, self.config.timeout_seconds if timeout is None else timeout)
            except RuntimeError:  # "can't start new thread": out of processes or memory
                raise _overloaded("cannot start a thread") from None
            yield run
        except BaseException:
            run.kill("error")
            raise
        finally:
            try:
                run.finish()
            finally:
                if armed is not None:
                    self._watchdog.disarm(armed)
                with self._running_lock:
                    self._running.discard(run)
                run.stderr.close()  # already closed unless finish() failed

    def _check(self, run: _GitRun, url: str, too_large: str) -> None:
        """Raise the error a finished git call stands for, if any."""
        shown = mask_url(url)
        if run.killed == "timeout":
            raise self._timeout(shown)
        if run.killed == "shutdown":
            raise UpstreamUnavailable(f"gitreg is shutting down; git for {shown} was stopped, try again")
        if run.killed == "too_large":
            log.warning("git %s: %s", shown, too_large)
            raise UpstreamUnavailable(too_large)
        answered = self._http_answers(run, url)
        if answered is not None:
            raise answered
        if run.proc.returncode != 0:
            raise self._classify(url, run.error_text, run.proc.returncode)

    def _http_answers(self, run: _GitRun, url: str) -> GitregError | None:
        """The error the host's HTTP answers stand for, from git's header trace: a redirect, or not git.

        Checked whether or not git succeeded: on an answer that is not git, git falls back to
        the dumb protocol, and an HTML page without a newline is then a repository without tags.
        """
        shown = mask_url(url)
        answers = _http_answers(run.trace)
        for answer in answers:
            expected = next((t for end, t in _GIT_CONTENT_TYPES.items() if answer.path.endswith(end)), None)
            if expected is None:
                continue  # not a request to git (a proxy's CONNECT)
            if 300 <= answer.status < 400:
                return self._redirect_error(url, answer.status, answer.location)
            if 200 <= answer.status < 300 and answer.content_type != expected:
                got = _printable(answer.content_type, 80) or "no content type"
                log.warning("git %s: the host answered %s with %s, not git", shown, answer.path, got)
                return UpstreamUnavailable(
                    f"the Git host did not answer with the git protocol for {shown}: it sent {got} instead of "
                    f"{expected} (a login page or a proxy's error page?)"
                )
        if run.proc.returncode != 0:
            if _REDIRECTED.search(run.error_text):  # the trace was cut short: no target known
                return self._redirect_error(url, 0, "")
            good = [a for a in answers if a.status == 200 and a.content_type in _GIT_CONTENT_TYPES.values()]
            if good and _CUT_SHORT.search(run.error_text) and not _CURL_FAILED.search(run.error_text):
                # Every answer arrived whole with git's content type, yet git found the protocol
                # unfinished: the body was not git's pkt-line framing (empty, or stopped early).
                log.warning("git %s failed: %s", shown, self._scrub(_last_line(run.error_text)))
                return UpstreamUnavailable(
                    f"the Git host did not answer with the git protocol for {shown}: its answer ended before "
                    "the ref advertisement did"
                )
        return None

    def _redirect_error(self, url: str, status: int, location: str) -> UpstreamUnavailable:
        shown = mask_url(url)
        target = self._scrub(_redirect_target(url, location))
        log.warning("git %s: the host redirected to %s (HTTP %s); not followed", shown, target or "?", status or "3xx")
        where = f"to {target}" if target else "elsewhere"
        return UpstreamUnavailable(
            f"the Git host redirected gitreg {where} for {shown}; gitreg follows no redirect, so that a "
            "credential never leaves its host: if that is the same repository, configure its URL instead"
        )

    def run(self, args: list[str], url: str, cwd: str | None = None) -> str:
        """Run a git command that talks to `url` (e.g. a fetch); its stdout, bounded by MAX_OUTPUT_BYTES."""
        with self._spawn(args, url, cwd) as run:
            assert run.proc.stdout is not None
            out = run.proc.stdout.read(MAX_OUTPUT_BYTES + 1)
            if len(out) > MAX_OUTPUT_BYTES:
                run.kill("too_large")
        self._check(run, url, f"git wrote more than {MAX_OUTPUT_BYTES // 2**20} MiB for {mask_url(url)}")
        return out.decode("utf-8", "replace")

    def kill_running(self) -> int:
        """Kill every git process still running (shutdown); later calls are refused. How many were killed."""
        with self._running_lock:
            self._closed = True
            runs = list(self._running)
        for run in runs:
            run.kill("shutdown")
        return len(runs)

    def running(self) -> int:
        """How many git processes run now (calls to Git hosts, and on gitreg's mirrors)."""
        with self._running_lock:
            return len(self._running)

    def ls_remote_tags(self, url: str) -> TagList:
        """List a repository's tags with `git ls-remote`; no clone is needed.

        The answer is read line by line: past MAX_REFS tag lines or MAX_OUTPUT_BYTES git is
        killed and the repository refused, before the rest is ever read.
        """
        parser = _RefParser(url)
        size = 0
        with self._spawn(["git", "ls-remote", "--tags", "--end-of-options", url], url) as run:
            assert run.proc.stdout is not None
            while line := run.proc.stdout.readline(_MAX_LINE):
                size += len(line)
                if size > MAX_OUTPUT_BYTES or parser.lines >= MAX_REFS:
                    run.kill("too_large")
                    break
                parser.feed(line)
        self._check(
            run,
            url,
            f"{mask_url(url)} has more than {MAX_REFS} tags (or {MAX_OUTPUT_BYTES // 2**20} MiB "
            "of tag refs); gitreg refuses to read them all",
        )
        return TagList(parser.result())

    def _timeout(self, shown: str) -> UpstreamTimeout:
        log.warning("git %s timed out after %gs", shown, self.config.timeout_seconds)
        return UpstreamTimeout(
            f"the Git host did not answer within {self.config.timeout_seconds:g}s for {shown}; "
            "try again later or raise [git] timeout_seconds"
        )

    def _classify(self, url: str, stderr: str, status: int | str | None) -> GitregError:
        """The error a failed git call's stderr stands for (never echoing credentials or raw bytes)."""
        shown = mask_url(url)
        if "did not complete in" in stderr or _STALLED.search(stderr):
            return self._timeout(shown)
        detail = self._scrub(_last_line(stderr))
        log.warning("git %s failed (exit %s): %s", shown, status, detail)
        if _AUTH_FAILED.search(stderr):
            if self.credential_for(url) is None:
                return UpstreamUnavailable(
                    f"the Git host refused access without credentials to {shown}; "
                    "add [[credentials]] for it on the registry server"
                )
            return UpstreamUnavailable(
                f"the Git host refused gitreg's credentials for {shown}; check [[credentials]] on the registry server"
            )
        if _NOT_FOUND.search(stderr):
            return ModuleNotFound(f"repository {shown} does not exist upstream (or gitreg may not read it)")
        if _NOT_GIT.search(stderr):
            return UpstreamUnavailable(f"the Git host did not answer with the git protocol for {shown}: {detail}")
        return UpstreamUnavailable(f"could not list tags of {shown}: {detail or 'git failed'}")


class _RefParser:
    """Incremental `git ls-remote --tags` parser; peeled `^{}` lines win for annotated tags."""

    def __init__(self, url: str = "") -> None:
        self.url = url
        self.lines = 0
        self._tags: dict[str, str] = {}
        self._peeled: dict[str, str] = {}

    def feed(self, raw: bytes | str) -> None:
        line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        line = line.rstrip("\r\n")
        self.lines += 1
        sha, sep, ref = line.partition("\t")
        if not sep or not _SHA_RE.fullmatch(sha) or not ref.startswith("refs/tags/"):
            if line.strip():
                raise UpstreamUnavailable(
                    f"the Git host answered something that is not a ref list for {mask_url(self.url)}"
                )
            return
        name = ref[len("refs/tags/") :]
        if name.endswith("^{}"):
            self._peeled[name[:-3]] = sha
        else:
            self._tags[name] = sha

    def result(self) -> dict[str, str]:
        tags = self._tags
        tags.update((name, sha) for name, sha in self._peeled.items() if name in tags)
        return tags


class _HttpAnswer(NamedTuple):
    """One HTTP answer git received, as its header trace shows it."""

    path: str  # of the request it answers
    status: int
    content_type: str = ""  # lowercase, without parameters
    location: str = ""


def _http_answers(trace: list[tuple[str, str, str]]) -> list[_HttpAnswer]:
    """The answers in git's GIT_TRACE_CURL lines, each with the path of the request it answers."""
    request = ""
    answers: list[_HttpAnswer] = []
    for direction, kind, text in trace:
        if direction == "=>" and kind == "Send header" and text.endswith((" HTTP/1.1", " HTTP/1.0", " HTTP/2")):
            request = urlsplit(text.split(" ")[1]).path  # "GET /repo.git/info/refs?service=... HTTP/1.1"
        elif direction == "<=" and kind == "Recv header":
            name, sep, value = text.partition(":")
            name = name.strip().lower()
            if started := _STATUS_LINE.match(text):  # a status line starts an answer (1xx ones too)
                answers.append(_HttpAnswer(request, int(started[1])))
            elif sep and answers and name == "content-type":
                answers[-1] = answers[-1]._replace(content_type=value.split(";")[0].strip().lower())
            elif sep and answers and name == "location":
                answers[-1] = answers[-1]._replace(location=value.strip())
    return answers


def _printable(text: str, limit: int) -> str:
    """`text` without control bytes and at most `limit` characters: it came from the host."""
    return "".join(c if c.isprintable() else "?" for c in text)[:limit]


def _redirect_target(url: str, location: str) -> str:
    """Where a redirect pointed: scheme, host, port and repository path, never user info or query."""
    if not location:
        return ""
    try:
        parts = urlsplit(urljoin(url.rstrip("/") + "/info/refs", location))
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return ""
    if not host:
        return ""
    host = f"[{host}]" if ":" in host else host
    path = parts.path.removesuffix("/info/refs").removesuffix("/git-upload-pack")
    return _printable(f"{parts.scheme}://{host}" + (f":{port}" if port else "") + path, 200)


def _last_line(stderr: str) -> str:
    """git's last informative stderr line (not its "make sure ... the repository exists" advice)."""
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    useful = [ln for ln in lines if not _BOILERPLATE.search(ln)]
    line = (useful or lines or [""])[-1]
    line = line.removeprefix("stderr:").strip().strip("'").strip()
    # Whatever the host sent may be echoed here: no credentials in URLs, no control bytes.
    line = _USERINFO_RE.sub("", line)
    return _printable(line, 300)


class NoSuchTree(Exception):
    """`git archive <sha>:<path>` found no such tree: the commit is not in the mirror, or has no such directory."""

    def __init__(self, sha: str, path: str, commit_missing: bool) -> None:
        super().__init__(f"{sha[:12]}:{path}")
        self.commit_missing = commit_missing


class MirrorGit:
    """Git commands on gitreg's own bare mirrors (archive mode, module details).

    Every one goes through the adapter's runner (`GitAdapter._spawn`), as calls to Git hosts
    do: timed, in its own process group, counted, killed at shutdown.
    """

    def __init__(self, adapter: GitAdapter) -> None:
        self.adapter = adapter

    def _local(
        self, path: str | None, args: list[str], timeout: float | None = None, stdin: BinaryIO | None = None
    ) -> tuple[int, str]:
        """Run git on gitreg's own repository at `path` (no Git host involved): exit status and stdout."""
        with self.adapter._spawn(["git", *args], "", cwd=path, timeout=timeout, stdin=stdin) as run:
            assert run.proc.stdout is not None
            out = run.proc.stdout.read(MAX_OUTPUT_BYTES + 1)
            if len(out) > MAX_OUTPUT_BYTES:
                run.kill("too_large")
        self._raise_if_killed(run, f"git {args[0]}")
        return run.proc.returncode, out.decode("utf-8", "replace")

    def local(self, path: str, args: list[str], timeout: float | None = None, stdin: BinaryIO | None = None) -> str:
        """Run git on the mirror at `path` (e.g. ref bookkeeping): its stdout; UpstreamUnavailable when git fails."""
        status, out = self._local(path, args, timeout, stdin)
        if status != 0:
            raise UpstreamUnavailable(f"git {args[0]} on gitreg's mirror failed (exit {status})")
        return out

    def _raise_if_killed(self, run: _GitRun, what: str) -> None:
        if run.killed == "timeout":
            raise UpstreamTimeout(f"{what} on gitreg's mirror took longer than [git] timeout_seconds")
        if run.killed == "too_large":
            raise UpstreamUnavailable(f"{what} wrote more than {MAX_OUTPUT_BYTES // 2**20} MiB")
        if run.killed is not None:
            raise UpstreamUnavailable("gitreg is shutting down; try again")

    def init(self, path: str) -> None:
        """Create an empty bare repository at `path`."""
        # Absolute: git runs in gitreg's own empty HOME, not in the server's working directory.
        # No template: none of the sample hooks, description and info/exclude a repository of
        # gitreg's never uses (a quarter of the files to write, and to remove after a scratch fetch).
        status, _ = self._local(
            None, ["init", "--quiet", "--bare", "--template=", "--end-of-options", os.path.abspath(path)], timeout=60
        )
        if status != 0:
            raise UpstreamUnavailable(f"could not create a mirror repository (git init exited with {status})")

    def fetch_tags(self, path: str, url: str, tag: str | None = None) -> None:
        """Fetch every tag of `url` into the mirror at `path` (tags may move: force, prune).

        With `tag`: that one tag and its commit's tree only (`--depth=1`, no history), what module
        details need of a repository gitreg keeps no mirror of. The tag name comes from the
        host's ref list (a valid ref name: no `:` or `*`).
        """
        if tag is None:
            settings, options, refspec = [], ["--force", "--prune"], "+refs/tags/*:refs/tags/*"
        else:
            # The pack is kept as it came, not unpacked into a file per object (git does that
            # below 100 objects, which a module's tree usually is): read once, then removed.
            settings = ["-c", "fetch.unpackLimit=1"]
            options, refspec = ["--depth=1", "--no-tags"], f"+refs/tags/{tag}:refs/tags/{tag}"
        args = [
            "git",
            *settings,
            "fetch",
            "--quiet",
            *options,
            "--no-write-fetch-head",
            "--end-of-options",
            url,
            refspec,
        ]
        self.adapter.run(args, url, path)

    def has_commit(self, path: str, sha: str) -> bool:
        """True when the mirror at `path` holds commit `sha` (a validated SHA from ls-remote)."""
        if not _SHA_RE.fullmatch(sha):
            raise ValueError("not a commit SHA")
        status, _ = self._local(path, ["cat-file", "-e", f"{sha}^{{commit}}"], timeout=30)
        return status == 0

    def archive(self, path: str, sha: str, subdir: str, consume: Callable[[BinaryIO], T]) -> T:
        """`git archive --format=tar <sha>:<subdir>` of the mirror at `path`, read by `consume` as git writes it.

        The directory's files are at the root of the tar. Raises UpstreamTimeout, or
        UpstreamUnavailable (shutdown, git failed), or NoSuchTree: the caller says what that means.
        """
        if not _SHA_RE.fullmatch(sha):
            raise ValueError("not a commit SHA")
        args = ["git", "archive", "--format=tar", "--end-of-options", f"{sha}:{subdir}"]
        with self.adapter._spawn(args, "", cwd=path) as run:
            assert run.proc.stdout is not None
            # Popen(stdout=PIPE) in bytes mode: a BufferedReader, which typeshed calls IO[bytes].
            result = consume(cast(BinaryIO, run.proc.stdout))
        self._raise_if_killed(run, f"git archive of commit {sha[:12]}")
        if run.proc.returncode != 0:
            if not self.has_commit(path, sha):
                raise NoSuchTree(sha, subdir, commit_missing=True)
            if "not a valid object name" in run.error_text or "not a tree object" in run.error_text:
                raise NoSuchTree(sha, subdir, commit_missing=False)
            raise UpstreamUnavailable(
                f"could not read commit {sha[:12]} from gitreg's mirror: {_last_line(run.error_text)}"
            )
        return result

    def tag_dates(self, path: str) -> dict[str, str]:
        """tag name -> ISO 8601 date (the tagger's date, or the commit's for a lightweight tag)."""
        status, out = self._local(
            path, ["for-each-ref", "--format=%(refname:strip=2)%00%(creatordate:iso-strict)", "refs/tags"], timeout=60
        )
        if status != 0:
            raise UpstreamUnavailable(f"could not read the tag dates of gitreg's mirror (git exited with {status})")
        dates = {}
        for line in out.splitlines():
            name, _, date = line.partition("\0")
            if name and date:
                dates[name] = date
        return dates
