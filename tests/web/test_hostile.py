"""Hostile input: generated paths, queries, headers, webhook bodies and tag names; git hardening.

The properties run against a real app whose every rule points at a real smart-HTTP git
server, including a wildcard rule that would turn any address into a repository URL. That
server's request log is the proof of "never a git call": a malformed request must leave it
untouched. Expected answers come from the grammar as the README states it (written out again
here, not imported), so a drift in gitreg's own regular expressions shows up as a failure.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import parse_qs, quote

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from gitreg.config.model import GitConfig
from gitreg.config.parse import parse_config
from gitreg.core.errors import ConfigError, GitregError
from gitreg.core.versions import select_versions
from gitreg.git.remote import GitAdapter
from gitreg.git.runner import GitRunner
from gitreg.registry.service import git_location
from gitreg.web.keys import METRICS
from tests.support.app import indexed_in_full, make_config, served_app
from tests.support.githttp import GitHttpServer
from tests.support.process import run_gitreg
from tests.support.repos import GitRepo
from tests.support.terraform import clean_env, cli_config

# --- the grammar, as README.md states it ------------------------------------------------------

NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,62}[A-Za-z0-9])?", re.ASCII)
SYSTEM = re.compile(r"[a-z0-9]{1,64}", re.ASCII)
# semver.org's regular expression, with the optional leading `v` gitreg accepts.
SEMVER = re.compile(
    r"v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?",
    re.ASCII,
)
GRAMMAR = {"namespace": NAME, "name": NAME, "system": SYSTEM, "version": SEMVER}
VALID = {
    "namespace": ["demo", "acme", "x"],
    "name": ["hello", "vpc"],
    "system": ["null", "aws"],
    "version": ["1.0.0", "v1.0.0", "2.0.0-rc.1"],
}
TEMPLATES = [
    "/v1/modules/{namespace}/{name}/{system}/versions",
    "/v1/modules/{namespace}/{name}/{system}/{version}/download",
    "/v1/modules/{namespace}/{name}/{system}/{version}",
    "/v1/modules/{namespace}/{name}/{system}/download",
    "/v1/modules/{namespace}/{name}/{system}",
    "/v1/modules/{namespace}/{name}",
    "/v1/modules/{namespace}",
]
# Every status the README documents for the API and the webhooks.
DOCUMENTED = {200, 202, 302, 400, 401, 403, 404, 405, 413, 502, 504}
TOKEN = "hostile-registry-token-0c7f2a9e"
METRICS_TOKEN = "hostile-metrics-token-51d0e6b3"
GITHUB_SECRET = "hostile-github-secret-8e2b41"
GITLAB_TOKEN = "hostile-gitlab-token-3f9d07"
FIXTURES = Path(__file__).parent.parent / "fixtures" / "webhooks"
# Examples per HTTP property (each a real request to a real app): EXAMPLES. No example database:
# every run explores afresh, and nothing is written into the checkout.
EXAMPLES = 300
TAG_EXAMPLES = 300  # the tag-name property is pure: no request, no git
UI_PAGE = re.compile(r"/modules(/.*)?", re.DOTALL)  # the pages: every path under /modules is one (pages/views.py)
SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

# Values a path segment must never be accepted with: look-alikes of valid names (Cyrillic,
# fullwidth, zero-width and no-break spaces, dotless i, Kelvin sign), separators, NUL, case.
LOOKALIKES = [
    "\u0430cme",
    "acm\u0435",
    "\uff41\uff43\uff4d\uff45",
    "acme\u200b",
    "\u200bacme",
    "acme\u00a0",
    "h\u0131llo",
    "\u212aelvin",
    "aws\u0000",
    "a\u0000b",
    "he/llo",
    "he\\llo",
    "a" * 65,
    "-acme",
    "acme-",
    "_x",
    "x_",
    "a.b",
    "a b",
    "%2F",
    "%00",
    "%",
    "a;b",
    "a?b",
    "a#b",
    "a&b",
    "AWS",
    "Null",
    "a\nb",
    "a\tb",
    "\ufeffacme",
    "ac\u0301me",
    "1.0",
    "1.0.0.0",
    "01.0.0",
    "1.0.0-",
    "1.0.0+",
    "v",
    "latest",
    "\uff11.0.0",
    "1.0.0\n",
    "..foo",
    "foo..",
]
# Already percent-encoded forms, sent as they are: encoded slashes and backslashes, overlong
# UTF-8 for '.', '/', invalid UTF-8, encoded NUL and CR/LF.
RAW = [
    "he%2Fllo",
    "he%2fllo",
    "a%5Cb",
    "a%00b",
    "%C0%AE%C0%AE",
    "%C0%AF",
    "a%FFb",
    "%E2%80%8Bacme",
    "a%0D%0Ab",
    "%252F",
    "a%2",
    "a%zzb",
    "%u002e%u002e",
    "a%20b",
    "%2e%2e%2fetc",
]


def valid(slot: str, value: str) -> bool:
    return bool(GRAMMAR[slot].fullmatch(value))


def changes_the_route(decoded: str) -> bool:
    # An empty segment makes another route match (`/v1/modules/` is the list): not a malformed one.
    return decoded == ""


SURROGATES: tuple[Literal["Cs"]] = ("Cs",)
no_surrogates = st.characters(blacklist_categories=SURROGATES)
hostile_text = st.one_of(st.sampled_from(LOOKALIKES), st.text(no_surrogates, max_size=80))


@st.composite
def invalid_path(draw: st.DrawFn) -> tuple[str, str]:
    """A path from TEMPLATES with at least one segment outside the grammar: (slot, raw path)."""
    template = draw(st.sampled_from(TEMPLATES))
    slots = re.findall(r"\{(\w+)\}", template)
    bad = draw(st.sampled_from(slots))
    values = {}
    for slot in slots:
        if slot != bad and draw(st.integers(0, 4)) > 0:
            values[slot] = draw(st.sampled_from(VALID[slot]))
        elif draw(st.booleans()):
            values[slot] = draw(st.sampled_from(RAW))  # each decodes to something outside every grammar
        else:
            text = draw(
                hostile_text.filter(
                    cast(Callable[[str], bool], lambda s, slot=slot: not valid(slot, s) and not changes_the_route(s))
                )
            )
            values[slot] = quote(text, safe="")
    return bad, template.format(**values)


# --- the app under attack -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def git_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitHttpServer]:
    """An anonymous smart-HTTP git server holding demo/hello/null; its request log counts git calls
    (the tests count what their own requests cause: the count before, the count after)."""
    root = tmp_path_factory.mktemp("hostile") / "repos"
    repo = GitRepo(root, "public")
    repo.commit({"main.tf": "# hello\n", "README.md": "# hello\n\nA module.\n"})
    repo.tag("v1.0.0")
    with GitHttpServer(root) as server:
        yield server


def hostile_config(git_host: GitHttpServer, tmp_path: Path, **sections: Any):
    rules = [
        {"namespace": "demo", "name": "hello", "system": "null", "repository": git_host.url("public.git")},
        # Any address at all becomes a repository URL on the same server: only the grammar stands between.
        {"repository": git_host.base_url + "/{namespace}/{name}-{system}.git"},
    ]
    sections.setdefault("storage", {"path": str(tmp_path / "state")})
    # "No git call" is counted at the host: no background index asking for the explicit module.
    sections.setdefault("index", {"enabled": False})
    return make_config(rules, **sections)


async def raw_request(port: int, method: str, target: str, headers: Sequence[tuple[str, str]] = (), body: bytes = b""):
    """Send exactly this request line and headers (no client-side normalization); (status, headers, body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lines = [f"{method} {target} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers]
    if body or method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape") + body)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(-1), 20)
    writer.close()
    head, _, payload = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parsed = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        parsed[name.strip().lower()] = value.strip()
    return int(status_line.split(" ", 2)[1]), parsed, payload


def assert_json_error(status: int, headers: dict[str, str], body: bytes) -> None:
    """The one error shape: application/json `{"errors": [non-empty strings]}`, no traceback."""
    assert headers.get("content-type", "").startswith("application/json"), (status, headers, body[:300])
    data = json.loads(body)
    assert set(data) == {"errors"}, data
    assert data["errors"] and all(isinstance(e, str) and e for e in data["errors"]), data
    assert "Traceback" not in body.decode("utf-8", "replace")


# The app the tests taking `app_client` attack is what `gitreg serve` builds (its index process too),
# built once for the module and run on the module's event loop (`module_loop`): none changes it.
module_loop = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_app_client(git_host, tmp_path_factory) -> AsyncIterator[TestClient]:
    config = hostile_config(git_host, tmp_path_factory.mktemp("hostile-state"), index={"enabled": True})
    async with TestClient(TestServer(served_app(config))) as client:
        yield client


@pytest_asyncio.fixture(loop_scope="module")
async def app_client(shared_app_client, git_host):
    # Indexed before the test, so list and search have something to show; what the background
    # index asked the host is done before any request below is counted.
    client = await indexed_in_full(shared_app_client)
    git_host.reset_counters()
    return client


# --- paths ---------------------------------------------------------------------------------------


def request_samples(client) -> list[Any]:
    """The `gitreg_http_requests_total` samples of the app's /metrics exposition."""
    text = client.app[METRICS].render().decode()
    return [
        sample
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "gitreg_http_requests_total"
    ]


def answered(client) -> float:
    """Requests gitreg's own middleware saw (gitreg_http_requests_total, all labels)."""
    return sum(sample.value for sample in request_samples(client))


def assert_json_or_refused_by_the_parser(
    client, seen: float, status: int, headers: dict[str, str], body: bytes
) -> None:
    """gitreg's JSON shape; or aiohttp's HTTP parser refused the request (400) and gitreg never saw it."""
    if headers.get("content-type", "").startswith("application/json"):
        assert_json_error(status, headers, body)
    else:
        assert status == 400 and answered(client) == seen, (status, headers, body[:300])


# --- query strings -------------------------------------------------------------------------------

QUERY_KEYS = ["offset", "limit", "q", "namespace", "provider", "verified", "page", "token", "x"]
query_values = st.one_of(
    st.sampled_from(
        [
            "",
            "0",
            "1",
            "15",
            "100",
            "-1",
            "1.5",
            "1e3",
            "\uff11",
            "9" * 13,
            "aws",
            "AWS",
            "acme",
            "-x-",
            "true",
            "TRUE",
            "network",
            " ",
            "\x00",
            "a\x1fb",
            "\x7f",
            "x" * 201,
            "x" * 4000,
        ]
    ),
    st.text(no_surrogates, max_size=40),
)
queries = st.lists(
    st.tuples(st.one_of(st.sampled_from(QUERY_KEYS), st.text(no_surrogates, max_size=10)), query_values), max_size=5
)
QUERY_PATHS = [
    "/v1/modules",
    "/v1/modules/search",
    "/v1/modules/demo",
    "/v1/modules/demo/hello",
    "/v1/modules/demo/hello/null/versions",
    "/v1/modules/demo/hello/null/1.0.0/download",
]


def query_is_invalid(path: str, params: list[tuple[str, str]], encoded: str) -> bool:
    """What README.md says must be refused: control characters, bad offset/limit/filters, an over-long q or query."""
    if len(encoded) > 4096:
        return True
    first: dict[str, str] = {}
    for key, value in params:
        first.setdefault(key, value)
        if re.search(r"[\x00-\x1f\x7f]", key + value):
            return True
    for key in ("offset", "limit"):
        if key in first and not re.fullmatch(r"[0-9]{1,12}", first[key]):
            return True
    if first.get("namespace") and not NAME.fullmatch(first["namespace"]):
        return True
    if first.get("provider") and not SYSTEM.fullmatch(first["provider"]):
        return True
    if len(first.get("q", "")) > 200:
        return True
    return path == "/v1/modules/search" and not first.get("q", "").strip()


# --- headers -------------------------------------------------------------------------------------

HEADER_NAMES = [
    "Authorization",
    "X-Hub-Signature-256",
    "X-Gitlab-Token",
    "X-GitHub-Event",
    "X-Gitlab-Event",
    "Content-Type",
    "Accept",
    "Accept-Encoding",
    "X-Forwarded-For",
    "X-Forwarded-Host",
    "Cookie",
    "Origin",
    "If-None-Match",
    "Range",
    "User-Agent",
    "Referer",
]
# The only Authorization values among those generated that carry the token (RFC 6750: the
# scheme is case-insensitive, one or more spaces follow it).
AUTHORIZED = ["Bearer " + TOKEN, "bearer " + TOKEN, "BEARER  " + TOKEN]
# Field values as HTTP allows them (visible ASCII, space, tab, and latin-1 obs-text), plus scheme-like prefixes.
header_values = st.one_of(
    st.sampled_from(
        [
            *AUTHORIZED,
            "Bearer",
            "Bearer ",
            "Bearer " + TOKEN.upper(),
            "Basic " + TOKEN,
            TOKEN,
            "Bearer " + TOKEN[:-1],
            "Bearer " + TOKEN + "x",
            "sha256=" + "0" * 64,
            "Bearer \u00ff\u00fe",
            "application/x-www-form-urlencoded",
            "text/html",
            "gzip, br",
            "bytes=0-1",
            "x" * 8000,
        ]
    ),
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, blacklist_characters="\x7f"), max_size=200),
)
HEADER_TARGETS = [
    ("GET", "/v1/modules/demo/hello/null/versions"),
    ("GET", "/v1/modules"),
    ("GET", "/metrics"),
    ("GET", "/healthz"),
    ("POST", "/webhooks/github"),
    ("POST", "/webhooks/gitlab"),
    ("HEAD", "/v1/modules/demo/hello/null/versions"),
]


