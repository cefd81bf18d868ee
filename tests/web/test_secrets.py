"""Secrets never leak: not into git's argv, logs at any level, error bodies, /metrics, or reprs.

Registry tokens, the metrics token, webhook secrets, the URL-signing key and Git passwords
(and the Basic credential git sends) are planted, every path that handles them is exercised
against real git over smart HTTP, and everything gitreg shows is searched for them.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import hmac
import json
import os
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gitreg.config.parse import parse_config
from gitreg.core.errors import ConfigError
from gitreg.web.keys import GIT, IDENTITY
from tests.support.app import served_app, version_details
from tests.support.githttp import GitHttpServer
from tests.support.process import GitregProcess, run_gitreg
from tests.support.repos import GitRepo

GIT_USER = "gitreg-reader"
GIT_PASSWORD = "git-password-7c1d9e0b5a"
WRONG_PASSWORD = "wrong-git-password-3e8f61"
REGISTRY_TOKEN = "secret-registry-token-6a0b2c"
SCOPED_TOKEN = "secret-scoped-token-40d7e1f9"
METRICS_TOKEN = "secret-metrics-token-1f5e7d"
GITHUB_SECRET = "secret-github-webhook-92be4"
GITLAB_TOKEN = "secret-gitlab-webhook-0c3a8"
SIGNING_KEY = "secret-url-signing-key-5d2f0a9c71e3b84d"


def basic(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


SECRETS = [
    GIT_PASSWORD,
    WRONG_PASSWORD,
    REGISTRY_TOKEN,
    SCOPED_TOKEN,
    METRICS_TOKEN,
    GITHUB_SECRET,
    GITLAB_TOKEN,
    SIGNING_KEY,
    basic(GIT_USER, GIT_PASSWORD),
    basic(GIT_USER, WRONG_PASSWORD),
]


def leaked(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


@pytest.fixture
def private_host(tmp_path: Path):
    """A git server that wants GIT_USER/GIT_PASSWORD for every repository: private.git, broken.git."""
    root = tmp_path / "repos"
    for name in ("private", "broken"):
        repo = GitRepo(root, name)
        repo.commit({"main.tf": f"# {name}\n", "README.md": f"# {name}\n\nA private module.\n"})
        repo.tag("v1.0.0")
    with GitHttpServer(root, username=GIT_USER, password=GIT_PASSWORD) as server:
        yield server


def config_data(host: GitHttpServer, tmp_path: Path) -> dict[str, Any]:
    return {
        "git": {"protocols": ["http"], "timeout_seconds": 20},
        "storage": {"path": str(tmp_path / "state")},
        "auth": {
            "tokens": ["${REGISTRY_TOKEN}", {"token": SCOPED_TOKEN, "namespaces": ["demo"]}],
            "metrics_token": METRICS_TOKEN,
            "signing_key": SIGNING_KEY,
        },
        "webhooks": {"github_secret": GITHUB_SECRET, "gitlab_token": GITLAB_TOKEN},
        "modules": [
            {"namespace": "demo", "name": "hello", "system": "null", "repository": host.url("private.git")},
            {"namespace": "demo", "name": "broken", "system": "null", "repository": host.url("broken.git")},
        ],
        "credentials": [
            {"url": host.base_url + "/", "username": GIT_USER, "password": "${GIT_PASSWORD}"},
            # the longer prefix wins for broken.git: a password the host refuses
            {"url": host.url("broken.git"), "username": GIT_USER, "password": WRONG_PASSWORD},
        ],
    }


ENV = {"REGISTRY_TOKEN": REGISTRY_TOKEN, "GIT_PASSWORD": GIT_PASSWORD}


# --- argv -----------------------------------------------------------------------------------------


def processes_naming(needle: str) -> dict[int, tuple[list[str], str]]:
    """pid -> (argv, environment) of every live process whose command line contains `needle`."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace").split("\0")
            if needle in " ".join(argv):
                found[int(pid)] = (argv, Path(f"/proc/{pid}/environ").read_bytes().decode("utf-8", "replace"))
        except OSError:  # gone, or not ours
            continue
    return found


