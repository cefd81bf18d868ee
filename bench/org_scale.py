"""Org mode at the size of a real org: first index, refresh, warm list/search, restart, RSS, install latency.

    python bench/org_scale.py [--repos 2000] [--tags 20] [--big 10000] [--concurrency 4] [--first-only]

One run, everything on 127.0.0.1, against a real `python -m gitreg serve`:

- an org of `--repos` repositories on the fake GitHub API of the tests (100 a page), all but 10
  named `terraform-{system}-{name}`, each a real bare repository (a README, main.tf,
  `--tags` tags) served over real smart HTTP (`git http-backend`, Basic auth) in a process of
  its own. The repositories are built fast: one `git fast-import` writes every module's commit
  into one template repository, which is hard-linked once per repository, each with its own
  packed-refs (main and the tags pointing at its own commit);
- baseline: `--repos` bare `git ls-remote --tags` at `--concurrency` (4 = the git pool's share
  for background work), with the same credential header, against the same server; and a
  second one: ls-remote + `git init --bare` + a shallow fetch of the highest tag + `git
  archive`, the least git that listing and describing a module takes;
- first full index: gitreg started with one `[[orgs]]` entry and one `[[modules]]` rule (the
  "cached" module, on another repository), until /readyz says complete, queued 0 and every
  module listed; meanwhile `--latency-requests` versions/download requests of the cached
  module (warmed first), spread over the index, next to as many at the same pace once the
  index is idle; its timeline (seconds from the serving process's start: /healthz, the index
  process spawned, the org's API pages answered, the first org `ls-remote` answered at the git
  server, the first org module and every module listed; `--first-only` stops there, once every
  module is listed); with `--floor`, the same on a second gitreg that indexes nothing while a
  third indexes the org from scratch (the machine's load alone, without the index's work in
  the process that answers), with that other gitreg at nice 0 and at nice 10;
- a refresh with nothing changed (refresh_seconds = 7x the baseline, so that the first one
  comes after the first index, as with the default 600 s): API pages only, zero git requests
  at the git server;
- restart with the persisted index: time from process start until list and search answer
  exactly as before the restart, and the git requests the restart caused;
- warm list and search p50/p90 per query (cold memo: each query's first time; repeated),
  with zero API calls and git requests during them, at `--repos` and at `--big` modules;
- RSS (VmRSS of the serving process, and of its index process) with `--big` modules indexed and with 0.

The `--big` org is generated, not built: the fake API lists `--big` repositories and gitreg's
storage gets the orgs.json, index.json and details/ files a finished index of them would have,
written with gitreg's own classes (RepoRecord, IndexEntry, DetailsStore) from the details of a
module the real run built (its README replaced per module). Their clone URLs name repositories
the git server does not have: any git call would show at the git server.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import (
    GIT_ENV,
    GitHttpChild,
    Server,
    cpu_seconds,
    index_process_pids,
    index_process_rss_kib,
    machine,
    median,
    pct,
    rss_kib,
    start_gitreg,
    workdir,
)
from gitreg.core.names import ModuleAddress
from gitreg.forges.github import record as github_record
from gitreg.index.details import ModuleDetails
from gitreg.index.model import IndexedVersion, IndexEntry
from gitreg.index.persist import DETAILS_DIR, FILE_NAME, FORMAT, DetailsStore
from gitreg.index.search import readme_words
from gitreg.orgs.store import FILE_NAME as ORGS_FILE
from gitreg.orgs.store import FORMAT as ORGS_FORMAT
from tests.support.forges import FakeForge

GROUP, NAMESPACE = "acme-infra", "acme"
GIT_USER, GIT_PASSWORD, API_TOKEN = "bench", "bench-git-password-0123", "bench-api-token-4567"
SYSTEMS = ("aws", "azurerm", "google")
WORDS = (
    "network",
    "bucket",
    "cluster",
    "dns",
    "iam",
    "queue",
    "cache",
    "database",
    "gateway",
    "firewall",
    "monitor",
    "logging",
    "secrets",
    "registry",
    "compute",
    "storage",
    "cdn",
    "mesh",
    "backup",
    "vault",
)
TIERS = ("edge", "core", "shared", "private", "public", "global", "regional", "zonal", "blue", "green")
NON_MATCHING = 10
CACHED = "bench/cached/aws"
MAIN_TF = b"""variable "name" {
  description = "What to call it"
  type        = string
}

variable "tags" {
  type    = map(string)
  default = {}
}

output "id" {
  description = "The id"
  value       = var.name
}
"""


# ---- the org -----------------------------------------------------------------------------------


def module_name(i: int) -> tuple[str, str]:
    """(system, name) of module number i."""
    return SYSTEMS[i % len(SYSTEMS)], f"{WORDS[i % len(WORDS)]}-{TIERS[(i // len(WORDS)) % len(TIERS)]}-{i:05d}"


def readme(i: int) -> str:
    """Module i's README: a few common words and one of its own (`quasar<i>`), for README search."""
    system, name = module_name(i)
    return (
        f"# {name}\n\nA Terraform module that manages {WORDS[i % len(WORDS)]} resources on {system}.\n"
        f'Its catalogue word is quasar{i:05d}.\n\n## Usage\n\n```hcl\nmodule "x" {{\n  source = "..."\n'
        f'  name   = "example"\n}}\n```\n'
    )


