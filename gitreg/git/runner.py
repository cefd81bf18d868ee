"""The one place that starts a git process. Blocking: callers run it in the app's bounded pool.

What runs is decided beside it (`remote`: calls to Git hosts; `mirror`: gitreg's own bare
mirrors; `failures`: what a failed call to a host means); how git runs is decided here, once:
- credentials reach git through its environment (`GIT_CONFIG_COUNT`/`KEY`/`VALUE` with
  `http.<url>.extraHeader`), never argv or a URL;
- git follows no HTTP redirect (`http.followRedirects=false`): git attaches the extraHeader to
  every request of the process, so a redirect followed would carry the credential to whatever
  host the redirect names. A redirect is an error naming its target instead (see `failures`);
- over HTTP, git traces the headers of its requests and answers (`GIT_TRACE_CURL`, no data,
  `Authorization` redacted) into its stderr, kept apart from git's own words (`GitRun.trace`),
  so gitreg sees where a redirect pointed and what content type each answer had;
- git's environment is built, not inherited: a few variables of gitreg's own by name (`PATH`,
  proxies, CA bundles; `SSH_AUTH_SOCK` for ssh), never the secrets `${VAR}` in the config read,
  and the one credential of the host it talks to;
- system and global git config are ignored and `HOME` is gitreg's own, so an operator's
  `~/.gitconfig` (`url.insteadOf`, credential helpers) cannot change what runs;
- only the configured transports are allowed (`GIT_ALLOW_PROTOCOL`: no `ext::`);
- nothing prompts (`GIT_TERMINAL_PROMPT=0`, ssh `BatchMode`);
- every git process, whether it talks to a Git host (`ls-remote`, `fetch`) or reads gitreg's
  own mirrors (`archive`, `cat-file`, `for-each-ref`, `init`), is started by `GitRunner.spawn`:
  in its own process group, so a timeout, an oversized answer or shutdown kills git *and* its
  helpers (`git-remote-http`, `ssh`, `index-pack`) at once and nothing is left behind even
  when git itself had exited; timed; counted (`running()`, the `gitreg_git_processes` gauge);
  killed at shutdown. (GitPython's `execute` was used for the mirror commands before: its
  `kill_after_timeout` kills git alone, not its helpers, and its processes were neither
  counted nor stopped at shutdown. GitPython is no longer a dependency.)
  curl and ssh also give up by themselves on a host that stalls (`GIT_HTTP_LOW_SPEED_*`,
  `ConnectTimeout`/`ServerAliveInterval`), which matters for git processes that outlive a
  gitreg killed with SIGKILL.
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
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import IO, BinaryIO

from gitreg.config.model import Credential, GitConfig, credential_for
from gitreg.core import urls
from gitreg.core.errors import OUT_OF_RESOURCES, Overloaded, UpstreamUnavailable
from gitreg.git.pool import RUNNING_AS, Priority

log = logging.getLogger(__name__)

# A line of git's GIT_TRACE_CURL output ("15:00:53.893252 http.c:684  => Send header: ..."),
# kept apart from git's own messages: header values are the host's words, not git's.
_TRACE_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d+ \S+:\d+ +(=>|<=|==) ([^:,]*)[:,] ?(.*)$")
# What one git call may write to stdout: beyond it, git is killed (an answer gitreg refuses).
MAX_OUTPUT_BYTES = 32 * 1024 * 1024
# `nice` of git run for background work (as the parse workers): install requests go first for the CPU too.
BACKGROUND_NICENESS = 10
_MAX_STDERR = 64 * 1024
# curl gives up on a transfer slower than this many bytes per second for [git] timeout_seconds.
LOW_SPEED_LIMIT = 1000


# What a child process takes from gitreg's own environment, by name: nothing else. gitreg's
# environment holds whatever `${VAR}` in the config read (the Redis password, registry and API
# tokens, the signing key, webhook secrets, the Git password), none of which git needs: git gets
# its own host's credential from `GitRunner.environment`, and the index process its config on stdin.
INHERITED = frozenset(
    {
        "PATH",
        "TMPDIR",
        "TZ",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        # Proxies, as curl reads them (an operator's proxy may carry its own password: it is the proxy's).
        "http_proxy",
        "https_proxy",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
        "no_proxy",
        "NO_PROXY",
        # An internal CA for the Git host.
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
        "GIT_SSL_CAPATH",
    }
)
# Only for git talking ssh: the agent holding the operator's keys.
INHERITED_FOR_SSH = frozenset({"SSH_AUTH_SOCK"})


def inherited_environment(names: frozenset[str] = INHERITED) -> dict[str, str]:
    """The variables of gitreg's own environment named in `names` that are set: what a child keeps."""
    # By name, not over the whole environment: every git process starts with this (#33: the
    # index process starts one a repository, and its CPU competes with git's at first listing).
    environ = os.environ
    return {name: environ[name] for name in names if name in environ}


