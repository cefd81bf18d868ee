"""GET /metrics, GET /readyz and the access log, as an operator sees them."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import re
import urllib.request
from pathlib import Path

import prometheus_client
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from gitreg.config.model import Config
from tests.support import docs
from tests.support.app import GIT_PASSWORD, GIT_USER, assert_error, make_config, served_app
from tests.support.metrics import scrape, value
from tests.support.process import GitregProcess
from tests.support.repos import GitRepo

METRICS_TOKEN = "metrics-token-1c9e44a7b2"
REGISTRY_TOKEN = "registry-token-7d1e5a0c9b"
GITHUB_SECRET = "github-webhook-secret-5b1f0c"
VERSIONS_ROUTE = "/v1/modules/{namespace}/{name}/{system}/versions"


def rule(url: str) -> dict:
    return {"namespace": "demo", "name": "hello", "system": "null", "repository": url}


def no_index(modules: list[dict], **sections) -> Config:
    """For the tests whose answers and metrics never involve the index: `gitreg serve` with it off."""
    return make_config(modules, index={"enabled": False}, **sections)


def public_repo(tmp_path: Path, name: str = "public") -> GitRepo:
    r = GitRepo(tmp_path / "repos", name)
    r.commit({"main.tf": "# module\n"})
    r.tag("v1.0.0")
    return r


async def test_requests_are_counted_by_route_template_and_status_never_by_raw_path(serve_client, repo):
    client = await serve_client(no_index([rule(repo.url)]))
    for _ in range(3):
        assert (await client.get("/v1/modules/demo/hello/null/versions")).status == 200
    assert (await client.get("/v1/modules/demo/hello/null/9.9.9/download")).status == 404
    assert (await client.get("/no/such/thing")).status == 404
    samples = await scrape(client)
    assert value(samples, "gitreg_http_requests_total", route=VERSIONS_ROUTE, method="GET", status="200") == 3
    assert (
        value(
            samples,
            "gitreg_http_requests_total",
            route="/v1/modules/{namespace}/{name}/{system}/{version}/download",
            method="GET",
            status="404",
        )
        == 1
    )
    assert value(samples, "gitreg_http_requests_total", route="unmatched", method="GET", status="404") == 1
    assert value(samples, "gitreg_http_request_duration_seconds_count", route=VERSIONS_ROUTE) == 3
    routes = {dict(labels).get("route") for _, labels in samples}
    assert not any(r and ("demo" in r or "9.9.9" in r or "/no/such" in r) for r in routes)


async def test_cache_counters_show_hits_misses_and_coalesced_waits(serve_client, git_http, tmp_path):
    public_repo(tmp_path)
    # The cache's own counters: no background index asking too.
    client = await serve_client(no_index([rule(git_http.url("public.git"))]))
    await asyncio.gather(*(client.get("/v1/modules/demo/hello/null/versions") for _ in range(10)))
    await client.get("/v1/modules/demo/hello/null/versions")
    samples = await scrape(client)
    assert value(samples, "gitreg_cache_misses_total") == 10
    assert value(samples, "gitreg_cache_coalesced_waits_total") == 9
    assert value(samples, "gitreg_cache_hits_total") == 1
    assert value(samples, "gitreg_cache_repositories") == 1
    assert value(samples, "gitreg_upstream_git_calls_total", host="127.0.0.1") == 1
    assert value(samples, "gitreg_upstream_git_duration_seconds_count", host="127.0.0.1") == 1


async def test_a_down_git_host_shows_as_failures_stale_serves_and_the_age_served(aiohttp_client, git_http, tmp_path):
    public_repo(tmp_path)
    config = no_index([rule(git_http.url("public.git"))], cache={"ttl_seconds": 300})
    now = [1000.0]
    client = await aiohttp_client(served_app(config, clock=lambda: now[0]))  # the tag cache's clock
    assert (await client.get("/v1/modules/demo/hello/null/versions")).status == 200
    git_http.mode = "down"
    now[0] += 301
    assert (await client.get("/v1/modules/demo/hello/null/versions")).status == 200  # stale
    samples = await scrape(client)
    assert value(samples, "gitreg_cache_stale_served_total") == 1
    assert value(samples, "gitreg_cache_refresh_failures_total") == 1
    assert value(samples, "gitreg_upstream_git_failures_total", host="127.0.0.1", reason="error") == 1
    assert value(samples, "gitreg_upstream_git_calls_total", host="127.0.0.1") == 2
    assert value(samples, "gitreg_cache_oldest_served_age_seconds") == 301


async def test_a_timeout_is_counted_as_a_timeout(serve_client, git_http, tmp_path):
    public_repo(tmp_path)
    client = await serve_client(no_index([rule(git_http.url("public.git"))], git={"timeout_seconds": 0.5}))
    git_http.mode, git_http.delay = "slow", 30
    assert (await client.get("/v1/modules/demo/hello/null/versions")).status == 504
    samples = await scrape(client)
    assert value(samples, "gitreg_upstream_git_failures_total", host="127.0.0.1", reason="timeout") == 1


async def test_webhook_deliveries_are_counted_by_result(serve_client, repo):
    client = await serve_client(no_index([rule(repo.url)], webhooks={"github_secret": GITHUB_SECRET}))
    body = json.dumps({"ref": "refs/tags/v1.0.0", "repository": {"clone_url": repo.url}}).encode()
    signature = "sha256=" + hmac.new(GITHUB_SECRET.encode(), body, hashlib.sha256).hexdigest()
    good = {"X-GitHub-Event": "push", "X-Hub-Signature-256": signature, "Content-Type": "application/json"}
    assert (await client.post("/webhooks/github", data=body, headers=good)).status == 200
    assert (
        await client.post("/webhooks/github", data=body, headers={**good, "X-Hub-Signature-256": "sha256=00"})
    ).status == 401
    assert (await client.post("/webhooks/gitlab", data=body)).status == 404
    samples = await scrape(client)
    assert value(samples, "gitreg_webhook_events_total", provider="github", result="refreshed") == 1
    assert value(samples, "gitreg_webhook_events_total", provider="github", result="bad_signature") == 1
    assert value(samples, "gitreg_webhook_events_total", provider="gitlab", result="disabled") == 1
    assert value(samples, "gitreg_cache_invalidations_total") == 1


async def test_metrics_never_show_credentials_or_repository_paths(serve_client, git_http, tmp_path):
    GitRepo(tmp_path / "repos", "private").commit({"main.tf": "#\n"})
    url = git_http.url("private.git").replace("http://", f"http://{GIT_USER}@")
    config = no_index(
        [rule(url)], credentials=[{"url": git_http.base_url + "/", "username": GIT_USER, "password": GIT_PASSWORD}]
    )
    client = await serve_client(config)
    await client.get("/v1/modules/demo/hello/null/versions")
    text = await (await client.get("/metrics")).text()
    assert 'host="127.0.0.1"' in text
    for secret in (GIT_PASSWORD, GIT_USER, "private.git", str(git_http.base_url.rsplit(":", 1)[1])):
        assert secret not in text


async def test_metrics_need_the_metrics_token_when_one_is_set(serve_client, repo):
    config = no_index([rule(repo.url)], auth={"tokens": [REGISTRY_TOKEN], "metrics_token": METRICS_TOKEN})
    client = await serve_client(config)
    resp = await client.get("/metrics")
    await assert_error(resp, 401, "metrics_token")
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    # A registry token is not a metrics token.
    await assert_error(await client.get("/metrics", headers={"Authorization": f"Bearer {REGISTRY_TOKEN}"}), 401)
    await assert_error(await client.get("/metrics", headers={"Authorization": "Bearer ünïcode"}), 401)
    await scrape(client, {"Authorization": f"Bearer {METRICS_TOKEN}"})


async def test_metrics_are_open_without_a_metrics_token_even_when_the_api_needs_one(serve_client, repo):
    client = await serve_client(no_index([rule(repo.url)], auth={"tokens": [REGISTRY_TOKEN]}))
    await scrape(client)


async def test_each_app_has_its_own_metrics_and_none_reach_the_global_registry(serve_client, repo):
    first = await serve_client(no_index([rule(repo.url)]))
    second = await serve_client(no_index([rule(repo.url)]))
    await first.get("/v1/modules/demo/hello/null/versions")
    assert (
        value(await scrape(first), "gitreg_http_requests_total", route=VERSIONS_ROUTE, method="GET", status="200") == 1
    )
    assert (
        value(await scrape(second), "gitreg_http_requests_total", route=VERSIONS_ROUTE, method="GET", status="200") == 0
    )
    assert "gitreg_" not in prometheus_client.generate_latest().decode()


# --- readiness ---------------------------------------------------------------------------------


async def test_readyz_is_200_while_serving_and_open_without_a_token(serve_client, repo):
    client = await serve_client(make_config([rule(repo.url)], auth={"tokens": [REGISTRY_TOKEN]}))
    resp = await client.get("/readyz")
    assert resp.status == 200
    body = await resp.json()
    assert body["status"] == "ready"
    # Ready while the index is still being built: `terraform init` never waits for it.
    assert set(body["index"]) == {"complete", "modules", "queued", "age_seconds"}


async def test_readyz_is_503_once_shutdown_has_begun_while_healthz_stays_200(serve_client, repo):
    client = await serve_client(no_index([rule(repo.url)]))
    await client.app.shutdown()  # what the runner does first on SIGTERM, before in-flight requests finish
    await assert_error(await client.get("/readyz"), 503, "stopping")
    assert (await client.get("/healthz")).status == 200


# --- access log ----------------------------------------------------------------------------------


def _get(url: str, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


async def _wait_for_log(proc: GitregProcess, needle: str) -> list[str]:
    return await asyncio.to_thread(proc.wait_for_log, needle)


@pytest.mark.slow
async def test_access_log_uses_the_combined_log_format_by_default(repo, tmp_path):
    with GitregProcess("--module", f"demo/hello/null={repo.url}", cwd=tmp_path) as proc:
        assert (
            await asyncio.to_thread(_get, proc.url + "/healthz?token=hunter2-secret", {"User-Agent": "Terraform/1.9.0"})
            == 200
        )
        line = (await _wait_for_log(proc, "/healthz"))[0]
    assert re.fullmatch(
        r'127\.0\.0\.1 - - \[[^\]]+\] "GET /healthz\?token=\*\*\* HTTP/1\.1" 200 \d+ '
        r'"-" "Terraform/1\.9\.0" \d+\.\d+\n',
        line,
    ), line
    assert "hunter2-secret" not in "".join(proc.log)


def _body(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.read()
    except urllib.error.HTTPError as e:
        return e.read()


@pytest.mark.slow
async def test_access_log_counts_the_body_bytes_not_the_headers(repo, tmp_path):
    # The combined log format's byte count is the response body: 16 for /healthz's {"status": "ok"}.
    paths = ["/healthz", "/v1/modules/demo/hello/null/versions", "/nope"]
    with GitregProcess("--module", f"demo/hello/null={repo.url}", cwd=tmp_path) as proc:
        bodies = {path: await asyncio.to_thread(_body, proc.url + path) for path in paths}
        lines = {path: (await _wait_for_log(proc, f'"GET {path} '))[0] for path in paths}
        head = urllib.request.Request(proc.url + paths[1], method="HEAD")
        await asyncio.to_thread(lambda: urllib.request.urlopen(head, timeout=10).read())
        [head_line] = await _wait_for_log(proc, f'"HEAD {paths[1]} ')
    assert len(bodies["/healthz"]) == 16
    for path in paths:
        logged = int(re.search(r'" \d{3} (\d+) "', lines[path]).group(1))
        assert logged == len(bodies[path]), (path, lines[path])
    assert re.search(r'" 200 0 "', head_line), head_line  # HEAD sends the headers only


async def _serve_ok(logger: logging.Logger) -> tuple[web.AppRunner, str]:
    """An app answering GET /x with `logger` as its access log (AccessLogger); (runner, url)."""
    from gitreg.observability.logs import AccessLogger

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/x", ok)
    runner = web.AppRunner(app, access_log_class=AccessLogger, access_log=logger)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/x"


async def test_access_lines_are_written_before_the_next_loop_iteration_and_the_rest_at_shutdown():
    # A handler that is not a plain stream gets the lines as records from `logging`: one record
    # per event-loop iteration, written before the next iteration, so nothing waits in memory.
    from aiohttp import ClientSession

    from gitreg.observability.logs import AccessLogger

    records: list[logging.LogRecord] = []
    logger = logging.getLogger("tests.access-iterations")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    runner, url = await _serve_ok(logger)

    def lines() -> list[str]:
        return [line for record in records for line in record.getMessage().split("\n")]

    try:
        async with ClientSession() as session:
            for i in range(3):
                async with session.get(f"{url}?n={i}") as resp:
                    assert resp.status == 200
                await asyncio.sleep(0)
                assert [line.split('"')[1] for line in lines()] == [f"GET /x?n={j} HTTP/1.1" for j in range(i + 1)]
            async with session.get(url + "?last") as resp:
                await resp.read()
            AccessLogger.write_pending()  # at shutdown: whatever the last iteration answered
            assert lines()[-1].split('"')[1] == "GET /x?last HTTP/1.1"
    finally:
        await runner.cleanup()
        AccessLogger.write_pending()
        logger.removeHandler(handler)


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_access_lines_written_straight_to_a_stream_are_the_lines_logging_would_write(tmp_path, log_format):
    # A plain stream handler ("%(message)s", or JsonFormatter) gets the block with one os.write:
    # the same bytes as the record `logging` would have formatted.
    from aiohttp import ClientSession

    from gitreg.observability.lines import ACCESS_FIELD, JsonFormatter, SecretFilter
    from gitreg.observability.logs import AccessEntry, AccessLogger, access_line

    log = tmp_path / "access.log"
    logger = logging.getLogger(f"tests.access-direct-{log_format}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    handler = logging.FileHandler(log)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter("%(message)s"))
    handler.addFilter(SecretFilter())
    logger.addHandler(handler)
    runner, url = await _serve_ok(logger)
    try:
        async with ClientSession() as session:
            for i in range(3):
                async with session.get(f"{url}?n={i}&token=hunter2", headers={"User-Agent": "t/1"}) as resp:
                    await resp.read()
                await asyncio.sleep(0)
                written = log.read_text().splitlines()
                assert len(written) == i + 1, written
        for line in written:
            text = json.loads(line)["message"] if log_format == "json" else line
            assert "hunter2" not in line and '"GET /x?n=' in text and "token=***" in text
        if log_format == "json":  # the object JsonFormatter makes of an access record
            entry = AccessEntry(1.5, "127.0.0.1", "GET", "/x?n=0&token=hunter2", (1, 1), 200, 2, "", "t/1", 0.001)
            record = logging.LogRecord(logger.name, logging.INFO, "", 0, "", (), None)
            setattr(record, ACCESS_FIELD, [(entry, access_line(entry))])
            first, expected = json.loads(written[0]), json.loads(handler.format(record))
            assert first.keys() == expected.keys() and first["http"].keys() == expected["http"].keys()
            assert first["http"]["path"] == expected["http"]["path"] == "/x?n=0&token=***"
            assert (first["level"], first["logger"]) == (expected["level"], expected["logger"]) == ("info", logger.name)
    finally:
        await runner.cleanup()
        AccessLogger.write_pending()
        logger.removeHandler(handler)
        handler.close()


@pytest.mark.slow
@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_no_access_line_is_lost_when_the_server_is_killed_right_after_answering(repo, tmp_path, log_format):
    # "Who installed what" is what an auditor asks for after an incident, and an OOM kill is
    # exactly that moment. aiohttp logs a request once its answer is sent, so the line of the very
    # last answer is written in the loop's next turn: one more request (whose answer comes from a
    # later turn) is the proof that the loop turned, and the kill comes right after it. Before,
    # lines waited up to a quarter of a second for a block: 0 of 100 were on disk.
    n = 100
    with GitregProcess("--module", f"demo/hello/null={repo.url}", "--log-format", log_format, cwd=tmp_path) as proc:
        for i in range(n):
            assert await asyncio.to_thread(_get, f"{proc.url}/healthz?n={i}") == 200
        assert await asyncio.to_thread(_get, f"{proc.url}/healthz?last") == 200
        assert proc.proc is not None
        proc.proc.kill()
        proc.stop()
    logged = {int(m.group(1)) for line in proc.log if (m := re.search(r"GET /healthz\?n=(\d+) ", line))}
    assert logged == set(range(n)), sorted(set(range(n)) - logged)


@pytest.mark.slow
async def test_log_format_json_writes_one_json_object_per_line(repo, tmp_path):
    args = ("--module", f"demo/hello/null={repo.url}", "--log-format", "json")
    with GitregProcess(*args, cwd=tmp_path) as proc:
        assert (
            await asyncio.to_thread(
                _get, proc.url + "/v1/modules/demo/hello/null/versions", {"Authorization": "Bearer not-logged-token"}
            )
            == 200
        )
        await _wait_for_log(proc, "/versions")
    records = [json.loads(line) for line in proc.log if line.strip()]  # every line is JSON
    assert any(r["logger"] == "gitreg" and "serving" in r["message"] for r in records)
    access = [r for r in records if "http" in r]
    assert access and access[0]["http"]["status"] == 200
    assert access[0]["http"]["path"] == "/v1/modules/demo/hello/null/versions"
    assert access[0]["http"]["method"] == "GET" and access[0]["level"] == "info"
    assert "not-logged-token" not in "".join(proc.log)


@pytest.mark.parametrize("fmt", ["xml"])
def test_unknown_log_format_is_refused(fmt):
    from tests.support.process import run_gitreg

    result = run_gitreg("serve", "--log-format", fmt, "--module", "demo/hello/null=file:///nonexistent.git")
    assert result.returncode == 2
    assert "--log-format" in result.stderr


async def test_every_metric_the_readme_documents_is_exposed(serve_client, repo):
    client = await serve_client(make_config([rule(repo.url)]))
    assert (await client.get("/v1/modules/demo/hello/null/versions")).status == 200
    exposed = {name for name, _ in await scrape(client)}
    text = await (await client.get("/metrics")).text()
    for family in text_string_to_metric_families(text):  # labelled families without samples yet
        exposed.add(family.name + ("_total" if family.type == "counter" else ""))
    table = docs.section("Metrics")
    documented = set()
    for cell in re.findall(r"^\| (`gitreg_[^|]+)\|", table, re.MULTILINE):
        first = None
        for name in re.findall(r"`(gitreg_\w+|_\w+)(?:\{[^`]*\})?`", cell):
            if name.startswith("gitreg_"):
                first = name
                documented.add(name)
            elif first is not None:  # `_misses_total` continues the family of the first name
                documented.add(first.rsplit("_", 2)[0] + name if first.startswith("gitreg_cache") else name)
    assert len(documented) >= 20, documented
    histograms = {n for n in documented if n.endswith("_seconds") and n + "_count" in exposed}
    missing = {n for n in documented - histograms if n not in exposed}
    assert not missing, missing


async def test_tasks_and_git_processes_are_back_to_idle_after_requests(serve_client, repo):
    client = await serve_client(no_index([rule(repo.url)]))  # the requests' own tasks and git processes only
    idle = await scrape(client)
    # Connection: close, as keep-alive connections rightly hold a task each while open.
    burst = [client.get("/v1/modules/demo/hello/null/versions", headers={"Connection": "close"}) for _ in range(20)]
    assert {r.status for r in await asyncio.gather(*burst)} == {200}
    after = await scrape(client)
    assert value(after, "gitreg_git_processes") == 0
    assert value(after, "gitreg_event_loop_tasks") == value(idle, "gitreg_event_loop_tasks") >= 1


async def _raw_method(port: int, method: str) -> int:
    """Send `method` exactly as written (no client would); the status line's code."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{method} /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    head = await asyncio.wait_for(reader.read(-1), 20)
    writer.close()
    return int(head.split(b" ", 2)[1])