@pytest.fixture
async def token_client(serve_client, git_host, tmp_path):
    config = hostile_config(
        git_host,
        tmp_path,
        auth={"tokens": [TOKEN], "metrics_token": METRICS_TOKEN},
        webhooks={"github_secret": GITHUB_SECRET, "gitlab_token": GITLAB_TOKEN},
    )
    client = await serve_client(config)  # (the index off: no background git)
    git_host.reset_counters()  # the host serves the whole module: what earlier tests asked is not counted
    return client


@pytest.mark.slow
@SETTINGS
@given(
    target=st.sampled_from(HEADER_TARGETS),
    headers=st.lists(st.tuples(st.sampled_from(HEADER_NAMES), header_values), max_size=4),
)
async def test_generated_headers_never_authenticate_or_break_the_error_shape(token_client, git_host, target, headers):
    method, path = target
    before, seen = len(git_host.requests()), answered(token_client)
    status, got, body = await raw_request(token_client.server.port, method, path, headers)
    if status == 400 and not got.get("content-type", "").startswith("application/json"):
        # e.g. a duplicate Content-Type: aiohttp's HTTP parser refused it, gitreg never saw it.
        assert answered(token_client) == seen and len(git_host.requests()) == before
        return
    authorization = next((v for k, v in headers if k == "Authorization"), None)
    authorized = authorization in AUTHORIZED and path.startswith("/v1/")
    # A header no client would send is refused, never a 500; nothing but the exact token opens anything.
    if path == "/healthz" or authorized:
        assert status == 200, (target, headers, status, body[:300])
    else:
        assert status in (400, 401), (target, headers, status, body[:300])
        if method != "HEAD":
            assert_json_error(status, got, body)
        if status == 401 and path.startswith("/v1/"):
            assert got["www-authenticate"].startswith("Bearer")
        assert len(git_host.requests()) == before


