"""Benchmark 4, publish latency: from a signed GitHub push webhook to the new version listed.

    python bench/publish_latency.py [--rounds 20] [--quick]

gitreg runs with `[webhooks] github_secret` and a one-hour cache TTL, serving a real repository
over git smart HTTP. Each round: the cache is warm; a new tag is pushed into the repository
(`git tag` + `git push`); a GitHub `push` delivery for that tag (the fixture payload with the
configured `clone_url`, signed with X-Hub-Signature-256) is POSTed to /webhooks/github; then
the versions endpoint is polled until it lists the new version. Timed from the POST to listed.

Baseline row: a bare `git ls-remote --tags` of the same repository through the same server,
once per round (the least any refresh needs). Contrast rows, without a webhook: the same
registry (TTL 1 h) does not list a pushed tag within the observation window; and a registry
with a 5 s TTL lists it only once the cached tag list expires.

Target: median (and p90) from webhook to listed < 1 s.
"""

from __future__ import annotations

import argparse
import http.client
import json
import time
from pathlib import Path
from urllib.parse import urlsplit

from _common import (
    ROOT,
    GitHttpChild,
    GitRepo,
    bare_ls_remote,
    github_signature,
    machine,
    median,
    pct,
    start_gitreg,
    workdir,
    write_config,
)

SECRET = "bench-webhook-secret-8f1e2d"
SHORT_TTL = 5
FIXTURE = ROOT / "tests" / "fixtures" / "webhooks" / "github-push-tag.json"
VERSIONS = "/v1/modules/demo/hello/null/versions"


class Client:
    """Requests on one keep-alive connection."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        self.conn.request(method, path, body=body, headers=headers or {})
        resp = self.conn.getresponse()
        return resp.status, resp.read()

    def versions(self) -> set[str]:
        status, body = self.request("GET", VERSIONS)
        if status != 200:
            raise RuntimeError(f"versions: HTTP {status}: {body[:300]!r}")
        return {v["version"] for v in json.loads(body)["modules"][0]["versions"]}

    def wait_listed(self, version: str, timeout: float) -> float | None:
        """Seconds until `version` is listed (polling every millisecond or so); None if not within `timeout`."""
        started = time.perf_counter()
        while time.perf_counter() - started < timeout:
            if version in self.versions():
                return time.perf_counter() - started
            time.sleep(0.001)
        return None


def push_payload(tag: str, url: str) -> bytes:
    """GitHub's push delivery for a new tag, naming the repository by the URL gitreg is configured with."""
    payload = json.loads(FIXTURE.read_text())
    payload["ref"] = f"refs/tags/{tag}"
    repo = payload["repository"]
    repo["clone_url"] = url
    repo["html_url"] = repo["url"] = repo["svn_url"] = url.removesuffix(".git")
    parts = urlsplit(url)
    repo["ssh_url"] = f"git@{parts.hostname}:{parts.path.lstrip('/')}"
    repo["git_url"] = f"git://{parts.hostname}{parts.path}"
    return json.dumps(payload).encode()


