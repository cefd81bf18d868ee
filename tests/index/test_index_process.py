"""`gitreg serve` builds its index in a second process at a lower CPU priority (gitreg/indexer.py).

Everything here runs the real `python -m gitreg serve` against real bare repositories over
smart HTTP and a fake GitHub API (in a thread of its own): the serving process, its index
process, and the pipe between them are the real ones.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.app import GIT_PASSWORD
from tests.support.forges import FakeForge
from tests.support.indexer import ENV, config_for, eventually, get, names
from tests.support.orgs import API_TOKEN, github_tag_push, module_repo, write_config
from tests.support.process import GitregProcess
from tests.support.webhooks import github_headers

# Left out of the fast subset (`-m "not slow"`): real gitreg processes with their index processes.
pytestmark = pytest.mark.slow


def post_github(server: GitregProcess, payload: dict[str, Any], event: str) -> int:
    body = json.dumps(payload).encode()
    request = urllib.request.Request(
        server.url + "/webhooks/github", data=body, headers=github_headers(body, event), method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        return resp.status


def index_processes(server: GitregProcess) -> list[int]:
    """The serving process's children that are its index process."""
    assert server.proc is not None
    pid = server.proc.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    found = []
    for child in map(int, children):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except FileNotFoundError:
            continue
        if b"gitreg.indexer" in cmdline:
            found.append(child)
    return found


@pytest.fixture
def github(git_http):
    fake = FakeForge("github", git_http, "acme-infra", token=API_TOKEN, max_per_page=2)
    with fake.in_thread():
        yield fake


def test_the_index_is_built_in_a_second_process_at_a_lower_priority_that_stops_with_gitreg(github, git_http, tmp_path):
    for name in ("terraform-aws-vpc", "terraform-aws-dns"):
        module_repo(tmp_path, name)
        github.add(name, description=f"The {name[14:]}")
    with GitregProcess("--config", str(config_for(tmp_path, github, git_http)), env=ENV) as server:
        server.wait_indexed()
        assert names(server) == ["acme/dns/aws", "acme/vpc/aws"]
        status, found = get(server, "/v1/modules/search?q=vpc")
        assert status == 200 and [m["name"] for m in found["modules"]] == ["vpc"]
        [child] = index_processes(server)
        assert server.proc is not None
        assert os.getpriority(os.PRIO_PROCESS, child) == os.getpriority(os.PRIO_PROCESS, server.proc.pid) + 10
        argv = Path(f"/proc/{child}/cmdline").read_bytes()
        assert API_TOKEN.encode() not in argv and GIT_PASSWORD.encode() not in argv
        assert server.stop() == 0
    log = "".join(server.log)
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)  # stopped (and reaped) with the serving process
    assert "Traceback" not in log and "ERROR" not in log, log
    assert API_TOKEN not in log
    # What it built is on disk: a new gitreg lists it before its own index process has run.
    stored = json.loads((tmp_path / "state" / "index.json").read_text())
    assert sorted(e["address"] for e in stored["entries"]) == ["acme/dns/aws", "acme/vpc/aws"]


def test_serving_goes_on_when_the_index_process_dies_and_its_successor_catches_up(github, git_http, tmp_path):
    vpc = module_repo(tmp_path, "terraform-aws-vpc", ("1.0.0",))
    github.add("terraform-aws-vpc")
    with GitregProcess("--config", str(config_for(tmp_path, github, git_http)), env=ENV) as server:
        server.wait_indexed()
        [first] = index_processes(server)
        os.kill(first, signal.SIGKILL)
        # Serving does not wait for it: lists, versions and pages answer from what is there.
        assert names(server) == ["acme/vpc/aws"]
        status, versions = get(server, "/v1/modules/acme/vpc/aws/versions")
        assert status == 200 and [v["version"] for v in versions["modules"][0]["versions"]] == ["1.0.0"]
        assert get(server, "/readyz")[0] == 200

        # A repository created meanwhile (the webhook reaches the serving process while no index
        # process runs): the next index process is given the listing, and lists it.
        module_repo(tmp_path, "terraform-aws-iam", ("0.1.0",))
        github.add("terraform-aws-iam")
        assert post_github(server, github.github_repository_event("created", "terraform-aws-iam"), "repository") == 200
        eventually(lambda: names(server) == ["acme/iam/aws", "acme/vpc/aws"], what="iam listed")
        [second] = eventually(lambda: index_processes(server), what="a new index process")
        assert second != first
        eventually(lambda: "the index process exited (signal 9)" in "".join(server.log), what="the exit logged")
        with urllib.request.urlopen(server.url + "/metrics", timeout=10) as resp:
            assert "gitreg_index_process_starts_total 2.0" in resp.read().decode()

        # A tag webhook: the serving process lists the tags once, and the index process takes
        # that list (its own cached one is an hour fresh) instead of asking the host again.
        server.wait_indexed()
        git_http.reset_counters()
        vpc.tag("v1.2.0")
        assert post_github(server, github_tag_push("terraform-aws-vpc"), "push") == 200

        def latest() -> str:
            status, body = get(server, "/v1/modules/acme/vpc/aws")
            return body.get("version", "") if status == 200 else ""

        eventually(lambda: latest() == "1.2.0", what="1.2.0 listed")
        server.wait_indexed()
        assert git_http.ref_advertisements() == 1
        assert server.stop() == 0
    log = "".join(server.log)
    assert "Traceback" not in log, log