@pytest.mark.slow
async def test_git_runs_with_credentials_in_its_environment_never_in_its_argv(aiohttp_client, private_host, tmp_path):
    client = await aiohttp_client(served_app(parse_config(config_data(private_host, tmp_path), ENV)))
    # Every git request waits: the children live long enough to read.
    private_host.mode, private_host.delay = "slow", 0.5
    # The index process runs ls-remote, then a fetch for the details (broken.git's host refuses
    # gitreg's password: it is never listed, so wait for the private module's details, not `indexed`).
    auth = {"Authorization": f"Bearer {REGISTRY_TOKEN}"}
    indexing = asyncio.ensure_future(
        version_details(client, "/v1/modules/demo/hello/null/1.0.0", timeout=60, headers=auth)
    )
    seen: dict[int, tuple[list[str], str]] = {}
    while not indexing.done():
        seen.update(processes_naming(private_host.base_url))
        await asyncio.sleep(0.01)
    await indexing
    resp = await client.get("/v1/modules/demo/hello/null", headers={"Authorization": f"Bearer {REGISTRY_TOKEN}"})
    assert resp.status == 200, await resp.text()  # ls-remote and the fetch into the mirror both ran
    commands = [argv for argv, _ in seen.values()]
    ls_remote = [a for a in commands if "ls-remote" in a]
    fetch = [a for a in commands if "fetch" in a]
    assert ls_remote and fetch, commands  # the probe saw the git processes it is about
    for argv in commands:
        assert leaked(" ".join(argv)) == [], argv
    for argv in ls_remote + fetch:
        # the one user-derived value comes after --end-of-options: it can never be read as an option
        repo_url = next(arg for arg in argv if arg.startswith(private_host.base_url))  # private.git or broken.git
        assert argv[argv.index(repo_url) - 1] == "--end-of-options", argv
    # The credential reaches git through its environment (http.<url>.extraHeader), as documented.
    assert any(f"Authorization: Basic {basic(GIT_USER, GIT_PASSWORD)}" in env for _, env in seen.values())


# --- logs, error bodies, /metrics -------------------------------------------------------------------


def github_push(url: str) -> bytes:
    return json.dumps(
        {"ref": "refs/tags/v1.0.1", "repository": {"clone_url": url, "html_url": url.removesuffix(".git")}}
    ).encode()