def _overloaded(reason: str) -> Overloaded:
    """The 503 for git that cannot start now (out of file descriptors, processes or memory), logged once."""
    log.warning("cannot start git: %s; answering 503 until resources free up", reason)
    return Overloaded(
        f"gitreg is out of file descriptors or processes to run git ({reason}); try again in a few seconds"
    )


# The reason /readyz, `serve` and `check` give when there is no git to run (#33).
GIT_MISSING = "git is not installed on the registry server (no `git` on PATH)"


def git_found() -> bool:
    """Whether `git` is on the PATH the git processes get (they inherit it): /readyz and the start checks."""
    return shutil.which("git", path=os.environ.get("PATH", os.defpath)) is not None


def _stderr_file() -> IO[bytes]:
    """Where one git process writes its stderr: an anonymous file in memory where Linux has them
    (no directory entry made and removed a git call, #33), else a temporary file."""
    if hasattr(os, "memfd_create"):
        with contextlib.suppress(OSError):  # (out of file descriptors: TemporaryFile says so below)
            return open(os.memfd_create("gitreg-git-stderr", os.MFD_CLOEXEC), "w+b", buffering=0)
    return tempfile.TemporaryFile()


class GitRun:
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
        self.stderr = _stderr_file()
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
        self._runs: dict[int, GitRun] = {}  # armed, by number
        self._numbers = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, run: GitRun, seconds: float) -> int:
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


class GitRunner:
    """Starts git for gitreg with a hardened, credential-carrying environment; counts and stops it."""

    def __init__(self, config: GitConfig, credentials: tuple[Credential, ...], home: str) -> None:
        self.config = config
        self.credentials = credentials
        # An empty HOME of our own: no ~/.gitconfig, ~/.netrc or ~/.ssh/config of the operator.
        self._home = home
        self._running: set[GitRun] = set()
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
            # by `failures` to see redirects and answers that are not git.
            "GIT_TRACE_CURL": "1" if url.startswith(("http://", "https://")) else "0",
            "GIT_TRACE_CURL_NO_DATA": "1",
            "GIT_TRACE_REDACT": "1",
            # `git -c` settings inherited from gitreg's own environment do not apply either,
            "GIT_CONFIG_PARAMETERS": "",
            # nor the config of a repository gitreg happens to be started in (see spawn's cwd).
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

    def scrub(self, text: str) -> str:
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
        return credential_for(self.credentials, url)

    @contextlib.contextmanager
    def spawn(
        self,
        args: list[str],
        url: str,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: BinaryIO | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> Iterator[GitRun]:
        """The one way gitreg starts git: against `url` (credentials) or its own repositories (url "").

        For the git package only: what runs is built from constants there (`remote`, `mirror`).
        In its own process group, killed with its helpers at `timeout` (default [git]
        timeout_seconds) or shutdown, counted in running(); on leaving, all of it is gone.
        """
        if self._closed:
            raise UpstreamUnavailable("gitreg is shutting down; try again")
        # Only what git needs (see INHERITED); English errors, to classify them.
        names = INHERITED | INHERITED_FOR_SSH if urls.transport(url) == "ssh" else INHERITED
        env = {**inherited_environment(names), "LC_ALL": "C", "LANGUAGE": "C", **self.environment(url)}
        env.update(extra_env or {})  # gitreg's own settings for one command (signature checks: GNUPGHOME)
        try:
            # Not the server's working directory: a repository there would lend git its config.
            run = GitRun(args, env, cwd or self._home, subprocess.PIPE, stdin)
        except FileNotFoundError:
            raise UpstreamUnavailable(GIT_MISSING) from None
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

    def output(
        self,
        args: list[str],
        url: str,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: BinaryIO | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> tuple[GitRun, bytes]:
        """Run git to its end (see spawn()): the finished run and its stdout, cut at MAX_OUTPUT_BYTES.

        Beyond that bound git is killed ("too_large"): the caller says what that means.
        """
        with self.spawn(args, url, cwd, timeout, stdin, extra_env) as run:
            assert run.proc.stdout is not None
            out = run.proc.stdout.read(MAX_OUTPUT_BYTES + 1)
            if len(out) > MAX_OUTPUT_BYTES:
                run.kill("too_large")
        return run, out

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
