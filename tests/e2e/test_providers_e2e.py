"""providers.v1 with the real Terraform CLIs: `terraform init` installs a provider from a private
GitHub release through gitreg, its lock file holding the signed hashes; a tampered zip, a wrong
key and a missing signature are refused with their reasons; `terraform providers lock`."""

from __future__ import annotations

import asyncio
import io
import re
import ssl
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gitreg.config.model import Config
from gitreg.providers.hashes import h1_of_zip
from gitreg.web.app import create_app
from tests.support.app import make_config
from tests.support.forges import FakeForge, releasing_github
from tests.support.releases import SigningKey, goreleaser_assets, signing_key
from tests.support.terraform import REGISTRY_HOST, TerraformClient, clean_env
from tests.support.tls import write_tls_files

pytestmark = pytest.mark.slow

GH_TOKEN = "ghp_providerreleasesreader02"
STATIC = "static-token-for-providers-e2e"
SOURCE = f"{REGISTRY_HOST}/acme/widget"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SigningKey, SigningKey]]:
    with (
        signing_key(tmp_path_factory.mktemp("gpg") / "home") as ours,
        signing_key(tmp_path_factory.mktemp("gpg-other") / "home", "Mallory <m@example.test>") as theirs,
    ):
        yield ours, theirs


@asynccontextmanager
async def serving(config: Config, ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    """gitreg's app on a free port of 127.0.0.1 (HTTPS with `ssl_context`); its base URL."""
    runner = web.AppRunner(create_app(config))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    scheme = "https" if ssl_context is not None else "http"
    try:
        yield f"{scheme}://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def run(terraform: TerraformClient, args: list[str], work: Path, env: dict[str, str]) -> tuple[int, str]:
    """`terraform ARGS` without blocking the event loop the fakes and gitreg answer on."""
    proc = await asyncio.create_subprocess_exec(
        *terraform.argv, *args, cwd=work, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 240)
    return proc.returncode or 0, out.decode(errors="replace")


def workdir(tmp_path: Path, name: str, source: str = SOURCE, version: str = "1.0.0") -> Path:
    work = tmp_path / name
    work.mkdir()
    (work / "main.tf").write_text(
        "terraform {\n  required_providers {\n    widget = {\n"
        f'      source  = "{source}"\n      version = "{version}"\n    }}\n  }}\n}}\n'
    )
    return work


def locked_hashes(work: Path) -> set[str]:
    return set(re.findall(r'"((?:h1|zh):[^"]+)"', (work / ".terraform.lock.hcl").read_text()))


def h1(data: bytes) -> str:
    return h1_of_zip(io.BytesIO(data))


def config_for(forge: FakeForge, keys_file: Path, download: str = "proxy", **sections: Any) -> Config:
    rule = {
        "namespace": "acme",
        "type": "*",
        "repository": f"{forge.base_url}/acme/terraform-provider-{{type}}",
        "keys": str(keys_file),
        "provider": "github",
        "api_url": forge.api_url,
        "download": download,
    }
    org = {"provider": "github", "api_url": forge.api_url, "group": "acme", "namespace": "acme", "token": GH_TOKEN}
    auth = {"tokens": [STATIC], "signing_key": "p" * 40}
    return make_config([], providers=[rule], orgs=[org], index={"enabled": False}, auth=auth, **sections)


@pytest.fixture
async def forge(git_http) -> AsyncIterator[FakeForge]:
    async with releasing_github(git_http, GH_TOKEN) as fake:
        yield fake


@pytest.mark.parametrize("download", ["proxy", "redirect"])
async def test_terraform_init_installs_a_provider_from_a_private_release_and_refuses_bad_ones(
    terraform_client: TerraformClient, forge: FakeForge, keys, tmp_path, caplog, download
):
    good, wrong = keys
    files = goreleaser_assets("widget", "1.0.0", good)
    forge.add_release("terraform-provider-widget", "v1.0.0", files)
    forge.add_release("terraform-provider-wrongkey", "v1.0.0", goreleaser_assets("wrongkey", "1.0.0", wrong))
    forge.add_release("terraform-provider-unsigned", "v1.0.0", goreleaser_assets("unsigned", "1.0.0", None))
    tampered = goreleaser_assets("tampered", "1.0.0", good, payload=600_000)
    forge.add_release("terraform-provider-tampered", "v1.0.0", tampered)
    zip_name = "terraform-provider-tampered_1.0.0_linux_amd64.zip"
    forge.replace_asset(
        "terraform-provider-tampered", "v1.0.0", zip_name, tampered[zip_name][:-1] + bytes([tampered[zip_name][-1] ^ 1])
    )
    async with serving(config_for(forge, good.write(tmp_path / "keys.asc"), download)) as url:
        cli = tmp_path / "terraformrc"
        cli.write_text(
            f'host "{REGISTRY_HOST}" {{\n  services = {{ "providers.v1" = "{url}/v1/providers/" }}\n}}\n'
            f'credentials "{REGISTRY_HOST}" {{\n  token = "{STATIC}"\n}}\n'
        )
        env = clean_env(tmp_path / "home", TF_CLI_CONFIG_FILE=str(cli))
        work = workdir(tmp_path, "ok")
        status, out = await run(terraform_client, ["init", "-no-color"], work, env)
        assert status == 0, out
        assert "Installed registry.example.test/acme/widget v1.0.0" in out
        sums = files["terraform-provider-widget_1.0.0_SHA256SUMS"].decode().splitlines()
        expected = {"zh:" + line.split()[0] for line in sums}
        assert locked_hashes(work) == expected | {h1(files["terraform-provider-widget_1.0.0_linux_amd64.zip"])}
        # Who fetched from the host's storage: gitreg (SHA256SUMS and its signature, to verify them; the
        # zip too with proxy) and, with redirect, Terraform itself (the zip).
        assert forge.storage is not None
        agents = {seen.get("User-Agent", "").split("/")[0] for seen in forge.storage.seen}
        assert agents == ({"gitreg"} if download == "proxy" else {"gitreg", "Terraform"}), agents

        lock = workdir(tmp_path, "lock")
        platforms = ["-platform=linux_amd64", "-platform=darwin_arm64"]
        status, out = await run(terraform_client, ["providers", "lock", "-no-color", *platforms], lock, env)
        assert status == 0, out
        both = {h1(files[f"terraform-provider-widget_1.0.0_{p}.zip"]) for p in ("linux_amd64", "darwin_arm64")}
        assert locked_hashes(lock) == expected | both

        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {STATIC}"}) as http:
            for type_, reason in [
                ("wrongkey", "not one of the configured keys"),
                ("unsigned", "has no signature terraform-provider-unsigned_1.0.0_SHA256SUMS.sig"),
                ("tampered", "does not match SHA256SUMS"),
            ]:
                bad = workdir(tmp_path, type_, source=f"{REGISTRY_HOST}/acme/{type_}")
                status, out = await run(terraform_client, ["init", "-no-color"], bad, env)
                assert status != 0, out
                assert not (bad / ".terraform.lock.hcl").exists()
                flat = " ".join(out.split())
                if type_ == "tampered" and download == "proxy":  # listed (signed), its bytes refused as streamed
                    assert "Failed to install provider" in flat, out
                    assert any(reason in r.getMessage() for r in caplog.records)
                elif type_ == "tampered":  # fetched by Terraform itself: refused against the signed shasum
                    assert "Failed to install provider" in flat and "checksum" in flat, out
                else:  # not listed: Terraform says "not found"; the registry's answer says why
                    assert "registry.example.test/acme/" + type_ in flat and "not found" in flat, out
                    async with http.get(f"{url}/v1/providers/acme/{type_}/versions") as resp:
                        body = await resp.json()
                    assert body["versions"] == []
                    assert reason in body["warnings"][0]


@pytest.mark.parametrize("download", ["proxy", "redirect"])
async def test_terraform_installs_through_the_network_mirror_over_https(
    terraform_client: TerraformClient, forge: FakeForge, keys, tmp_path, download
):
    good, _ = keys
    files = goreleaser_assets("widget", "1.0.0", good)
    forge.add_release("terraform-provider-widget", "v1.0.0", files)
    tls = tmp_path / "tls"
    tls.mkdir()
    write_tls_files(tls)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls / "cert.pem", tls / "key.pem")
    public = {"public_url": f"https://{REGISTRY_HOST}"}
    config = config_for(forge, good.write(tmp_path / "keys.asc"), download, server=public)
    async with serving(config, context) as url:
        host = url.removeprefix("https://")
        cli = tmp_path / "terraformrc"
        cli.write_text(
            f'provider_installation {{\n  network_mirror {{\n    url = "{url}/v1/mirror/"\n  }}\n}}\n'
            f'credentials "{host}" {{\n  token = "{STATIC}"\n}}\n'
        )
        env = clean_env(tmp_path / "home", TF_CLI_CONFIG_FILE=str(cli), SSL_CERT_FILE=str(tls / "ca.pem"))
        work = workdir(tmp_path, "mirror")
        status, out = await run(terraform_client, ["init", "-no-color"], work, env)
        assert status == 0, out
        assert "Installed registry.example.test/acme/widget v1.0.0" in out
        # A mirror's hashes are not signed: the lock holds the h1 Terraform computed, which gitreg's matched.
        assert locked_hashes(work) == {h1(files["terraform-provider-widget_1.0.0_linux_amd64.zip"])}

        lock = workdir(tmp_path, "lock")
        args = ["providers", "lock", "-no-color", f"-net-mirror={url}/v1/mirror/"]
        status, out = await run(terraform_client, [*args, "-platform=linux_amd64", "-platform=darwin_arm64"], lock, env)
        assert status == 0, out
        both = {h1(files[f"terraform-provider-widget_1.0.0_{p}.zip"]) for p in ("linux_amd64", "darwin_arm64")}
        assert both <= locked_hashes(lock)
