"""`gitreg check --probe` reports what a module's `.gitreg.toml` declares, and a malformed one (#35)."""

from __future__ import annotations

import pytest

from tests.support.lifecycle import module_repo
from tests.support.process import run_gitreg

pytestmark = pytest.mark.slow  # a gitreg process per probe, and real git


def test_check_probe_lists_deprecated_and_revoked_versions(tmp_path):
    repo = module_repo(tmp_path / "repos")
    result = run_gitreg("check", "--probe", "--module", f"demo/hello/null={repo.url}", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "revoked 1.4.2: leaks the KMS key ARN in an output (not listed; its download answers 410)" in result.stdout
    assert "deprecated 1.4.1: 2.x moves to the new VPC layout (https://wiki.example.com/vpc-2)" in result.stdout
    assert "2.0.0:" not in result.stdout


def test_check_probe_reports_a_malformed_file_and_exits_1(tmp_path):
    repo = module_repo(tmp_path / "repos", declared='[[revoked]]\nversions = "~> banana"\nreason = "x"\n')
    for probe in (["--probe"], ["--probe", "demo/hello/null"]):
        result = run_gitreg("check", *probe, "--module", f"demo/hello/null={repo.url}", cwd=tmp_path)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "ERROR: .gitreg.toml is malformed and declares nothing: revoked[0].versions" in result.stdout
        assert "Traceback" not in result.stderr