def test_details_someone_asks_for_and_modules_a_wildcard_rule_served_reach_the_index_process(
    github, git_http, tmp_path
):
    module_repo(tmp_path, "terraform-aws-vpc", ("1.0.0", "1.1.0"))
    github.add("terraform-aws-vpc")
    module_repo(tmp_path, "terraform-null-label", ("0.3.0",))
    rule = f'[[modules]]\nnamespace = "tools"\nrepository = "{git_http.base_url}/terraform-{{system}}-{{name}}.git"\n'
    with GitregProcess("--config", str(config_for(tmp_path, github, git_http, rule)), env=ENV) as server:
        server.wait_indexed()
        # An older version's details are not read yet: 503, then read by the index process.
        status, body = get(server, "/v1/modules/acme/vpc/aws/1.0.0")
        assert status == 503, body
        found = eventually(lambda: get(server, "/v1/modules/acme/vpc/aws/1.0.0"), what="details of 1.0.0")
        while found[0] == 503:
            time.sleep(0.1)
            found = get(server, "/v1/modules/acme/vpc/aws/1.0.0")
        assert found[0] == 200 and found[1]["version"] == "1.0.0" and "root" in found[1]

        # A module only a wildcard rule serves is listed once someone installed it.
        assert "tools/label/null" not in names(server)
        assert get(server, "/v1/modules/tools/label/null/versions")[0] == 200
        eventually(lambda: "tools/label/null" in names(server), what="the wildcard module listed")
        assert server.stop() == 0
    catalog = json.loads((tmp_path / "state" / "catalog.json").read_text())
    assert catalog["modules"] == ["tools/label/null"]  # kept by the serving process


def test_the_index_process_does_not_outlive_a_killed_gitreg(github, git_http, tmp_path):
    module_repo(tmp_path, "terraform-aws-vpc")
    github.add("terraform-aws-vpc")
    server = GitregProcess("--config", str(config_for(tmp_path, github, git_http)), env=ENV).start()
    try:
        server.wait_indexed()
        [child] = index_processes(server)
        assert server.proc is not None
        server.proc.kill()  # no shutdown at all: the index process sees its input end
        server.proc.wait()

        def gone() -> bool:
            try:
                state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except FileNotFoundError:
                return True
            return state == "Z"  # exited; reaped by whoever adopted it

        eventually(gone, timeout=20, what="the index process to exit")
    finally:
        server.stop()


async def test_what_the_serving_process_cannot_read_from_the_index_process_is_ignored(tmp_path):
    from gitreg.core.names import ModuleAddress
    from gitreg.index.process import IndexProcess
    from gitreg.index.store import ModuleIndex
    from gitreg.orgs.service import OrgCatalog
    from gitreg.registry.catalog import Catalog
    from gitreg.registry.resolve import Resolver
    from gitreg.registry.tags import TagCache
    from gitreg.replicas.memory import MemoryShared
    from tests.support.app import make_config
    from tests.support.storage import entry

    config = make_config([])
    index = ModuleIndex(tmp_path, dict, lambda a: None, None, None, 60, builds=False)  # type: ignore[arg-type]
    orgs = OrgCatalog(config, None)
    process = IndexProcess(
        config,
        index,
        Catalog(config, tmp_path / "catalog.json", Resolver(config, orgs), MemoryShared()),
        orgs,
        TagCache(config.cache, None),  # type: ignore[arg-type]
        MemoryShared(),
    )
    vpc = ModuleAddress("acme", "vpc", "aws")
    process._take(json.dumps({"set": entry("vpc", ["1.0.0"], "1.0.0")}).encode())
    assert index.get(vpc) is not None
    for line in (b"not json", b"[]", b"{}", b'{"drop": "acme/../aws"}', b'{"drop": 7}', b'{"status": {"queued": "x"}}'):
        process._take(line)  # each ignored: none raises
    assert index.get(vpc) is not None
    process._take(b'{"drop": "acme/vpc/aws"}')
    assert index.get(vpc) is None