# --- webhook bodies ------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(no_surrogates, max_size=30),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(no_surrogates, max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
hostile_urls = st.sampled_from(
    [
        "https://[oops/x.git",
        "https://u:p@host:abc/x.git",
        "https://u:p@[::1/x",
        "git@:",
        "::",
        "file:///",
        "file:///etc",
        "ext::sh -c touch% /tmp/gitreg-pwned",
        "-oProxyCommand=touch /tmp/gitreg-pwned",
        "https://h/" + "a" * 3000,
        "https://\u0430cme.example/x.git",
        "ssh://git@host:99999/x",
        "",
        " ",
        "\x00",
        "https://github.com/Codertocat/Hello-World.git",
    ]
)
PAYLOAD_KEYS = [
    "ref",
    "ref_type",
    "repository",
    "project",
    "object_kind",
    "event_name",
    "clone_url",
    "ssh_url",
    "html_url",
    "git_url",
    "git_http_url",
    "git_ssh_url",
    "web_url",
    "url",
    "homepage",
]


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


@st.composite
def webhook_bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["bytes", "json", "mutated"]))
    if kind == "bytes":
        return draw(st.binary(max_size=512))
    if kind == "json":
        return json.dumps(draw(json_values)).encode()
    payload = fixture(draw(st.sampled_from(sorted(p.name for p in FIXTURES.glob("*.json")))))
    for _ in range(draw(st.integers(1, 4))):
        section = draw(st.sampled_from([payload, payload.get("repository"), payload.get("project")]))
        if isinstance(section, dict):
            section[draw(st.sampled_from(PAYLOAD_KEYS))] = draw(st.one_of(json_values, hostile_urls))
    return json.dumps(payload).encode()