@pytest.mark.slow
@pytest.mark.parametrize("log_format", ["json", "text"])
async def test_no_secret_in_logs_at_debug_in_error_bodies_or_in_metrics(private_host, tmp_path, log_format):
    config = tmp_path / "gitreg.toml"
    data = config_data(private_host, tmp_path)
    config.write_text(toml(data))
    shown: list[str] = []  # every status line, header and body gitreg answered with

    async def call(session: aiohttp.ClientSession, method: str, path: str, **kw: Any) -> int:
        async with session.request(method, server.url + path, **kw) as resp:
            shown.append(f"{resp.status} {dict(resp.headers)} {await resp.text()}")
            print(method, path[:60], shown[-1][:300])  # shown by pytest when an assertion below fails
            return resp.status

    with GitregProcess("--config", str(config), "--log-level", "debug", "--log-format", log_format, env=ENV) as server:
        good = {"Authorization": f"Bearer {REGISTRY_TOKEN}"}
        async with aiohttp.ClientSession() as s:
            assert await call(s, "GET", "/v1/modules/demo/hello/null/versions", headers=good) == 200
            server.wait_indexed()
            assert await call(s, "GET", "/v1/modules/demo/hello/null", headers=good) == 200  # read from the mirror
            assert await call(s, "GET", "/v1/modules/demo/hello/null/1.0.0/download", headers=good) == 200
            assert await call(s, "GET", "/v1/modules", headers={"Authorization": f"Bearer {SCOPED_TOKEN}"}) == 200
            # a secret in a query string (where a careless client puts it) is masked in the access log
            assert (
                await call(
                    s,
                    "GET",
                    f"/v1/modules/demo/hello/null/versions?token={REGISTRY_TOKEN}&signature={SIGNING_KEY}",
                    headers=good,
                )
                == 200
            )
            assert (
                await call(
                    s,
                    "GET",
                    "/v1/modules/demo/hello/null/versions",
                    headers={"Authorization": f"Bearer {REGISTRY_TOKEN}x"},
                )
                == 401
            )
            # git refuses the password
            assert await call(s, "GET", "/v1/modules/demo/broken/null/versions", headers=good) == 502
            assert await call(s, "GET", "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}) == 200
            assert await call(s, "GET", "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN[:-1]}"}) == 401
            body = github_push(private_host.url("private.git"))
            signature = "sha256=" + hmac.new(GITHUB_SECRET.encode(), body, hashlib.sha256).hexdigest()
            wrong_last = "1" if signature.endswith("0") else "0"  # always a different signature
            # accepted: a background git call
            assert (
                await call(
                    s,
                    "POST",
                    "/webhooks/github",
                    data=body,
                    headers={
                        "X-GitHub-Event": "push",
                        "X-Hub-Signature-256": signature,
                        "Content-Type": "application/json",
                    },
                )
                == 200
            )
            assert (
                await call(
                    s,
                    "POST",
                    "/webhooks/github",
                    data=body,
                    headers={"X-GitHub-Event": "push", "X-Hub-Signature-256": signature[:-1] + wrong_last},
                )
                == 401
            )
            assert (
                await call(
                    s,
                    "POST",
                    "/webhooks/gitlab",
                    data=b"{}",
                    headers={"X-Gitlab-Event": "Tag Push Hook", "X-Gitlab-Token": GITLAB_TOKEN + "x"},
                )
                == 401
            )
            await asyncio.sleep(0.5)  # let the webhook's background refresh log what it logs
            assert await call(s, "GET", "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}) == 200
    log = "".join(server.log)
    # The run was the one we meant: debug on (its first line names the event loop: uvloop, which
    # the warm path's figures are measured on), every request in the access log, the git failure logged.
    assert "event loop: uvloop.Loop" in log and log.count("/v1/modules/demo/hello/null/versions") >= 3, log[-3000:]
    assert "token=***" in log and "signature=***" in log, log[-3000:]
    assert "broken.git" in log and "gitreg_webhook_events_total" in shown[-1], log[-3000:]
    if log_format == "json":
        assert all(json.loads(line) for line in log.splitlines() if line.strip())
    assert leaked(log) == [], "in the log"
    assert leaked("\n".join(shown)) == [], "in a response"


def toml(data: dict[str, Any]) -> str:
    """Just enough TOML for config_data (tables, arrays of tables, strings, lists, numbers)."""

    def value(v: Any) -> str:
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return json.dumps(v)

    out = []
    for section, content in data.items():
        if isinstance(content, list):
            for table in content:
                out.append(f"[[{section}]]\n" + "".join(f"{k} = {value(v)}\n" for k, v in table.items()))
        else:
            out.append(f"[{section}]\n" + "".join(f"{k} = {value(v)}\n" for k, v in content.items()))
    return "\n".join(out)


def test_check_probe_never_prints_a_password(private_host, tmp_path):
    config = tmp_path / "gitreg.toml"
    config.write_text(toml(config_data(private_host, tmp_path)))
    result = run_gitreg("check", "--probe", "--config", str(config), env=ENV)
    assert result.returncode == 1  # broken.git's credential is refused...
    assert "demo/hello/null" in result.stdout and "1.0.0" in result.stdout  # ...private.git's works
    assert "refused gitreg's credentials" in result.stdout
    assert leaked(result.stdout + result.stderr) == []


# --- reprs and config errors --------------------------------------------------------------------------


async def test_no_secret_in_the_repr_of_config_or_of_the_objects_that_hold_it(aiohttp_client, private_host, tmp_path):
    config = parse_config(config_data(private_host, tmp_path), ENV)
    objects: list[Any] = [
        config,
        config.auth,
        config.webhooks,
        *config.auth.tokens,
        *config.credentials,
        config.credentials,
    ]
    client = await aiohttp_client(served_app(config))
    objects += [client.app[IDENTITY].static, client.app[GIT]]
    text = "\n".join(f"{o!r}\n{o!s}" for o in objects)
    assert leaked(text) == [], text
    # repr=False hides them, it does not lose them: the config still carries every secret it was given.
    assert config.credentials[0].password == GIT_PASSWORD and config.auth.metrics_token == METRICS_TOKEN
    for o in (config.auth, config.webhooks, *config.credentials):
        assert dataclasses.is_dataclass(o)


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"auth": {"metrics_token": "shortsecret1"}}, "auth.metrics_token"),
        ({"auth": {"signing_key": "short-signing-key-1234"}}, "auth.signing_key"),
        ({"auth": {"tokens": ["shortsecret2"]}}, "auth.tokens[0]"),
        ({"auth": {"tokens": [{"token": "shortsecret3", "namespaces": ["acme"]}]}}, "auth.tokens[0]"),
        ({"webhooks": {"github_secret": "shortsecret4"}}, "webhooks.github_secret"),
        ({"webhooks": {"gitlab_token": "shortsecret5"}}, "webhooks.gitlab_token"),
        (
            {"credentials": [{"url": "ssh://git.example.com/", "username": "u", "password": "shortsecret6"}]},
            "credentials[0].url",
        ),
    ],
)
def test_a_config_error_about_a_secret_never_prints_the_secret(data, key):
    with pytest.raises(ConfigError) as e:
        parse_config(data, {})
    text = "\n".join(e.value.problems)
    assert f"{key}:" in text
    assert "shortsecret" not in text and "short-signing-key" not in text, text


