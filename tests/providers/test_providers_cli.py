"""`gitreg check --probe` says which provider releases are served and why the others are not."""

from __future__ import annotations

import pytest

from tests.support.forges import FakeForge
from tests.support.process import run_gitreg
from tests.support.releases import goreleaser_assets, signing_key

pytestmark = pytest.mark.slow  # runs gitreg as a process

TOKEN = "ghp_providerprobereader00001"


def test_check_probe_lists_served_provider_versions_and_the_reasons_others_are_not(git_http, release_key, tmp_path):
    forge = FakeForge("github", git_http, "acme", token=TOKEN)
    # (releases added once the forge listens: their asset URLs name its port)
    with signing_key(tmp_path / "other") as other, forge.in_thread():
        forge.add_release("terraform-provider-widget", "v1.0.0", goreleaser_assets("widget", "1.0.0", release_key))
        forge.add_release("terraform-provider-widget", "v0.9.0", goreleaser_assets("widget", "0.9.0", None))
        forge.add_release("terraform-provider-gadget", "v2.0.0", goreleaser_assets("gadget", "2.0.0", other))
        config = tmp_path / "gitreg.toml"
        rules = "".join(
            f'[[providers]]\nnamespace = "acme"\ntype = "{t}"\n'
            f'repository = "{forge.base_url}/acme/terraform-provider-{t}"\n'
            f'keys = "{release_key.write(tmp_path / "k.asc")}"\n'
            f'provider = "github"\napi_url = "{forge.api_url}"\n'
            for t in ("widget", "gadget")
        )
        config.write_text(
            rules + f'[[orgs]]\nprovider = "github"\napi_url = "{forge.api_url}"\ngroup = "acme"\nnamespace = "acme"\n'
            f'token = "{TOKEN}"\n[index]\nenabled = false\n'
        )
        result = run_gitreg("check", "--config", str(config), "--probe")
        one = run_gitreg("check", "--config", str(config), "--probe", "acme/widget")
    out = result.stdout
    assert result.returncode == 1, out + result.stderr  # gadget serves nothing
    assert "config OK: 0 module rule(s), 0 credential(s), 1 org(s), 2 provider rule(s)" in out
    assert f"provider acme/widget <- {forge.base_url}/acme/terraform-provider-widget" in out
    assert f"  1.0.0: protocols 6.0; darwin_arm64, linux_amd64; signed by key {release_key.fingerprint[-16:]}" in out
    assert (
        "  not served: release v0.9.0: the release has no signature terraform-provider-widget_0.9.0_SHA256SUMS.sig"
        in out
    )
    assert f"not served: release v2.0.0: SHA256SUMS is signed by key {other.fingerprint[-16:]}, which is not" in out
    assert "ERROR: no release is served" in out
    assert TOKEN not in out + result.stderr
    assert one.returncode == 0, one.stdout + one.stderr
    assert "provider acme/widget" in one.stdout and "acme/gadget" not in one.stdout