@pytest.mark.slow
@SETTINGS
@given(
    provider=st.sampled_from(["github", "gitlab"]),
    body=webhook_bodies(),
    event=st.sampled_from(["push", "create", "delete", "ping", "Tag Push Hook", "Push Hook", "System Hook", "x\u00e9"]),
    content_type=st.sampled_from(["application/json", "application/x-www-form-urlencoded", "text/plain", ""]),
    signed=st.booleans(),
)
@example(
    provider="github",
    event="push",
    content_type="application/json",
    signed=True,  # once a 500
    body=json.dumps({"ref": "refs/tags/v1.0.0", "repository": {"clone_url": "https://[oops/x.git"}}).encode(),
)
@example(provider="github", event="push", content_type="application/json", signed=True, body=b"[" * 100_000)
@example(
    provider="gitlab",
    event="Tag Push Hook",
    content_type="application/json",
    signed=True,
    body=json.dumps(
        {"object_kind": "tag_push", "ref": "refs/tags/v1", "project": {"git_http_url": "https://u:p@h:x/y"}}
    ).encode(),
)
# once a 500: a list cannot be looked up among the project event names
@example(provider="gitlab", event="push", content_type="application/json", signed=True, body=b'{"event_name": []}')
async def test_generated_webhook_bodies_get_a_documented_answer_and_no_git_call(
    token_client, git_host, provider, body, event, content_type, signed
):
    if content_type == "application/x-www-form-urlencoded" and signed:
        body = b"payload=" + quote(body, safe="").encode()
    headers = {"Content-Type": content_type} if content_type else {}
    if provider == "github":
        secret = GITHUB_SECRET if signed else "not-the-secret-000000"
        headers |= {
            "X-GitHub-Event": event,
            "X-Hub-Signature-256": "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest(),
        }
    else:
        headers |= {"X-Gitlab-Event": event, "X-Gitlab-Token": GITLAB_TOKEN if signed else "not-the-token-0000000"}
    before = len(git_host.requests())
    resp = await token_client.post(f"/webhooks/{provider}", data=body, headers=headers)
    text = await resp.text()
    assert resp.status in ((200, 202, 400) if signed else (401,)), (provider, event, body[:200], resp.status, text)
    assert resp.content_type == "application/json"
    data = json.loads(text)
    if resp.status >= 400:
        assert set(data) == {"errors"} and data["errors"] and all(isinstance(e, str) for e in data["errors"])
    else:
        # (`duplicate`: a body sent again without a delivery id is a replay, #22)
        assert data["result"] in ("pong", "ignored", "unknown_repository", "duplicate"), data
    # None of these names a repository this registry serves: nothing may reach git.
    assert len(git_host.requests()) == before