def test_an_org_listed_for_the_first_time_is_indexed_page_by_page_and_complete_after_its_last(
    github, git_http, tmp_path
):
    for name in ("terraform-aws-vpc", "terraform-aws-dns", "terraform-aws-iam"):  # pages of two: iam on page 2
        module_repo(tmp_path, name)
        github.add(name)
    github.hold(2)
    with GitregProcess("--config", str(config_for(tmp_path, github, git_http)), env=ENV) as server:
        eventually(lambda: names(server) == ["acme/dns/aws", "acme/vpc/aws"], what="the first page's modules")
        status, ready = get(server, "/readyz")
        assert status == 200 and ready["index"]["complete"] is False  # the org is not listed yet
        github.release()
        eventually(lambda: get(server, "/readyz")[1]["index"]["complete"], what="the first index")
        assert get(server, "/v1/modules/acme/iam/aws")[0] == 200  # listed by then, not "being indexed"
        # The list may be a second behind while the index still reads tag dates and details.
        eventually(lambda: names(server) == ["acme/dns/aws", "acme/iam/aws", "acme/vpc/aws"], 5, "the whole list")


def fetches(git_http) -> int:
    """git-upload-pack POSTs that were not ref listings: fetches (a mirror's, a details read's)."""
    posts = sum(1 for r in git_http.requests() if r.method == "POST" and r.path.endswith("/git-upload-pack"))
    return posts - git_http.ref_listings()


def test_every_module_of_a_first_org_listing_is_listed_before_any_details_are_fetched(github, git_http, tmp_path):
    # #33: details reads (a fetch, an archive, a parse each) took the index's background slots
    # between two pages of the org's first listing: at 2,000 repositories the listing took 1.32x
    # bare ls-remote. The org's second page is held: the first page's modules are listed, and
    # their details wait for the listing's end.
    for name in ("terraform-aws-vpc", "terraform-aws-dns", "terraform-aws-iam"):  # pages of two: iam on page 2
        module_repo(tmp_path, name)
        github.add(name)
    github.hold(2)
    with GitregProcess("--config", str(config_for(tmp_path, github, git_http)), env=ENV) as server:
        eventually(lambda: names(server) == ["acme/dns/aws", "acme/vpc/aws"], what="the first page's modules")
        time.sleep(2.0)  # time for details reads to start, before the org is listed
        assert fetches(git_http) == 0, "details were fetched before every module was listed"
        github.release()
        eventually(lambda: get(server, "/readyz")[1]["index"]["complete"], what="the first index")
        assert fetches(git_http) > 0  # complete: every module's details read, after the listing


def environ(pid: int) -> dict[str, str]:
    """The environment `pid` was started with (empty when it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode("utf-8", "replace").split("\0") if "=" in item)


def children(pid: int) -> list[int]:
    """The live children of `pid`, whichever of its threads started them."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found += map(int, (task / "children").read_text().split())
    return found


