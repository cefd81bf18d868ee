"""Archive mode end to end: real Terraform, a credentialed smart-HTTP Git host, a real gitreg process.

Terraform runs with the registry token only: no git on its PATH, no Git credentials, no .netrc.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import signal
import ssl
import subprocess
import tarfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
import trustme

from tests.support.app import GIT_PASSWORD, GIT_USER
from tests.support.archives import mono_repo
from tests.support.githttp import GitHttpServer
from tests.support.process import GitregProcess
from tests.support.repos import GitRepo
from tests.support.terraform import clean_env, cli_config

# Left out of the fast subset (`-m "not slow"`): a real gitreg process and both real Terraform CLIs.
pytestmark = pytest.mark.slow

TOKEN = "e2e-archive-token-77aa1c"
SIGNING_KEY = "s" * 48


def installed_dirs(work: Path) -> dict[str, Path]:
    manifest = json.loads((work / ".terraform/modules/modules.json").read_text())
    return {m["Key"]: work / m["Dir"] for m in manifest["Modules"] if m["Key"]}


def files_under(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def test_terraform_installs_archives_from_a_private_repo_with_only_the_registry_token(terraform_client, tmp_path):
    root = tmp_path / "repos"
    mono_repo(root, "mono")  # private: the smart-HTTP server wants gitreg's credentials
    hello = GitRepo(root, "hello")
    hello.commit({"main.tf": 'output "v" { value = "hello-1.2.0" }\n'})
    hello.tag("v1.2.0")
    with GitHttpServer(root, username=GIT_USER, password=GIT_PASSWORD) as git_http:
        config = tmp_path / "gitreg.toml"
        config.write_text(
            '[git]\nprotocols = ["http"]\n'
            f'[storage]\npath = "{tmp_path / "store"}"\n'
            f'[auth]\ntokens = ["{TOKEN}"]\nsigning_key = "{SIGNING_KEY}"\n'
            f'[[credentials]]\nurl = "{git_http.base_url}/"\nusername = "{GIT_USER}"\npassword = "${{GIT_PASSWORD}}"\n'
            '[[modules]]\nnamespace = "acme"\nname = "network"\nsystem = "aws"\n'
            f'repository = "{git_http.url("mono.git")}"\n'
            'path = "modules/network"\ntag_prefix = "network/"\ndownload = "archive"\n'
            '[[modules]]\nnamespace = "demo"\nname = "hello"\nsystem = "null"\n'
            f'repository = "{git_http.url("hello.git")}"\n'
            'download = "archive"\n'
        )
        with GitregProcess("--config", str(config), env={"GIT_PASSWORD": GIT_PASSWORD}) as server:
            work = tmp_path / "work"
            work.mkdir()
            (work / "main.tf").write_text(
                'module "net" {\n  source  = "registry.example.test/acme/network/aws"\n  version = "~> 1.0"\n}\n'
                'module "hello" {\n  source  = "registry.example.test/demo/hello/null"\n  version = "1.2.0"\n}\n'
            )
            cli_config(tmp_path / "cli.tfrc", server.url)
            empty_bin = tmp_path / "empty-bin"
            empty_bin.mkdir()
            env = clean_env(
                tmp_path / "home",
                TF_CLI_CONFIG_FILE=str(tmp_path / "cli.tfrc"),
                TF_TOKEN_registry_example_test=TOKEN,
                PATH=str(empty_bin),
            )
            assert not (tmp_path / "home" / ".netrc").exists()
            result = terraform_client.run(["init", "-input=false", "-no-color"], cwd=work, env=env)
            assert result.returncode == 0, f"{terraform_client.name} init failed:\n{result.stdout}\n{result.stderr}"
        log = "".join(server.log)
        seen = git_http.requests()
    dirs = installed_dirs(work)
    # the monorepo module: only its own directory, at the module root
    assert files_under(dirs["net"]) == ["main.tf", "sub/vars.tf"]
    assert (dirs["net"] / "main.tf").read_text() == 'output "v" { value = "net-1.1.0" }\n'
    assert files_under(dirs["hello"]) == ["main.tf"]
    assert (dirs["hello"] / "main.tf").read_text() == 'output "v" { value = "hello-1.2.0" }\n'
    # the Git host saw gitreg alone (git's user agent, authenticated), never Terraform
    assert seen and all(r.headers.get("User-Agent", "").startswith("git/") for r in seen)
    assert all(r.status in (200, 401) for r in seen)
    # no secret in gitreg's output or in its mirrors' git config
    assert GIT_PASSWORD not in log and TOKEN not in log and SIGNING_KEY not in log
    for mirror_config in (tmp_path / "store" / "mirrors").glob("*.git/config"):
        assert GIT_PASSWORD not in mirror_config.read_text()


class _TarballHost(BaseHTTPRequestHandler):
    """A stand-in for codeload.github.com: fixed tarballs by path, over HTTPS."""

    files: ClassVar[dict[str, bytes]] = {}
    seen: ClassVar[list[str]] = []

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_HEAD(self) -> None:
        self._send(head=True)

    def do_GET(self) -> None:
        self._send(head=False)

    def _send(self, head: bool) -> None:
        path = self.path.split("?", 1)[0]
        self.seen.append(self.path)
        body = self.files.get(path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "application/x-gzip")
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        if body and not head:
            self.wfile.write(body)


def test_terraform_installs_from_a_host_tarball_with_a_wrapper_directory(terraform_client, tmp_path):
    mono = mono_repo(tmp_path / "repos", "infra")
    # what GitHub serves: the tree under one wrapper directory
    tarball = subprocess.run(
        ["git", "archive", "--format=tar.gz", "--prefix=infra-network-v1.1.0/", "network/v1.1.0"],
        cwd=mono.bare,
        capture_output=True,
        check=True,
    ).stdout
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    handler = type("Host", (_TarballHost,), {"files": {"/acme/infra/tar.gz/network/v1.1.0": tarball}, "seen": []})
    host = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    host.socket = context.wrap_socket(host.socket, server_side=True)
    threading.Thread(target=host.serve_forever, daemon=True).start()
    try:
        config = tmp_path / "gitreg.toml"
        config.write_text(
            f'[[modules]]\nnamespace = "acme"\nname = "network"\nsystem = "aws"\nrepository = "{mono.url}"\n'
            'path = "modules/network"\ntag_prefix = "network/"\n'
            f'download = "https://127.0.0.1:{host.server_address[1]}/acme/infra/tar.gz/{{tag}}"\n'
            'archive_root = "infra-{tag}"\n'
        )
        with GitregProcess("--config", str(config)) as server:
            work = tmp_path / "work"
            work.mkdir()
            (work / "main.tf").write_text(
                'module "net" {\n  source  = "registry.example.test/acme/network/aws"\n  version = "1.1.0"\n}\n'
            )
            cli_config(tmp_path / "cli.tfrc", server.url)
            env = clean_env(
                tmp_path / "home",
                TF_CLI_CONFIG_FILE=str(tmp_path / "cli.tfrc"),
                SSL_CERT_FILE=str(tmp_path / "ca.pem"),
                PATH=str(tmp_path),
            )
            result = terraform_client.run(["init", "-input=false", "-no-color"], cwd=work, env=env)
            assert result.returncode == 0, f"{terraform_client.name} init failed:\n{result.stdout}\n{result.stderr}"
    finally:
        host.shutdown()
    net = installed_dirs(work)["net"]
    assert files_under(net) == ["main.tf", "sub/vars.tf"]
    assert (net / "main.tf").read_text() == 'output "v" { value = "net-1.1.0" }\n'
    assert any(p.startswith("/acme/infra/tar.gz/network/v1.1.0") for p in handler.seen)


def test_kill_9_during_an_archive_build_leaves_nothing_that_is_ever_served(tmp_path):
    repo = GitRepo(tmp_path / "repos", "big")
    # ~48 MB of text: compressing it takes long enough to be killed in the middle
    blob = "".join(f"{i:016x}\n" for i in range(2_800_000))
    repo.commit({"main.tf": 'output "v" { value = "big" }\n', "blob.txt": blob})
    repo.tag("v1.0.0")
    store = tmp_path / "store"
    config = tmp_path / "gitreg.toml"
    config.write_text(
        f'[storage]\npath = "{store}"\n'
        f'[[modules]]\nnamespace = "demo"\nname = "big"\nsystem = "null"\nrepository = "{repo.url}"\n'
        'download = "archive"\n'
    )
    archives = store / "archives"
    server = GitregProcess("--config", str(config)).start()
    try:
        url = f"{server.url}/v1/modules/demo/big/null/1.0.0/archive.tar.gz"
        threading.Thread(target=lambda: _quietly_fetch(url), daemon=True).start()
        deadline = time.monotonic() + 60
        while not list(archives.glob("tmp-*")) and time.monotonic() < deadline:
            time.sleep(0.005)
        partial = list(archives.glob("tmp-*"))
        assert partial, "the build never started"
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(10)
    finally:
        server.stop()
    assert list(archives.glob("tmp-*")), "the crash left its half-written build (what this test is about)"
    assert not list(archives.glob("[!t]*.tar.gz"))  # nothing under a servable name
    with GitregProcess("--config", str(config)) as server:
        assert not list(archives.glob("tmp-*"))  # cleaned at start
        with urllib.request.urlopen(f"{server.url}/v1/modules/demo/big/null/1.0.0/archive.tar.gz", timeout=120) as r:
            data = r.read()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        assert tar.extractfile("blob.txt").read().decode() == blob
        assert tar.extractfile("main.tf").read() == b'output "v" { value = "big" }\n'
    assert gzip.decompress(data)


def _quietly_fetch(url: str) -> None:
    with contextlib.suppress(OSError):  # the server is killed under it
        urllib.request.urlopen(url, timeout=120).read()


def test_terraform_verifies_the_archive_checksum_and_refuses_bytes_changed_on_disk(terraform_client, tmp_path):
    hello = GitRepo(tmp_path / "repos", "hello")
    hello.commit({"main.tf": 'output "v" { value = "hello-1.0.0" }\n'})
    hello.tag("v1.0.0")
    store = tmp_path / "store"
    config = tmp_path / "gitreg.toml"
    config.write_text(
        f'[storage]\npath = "{store}"\n[auth]\ntokens = ["{TOKEN}"]\nsigning_key = "{SIGNING_KEY}"\n'
        f'[[modules]]\nnamespace = "demo"\nname = "hello"\nsystem = "null"\nrepository = "{hello.url}"\n'
        'download = "archive"\n'
    )

    def init(server: GitregProcess, name: str) -> tuple[subprocess.CompletedProcess[str], Path]:
        work = tmp_path / name
        work.mkdir()
        (work / "main.tf").write_text(
            'module "hello" {\n  source  = "registry.example.test/demo/hello/null"\n  version = "1.0.0"\n}\n'
        )
        cli_config(tmp_path / "cli.tfrc", server.url)
        env = clean_env(
            tmp_path / "home", TF_CLI_CONFIG_FILE=str(tmp_path / "cli.tfrc"), TF_TOKEN_registry_example_test=TOKEN
        )
        return terraform_client.run(["init", "-input=false", "-no-color"], cwd=work, env=env), work

    with GitregProcess("--config", str(config)) as server:
        good, work = init(server, "good")
        assert good.returncode == 0, f"{terraform_client.name} init failed:\n{good.stdout}\n{good.stderr}"
        assert (installed_dirs(work)["hello"] / "main.tf").read_text() == 'output "v" { value = "hello-1.0.0" }\n'
        (archive,) = store.glob("archives/*.tar.gz")
        built = hashlib.sha256(archive.read_bytes()).hexdigest()
        # Someone with access to the disk swaps the archive for a valid one with other content.
        evil = io.BytesIO()
        with tarfile.open(fileobj=evil, mode="w:gz") as tar:
            data = b'output "v" { value = "evil" }\n'
            info = tarfile.TarInfo("main.tf")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        archive.write_bytes(evil.getvalue())
        bad, work = init(server, "tampered")
        request = urllib.request.Request(
            f"{server.url}/v1/modules/demo/hello/null/1.0.0/download", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            location = json.loads(resp.read())["location"]
    log = "".join(server.log)
    output = bad.stdout + bad.stderr
    assert bad.returncode != 0, output
    assert "checksums did not match" in output.lower(), output
    assert not (work / ".terraform/modules/hello/main.tf").exists()
    # Signed and checksummed (go-getter takes `checksum` out before it fetches; the signature still
    # holds): the checksum of the archive as gitreg built it, not of what is on disk now.
    archive_url = f"{server.url}/v1/modules/demo/hello/null/1.0.0/archive.tar.gz?expires="
    assert location.startswith(archive_url) and location.endswith(f"&checksum=sha256:{built}")
    # the archive was served (the bytes reached Terraform, which refused them), not refused by gitreg
    assert log.count("/v1/modules/demo/hello/null/1.0.0/archive.tar.gz") >= 2, log[-3000:]