# --- what aiohttp and asyncio log by themselves ------------------------------------------------------

SIGNATURE = "capability-signature-5f0e2d7c9b"


def raw_exchange(url: str, *payloads: bytes) -> bytes:
    """Send each payload on one connection (waiting for an answer after each); everything answered."""
    import socket

    host, port = url.split("://", 1)[1].rsplit(":", 1)
    answers = b""
    with socket.create_connection((host, int(port)), timeout=10) as s:
        for payload in payloads:
            s.sendall(payload)
            try:
                answers += s.recv(65536)
            except OSError:
                break
    return answers


@pytest.mark.slow
@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_request_the_http_parser_refuses_is_never_logged_with_its_signature(tmp_path, log_format):
    repo = GitRepo(tmp_path / "repos", "hello")
    repo.commit({"main.tf": "#\n"})
    repo.tag("v1.0.0")
    archive = f"/v1/modules/demo/hello/null/1.0.0/archive.tar.gz?expires=1&signature={SIGNATURE}"
    with GitregProcess(
        "--module", f"demo/hello/null={repo.url}", "--log-level", "debug", "--log-format", log_format, cwd=tmp_path
    ) as server:
        # an unknown method as the first request (aiohttp logs it at DEBUG, with the request line)...
        first = raw_exchange(server.url, f"BREW {archive} HTTP/1.1\r\nHost: registry\r\n\r\n".encode())
        # ...and after a good one on the same connection (at ERROR, with a traceback)
        later = raw_exchange(
            server.url,
            b"GET /healthz HTTP/1.1\r\nHost: registry\r\n\r\n",
            f"BREW {archive} HTTP/1.1\r\nHost: registry\r\n\r\n".encode(),
        )
        # a header the parser refuses, after a request line that carries the signature
        header = raw_exchange(server.url, f"GET {archive} HTTP/1.1\r\nHost: registry\r\nBad Header: x\r\n\r\n".encode())
    log = "".join(server.log)
    assert first.startswith(b"HTTP/1.") and b" 400 " in first.split(b"\r\n")[0]  # refused, as it should be
    assert b" 200 " in later and b" 400 " in later and b" 400 " in header.split(b"\r\n")[0]
    assert log.count("refused by the HTTP parser") == 3, log[-3000:]
    assert SIGNATURE not in log, log[-3000:]
    assert "Traceback" not in log