def test_the_index_process_and_git_get_no_secret_they_do_not_use(github, git_http, tmp_path):
    import base64

    from tests.support.app import GIT_USER

    secrets = {
        "REDIS_PASSWORD": "redis-password-0b1e6d2c",  # set, read by nobody: inherited by nobody either
        "REG_TOKEN": "secret-registry-token-51c0e9a2",
        "SIGN_KEY": "secret-url-signing-key-7d29c0e4b1a83f65",
        "METRICS": "secret-metrics-token-a4b7e1",
        "HOOK_SECRET": "secret-github-webhook-3e0d9",
    }
    extra = (
        '[auth]\ntokens = ["${REG_TOKEN}"]\nmetrics_token = "${METRICS}"\nsigning_key = "${SIGN_KEY}"\n'
        '[webhooks]\ngithub_secret = "${HOOK_SECRET}"\n'
    )
    module_repo(tmp_path, "terraform-aws-vpc", ("1.0.0", "1.1.0"))
    github.add("terraform-aws-vpc")
    git_http.mode, git_http.delay = "slow", 0.3  # each git request waits: git lives long enough to be read
    env = {**ENV, **secrets, "SSH_AUTH_SOCK": "/nonexistent/agent.sock", "http_proxy": ""}
    seen: dict[int, tuple[str, dict[str, str]]] = {}  # pid -> (what it is, its environment)
    with GitregProcess("--config", str(write_config(tmp_path, github, git_http, extra=extra)), env=env) as server:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(kind == "git" for kind, _ in seen.values()):
            for child in index_processes(server):
                seen[child] = ("index", environ(child))
                for pid in children(child):  # started by any of its threads
                    with contextlib.suppress(OSError):  # gone meanwhile
                        if git_http.base_url.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                            seen[pid] = ("git", environ(pid))
            time.sleep(0.01)
        server.wait_indexed()
    kinds = sorted({kind for kind, _ in seen.values()})
    assert kinds == ["git", "index"], seen
    not_theirs = [*secrets.values(), API_TOKEN, GIT_PASSWORD]
    for pid, (kind, variables) in seen.items():
        text = "\n".join(f"{k}={v}" for k, v in variables.items())
        assert [s for s in not_theirs if s in text] == [], (kind, pid, text)
        assert "PATH" in variables and "http_proxy" in variables, (kind, variables)
        assert ("SSH_AUTH_SOCK" in variables) == (kind == "index"), (kind, variables)  # git over http: no agent
    # git gets its own host's credential, and only through git's config in its environment.
    token = base64.b64encode(f"{GIT_USER}:{GIT_PASSWORD}".encode()).decode()
    assert all(f"Authorization: Basic {token}" in v.values() for kind, v in seen.values() if kind == "git")