async def test_a_webhook_body_streamed_past_the_limit_is_413_without_a_content_length(token_client, git_host):
    async def chunks():
        for _ in range(40):  # 2.5 MiB in 64 KiB chunks, sent chunked: no Content-Length to refuse up front
            yield b" " * 65536

    resp = await token_client.post(
        "/webhooks/github", data=chunks(), headers={"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=00"}
    )
    assert resp.status == 413
    assert set(await resp.json()) == {"errors"}
    assert git_host.requests() == []


# --- tag names are data ----------------------------------------------------------------------------

special = "?#&+% /\u00fc\u0131\uff11;'\"=@:"
semver_core = st.builds(lambda a, b, c: f"{a}.{b}.{c}", *(st.integers(0, 20),) * 3)
tag_names = st.one_of(
    st.builds(
        lambda v, pre, junk: f"{pre}{v}{junk}",
        semver_core,
        st.sampled_from(["", "v", "net/", "net/v"]),
        st.text(st.sampled_from(special + "abc019.-"), max_size=8),
    ),
    st.builds(
        lambda v, build: f"v{v}+{build}",
        semver_core,
        st.from_regex(r"[0-9A-Za-z-]+(\.[0-9A-Za-z-]+){0,2}", fullmatch=True),
    ),
    st.text(no_surrogates, min_size=1, max_size=20),
)


@settings(max_examples=TAG_EXAMPLES, deadline=None, database=None)
@given(
    tags=st.lists(tag_names, min_size=1, max_size=8, unique=True),
    prefix=st.sampled_from(["", "net/"]),
    clone_url=st.sampled_from(["https://git.example.com/acme/infra.git", "git@git.example.com:acme/infra.git"]),
)
@pytest.mark.slow
def test_any_tag_is_served_so_that_the_location_names_exactly_it_or_is_skipped_with_a_reason(tags, prefix, clone_url):
    found = select_versions(dict.fromkeys(tags, "a" * 40), prefix)
    served = [tv.tag for tv in found.versions]
    skipped = {s.tag: s.reason for s in found.skipped}
    assert not set(served) & set(skipped)
    assert set(served) | set(skipped) == {t for t in tags if t.startswith(prefix)}
    assert all(reason for reason in skipped.values())
    for tag in served:
        location = git_location(clone_url, "modules/x", tag, shallow=True)
        # go-getter reads `git::<url>//<subdir>?<query>`: the query must decode (Go's ParseQuery,
        # '+' as space, like parse_qs) to one `ref`, exactly the tag, and `depth=1`; no fragment may appear.
        url = location.removeprefix("git::")
        assert "#" not in url and " " not in url
        base, _, query = url.partition("?")
        assert base.endswith("/acme/infra.git//modules/x")
        assert parse_qs(query, keep_blank_values=True, strict_parsing=True) == {"ref": [tag], "depth": ["1"]}


# Tags git itself accepts, each one a trap for a naive `?ref=` + tag; and two that git refuses.
NASTY_TAGS = [
    "v1.0.0+build#1",
    "v1.1.0&x",
    "v1.2.0+a%2Fb",
    "v1.3.0+\u00fc",
    "v1.6.0#frag",
    "v1.7.0%20x",
    "v1.8.0+a&ref=evil",
    "v1.9.0;rm",
    "v3.0.0-\u00fcn\u00ef",
    "v\uff11.0.0",
    "v1.10.0'",
]
GOOD_TAGS = {"v2.0.0+build.7": "2.0.0+build.7", "v2.1.0-rc.1+sha.5114f85": "2.1.0-rc.1+sha.5114f85", "v1.0.0": "1.0.0"}


def test_git_refuses_tags_with_question_marks_spaces_and_the_like():
    for tag in ("v1.4.0?x", "v1.5.0 x", "v1.13.0*", "v1.14.0[", "v1.12.0\\x", "v1.17.0:", "v1.15.0~1"):
        assert subprocess.run(["git", "check-ref-format", f"refs/tags/{tag}"]).returncode != 0, tag