def _env() -> dict[str, str]:
    return {**os.environ, **GIT_ENV}


def build_repos(root: Path, repos: int, tags: int) -> list[str]:
    """`repos` bare repositories under root (`<name>.git`); their repository names, matching ones first.

    One `git fast-import` writes every module's commit into a template; each repository is the
    template hard-linked (git objects are immutable) with packed-refs of its own.
    """
    template = root / ".template"
    subprocess.run(["git", "init", "--quiet", "--bare", "-b", "main", str(template)], check=True, env=_env())
    shutil.rmtree(template / "hooks", ignore_errors=True)
    stream = bytearray()
    main_tf = b"blob\nmark :1\ndata %d\n%s\n" % (len(MAIN_TF), MAIN_TF)
    stream += main_tf
    for i in range(repos):
        text = readme(i).encode()
        stream += b"reset refs/heads/build\n"
        stream += (
            b"commit refs/heads/build\nmark :%d\ncommitter bench <bench@example.com> %d +0000\ndata 6\nmodule\n"
            % (i + 2, 1700000000 + i)
        )
        stream += b"M 100644 :1 main.tf\nM 100644 inline README.md\ndata %d\n%s\n" % (len(text), text)
    marks = root / ".marks"
    subprocess.run(
        ["git", "fast-import", "--quiet", f"--export-marks={marks}"],
        cwd=template,
        input=bytes(stream),
        check=True,
        env=_env(),
    )
    commits = {}
    for line in marks.read_text().split("\n"):
        if line:
            mark, sha = line.split()
            commits[int(mark[1:])] = sha
    (template / "refs" / "heads" / "build").unlink(missing_ok=True)
    (template / "packed-refs").unlink(missing_ok=True)
    tag_names = sorted(f"refs/tags/v{t // 10000}.{t // 100 % 100}.{t % 100}" for t in range(tags))
    names = []
    for i in range(repos):
        if i < repos - NON_MATCHING:
            system, name = module_name(i)
            repo = f"terraform-{system}-{name}"
        else:
            repo = f"docs-site-{i:05d}"
        names.append(repo)
        dest = root / f"{repo}.git"
        _link_tree(template, dest)
        sha = commits[i + 2]
        lines = ["# pack-refs with: peeled fully-peeled sorted", f"{sha} refs/heads/main"]
        lines += [f"{sha} {t}" for t in tag_names]
        (dest / "packed-refs").write_text("\n".join(lines) + "\n")  # a new file: the template has none
    return names


def _link_tree(src: Path, dest: Path) -> None:
    for dirpath, _dirs, files in os.walk(src):
        target = dest / os.path.relpath(dirpath, src)
        target.mkdir(parents=True, exist_ok=True)
        for f in files:
            os.link(os.path.join(dirpath, f), target / f)


def cached_repo(root: Path) -> None:
    """The [[modules]] rule's repository: 20 tags, a main.tf."""
    from _common import tagged_repo

    tagged_repo(root / "cached.git", 20)


REFRESH_FACTOR = 7  # refresh_seconds of the first run, in baselines (the first index takes 4-5)

# ---- baselines ---------------------------------------------------------------------------------


def credential_env(base_url: str) -> dict[str, str]:
    """The credential header as gitreg gives it to git (http.<url>.extraHeader through the environment)."""
    import base64

    token = base64.b64encode(f"{GIT_USER}:{GIT_PASSWORD}".encode()).decode()
    return {
        **_env(),
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": f"http.{base_url}/.extraHeader",
        "GIT_CONFIG_VALUE_0": f"Authorization: Basic {token}",
    }


def baseline_ls_remote(urls: list[str], env: dict[str, str], concurrency: int) -> float:
    """Seconds for a plain `git ls-remote --tags` of every URL, `concurrency` at a time."""

    def one(url: str) -> None:
        subprocess.run(["git", "ls-remote", "--tags", url], check=True, capture_output=True, env=env)

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, urls))
    return time.perf_counter() - started