async def test_a_stopped_index_process_never_makes_the_serving_process_buffer_without_bound():
    import asyncio
    import subprocess

    from gitreg.config.model import Config
    from gitreg.index.process import MAX_PENDING_BYTES, CommandPipe
    from gitreg.index.protocol import Seed, TagsFetched, encode_command

    # A real pipe to a real process that reads nothing: stopped, as with SIGSTOP.
    proc = await asyncio.create_subprocess_exec("cat", stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    os.kill(proc.pid, signal.SIGSTOP)
    stalled: list[int] = []
    try:
        pipe = CommandPipe()
        pipe.on_stalled = stalled.append
        pipe.hold()
        assert proc.stdin is not None
        pipe.open(proc.stdin, encode_command(Seed(Config(), 20, False)))
        # 60 changed 50,000-tag lists (about 2.6 MB each) while it does not read.
        tags = TagsFetched("https://git.example/acme/x.git", {f"v1.0.{i}": f"{i:040x}" for i in range(50_000)})
        size = len(encode_command(tags))
        for _ in range(60):
            pipe.send(tags)
            await asyncio.sleep(0)
        pending = proc.stdin.transport.get_write_buffer_size()
        assert pending <= MAX_PENDING_BYTES + size, pending >> 20
        assert len(stalled) == 1 and pipe.dropped > 0  # told once; the rest dropped, not kept
    finally:
        proc.kill()  # SIGKILL ends a stopped process too; it may be reaped at once
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
        await proc.wait()


def test_a_stopped_index_process_is_killed_and_started_again(github, git_http, tmp_path):
    from gitreg.index.process import SILENCE_SECONDS

    module_repo(tmp_path, "terraform-aws-vpc", ("1.0.0",))
    github.add("terraform-aws-vpc")
    with GitregProcess("--config", str(config_for(tmp_path, github, git_http)), env=ENV) as server:
        server.wait_indexed()
        [first] = index_processes(server)
        os.kill(first, signal.SIGSTOP)
        stopped = time.monotonic()
        assert names(server) == ["acme/vpc/aws"]  # serving goes on meanwhile
        second = eventually(
            lambda: [pid for pid in index_processes(server) if pid != first], SILENCE_SECONDS + 20, "a new process"
        )
        assert time.monotonic() - stopped >= SILENCE_SECONDS - 1  # not before its silence was long enough
        assert first not in index_processes(server)  # killed and reaped
        server.wait_indexed()
        assert names(server) == ["acme/vpc/aws"] and second
        assert server.stop() == 0
    log = "".join(server.log)
    assert f"the index process (pid {first}) sent nothing for {SILENCE_SECONDS:.0f} s" in log, log
    assert "Traceback" not in log, log


async def test_a_large_org_change_reaches_the_index_process_whole_in_parts_with_the_loop_free_between(tmp_path):
    """230,000 addresses told at once held the serving loop for about a second (#22): a change larger
    than ORGS_PART goes in parts, each pickled on its own turn of the loop, taken whole at the last."""
    import asyncio

    from gitreg.core.names import ModuleAddress
    from gitreg.index.child import IndexSide
    from gitreg.index.parse_workers import FRAME
    from gitreg.index.process import ORGS_PART, IndexProcess
    from gitreg.index.protocol import OrgsChanged, Seed, decode_command
    from gitreg.index.store import ModuleIndex
    from gitreg.orgs.model import OrgChanges, OrgRepo
    from gitreg.orgs.service import OrgCatalog
    from gitreg.registry.catalog import Catalog
    from gitreg.registry.resolve import Resolver
    from gitreg.registry.tags import TagCache
    from gitreg.replicas.memory import MemoryShared
    from tests.support.app import make_config

    config = make_config([])

    def side(name: str) -> tuple[ModuleIndex, OrgCatalog, Catalog]:
        index = ModuleIndex(tmp_path / name, dict, lambda a: None, None, None, 60)  # type: ignore[arg-type]
        orgs = OrgCatalog(config, None)
        return index, orgs, Catalog(config, tmp_path / name / "catalog.json", Resolver(config, orgs), MemoryShared())

    def repo(i: int) -> OrgRepo:
        url = f"https://git.example/acme/terraform-aws-m{i:05d}.git"
        address = ModuleAddress("acme", f"m{i:05d}", "aws")
        return OrgRepo(address, url, url, "", "", (), False, "", f"acme/terraform-aws-m{i:05d}", 0)

    repos = [repo(i) for i in range(ORGS_PART * 2 + 5)]
    index, orgs, catalog = side("serving")
    orgs.follow(repos, [], complete=True)
    cache = TagCache(config.cache, None)  # type: ignore[arg-type]
    process = IndexProcess(config, index, catalog, orgs, cache, MemoryShared())
    process.commands.hold()  # as while the index process starts: what is sent is kept, in order
    process.orgs_changed(OrgChanges(added=frozenset(r.address for r in repos)))
    frames: list[bytes] = []
    while True:
        held = b"".join(process.commands._outbox or [])
        frames = []
        while held:
            (size,) = FRAME.unpack(held[: FRAME.size])
            frames.append(held[FRAME.size : FRAME.size + size])
            held = held[FRAME.size + size :]
        if frames and not decode_command(frames[-1]).more:  # type: ignore[union-attr]
            break
        await asyncio.sleep(0)  # the loop runs between parts
    parts = [decode_command(frame) for frame in frames]
    assert all(isinstance(p, OrgsChanged) and len(p.repos) <= ORGS_PART for p in parts)
    assert len(parts) > 2

    index2, orgs2, catalog2 = side("index")
    there = IndexSide(Seed(config, 20, False), index2, catalog2, orgs2, cache, None)  # type: ignore[arg-type]
    for part in parts[:-1]:
        there.apply(part)
    assert not orgs2.modules()  # nothing taken before the last part
    there.apply(parts[-1])
    assert set(orgs2.modules()) == {r.address for r in repos}


def test_an_index_process_started_again_is_given_every_org_module_in_its_seed():
    """An index process started again after a crash is given the whole org listing in its seed, pickled
    off the serving loop in parts (one pickle of 230,000 modules held the loop 1.1-1.3 s, #22)."""
    from gitreg.core.names import ModuleAddress
    from gitreg.index.parse_workers import FRAME
    from gitreg.index.protocol import SEED_PART, Seed, decode_command, encode_seed
    from gitreg.orgs.model import OrgRepo
    from gitreg.orgs.service import OrgCatalog
    from tests.support.app import make_config

    config = make_config([])

    def repo(i: int) -> OrgRepo:
        url = f"https://git.example/acme/terraform-aws-m{i:05d}.git"
        return OrgRepo(ModuleAddress("acme", f"m{i:05d}", "aws"), url, url, "", "", (), False, "", f"acme/m{i}", 0)

    repos = [repo(i) for i in range(SEED_PART * 2 + 5)]
    frame = encode_seed(Seed(config, 20, False, orgs=repos, orgs_complete=True))
    (size,) = FRAME.unpack(frame[: FRAME.size])
    seed = decode_command(frame[FRAME.size :])
    assert size == len(frame) - FRAME.size and isinstance(seed, Seed)
    orgs = OrgCatalog(config, None)  # as the index process takes its seed (web/app.py)
    orgs.follow(seed.orgs, (), seed.orgs_complete)
    assert dict(orgs.modules()) == {r.address: r for r in repos} and orgs.complete()