@pytest.mark.slow
def test_an_archive_build_that_fails_after_its_waiter_gave_up_logs_one_line_and_no_traceback(tmp_path):
    repo = GitRepo(tmp_path / "repos", "broken")
    repo.commit({"main.tf": "#\n"})
    repo.tag("v1.0.0")
    with GitHttpServer(tmp_path / "repos") as host:
        config = tmp_path / "gitreg.toml"
        config.write_text(
            f'[git]\nprotocols = ["http"]\ntimeout_seconds = 30\n[storage]\npath = "{tmp_path / "store"}"\n'
            '[[modules]]\nnamespace = "demo"\nname = "broken"\nsystem = "null"\n'
            f'repository = "{host.url("broken.git")}"\n'
            'path = "nope"\ndownload = "archive"\n'  # no such directory: the build fails, after its clone
        )
        with GitregProcess("--config", str(config), "--log-level", "debug") as server:
            base = f"{server.url}/v1/modules/demo/broken/null"
            assert urllib_status(f"{base}/versions") == 200
            # Each git request to the host now takes 3.5 s: the mirror's clone (two requests) outlasts
            # the lookup's wait for the build, and the client gives up even sooner.
            host.mode, host.delay = "slow", 3.5
            assert urllib_status(f"{base}/1.0.0/download", timeout=1) is None
            deadline = time.monotonic() + 30
            while "failed: commit" not in "".join(server.log) and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(1)  # what asyncio would log once the failed build is released
            host.mode = "ok"
            # The next lookup gets the reason, in the JSON error shape.
            status, body = urllib_status(f"{base}/1.0.0/download", body=True)
            assert status == 404 and "has no directory 'nope'" in body["errors"][0], body
    log = "".join(server.log)
    assert "never retrieved" not in log and "Traceback" not in log, log[-3000:]
    assert "building the archive of" in log and "failed: commit" in log, log[-3000:]  # said once, as one line