def baseline_details(urls: list[str], env: dict[str, str], concurrency: int, scratch: Path) -> float:
    """Seconds for the least git that listing and describing every URL takes, `concurrency` at a time.

    Per URL: `git ls-remote --tags` (the versions), then `git init --bare`, a shallow fetch of
    the highest tag alone and `git archive` of its tree (the files details are read from).
    """
    scratch.mkdir(parents=True, exist_ok=True)

    def one(job: tuple[int, str]) -> None:
        n, url = job
        path = scratch / f"m{n}"
        refs = subprocess.run(["git", "ls-remote", "--tags", url], check=True, capture_output=True, env=env, text=True)
        tags = [line.split("\trefs/tags/", 1)[1] for line in refs.stdout.splitlines() if "\trefs/tags/v" in line]
        latest = max(tags, key=lambda t: tuple(int(p) for p in t[1:].split(".")))
        subprocess.run(["git", "init", "--quiet", "--bare", str(path)], check=True, capture_output=True, env=env)
        fetch = ["git", "fetch", "--quiet", "--depth=1", "--no-tags", "--no-write-fetch-head", url]
        fetch.append(f"+refs/tags/{latest}:refs/tags/{latest}")
        subprocess.run(fetch, cwd=path, check=True, capture_output=True, env=env)
        subprocess.run(["git", "archive", "--format=tar", f"{latest}:"], cwd=path, check=True, capture_output=True)
        shutil.rmtree(path)

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, enumerate(urls)))
    took = time.perf_counter() - started
    shutil.rmtree(scratch, ignore_errors=True)
    return took


class TimedForge(FakeForge):
    """The fake GitHub API, noting when it answered each listing page (wall time), for the first index's timeline."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.answered: list[float] = []

    def _record(self, request: Any, status: int) -> None:
        if "/repos" in request.raw_path:
            self.answered.append(time.time())
        super()._record(request, status)


def started_after(pid: int, parent: int) -> float:
    """Seconds between the start of process `parent` and of process `pid` (from /proc, to the clock tick)."""

    def start_ticks(p: int) -> int:
        return int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[19])

    return (start_ticks(pid) - start_ticks(parent)) / os.sysconf("SC_CLK_TCK")


# ---- talking to gitreg -------------------------------------------------------------------------


class Client:
    """One keep-alive HTTP connection to gitreg; each request timed (ms) with its body read."""

    def __init__(self, base_url: str) -> None:
        parts = urllib.parse.urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)

    def get(self, path: str) -> tuple[int, bytes, float]:
        """(status, body, milliseconds)."""
        for attempt in (0, 1):
            started = time.perf_counter()
            try:
                self.conn.request("GET", path)
                resp = self.conn.getresponse()
                body = resp.read()
                return resp.status, body, (time.perf_counter() - started) * 1000
            except (ConnectionError, http.client.HTTPException):
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def json(self, path: str) -> Any:
        status, body, _ = self.get(path)
        return json.loads(body) if status == 200 else None

    def close(self) -> None:
        self.conn.close()


def metric(client: Client, name: str) -> float:
    """The sum of every sample of metric `name` in /metrics."""
    _, body, _ = client.get("/metrics")
    total = 0.0
    for line in body.decode().splitlines():
        if line.startswith(name) and (line[len(name)] in " {"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def config_text(storage: Path, api_url: str, git_base: str, refresh: int, cached: bool, org: bool = True) -> str:
    """A gitreg config: one GitHub org (unless not `org`), optionally the cached module's rule, the git credential."""
    text = f'''
[storage]
path = "{storage}"
[cache]
ttl_seconds = 3600
[git]
protocols = ["http"]
'''
    if org:
        text += f'''
[[orgs]]
provider = "github"
api_url = "{api_url}"
group = "{GROUP}"
namespace = "{NAMESPACE}"
token = "${{BENCH_API_TOKEN}}"
refresh_seconds = {refresh}
'''
    text += f'''
[[credentials]]
url = "{git_base}/"
username = "{GIT_USER}"
password = "${{BENCH_GIT_PASSWORD}}"
'''
    if cached:
        namespace, name, system = CACHED.split("/")
        text += f'''
[[modules]]
namespace = "{namespace}"
name = "{name}"
system = "{system}"
repository = "{git_base}/cached.git"
'''
    return text


SERVER_ENV = {"BENCH_API_TOKEN": API_TOKEN, "BENCH_GIT_PASSWORD": GIT_PASSWORD}


def start(
    work: Path,
    label: str,
    storage: Path,
    api_url: str,
    git_base: str,
    refresh: int,
    cached: bool,
    org: bool = True,
    niceness: int = 0,
) -> Server:
    config = work / f"{label}.toml"
    config.write_text(config_text(storage, api_url, git_base, refresh, cached, org))
    return start_gitreg(
        ["--config", str(config), "--log-level", "warning"], work / f"{label}.log", env=SERVER_ENV, niceness=niceness
    )


def readyz(client: Client) -> dict[str, Any]:
    index: dict[str, Any] = client.json("/readyz")["index"]
    return index


def wait_settled(client: Client, modules: int, timeout: float = 600) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        idx = readyz(client)
        if idx["complete"] and idx["queued"] == 0 and idx["modules"] >= modules:
            return
        time.sleep(0.2)
    raise RuntimeError(f"the index did not settle: {readyz(client)}")


def wait_api_calls(client: Client, at_least: float, timeout: float = 60) -> float:
    deadline = time.time() + timeout
    while time.time() < deadline:
        calls = metric(client, "gitreg_org_api_calls_total")
        if calls >= at_least:
            return calls
        time.sleep(0.2)
    raise RuntimeError("the org was not enumerated in time")