@pytest.fixture
def nasty_repo(tmp_path: Path) -> GitRepo:
    repo = GitRepo(tmp_path / "repos", "nasty")
    repo.commit({"main.tf": 'output "v" { value = "tagged" }\n'})
    for tag in [*NASTY_TAGS, *GOOD_TAGS]:
        repo.tag(tag)
    return repo


async def test_tags_with_special_characters_are_skipped_and_plus_is_encoded(serve_client, nasty_repo):
    rule = {"namespace": "demo", "name": "hello", "system": "null", "repository": nasty_repo.url, "download": "git"}
    client = await serve_client(make_config([rule], index={"enabled": False}))  # versions and downloads only
    resp = await client.get("/v1/modules/demo/hello/null/versions")
    listed = [v["version"] for v in (await resp.json())["modules"][0]["versions"]]
    assert sorted(listed) == sorted(GOOD_TAGS.values())
    for tag, version in GOOD_TAGS.items():
        resp = await client.get(f"/v1/modules/demo/hello/null/{quote(version, safe='')}/download")
        location = (await resp.json())["location"]
        assert resp.headers["X-Terraform-Get"] == location
        base, _, query = location.partition("?")
        assert base == f"git::{nasty_repo.url}"
        assert parse_qs(query, strict_parsing=True) == {"ref": [tag]}  # ref alone: Checkov and tfmodcache read no other


def test_check_probe_says_why_each_special_tag_is_skipped(nasty_repo):
    result = run_gitreg("check", "--probe", "--module", f"demo/hello/null={nasty_repo.url}")
    assert result.returncode == 0, result.stderr
    for tag in NASTY_TAGS:
        assert re.search(rf"skipped tag {re.escape(repr(tag))}: \S", result.stdout), (tag, result.stdout)


@pytest.mark.slow
def test_terraform_installs_a_version_whose_tag_has_build_metadata(terraform_client, nasty_repo, tmp_path):
    terraform = terraform_client
    """The `+` of `v2.0.0+build.7` reaches git as `+` (sent as %2B): the real CLI fetches that very tag."""
    from tests.support.process import GitregProcess

    with GitregProcess("--module", f"demo/hello/null={nasty_repo.url}") as server:
        work = tmp_path / "work"
        work.mkdir()
        (work / "main.tf").write_text(
            'module "m" {\n  source  = "registry.example.test/demo/hello/null"\n  version = "2.0.0+build.7"\n}\n'
        )
        cli_config(tmp_path / "cli.tfrc", server.url)
        result = terraform.run(
            ["init", "-input=false", "-no-color"],
            cwd=work,
            env=clean_env(tmp_path / "home", TF_CLI_CONFIG_FILE=str(tmp_path / "cli.tfrc")),
        )
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = json.loads((work / ".terraform/modules/modules.json").read_text())
    assert {m["Key"]: m.get("Version") for m in manifest["Modules"] if m["Key"]} == {"m": "2.0.0+build.7"}


# --- git hardening ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "repository",
    [
        "ext::sh -c touch% /tmp/gitreg-pwned",
        "{namespace}::sh -c touch% /tmp/gitreg-pwned",
        "ext::{name}",
        "fd::3",
        "-oProxyCommand=touch /tmp/gitreg-pwned",
    ],
)
def test_config_refuses_rules_that_would_make_git_use_another_transport(repository):
    with pytest.raises(ConfigError) as e:
        parse_config({"modules": [{"namespace": "acme", "repository": repository}]}, {})
    assert e.value.problems and all(p.startswith("modules[0].repository:") for p in e.value.problems)


def adapter(tmp_path: Path, protocols: tuple[str, ...] = ("https", "ssh", "git", "file")) -> GitAdapter:
    home = tmp_path / "gitreg-home"
    home.mkdir(exist_ok=True)
    return GitAdapter(GitRunner(GitConfig(timeout_seconds=20, protocols=protocols), (), str(home)))


