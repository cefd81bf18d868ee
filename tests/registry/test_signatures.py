"""Signed releases (#35): versions verified by git against [signing]'s keys, real SSH and OpenPGP signatures."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from gitreg.core.names import ModuleAddress
from gitreg.web.keys import REGISTRY
from tests.support.app import assert_error
from tests.support.app import make_config as _make_config
from tests.support.repos import GitRepo
from tests.support.signing import (
    allowed_signers,
    openpgp_key,
    ssh_key,
    ssh_signed_commit,
    ssh_signed_tag,
    tampered_tag,
)

BASE = "/v1/modules/acme/vpc/aws"


def make_config(modules: list[dict[str, Any]], **sections: Any) -> Any:
    """Versions, downloads and verdicts only: the index off (nothing here reads it; the verdicts
    counted are the requests' own)."""
    return _make_config(modules, index={"enabled": False}, **sections)


# Real keys, signed repositories and verifications: over a second a test on a loaded machine.
pytestmark = pytest.mark.slow


class Signed:
    """A repository whose versions are signed in every way that matters, and the keys."""

    def __init__(self, tmp_path: Path) -> None:
        keys = tmp_path / "keys"
        self.alice = ssh_key(keys, "alice")
        self.mallory = ssh_key(keys, "mallory")
        self.allowed = allowed_signers(keys / "allowed_signers", {"alice@example.com": self.alice})
        repo = self.repo = GitRepo(tmp_path / "repos", "vpc")
        repo.commit({"main.tf": 'output "v" { value = "1.0.0" }\n'})
        ssh_signed_tag(repo, "v1.0.0", self.alice)  # a signed annotated tag
        ssh_signed_commit(repo, {"main.tf": 'output "v" { value = "1.1.0" }\n'}, self.alice)
        repo.tag("v1.1.0")  # a lightweight tag on a signed commit
        repo.commit({"main.tf": 'output "v" { value = "1.2.0" }\n'})
        ssh_signed_tag(repo, "v1.2.0", self.mallory)  # a key nobody trusts
        repo.commit({"main.tf": 'output "v" { value = "1.3.0" }\n'})
        repo.tag("v1.3.0", annotated=True)  # not signed at all
        repo.commit({"main.tf": 'output "v" { value = "1.4.0" }\n'})
        ssh_signed_tag(repo, "v1.4.0-good", self.alice)
        tampered_tag(repo, "v1.4.0-good", "v1.4.0")  # alice's signature over another message
        repo.delete_tag("v1.4.0-good")


@pytest.fixture
def signed(tmp_path: Path) -> Signed:
    return Signed(tmp_path)


def config(signed: Signed, tmp_path: Path, download: str = "archive", **signing: Any) -> Any:
    module = {"namespace": "acme", "name": "vpc", "system": "aws", "repository": signed.repo.url, "download": download}
    return make_config(
        [module],
        signing={"allowed_signers": str(signed.allowed), **signing},
        storage={"path": str(tmp_path / "state")},
    )


async def versions(client: Any) -> list[str]:
    resp = await client.get(f"{BASE}/versions")
    assert resp.status == 200, await resp.text()
    return [v["version"] for v in (await resp.json())["modules"][0]["versions"]]


@pytest.mark.parametrize("download", ["git", "archive"])
async def test_where_signatures_are_required_only_versions_a_trusted_key_signed_are_served(
    serve_client, signed, tmp_path, download
):
    client = await serve_client(config(signed, tmp_path, download, require=True))
    # The signed tag and the signed commit under a lightweight tag; not the unknown key, the
    # unsigned tag, nor the tag whose message was rewritten under alice's signature.
    assert await versions(client) == ["1.1.0", "1.0.0"]
    ok = await client.get(f"{BASE}/1.1.0/download")
    assert ok.status == 200 and ok.headers["X-Terraform-Get"]
    for version, why in [
        ("1.3.0", "neither its tag nor its commit is signed"),
        ("1.2.0", "not in [signing] allowed_signers"),
        ("1.4.0", "altered"),
    ]:
        resp = await client.get(f"{BASE}/{version}/download")
        await assert_error(resp, 403, f"version {version} is not served", why)


async def test_the_archive_of_an_unsigned_version_is_refused_too(serve_client, signed, tmp_path):
    client = await serve_client(config(signed, tmp_path, "archive", require=True))
    await versions(client)
    resp = await client.get(f"{BASE}/1.3.0/archive.tar.gz")
    await assert_error(resp, 403, "version 1.3.0 is not served")


async def test_without_require_every_version_is_served_and_the_verdicts_name_the_signer(serve_client, signed, tmp_path):
    client = await serve_client(config(signed, tmp_path, "archive"))
    assert await versions(client) == ["1.4.0", "1.3.0", "1.2.0", "1.1.0", "1.0.0"]
    assert (await client.get(f"{BASE}/1.3.0/download")).status == 200
    sigs = client.app[REGISTRY].signatures
    found = await sigs.verdicts(signed.repo.url, (await client.app[REGISTRY].versions(ADDRESS))[1].versions, 10)
    assert {tag: (v.status, v.signed, v.signer) for tag, v in found.items()} == {
        "v1.0.0": ("signed", "tag", "alice@example.com"),
        "v1.1.0": ("signed", "commit", "alice@example.com"),
        "v1.2.0": ("unknown_key", "tag", ""),
        "v1.3.0": ("unsigned", "", ""),
        "v1.4.0": ("bad", "tag", ""),
    }
    assert found["v1.0.0"].fingerprint.startswith("SHA256:") and found["v1.0.0"].format == "ssh"


ADDRESS = ModuleAddress("acme", "vpc", "aws")


async def test_require_signed_on_a_module_overrides_signing_require(serve_client, signed, tmp_path):
    module = {
        "namespace": "acme",
        "name": "vpc",
        "system": "aws",
        "repository": signed.repo.url,
        "download": "git",
        "require_signed": False,
    }
    cfg = make_config(
        [module, {**module, "name": "strict", "require_signed": True}],
        signing={"allowed_signers": str(signed.allowed), "require": True},
        storage={"path": str(tmp_path / "state")},
    )
    client = await serve_client(cfg)
    assert len(await versions(client)) == 5
    resp = await client.get("/v1/modules/acme/strict/aws/versions")
    assert [v["version"] for v in (await resp.json())["modules"][0]["versions"]] == ["1.1.0", "1.0.0"]


async def test_a_new_tag_signed_later_is_served_after_the_tag_list_refreshes(serve_client, signed, tmp_path):
    client = await serve_client(config(signed, tmp_path, "git", require=True))
    assert await versions(client) == ["1.1.0", "1.0.0"]
    signed.repo.commit({"main.tf": 'output "v" { value = "1.5.0" }\n'})
    ssh_signed_tag(signed.repo, "v1.5.0", signed.alice)
    client.app[REGISTRY].cache.invalidate(signed.repo.url)
    # The memo of the answer is not served stale: the new verdict comes in with the new list.
    assert await versions(client) == ["1.5.0", "1.1.0", "1.0.0"]


async def test_openpgp_signed_tags_verify_against_the_armored_keys(serve_client, tmp_path):
    repo = GitRepo(tmp_path / "repos", "vpc")
    repo.commit({"main.tf": "# one\n"})
    with openpgp_key(tmp_path / "gnupg", "Release Bot <release@example.com>") as key:
        key.signed_tag(repo, "v1.0.0")
        repo.commit({"main.tf": "# two\n"})
        repo.tag("v1.1.0", annotated=True)
        keys = key.export(tmp_path / "release-keys.asc")
        module = {"namespace": "acme", "name": "vpc", "system": "aws", "repository": repo.url, "download": "git"}
        cfg = make_config(
            [module], signing={"openpgp_keys": str(keys), "require": True}, storage={"path": str(tmp_path / "state")}
        )
        client = await serve_client(cfg)
        assert await versions(client) == ["1.0.0"]
        await assert_error(await client.get(f"{BASE}/1.1.0/download"), 403, "nor its commit is signed")
        found = client.app[REGISTRY].signatures.known(repo.url, "v1.0.0", repo.git("rev-parse", "v1.0.0^{commit}"))
        assert found is not None
        assert (found.signer, found.format, found.signed) == ("Release Bot <release@example.com>", "openpgp", "tag")
        assert found.fingerprint == key.fingerprint


async def test_a_verdict_is_remembered_across_a_restart(serve_client, signed, tmp_path):
    cfg = config(signed, tmp_path, "git", require=True)
    first = await serve_client(cfg)
    assert await versions(first) == ["1.1.0", "1.0.0"]
    assert first.app[REGISTRY].signatures.verified == 5
    await first.close()
    stored = json.loads((tmp_path / "state" / "signatures" / "signatures.json").read_text())
    assert {row["tag"]: row["status"] for row in stored["verdicts"]}["v1.3.0"] == "unsigned"
    second = await serve_client(cfg)
    assert await versions(second) == ["1.1.0", "1.0.0"]
    await assert_error(await second.get(f"{BASE}/1.3.0/download"), 403, "nor its commit is signed")
    assert second.app[REGISTRY].signatures.verified == 0  # no git verify after the restart


async def test_a_key_file_changed_verifies_again(serve_client, signed, tmp_path):
    cfg = config(signed, tmp_path, "git", require=True)
    first = await serve_client(cfg)
    assert await versions(first) == ["1.1.0", "1.0.0"]
    await first.close()
    allowed_signers(signed.allowed, {"alice@example.com": signed.alice, "mallory@example.com": signed.mallory})
    second = await serve_client(cfg)
    assert await versions(second) == ["1.2.0", "1.1.0", "1.0.0"]
    assert second.app[REGISTRY].signatures.verified == 5


async def test_a_version_not_verified_in_time_is_left_out_of_that_answer_only_and_never_remembered_unsigned(
    serve_client, git_http, tmp_path
):
    key = ssh_key(tmp_path / "keys", "alice")
    allowed = allowed_signers(tmp_path / "keys" / "allowed_signers", {"alice@example.com": key})
    repo = GitRepo(tmp_path / "repos", "public")  # served anonymously by git_http
    repo.commit({"main.tf": "# one\n"})
    ssh_signed_tag(repo, "v1.0.0", key)
    module = {"namespace": "acme", "name": "vpc", "system": "aws", "repository": git_http.url("public.git")}
    cfg = make_config(
        [{**module, "download": "git"}],
        signing={"allowed_signers": str(allowed), "require": True},
        storage={"path": str(tmp_path / "state")},
    )
    client = await serve_client(cfg)
    git_http.hold_fetches()  # the tag list is answered, the fetch of the tag objects waits
    try:
        started = time.monotonic()
        assert await versions(client) == []
        assert time.monotonic() - started < 8  # well under Terraform's 10 s
        assert not (tmp_path / "state" / "signatures" / "signatures.json").exists()
    finally:
        git_http.release_fetches()
    for _ in range(100):  # the verification goes on in the background and its verdict comes in
        if await versions(client) == ["1.0.0"]:
            break
        await asyncio.sleep(0.1)
    assert await versions(client) == ["1.0.0"]
    stored = json.loads((tmp_path / "state" / "signatures" / "signatures.json").read_text())
    assert [(row["tag"], row["status"]) for row in stored["verdicts"]] == [("v1.0.0", "signed")]


async def test_a_key_added_while_serving_is_taken_up_and_the_versions_answer_follows(serve_client, signed, tmp_path):
    client = await serve_client(config(signed, tmp_path, "git", require=True))
    assert await versions(client) == ["1.1.0", "1.0.0"]
    allowed_signers(signed.allowed, {"alice@example.com": signed.alice, "mallory@example.com": signed.mallory})
    for _ in range(150):
        if await versions(client) == ["1.2.0", "1.1.0", "1.0.0"]:
            break
        await asyncio.sleep(0.1)
    assert await versions(client) == ["1.2.0", "1.1.0", "1.0.0"]
    assert client.app[REGISTRY].signatures.verified == 10  # every version verified again with the new keys


async def test_a_tag_re_pointed_or_re_created_without_a_trusted_key_is_no_longer_served(serve_client, signed, tmp_path):
    client = await serve_client(config(signed, tmp_path, "git", require=True))
    assert await versions(client) == ["1.1.0", "1.0.0"]
    signed.repo.commit({"main.tf": 'output "v" { value = "evil" }\n'})
    signed.repo.tag("v1.1.0")  # moved to an unsigned commit by someone who can push
    v100 = signed.repo.git("rev-parse", "v1.0.0^{commit}")
    signed.repo.tag("v1.0.0", sha=v100, annotated=True, message="re-created")  # same commit, unsigned tag object
    client.app[REGISTRY].cache.invalidate(signed.repo.url)
    assert await versions(client) == []
    await assert_error(await client.get(f"{BASE}/1.1.0/download"), 403, "nor its commit is signed")
    await assert_error(await client.get(f"{BASE}/1.0.0/download"), 403, "nor its commit is signed")


async def test_a_failed_fetch_is_never_a_verdict_and_is_retried_after_error_retry_seconds(
    serve_client, git_http, tmp_path
):
    key = ssh_key(tmp_path / "keys", "alice")
    allowed = allowed_signers(tmp_path / "keys" / "allowed_signers", {"alice@example.com": key})
    repo = GitRepo(tmp_path / "repos", "public")
    repo.commit({"main.tf": "# one\n"})
    ssh_signed_tag(repo, "v1.0.0", key)
    module = {"namespace": "acme", "name": "vpc", "system": "aws", "repository": git_http.url("public.git")}
    cfg = make_config(
        [{**module, "download": "git"}],
        signing={"allowed_signers": str(allowed), "require": True},
        storage={"path": str(tmp_path / "state")},
        cache={"error_retry_seconds": 1},
    )
    client = await serve_client(cfg)
    await client.app[REGISTRY].versions(ADDRESS)  # the tag list is cached; nothing verified yet
    git_http.mode = "error"  # the host now fails every request: the fetch of the tag objects too
    assert await versions(client) == []
    await assert_error(await client.get(f"{BASE}/1.0.0/download"), 502, "not been verified yet")
    assert not (tmp_path / "state" / "signatures" / "signatures.json").exists()
    git_http.mode = "ok"
    await asyncio.sleep(1.1)
    assert await versions(client) == ["1.0.0"]