# ---- phases ------------------------------------------------------------------------------------


def paced_latency(
    base_url: str, count: int, interval: float, stop_at: list[float] | None = None
) -> list[tuple[float, str, float]]:
    """`count` requests (versions and download of the cached module, alternately) `interval` s apart:
    (wall time, kind, ms) each."""
    client = Client(base_url)
    paths = (f"/v1/modules/{CACHED}/versions", f"/v1/modules/{CACHED}/0.0.19/download")
    out = []
    for n in range(count):
        kind = ("versions", "download")[n % 2]
        status, _, ms = client.get(paths[n % 2])
        assert status in (200, 204), status
        out.append((time.time(), kind, ms))
        time.sleep(interval)
    client.close()
    return out


def latency_floor(work: Path, api_url: str, git_base: str, modules: int, count: int, interval: float) -> None:
    """The same install latency, on a gitreg that serves the cached module and indexes nothing, idle and
    while another gitreg process indexes the org from scratch, once at the same CPU priority and once
    under `nice -n 10`: what the machine's load alone costs a request with no index work in its own
    process, and what an index process of lower priority would."""
    solo = start(work, "floor-solo", work / "floor-solo-storage", api_url, git_base, 600, cached=True, org=False)
    status, _, _ = Client(solo.url).get(f"/v1/modules/{CACHED}/versions")
    assert status == 200
    print("  floor: a gitreg that indexes nothing, while another gitreg process indexes the org from scratch")
    for niceness in (0, 10):
        idle = [ms for _, _, ms in paced_latency(solo.url, count, interval)]
        label = f"floor-indexer-{niceness}"
        indexer = start(work, label, work / f"{label}-storage", api_url, git_base, 600, cached=False, niceness=niceness)
        during: list[tuple[float, str, float]] = []
        pacer = threading.Thread(
            target=lambda out=during: out.extend(paced_latency(solo.url, count, interval)), daemon=True
        )
        pacer.start()
        started = time.perf_counter()
        wait_settled(Client(indexer.url), modules - 1)
        took, done_wall = time.perf_counter() - started, time.time()
        pacer.join()
        indexer.stop()
        busy = [ms for wall, _, ms in during if wall <= done_wall]
        print(f"  the other process at nice {niceness} (its first index took {took:.1f} s):")
        print(f"  both      during the other's index: {latency_row(busy)}")
        ratios = f"ratio p50 {median(busy) / median(idle):.2f}x, p90 {pct(busy, 90) / pct(idle, 90):.2f}x"
        print(f"  both      idle:                     {latency_row(idle)}   {ratios}")
    solo.stop()


def latency_row(samples: list[float]) -> str:
    return f"p50 {median(samples):6.2f} ms  p90 {pct(samples, 90):6.2f} ms  (n={len(samples)})"