def hostile_home(tmp_path: Path, config: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator's environment at its worst: HOME, XDG, system and -c config all say `config`,
    and the server runs inside a repository whose own config says it too."""
    home = tmp_path / "operator-home"
    (home / ".config" / "git").mkdir(parents=True)
    for path in (home / ".gitconfig", home / ".config" / "git" / "config", tmp_path / "system-gitconfig"):
        path.write_text(config)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_SYSTEM", str(tmp_path / "system-gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    cwd = tmp_path / "checkout"
    subprocess.run(["git", "init", "--quiet", str(cwd)], check=True)
    with (cwd / ".git" / "config").open("a") as f:
        f.write(config)
    monkeypatch.chdir(cwd)


def test_ext_transport_is_refused_even_when_the_operators_git_config_allows_it(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    hostile_home(tmp_path, '[protocol "ext"]\n\tallow = always\n[protocol]\n\tallow = always\n', monkeypatch)
    url = f"ext::sh -c touch% {marker}"
    # The hostile config works on a plain git: this test could fail.
    subprocess.run(["git", "ls-remote", url], capture_output=True, timeout=30)
    assert marker.exists()
    marker.unlink()
    with pytest.raises(GitregError):
        adapter(tmp_path).ls_remote_tags(url)
    assert not marker.exists()


def test_only_the_configured_transports_reach_git(tmp_path):
    repo = GitRepo(tmp_path / "repos", "local")
    repo.commit({"main.tf": "#\n"})
    repo.tag("v1.0.0")
    assert "v1.0.0" in adapter(tmp_path).ls_remote_tags(repo.url).tags
    with pytest.raises(GitregError):
        adapter(tmp_path, protocols=("https",)).ls_remote_tags(repo.url)  # file:// is not in [git] protocols


@pytest.mark.parametrize(
    "url",
    ["--upload-pack=touch {marker}", "-oProxyCommand=touch {marker}", "ssh://-oProxyCommand=touch%20{marker}/x.git"],
)
def test_a_url_that_looks_like_an_option_is_never_one(tmp_path, url):
    marker = tmp_path / "pwned"
    with pytest.raises(GitregError):
        adapter(tmp_path).ls_remote_tags(url.format(marker=marker))
    assert not marker.exists()


@pytest.mark.slow
async def test_the_operators_git_config_and_working_directory_repository_are_not_honoured(
    serve_client, tmp_path, monkeypatch
):
    good = GitRepo(tmp_path / "repos", "good")
    good.commit({"main.tf": "# good\n"})
    good.tag("v1.0.0")
    evil = GitRepo(tmp_path / "repos", "evil")
    evil.commit({"main.tf": "# evil\n"})
    evil.tag("v6.6.6")
    hostile_home(tmp_path, f'[url "{evil.url}"]\n\tinsteadOf = {good.url}\n', monkeypatch)
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", f"'url.{evil.url}.insteadof'='{good.url}'")
    # A plain git in this environment is redirected: the test could fail.
    plain = subprocess.run(["git", "ls-remote", "--tags", good.url], capture_output=True, text=True, check=True)  # noqa: ASYNC221 - no request in flight
    assert "v6.6.6" in plain.stdout
    monkeypatch.delenv("GIT_CONFIG_PARAMETERS")
    plain = subprocess.run(["git", "ls-remote", "--tags", good.url], capture_output=True, text=True, check=True)  # noqa: ASYNC221 - no request in flight
    assert "v6.6.6" in plain.stdout  # the files alone redirect it too
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", f"'url.{evil.url}.insteadof'='{good.url}'")
    client = await indexed_in_full(
        await serve_client(
            make_config(
                [{"namespace": "demo", "name": "hello", "system": "null", "repository": good.url}],
                storage={"path": str(tmp_path / "state")},
            )
        )
    )
    resp = await client.get("/v1/modules/demo/hello/null/versions")
    assert [v["version"] for v in (await resp.json())["modules"][0]["versions"]] == ["1.0.0"]
    resp = await client.get("/v1/modules/demo/hello/null")  # details: read by the index from gitreg's mirror
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["versions"] == ["1.0.0"]


# --- the tests of the app built once for the module, last, as its event loop runs only while they
# do (paused longer than SILENCE_SECONDS, the serving process kills its index process) ---------------


@module_loop
@pytest.mark.slow
@SETTINGS
@given(case=invalid_path())
@example(case=("version", "/v1/modules/demo/hello/null/%00"))  # the details route once listed tags first
@example(case=("version", "/v1/modules/acme/vpc/aws/%D0%B0cme"))
@example(case=("name", "/v1/modules/demo/he%2Fllo/null/versions"))
async def test_a_path_segment_outside_the_grammar_is_a_4xx_json_error_and_never_a_git_call(app_client, git_host, case):
    _, path = case
    before = len(git_host.requests())
    status, headers, body = await raw_request(app_client.server.port, "GET", path)
    # 400 for a segment the router matched; 404 when it cannot match at all (an encoded '/' in it).
    assert status in (400, 404), (path, status, body[:300])
    assert_json_error(status, headers, body)
    assert len(git_host.requests()) == before, f"{path} made a git call"


@module_loop
@pytest.mark.slow
@SETTINGS
@given(
    path=st.lists(
        st.one_of(
            st.sampled_from([*RAW, "v1", "modules", "..", ".", "", "%2e%2e"]),
            st.text(no_surrogates, max_size=30).map(lambda s: quote(s, safe="")),
        ),
        max_size=8,
    ).map(lambda parts: "/" + "/".join(parts)),
    method=st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "PROPFIND"]),
)
@example(path="/modules/he%2Fllo/he%2Fllo/he%2Fllo", method="GET")  # a web page's 404 (found by this test)
@example(path="/a%0D%0Ab", method="GET")  # a line break in the decoded path: still JSON (found by this test)
async def test_any_path_and_method_get_a_documented_status_the_json_shape_and_a_bounded_metric_label(
    app_client, path, method
):
    status, headers, body = await raw_request(app_client.server.port, method, path)
    assert status in DOCUMENTED, (method, path, status, body[:300])
    if status >= 400 and method != "HEAD":
        if headers.get("content-type", "").startswith("text/html"):
            # A web page's error is a page (for a browser), and only a web page's is.
            assert method == "GET" and UI_PAGE.fullmatch(path), (method, path, status, body[:300])
            assert b"<html" in body and b"Traceback" not in body
        else:
            assert_json_error(status, headers, body)
    # Request metrics are labelled by route template: a hostile path never becomes a new series.
    templates = {r.resource.canonical for r in app_client.app.router.routes() if r.resource is not None}
    labels = {sample.labels["route"] for sample in request_samples(app_client)}
    assert labels <= templates | {"unmatched"}, labels - templates


@module_loop
@pytest.mark.parametrize(
    "target",
    [
        "/v1/modules/demo/hello/null/versions/../../../../../../etc/passwd",
        "/v1/modules/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/v1/modules/../hello/null/versions",
        "/v1/modules/demo/hello/null/../../../../healthz",
        "/v1/modules/demo/x/../hello/null/versions",
        "/v1/modules/demo/hello/null/%2e/versions",
        "/v1/modules/demo/hello/null/..%2Fversions",
    ],
)
async def test_dot_segments_are_taken_literally_and_never_escape_the_api(app_client, git_host, target):
    """aiohttp does not resolve `..` before routing: such a path matches no route, or a segment the grammar refuses."""
    status, headers, body = await raw_request(app_client.server.port, "GET", target)
    assert status in (400, 404), (target, status, body)
    assert_json_error(status, headers, body)
    assert b"root:" not in body
    assert git_host.requests() == []


@module_loop
async def test_requests_the_http_parser_refuses_are_400_and_never_reach_gitreg(app_client, git_host, caplog):
    """Beyond aiohttp's limits (8190-byte request line or header, duplicate singleton headers) the parser answers.

    Those answers are aiohttp's own plain-text 400 (not gitreg's JSON shape: see SECURITY.md).
    They reach no handler, rule or git, and are logged as one WARNING line: no traceback, and
    nothing of the request (which may carry a signature or token in its query string).
    """
    port = app_client.server.port
    secret_query = "signature=" + "s3cr3t" * 1500
    cases = [
        ("GET", f"/v1/modules/demo/hello/null/versions?{secret_query}", []),
        ("GET", "/v1/modules/demo/hello/null/versions", [("X-Big", "x" * 9000)]),
        ("GET", "/v1/modules/demo/hello/null/versions", [("Content-Type", "a/b"), ("Content-Type", "c/d")]),
    ]
    for method, target, headers in cases:
        caplog.clear()
        seen = answered(app_client)
        status, _, body = await raw_request(port, method, target, headers)
        assert status in (400, 431), (target[:80], status, body)
        assert answered(app_client) == seen  # gitreg's middleware never ran
        records = [r for r in caplog.records if r.name == "aiohttp.server"]
        assert records and all(r.levelname == "WARNING" and r.exc_info is None for r in records), records
        assert "s3cr3t" not in caplog.text
    assert git_host.requests() == []


@module_loop
@pytest.mark.slow
@SETTINGS
@given(path=st.sampled_from(QUERY_PATHS), params=queries)
@example(path="/v1/modules", params=[("offset", "abc")])  # lists (and so git) once came before this check
@example(path="/v1/modules/search", params=[("q", "\x00")])
@example(path="/v1/modules/demo/hello/null/versions", params=[("junk", "y" * 4100)])  # over 4096 bytes: JSON 400
async def test_query_parameters_are_checked_before_any_git_call(app_client, git_host, path, params):
    encoded = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in params)
    before, seen = len(git_host.requests()), answered(app_client)
    status, headers, body = await raw_request(app_client.server.port, "GET", f"{path}?{encoded}")
    if query_is_invalid(path, params, encoded):
        assert status == 400, (path, params, status, body[:300])
        # Past 8190 bytes of request line aiohttp's parser refuses it before gitreg: see above.
        assert_json_or_refused_by_the_parser(app_client, seen, status, headers, body)
        assert len(git_host.requests()) == before, f"{path}?{encoded} made a git call"
    else:
        assert status == 200, (path, params, status, body[:300])


@module_loop
@SETTINGS
@given(query=st.text(st.sampled_from("a=&;+%2Fz0q\u00e9 #?"), max_size=60))
async def test_raw_query_strings_never_break_the_error_shape(app_client, query):
    status, headers, body = await raw_request(
        app_client.server.port, "GET", "/v1/modules/search?" + quote(query, safe="=&;+%")
    )
    assert status in (200, 400), (query, status, body[:300])
    if status >= 400:
        assert_json_error(status, headers, body)