def urllib_status(url: str, timeout: float = 10, body: bool = False) -> Any:
    """The status (and JSON body) of a GET; None when the client's timeout passed first."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            status, data = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, data = e.code, e.read()
    except TimeoutError:  # socket.timeout too
        return None
    except urllib.error.URLError as e:
        if isinstance(e.reason, TimeoutError):
            return None
        raise
    return (status, json.loads(data)) if body else status


@pytest.mark.parametrize("json_format", [False, True])
def test_the_log_filter_masks_capabilities_in_any_library_line_and_traceback(json_format):
    import io
    import logging

    from gitreg.observability.lines import JsonFormatter, SecretFilter

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(SecretFilter())
    handler.setFormatter(JsonFormatter() if json_format else logging.Formatter("%(message)s"))
    logger = logging.getLogger("some.library")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    try:
        logger.debug("fetching %s", f"/a/archive.tar.gz?expires=1&signature={SIGNATURE}")
        logger.debug("sent Authorization: Bearer %s", REGISTRY_TOKEN)
        try:
            raise ValueError(f"bad URL https://h/x?private_token={GIT_PASSWORD}&ok=1")
        except ValueError:
            logger.exception("it failed")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    text = stream.getvalue()
    assert SIGNATURE not in text and REGISTRY_TOKEN not in text and GIT_PASSWORD not in text, text
    assert "signature=***" in text and "Bearer ***" in text and "private_token=***&ok=1" in text
    assert "ValueError" in text  # the traceback is still there, masked


# --- a token written as a URL's user name (#22) ---------------------------------------------------------

USER_TOKEN = "ghp_UserNameToken9f3a7c21"


def test_check_refuses_a_token_written_as_a_repository_urls_user_name(tmp_path):
    data = {
        "storage": {"path": str(tmp_path / "state")},
        "git": {"protocols": ["https", "ssh"]},
        "modules": [
            {"namespace": "demo", "name": "a", "system": "null", "repository": f"https://{USER_TOKEN}@h.example/a.git"},
            {"namespace": "demo", "name": "b", "system": "null", "repository": "git@h.example:acme/b.git"},
            {"namespace": "demo", "name": "c", "system": "null", "repository": "ssh://git@h.example/acme/c.git"},
        ],
    }
    config = tmp_path / "gitreg.toml"
    config.write_text(toml(data))
    result = run_gitreg("check", "--config", str(config))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "modules[0].repository: must not contain user info" in result.stderr
    assert "modules[1]" not in result.stderr and "modules[2]" not in result.stderr  # an ssh login is fine
    assert USER_TOKEN not in result.stdout + result.stderr


def test_a_token_as_a_urls_user_name_is_masked_in_git_errors_and_in_any_log_line(tmp_path):
    import io
    import logging

    from gitreg.config.model import GitConfig
    from gitreg.core.errors import UpstreamUnavailable
    from gitreg.git.remote import GitAdapter
    from gitreg.git.runner import GitRunner
    from gitreg.observability.lines import SecretFilter
    from gitreg.observability.logs import AccessEntry, access_line

    home = tmp_path / "home"
    home.mkdir()
    adapter = GitAdapter(GitRunner(GitConfig(protocols=("http",), timeout_seconds=5), (), str(home)))
    with pytest.raises(UpstreamUnavailable) as e:  # nothing listens on port 9: the error names the URL
        adapter.ls_remote_tags(f"http://{USER_TOKEN}@127.0.0.1:9/acme/x.git")
    assert USER_TOKEN not in str(e.value) and "http://***@127.0.0.1:9/acme/x.git" in str(e.value), str(e.value)

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(SecretFilter())
    logger = logging.getLogger("some.library")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    try:
        logger.debug("GET %s", f"http://{USER_TOKEN}@h.example/x.git (and ssh://git@h.example/y.git)")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    text = stream.getvalue()
    assert USER_TOKEN not in text and "http://***@h.example/x.git" in text and "ssh://git@h.example/y.git" in text
    entry = AccessEntry(
        0.0, "127.0.0.1", "GET", f"/?u=https://{USER_TOKEN}@h/", (1, 1), 200, 2, f"https://{USER_TOKEN}:x@h/", "ua", 0.1
    )
    assert USER_TOKEN not in access_line(entry) and USER_TOKEN not in json.dumps(entry.fields())


def test_the_config_the_index_process_is_given_holds_only_the_git_credentials(private_host, tmp_path):
    import pickle

    from gitreg.index.process import index_config

    data = config_data(private_host, tmp_path)
    data["cache"] = {"backend": "redis", "redis_url": "redis://:redis-password-62c1f0@127.0.0.1:6379/0"}
    data["orgs"] = [{"provider": "github", "group": "acme", "namespace": "acme", "token": "secret-org-token-9e1d"}]
    config = parse_config(data, ENV)
    given = pickle.dumps(index_config(config)).decode("latin-1")
    assert leaked(given) == [GIT_PASSWORD, WRONG_PASSWORD]  # its own git calls need them
    assert "redis-password-62c1f0" not in given and "secret-org-token-9e1d" not in given
    assert index_config(config).credentials == config.credentials and index_config(config).modules == config.modules