def config_text(base: Path, url: str, ttl: int, webhook: bool) -> str:
    return (
        f'[cache]\nttl_seconds = {ttl}\n[git]\nprotocols = ["http"]\n[storage]\npath = "{base / f"state-{ttl}"}"\n'
        + (f'[webhooks]\ngithub_secret = "{SECRET}"\n' if webhook else "")
        + f'[[modules]]\nnamespace = "demo"\nname = "hello"\nsystem = "null"\nrepository = "{url}"\n'
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20, help="tags pushed and announced by webhook (default 20)")
    parser.add_argument("--watch", type=float, default=10, help="seconds to watch for a tag pushed without webhook")
    parser.add_argument("--quick", action="store_true", help="5 rounds, 3 s watch, 1 short-TTL round")
    args = parser.parse_args()
    short_rounds = 3
    if args.quick:
        args.rounds, args.watch, short_rounds = 5, 3, 1

    base = workdir("publish")
    repos = base / "repos"
    repo = GitRepo(repos, "hello")
    repo.commit({"main.tf": 'output "x" { value = 1 }\n'})
    repo.tag("v1.0.0")
    git = GitHttpChild(repos)
    url = git.url("hello.git")
    webhook_config = write_config(base / "webhook.toml", config_text(base, url, 3600, webhook=True))
    short_config = write_config(base / "short.toml", config_text(base, url, SHORT_TTL, webhook=False))

    webhook_s: list[float] = []
    bare_s: list[float] = []  # the floor: one `git ls-remote --tags` of the same repository, same server
    answers: set[str] = set()
    no_webhook: float | None = None
    short_s: list[float | None] = []
    server = start_gitreg(["--config", str(webhook_config)], base / "gitreg.log")
    try:
        client = Client(server.url)
        client.versions()  # warm the cache
        for i in range(args.rounds):
            tag = f"v1.{i + 1}.0"
            repo.tag(tag)
            body = push_payload(tag, url)
            headers = {
                "X-GitHub-Event": "push",
                "X-GitHub-Delivery": f"bench-{i}",
                "Content-Type": "application/json",
                "X-Hub-Signature-256": github_signature(SECRET, body),
            }
            started = time.perf_counter()
            status, answer = client.request("POST", "/webhooks/github", body, headers)
            answers.add(f"{status} {json.loads(answer).get('result')}")
            waited = client.wait_listed(tag[1:], 30)
            if waited is None:
                raise RuntimeError(f"{tag} not listed 30 s after the webhook")
            webhook_s.append(time.perf_counter() - started)
            bare_s.append(bare_ls_remote(url))
        # Contrast: a tag pushed without a webhook, same registry (TTL 1 h).
        repo.tag("v9.0.0")
        no_webhook = client.wait_listed("9.0.0", args.watch)
    finally:
        server.stop()

    # Contrast: no webhook, short TTL: listed once the cached list (fetched at start-up's first request) expires.
    for i in range(short_rounds):
        short = start_gitreg(["--config", str(short_config)], base / f"gitreg-short-{i}.log")
        try:
            client = Client(short.url)
            client.versions()  # fetched now: fresh for SHORT_TTL seconds
            tag = f"v2.{i}.0"
            repo.tag(tag)
            short_s.append(client.wait_listed(tag[1:], SHORT_TTL + 10))
        finally:
            short.stop()
    git.stop()

    print(
        f"# publish latency: python bench/publish_latency.py{' --quick' if args.quick else ''}: {args.rounds} tags, "
        "git smart HTTP on 127.0.0.1, polling the versions endpoint about every millisecond"
    )
    print(f"# machine: {machine()}")
    print("| how the tag gets listed | rounds | median | p90 | max |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print(
        f"| webhook (TTL 3600 s): POST /webhooks/github -> listed | {len(webhook_s)} "
        f"| {median(webhook_s) * 1000:.0f} ms | "
        f"{pct(webhook_s, 90) * 1000:.0f} ms | {max(webhook_s) * 1000:.0f} ms |"
    )
    print(
        f"| baseline: bare `git ls-remote --tags` of the repository (what one refresh needs) | {len(bare_s)} | "
        f"{median(bare_s) * 1000:.0f} ms | {pct(bare_s, 90) * 1000:.0f} ms | {max(bare_s) * 1000:.0f} ms |"
    )
    shown = "not listed" if no_webhook is None else f"listed after {no_webhook:.1f} s (unexpected)"
    print(
        f"| no webhook, TTL 3600 s: push -> listed | 1 | {shown} within {args.watch:g} s (would wait for the TTL) | | |"
    )
    done = [s for s in short_s if s is not None]
    print(
        f"| no webhook, TTL {SHORT_TTL} s: push (right after a fetch) -> listed | {len(short_s)} | "
        f"{median(done):.2f} s | | {max(done):.2f} s |"
        if done
        else f"| no webhook, TTL {SHORT_TTL} s | {len(short_s)} | never listed | | |"
    )
    print(f"webhook answers: {', '.join(sorted(answers))}")
    ok = median(webhook_s) < 1 and pct(webhook_s, 90) < 1 and no_webhook is None
    print(
        f"target median and p90 webhook -> listed < 1 s: {median(webhook_s) * 1000:.0f} ms / "
        f"{pct(webhook_s, 90) * 1000:.0f} ms -> {'met' if ok else 'MISSED'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
