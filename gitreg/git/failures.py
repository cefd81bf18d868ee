"""What a git call to a Git host that went wrong stands for: the one reader of git's stderr and
of the HTTP answers in its header trace (`GitRun.trace`, see `runner`).

A redirect is an error naming its target (never followed: the credential would go along); an
answer that is not git's smart protocol (an SSO page, a proxy's error page) is an error, not
the "no tags" git's dumb-protocol fallback makes of it; a missing repository is a 404, a
refused credential or a stalled host a 503 or 504. Nothing the host sent reaches a message
unscrubbed: no credentials, no control bytes.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import NamedTuple
from urllib.parse import urljoin, urlsplit

from gitreg.core.errors import DiskFull, GitregError, ModuleNotFound, UpstreamTimeout, UpstreamUnavailable
from gitreg.core.urls import mask
from gitreg.git.runner import GitRun, GitRunner

log = logging.getLogger(__name__)

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
# gitreg's own disk, not the host: git could not write what it fetched ("unpack-objects failed" follows).
DISK_FULL_TEXT = re.compile(r"no space left on device|disk quota exceeded", re.IGNORECASE)
# The host refused to send an object asked for by its name (a protocol v0 server, or one that
# allows only advertised objects): the caller asks again by the tag's name.
_WANT_REFUSED = re.compile(r"not our ref|unadvertised object", re.IGNORECASE)
_STATUS_LINE = re.compile(r"HTTP/[\d.]+ (\d{3})\b", re.IGNORECASE)
_REDIRECTED = re.compile(r"returned error: 3\d\d\b")
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
_USERINFO_RE = re.compile(r"(?<=://)[^/@\s']+@")


class WantRefused(UpstreamUnavailable):
    """The host would not send an object asked for by its SHA (protocol v0, or only advertised objects allowed)."""


def check(runner: GitRunner, run: GitRun, url: str, too_large: Callable[[str], str]) -> None:
    """Raise the error a finished git call stands for, if any. `too_large`: what an answer past the
    bound means, given the URL as shown (masked only when a message needs it: not for each call)."""
    if run.killed == "timeout":
        raise _timeout(runner, mask(url))
    if run.killed == "shutdown":
        raise UpstreamUnavailable(f"gitreg is shutting down; git for {mask(url)} was stopped, try again")
    if run.killed == "too_large":
        shown = mask(url)
        message = too_large(shown)
        log.warning("git %s: %s", shown, message)
        raise UpstreamUnavailable(message)
    answered = _http_failure(runner, run, url)
    if answered is not None:
        raise answered
    if run.proc.returncode != 0:
        raise _classify(runner, url, run.error_text, run.proc.returncode)


def _http_failure(runner: GitRunner, run: GitRun, url: str) -> GitregError | None:
    """The error the host's HTTP answers stand for, from git's header trace: a redirect, or not git.

    Checked whether or not git succeeded: on an answer that is not git, git falls back to
    the dumb protocol, and an HTML page without a newline is then a repository without tags.
    """
    answers = _http_answers(run.trace)
    for answer in answers:
        expected = next((t for end, t in _GIT_CONTENT_TYPES.items() if answer.path.endswith(end)), None)
        if expected is None:
            continue  # not a request to git (a proxy's CONNECT)
        if 300 <= answer.status < 400:
            return _redirect_error(runner, url, answer.status, answer.location)
        if 200 <= answer.status < 300 and answer.content_type != expected:
            got = _printable(answer.content_type, 80) or "no content type"
            shown = mask(url)
            log.warning("git %s: the host answered %s with %s, not git", shown, answer.path, got)
            return UpstreamUnavailable(
                f"the Git host did not answer with the git protocol for {shown}: it sent {got} instead of "
                f"{expected} (a login page or a proxy's error page?)"
            )
    if run.proc.returncode != 0:
        if _REDIRECTED.search(run.error_text):  # the trace was cut short: no target known
            return _redirect_error(runner, url, 0, "")
        good = [a for a in answers if a.status == 200 and a.content_type in _GIT_CONTENT_TYPES.values()]
        if good and _CUT_SHORT.search(run.error_text) and not _CURL_FAILED.search(run.error_text):
            # Every answer arrived whole with git's content type, yet git found the protocol
            # unfinished: the body was not git's pkt-line framing (empty, or stopped early).
            shown = mask(url)
            log.warning("git %s failed: %s", shown, runner.scrub(last_line(run.error_text)))
            return UpstreamUnavailable(
                f"the Git host did not answer with the git protocol for {shown}: its answer ended before "
                "the ref advertisement did"
            )
    return None


def _redirect_error(runner: GitRunner, url: str, status: int, location: str) -> UpstreamUnavailable:
    shown = mask(url)
    target = runner.scrub(_redirect_target(url, location))
    log.warning("git %s: the host redirected to %s (HTTP %s); not followed", shown, target or "?", status or "3xx")
    where = f"to {target}" if target else "elsewhere"
    return UpstreamUnavailable(
        f"the Git host redirected gitreg {where} for {shown}; gitreg follows no redirect, so that a "
        "credential never leaves its host: if that is the same repository, configure its URL instead"
    )


def _timeout(runner: GitRunner, shown: str) -> UpstreamTimeout:
    log.warning("git %s timed out after %gs", shown, runner.config.timeout_seconds)
    return UpstreamTimeout(
        f"the Git host did not answer within {runner.config.timeout_seconds:g}s for {shown}; "
        "try again later or raise [git] timeout_seconds"
    )


def _classify(runner: GitRunner, url: str, stderr: str, status: int | str | None) -> GitregError:
    """The error a failed git call's stderr stands for (never echoing credentials or raw bytes)."""
    shown = mask(url)
    if "did not complete in" in stderr or _STALLED.search(stderr):
        return _timeout(runner, shown)
    detail = runner.scrub(last_line(stderr))
    log.warning("git %s failed (exit %s): %s", shown, status, detail)
    if DISK_FULL_TEXT.search(stderr):
        # The caller that knows where git wrote names the path (storage.mirrors: disk_full).
        return DiskFull(f"git could not write what it fetched from {shown}: no space left on gitreg's disk")
    if _AUTH_FAILED.search(stderr):
        if runner.credential_for(url) is None:
            return UpstreamUnavailable(
                f"the Git host refused access without credentials to {shown}; "
                "add [[credentials]] for it on the registry server"
            )
        return UpstreamUnavailable(
            f"the Git host refused gitreg's credentials for {shown}; check [[credentials]] on the registry server"
        )
    if _WANT_REFUSED.search(stderr):
        return WantRefused(f"the Git host of {shown} sends only the objects it advertises: {detail}")
    if _NOT_FOUND.search(stderr):
        return ModuleNotFound(f"repository {shown} does not exist upstream (or gitreg may not read it)")
    if _NOT_GIT.search(stderr):
        return UpstreamUnavailable(f"the Git host did not answer with the git protocol for {shown}: {detail}")
    return UpstreamUnavailable(f"could not list tags of {shown}: {detail or 'git failed'}")


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


def last_line(stderr: str) -> str:
    """git's last informative stderr line (not its "make sure ... the repository exists" advice)."""
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    useful = [ln for ln in lines if not _BOILERPLATE.search(ln)]
    line = (useful or lines or [""])[-1]
    line = line.removeprefix("stderr:").strip().strip("'").strip()
    # Whatever the host sent may be echoed here: no credentials in URLs, no control bytes.
    line = _USERINFO_RE.sub("", line)
    return _printable(line, 300)