@pytest.mark.slow
async def test_invented_http_methods_share_one_method_label_so_series_stay_bounded(repo, tmp_path):
    # aiohttp's pure-Python HTTP parser (no C extensions, as on some platforms) passes any
    # token on as the method: each one used to become a time series of its own.
    invented = [f"X{i}INVENTED" for i in range(50)]
    env = {"AIOHTTP_NO_EXTENSIONS": "1"}
    with GitregProcess("--module", f"demo/hello/null={repo.url}", env=env, cwd=tmp_path) as proc:
        port = int(proc.url.rsplit(":", 1)[1])
        statuses = [await _raw_method(port, method) for method in invented]
        assert set(statuses) == {405}, statuses  # answered by gitreg, so counted by its middleware
        for method in ("GET", "HEAD", "OPTIONS", "DELETE"):
            await _raw_method(port, method)
        text = await asyncio.to_thread(
            lambda: urllib.request.urlopen(proc.url + "/metrics", timeout=10).read().decode()
        )
    series = [
        s for f in text_string_to_metric_families(text) for s in f.samples if s.name == "gitreg_http_requests_total"
    ]
    methods = {s.labels["method"] for s in series}
    assert methods <= {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "other"}, methods
    assert sum(s.value for s in series if s.labels["method"] == "other") == 50
    assert len(series) <= 6, [s.labels for s in series]