def query_sets(modules: int, variants: int) -> dict[str, list[str]]:
    """Per kind of query, `variants` distinct queries (each one's first time is a cold memo)."""
    step = max(1, (modules - NON_MATCHING) // variants)
    picks = [min(modules - NON_MATCHING - 1, k * step + 7) for k in range(variants)]
    return {
        "name": [module_name(i)[1] for i in picks],
        "word": [WORDS[k % len(WORDS)] for k in range(variants)][: len(WORDS)],
        "two words": [f"{WORDS[k % len(WORDS)]} {TIERS[(k // 2) % len(TIERS)]}" for k in range(variants)],
        "README word": [f"quasar{i:05d}" for i in picks],
        "no match": [f"zzqx{k}nothing" for k in range(variants)],
    }


LISTS = [
    "/v1/modules",
    f"/v1/modules/{NAMESPACE}",
    "/v1/modules?provider=aws",
    "/v1/modules?provider=google",
    f"/v1/modules/{NAMESPACE}?provider=azurerm",
    "/v1/modules?verified=true",
    "/v1/modules?provider=aws&limit=100",
    "/v1/modules?provider=nothing",
]


def browse_latency(base_url: str, modules: int, variants: int, repeats: int) -> dict[str, dict[str, list[float]]]:
    """Per query kind: "cold" (first time of each distinct query) and "repeated" times in ms; also the first request."""
    client = Client(base_url)
    results: dict[str, dict[str, list[float]]] = {}
    status, _, first = client.get("/v1/modules/search?q=firstrequestbuildsview")
    results["first request (builds the view)"] = {"cold": [first], "repeated": []}
    kinds: dict[str, list[str]] = {
        "list": LISTS,
        **{
            f"search: {k}": [f"/v1/modules/search?q={urllib.parse.quote(q)}" for q in qs]
            for k, qs in query_sets(modules, variants).items()
        },
    }
    for kind, paths in kinds.items():
        cold, warm = [], []
        for path in paths:
            status, body, ms = client.get(path)
            assert status == 200, (path, status, body[:200])
            cold.append(ms)
        for _ in range(repeats):
            for path in paths:
                status, _, ms = client.get(path)
                warm.append(ms)
        results[kind] = {"cold": cold, "repeated": warm}
    client.close()
    return results


def check_answers(client: Client, modules: int) -> dict[str, Any]:
    """What list and search answer (to compare before and after a restart)."""
    answers = {}
    for path in [
        "/v1/modules?limit=100",
        f"/v1/modules?limit=100&offset={max(0, modules - 50)}",
        *[f"/v1/modules/search?q={urllib.parse.quote(q)}" for qs in query_sets(modules, 3).values() for q in qs],
    ]:
        status, body, _ = client.get(path)
        answers[path] = json.loads(body) if status == 200 else status
    return answers


def print_browse(label: str, results: dict[str, dict[str, list[float]]]) -> None:
    print(f"\n  warm list and search at {label} (ms; cold = each distinct query's first time):")
    print(f"    {'query':34} {'cold p50':>9} {'cold p90':>9} {'rep. p50':>9} {'rep. p90':>9}")
    for kind, r in results.items():
        cold, warm = r["cold"], r["repeated"]
        print(
            f"    {kind:34} {median(cold):9.2f} {pct(cold, 90):9.2f} "
            f"{(f'{median(warm):9.2f}' if warm else '        -')} {(f'{pct(warm, 90):9.2f}' if warm else '        -')}"
        )


# ---- the big generated org -----------------------------------------------------------------------


def generate_big(storage: Path, fake: FakeForge, big: int, template: ModuleDetails, tags: int) -> None:
    """orgs.json, index.json and details/ as a finished index of the fake's `big` repositories would leave them."""
    storage.mkdir(parents=True, exist_ok=True)
    objects = fake._sorted()
    records = [r for r in (github_record(o) for o in objects) if r is not None]
    (storage / ORGS_FILE).write_text(
        json.dumps(
            {
                "format": ORGS_FORMAT,
                "orgs": [
                    {
                        "provider": "github",
                        "api_url": fake.api_url,
                        "group": GROUP,
                        "enumerated_at": time.time(),
                        "repositories": [r.to_json() for r in sorted(records, key=lambda r: r.full_name.lower())],
                    }
                ],
            }
        )
    )
    store = DetailsStore(storage / DETAILS_DIR)
    entries = []
    import hashlib

    for _i, rec in enumerate(sorted(records, key=lambda r: r.name)):
        m = re.fullmatch(r"terraform-([a-z0-9]+)-(.+)", rec.name)
        assert m is not None
        n = int(rec.name.rsplit("-", 1)[1])
        sha = hashlib.sha1(rec.name.encode()).hexdigest()
        versions = tuple(
            IndexedVersion(f"0.{t // 100 % 100}.{t % 100}", f"v0.{t // 100 % 100}.{t % 100}", sha)
            for t in reversed(range(tags))
        )
        text = readme(n)
        details = replace(template, root={**template.root, "readme": text})
        store.save(rec.https_url, "", sha, details)
        entries.append(
            IndexEntry(
                address=ModuleAddress(NAMESPACE, m.group(2), m.group(1)),
                repository=rec.https_url,
                path="",
                source=rec.web_url,
                versions=versions,
                latest=versions[0],
                description=rec.description,
                published_at=template.published_at,
                verified=False,
                topics=rec.topics,
                words=readme_words(text),
                marker=rec.pushed_at,
                details=True,
                indexed_at=time.time(),
            )
        )
    data = {
        "format": FORMAT,
        "complete": True,
        "entries": [e.to_json() for e in sorted(entries, key=lambda e: str(e.address))],
    }
    (storage / FILE_NAME).write_text(json.dumps(data))


def any_details(storage: Path) -> ModuleDetails:
    for path in sorted((storage / DETAILS_DIR).glob("*.json")):
        data = json.loads(path.read_text())
        if "quasar" in data["root"].get("readme", ""):
            return ModuleDetails(
                data["description"], data["published_at"], data["root"], data["submodules"], data.get("examples", [])
            )
    raise RuntimeError("no details were built")


# ---- main ---------------------------------------------------------------------------------------


# One measurement session read top to bottom (each phase prints as it ends, on the same gitreg
# and git server); split up, its phases would pass a dozen measured values between them.
def run(args: argparse.Namespace) -> None:  # noqa: C901 - see above
    work = workdir("orgscale")
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    repos_root = work / "repos"
    repos_root.mkdir()
    started = time.perf_counter()
    names = build_repos(repos_root, args.repos, args.tags)
    cached_repo(repos_root)
    print(f"built {args.repos} bare repositories ({args.tags} tags each) in {time.perf_counter() - started:.1f} s")
    git = GitHttpChild(repos_root, username=GIT_USER, password=GIT_PASSWORD)
    fake = TimedForge("github", git, GROUP, token=API_TOKEN)  # (GitHttpChild: only .url() is used)
    matching = args.repos - NON_MATCHING
    expected = matching + 1  # and the cached module
    try:
        with fake.in_thread():
            for i, repo in enumerate(names):
                fake.add(
                    repo,
                    description=f"{WORDS[i % len(WORDS)].capitalize()} module",
                    topics=("terraform-module",),
                    pushed=1700000000 + i,
                )
            urls = [git.url(f"{repo}.git") for repo in names]
            env = credential_env(git.base_url)
            pages = -(-args.repos // 100)

            # -- baselines
            base = baseline_ls_remote(urls, env, args.concurrency)
            print(
                f"\nbaseline: {args.repos} x git ls-remote --tags at concurrency {args.concurrency}: {base:.1f} s "
                f"({base / args.repos * 1000:.1f} ms each)"
            )
            details_base = None
            if not args.no_details_baseline:
                details_base = baseline_details(urls, env, args.concurrency, work / "details-baseline")
                print(
                    f"baseline: {args.repos} x (ls-remote + init --bare + shallow fetch of the latest tag + archive) "
                    f"at concurrency {args.concurrency}: {details_base:.1f} s"
                )
            adv0, req0, api_first = git.ref_advertisements(), git.requests(), len(fake.requests())
            listings0 = git.ref_listings()

            # -- first full index, with install latency of the cached module spread over it
            storage = work / "storage"
            # The org's next enumeration is due after the first index (details included: 4-5x the
            # baseline), as with the default refresh_seconds (600): the first index is measured as a
            # user would run it, not with full enumerations of the org in the middle of it.
            refresh = max(60, round(REFRESH_FACTOR * base))
            server = start(work, "first", storage, fake.api_url, git.base_url, refresh, cached=True)
            t0 = server.started
            wall0 = time.time() - (time.perf_counter() - t0)  # the serving process's start, as wall time
            indexer_pids = index_process_pids(server.proc.pid)
            spawned = started_after(indexer_pids[0], server.proc.pid) if indexer_pids else None
            client = Client(server.url)
            status, _, warm_ms = client.get(f"/v1/modules/{CACHED}/versions")
            assert status == 200
            interval = max(0.01, base / args.latency_requests)
            during: list[tuple[float, str, float]] = []
            pacer = threading.Thread(
                target=lambda: during.extend(paced_latency(server.url, args.latency_requests, interval)), daemon=True
            )
            pacer.start()
            t_listed: float | None = None
            t_first: float | None = None  # the first org module listed
            t_done: float | None = None
            cpu_listed = (0.0, 0.0)  # (serving, index process) own CPU when every module was listed
            timeline = []
            deadline = time.time() + args.timeout
            while time.time() < deadline:
                idx = readyz(client)
                now = time.perf_counter() - t0
                timeline.append((now, idx["modules"]))
                if t_first is None and idx["modules"] >= 2:  # (the cached module, and an org module)
                    t_first = now
                if t_listed is None and idx["modules"] >= expected:
                    t_listed = now
                    cpu_listed = (
                        cpu_seconds(server.proc.pid),
                        sum(cpu_seconds(pid) for pid in index_process_pids(server.proc.pid)),
                    )
                if (idx["complete"] and idx["queued"] == 0 and idx["modules"] >= expected) or (
                    args.first_only and t_listed is not None
                ):
                    t_done = now
                    break
                time.sleep(0.25 if t_first is not None else 0.02)
            if t_done is None or t_listed is None:
                raise RuntimeError(f"the first index did not finish in {args.timeout} s: {readyz(client)}")
            done_wall = time.time()
            cpu_serving = cpu_seconds(server.proc.pid)
            cpu_indexer = sum(cpu_seconds(pid) for pid in index_process_pids(server.proc.pid))
            pacer.join()
            index_git = git.ref_advertisements() - adv0
            index_listings = git.ref_listings() - listings0
            index_requests = git.requests() - req0
            api_first = len(fake.requests()) - api_first
            ls_calls = metric(client, "gitreg_upstream_git_calls_total")
            half = next(t for t, n in timeline if n >= expected / 2)
            print(
                f"\nfirst full index of {matching} org modules + 1 rule module (gitreg started at t=0; "
                f"/healthz after {server.startup_seconds:.1f} s)"
            )
            print(
                f"  every module listed with its versions:          {t_listed:6.1f} s  = {t_listed / base:.2f}x the "
                "ls-remote baseline"
            )
            if not args.first_only:
                print(
                    f"  details built too (/readyz complete, queued 0): {t_done:6.1f} s  = {t_done / base:.2f}x the "
                    "ls-remote baseline"
                    + (f", {t_done / details_base:.2f}x the details baseline" if details_base else "")
                )
            print(f"  half the modules listed at {half:.1f} s")
            first_git = git.first_request_after(wall0, excluding="cached.git")
            pages_at = [t - wall0 for t in fake.answered if t >= wall0]
            print(
                "  timeline (s from process start): /healthz "
                f"{server.startup_seconds:.2f}, index process spawned "
                f"{'?' if spawned is None else f'{spawned:.2f}'}, the org's API pages answered "
                f"{pages_at[0]:.2f} .. {pages_at[-1]:.2f} ({len(pages_at)}), first org ls-remote answered "
                f"{'?' if first_git is None else f'{first_git - wall0:.2f}'}, first org module listed "
                f"{'?' if t_first is None else f'{t_first:.2f}'}, every module {t_listed:.2f}"
            )
            print(
                f"  CPU used until every module was listed (own, git not counted): serving process "
                f"{cpu_listed[0]:.1f} s, its index process (nice +10) {cpu_listed[1]:.1f} s "
                f"({cpu_listed[1] / matching * 1000:.1f} ms a repository)"
            )
            print(
                f"  CPU used until the details were built too: serving process {cpu_serving:.1f} s, "
                f"its index process (nice +10) {cpu_indexer:.1f} s"
            )
            print(
                f"  git server: {index_git} ref advertisements (info/refs), {index_listings} ref listings "
                f"(ls-refs or v0), {index_requests} requests in all; gitreg "
                f"ls-remote calls: {ls_calls:.0f}; the fake API: {api_first} requests ({pages} pages a listing)"
            )

            if args.first_only:
                client.close()
                server.stop()
                return

            # -- refresh with nothing changed
            calls0 = metric(client, "gitreg_org_api_calls_total")
            req1 = git.requests()
            api0 = len(fake.requests())
            calls1 = wait_api_calls(client, calls0 + pages, timeout=2.2 * refresh + 40)
            time.sleep(1.0)  # what the refresh would start, had it found a change
            refresh_git = git.requests() - req1
            print(
                f"\nrefresh with nothing changed (refresh_seconds = {refresh}): "
                f"gitreg_org_api_calls_total +{calls1 - calls0:.0f} "
                f"(the fake API saw {len(fake.requests()) - api0} requests, {pages} pages a listing); "
                f"git server requests during it: {refresh_git}; /readyz queued {readyz(client)['queued']}"
            )

            # -- idle install latency, at the same pace as during the index
            idle = paced_latency(server.url, args.latency_requests, interval)
            busy = [s for s in during if s[0] <= done_wall]
            print(f"\nversions/download of the cached module ({CACHED}; warmed: first versions {warm_ms:.1f} ms)")
            for kind in ("versions", "download", None):
                b = [ms for _, k, ms in busy if kind in (None, k)]
                quiet = [ms for _, k, ms in idle if kind in (None, k)]
                name = kind or "both"
                print(f"  {name:9} during the first index: {latency_row(b)}")
                print(
                    f"  {name:9} idle:                   {latency_row(quiet)}   ratio p50 "
                    f"{median(b) / median(quiet):.2f}x, p90 {pct(b, 90) / pct(quiet, 90):.2f}x"
                )
            print(
                f"  ({len(during) - len(busy)} of the {len(during)} requests during the index came after it finished)"
            )

            if args.floor:
                latency_floor(work, fake.api_url, git.base_url, expected, args.latency_requests, interval)

            before = check_answers(client, expected)
            rss_first = rss_kib(server.proc.pid)
            client.close()
            server.stop()

            # -- restart with the persisted index
            req2, adv2, cached2 = git.requests(), git.ref_advertisements(), git.ref_advertisements("cached.git")
            api2 = len(fake.requests())
            server = start(work, "restart", storage, fake.api_url, git.base_url, 600, cached=True)
            client = Client(server.url)
            t_correct = None
            while time.perf_counter() - server.started < 30:
                if check_answers(client, expected) == before:
                    t_correct = time.perf_counter() - server.started
                    break
                time.sleep(0.02)
            wait_settled(client, expected)  # the org's listing is current: no enumeration is due at start
            time.sleep(1.0)
            cached_adv = git.ref_advertisements("cached.git") - cached2
            print(
                f"\nrestart with the persisted index: /healthz after {server.startup_seconds:.2f} s; list and search "
                f"answer as before the restart {t_correct if t_correct is None else f'{t_correct:.2f} s'} after "
                "process start"
            )
            print(
                f"  git server during the restart: {git.requests() - req2} requests, "
                f"{git.ref_advertisements() - adv2} ref advertisements "
                f"(org repositories: {git.ref_advertisements() - adv2 - cached_adv}, the [[modules]] rule's: "
                f"{cached_adv}); "
                f"the fake API: {len(fake.requests()) - api2} requests"
            )

            # -- warm list/search at the org's size
            req3, api3 = git.requests(), len(fake.requests())
            calls3 = metric(client, "gitreg_org_api_calls_total")
            small = browse_latency(server.url, expected, args.variants, args.repeats)
            print_browse(f"{expected} modules", small)
            print(
                f"    during them: git server requests {git.requests() - req3}, fake API requests "
                f"{len(fake.requests()) - api3}, gitreg_org_api_calls_total +"
                f"{metric(client, 'gitreg_org_api_calls_total') - calls3:.0f}"
            )
            rss_small = rss_kib(server.proc.pid)
            template = any_details(storage)
            client.close()
            server.stop()
            print(
                f"\n  RSS: {rss_first / 1024:.0f} MiB after the first index (parse workers not counted), "
                f"{rss_small / 1024:.0f} MiB after the restart and the list/search runs"
            )

        # -- the big org, generated
        big_fake = FakeForge("github", git, GROUP, token=API_TOKEN)  # type: ignore[arg-type]
        with big_fake.in_thread():
            for i in range(args.big):
                system, name = module_name(i)
                big_fake.add(
                    f"terraform-{system}-{name}",
                    description=f"{WORDS[i % len(WORDS)].capitalize()} module",
                    topics=("terraform-module",),
                    pushed=1700000000 + i,
                )
            big_storage = work / "big-storage"
            started = time.perf_counter()
            generate_big(big_storage, big_fake, args.big, template, args.tags)
            print(
                f"\ngenerated the {args.big}-module index (orgs.json, index.json, details/) in "
                f"{time.perf_counter() - started:.1f} s"
            )
            req4, api4 = git.requests(), len(big_fake.requests())
            server = start(work, "big", big_storage, big_fake.api_url, git.base_url, 600, cached=False)
            client = Client(server.url)
            t_ready = None
            while time.perf_counter() - server.started < 60:
                idx = readyz(client)
                if idx["modules"] >= args.big and idx["complete"] and idx["queued"] == 0:
                    t_ready = time.perf_counter() - server.started
                    break
                time.sleep(0.05)
            wait_settled(client, args.big)  # the listing on disk is current: no enumeration is due at start
            time.sleep(1.0)
            print(
                f"  start: /healthz {server.startup_seconds:.2f} s, index of {args.big} loaded "
                f"(complete, queued 0) {t_ready if t_ready is None else f'{t_ready:.2f} s'} after process start; "
                f"git server requests {git.requests() - req4}; fake API requests {len(big_fake.requests()) - api4}"
            )
            req5, api5 = git.requests(), len(big_fake.requests())
            big_results = browse_latency(server.url, args.big, args.variants, args.repeats)
            print_browse(f"{args.big} modules", big_results)
            status, body, ms = client.get(f"/v1/modules/{NAMESPACE}/{module_name(42)[1]}/{module_name(42)[0]}")
            assert status == 200 and b"quasar00042" in body, (status, body[:300])
            print(
                f"    during them: git server requests {git.requests() - req5}, fake API requests "
                f"{len(big_fake.requests()) - api5}; a details request (from disk) {ms:.1f} ms"
            )
            rss_big = rss_kib(server.proc.pid)
            rss_big_indexer = index_process_rss_kib(server.proc.pid)
            client.close()
            server.stop()

        # -- 0 modules
        empty_fake = FakeForge("github", git, GROUP, token=API_TOKEN)  # type: ignore[arg-type]
        with empty_fake.in_thread():
            server = start(work, "empty", work / "empty-storage", empty_fake.api_url, git.base_url, 600, cached=False)
            client = Client(server.url)
            wait_api_calls(client, 1)
            browse_latency(server.url, 0 + NON_MATCHING + 1, args.variants, args.repeats)
            rss_empty = rss_kib(server.proc.pid)
            rss_empty_indexer = index_process_rss_kib(server.proc.pid)
            client.close()
            server.stop()
        print(
            f"\nRSS (VmRSS of the server process, after the same list/search runs): {args.big} modules "
            f"{rss_big / 1024:.0f} MiB, 0 modules {rss_empty / 1024:.0f} MiB "
            f"(+{(rss_big - rss_empty) / 1024:.0f} MiB, {(rss_big - rss_empty) / args.big:.1f} KiB a module); "
            f"its index process: {rss_big_indexer / 1024:.0f} MiB and {rss_empty_indexer / 1024:.0f} MiB"
        )
    finally:
        git.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repos", type=int, default=2000, help="repositories in the org (10 of them do not match)")
    parser.add_argument("--tags", type=int, default=20)
    parser.add_argument("--big", type=int, default=10000, help="modules of the generated org")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=4,
        help="the baseline's parallel ls-remote (4: the git pool's background share of 8 slots)",
    )
    parser.add_argument("--latency-requests", type=int, default=200)
    parser.add_argument("--variants", type=int, default=20, help="distinct queries per kind of search")
    parser.add_argument("--repeats", type=int, default=5, help="repeated passes over the queries")
    parser.add_argument("--timeout", type=float, default=900, help="give the first index this long")
    parser.add_argument("--no-details-baseline", action="store_true")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also measure the install latency of a gitreg that indexes nothing while another one indexes the org "
        "(at nice 0, then at nice 10)",
    )
    parser.add_argument(
        "--first-only", action="store_true", help="stop after the first full index (its timeline and CPU)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    run(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
