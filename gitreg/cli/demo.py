"""`gitreg demo`: a tagged demo repository, the files Terraform needs to install from it, and what to run.

The repository is written by `git fast-import` (MirrorGit.import_history) with fixed authors and
dates, so it is the same, commit for commit, on every machine. The CLI (main.py) serves it.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gitreg.config.model import GitConfig
from gitreg.core.errors import GitregError
from gitreg.git.mirror import MirrorGit
from gitreg.git.remote import GitAdapter
from gitreg.git.runner import GitRunner

ADDRESS = "demo/hello/null"
HOST = "registry.example.test"  # in module sources; the CLI config points it at the demo server
VERSIONS = ("1.0.0", "1.1.0", "1.2.0", "2.0.0-rc.1")
MARKER = ".gitreg-demo"  # a directory holding it is one `gitreg demo` made: safe to replace

MODULE_README = "# hello\n\nA module with no providers, served by `gitreg demo`.\n"
MODULE_MAIN = """variable "name" {
  type        = string
  description = "Who to greet."
  default     = "world"
}

output "greeting" {
  description = "The greeting."
  value       = "hello (v%s), ${var.name}"
}
"""
ROOT_MAIN = f"""# `terraform init` here installs {ADDRESS} from the gitreg demo.
module "hello" {{
  source  = "{HOST}/{ADDRESS}"
  version = "~> 1.1"
}}

output "greeting" {{
  value = module.hello.greeting
}}
"""
CLI_CONFIG = """# A CLI config `host` block: skips HTTPS discovery, so the plain-HTTP demo server works.
host "%s" {
  services = {
    "modules.v1" = "%s/v1/modules/"
  }
}
"""


class DemoError(Exception):
    """The demo cannot be set up there (a directory that is not a demo's, git failing)."""


@dataclass(frozen=True)
class Demo:
    """Where a demo lives: DIR/hello.git, DIR/terraform (the root module), DIR/cli.tfrc, DIR/state."""

    directory: Path
    temporary: bool  # removed when the demo stops

    @property
    def repository(self) -> Path:
        return self.directory / "hello.git"

    @property
    def url(self) -> str:
        return self.repository.as_uri()

    @property
    def storage(self) -> Path:
        return self.directory / "state"

    @property
    def cli_config(self) -> Path:
        return self.directory / "cli.tfrc"

    @property
    def root_module(self) -> Path:
        return self.directory / "terraform"

    def point_terraform_at(self, server_url: str) -> str:
        """Write the CLI config for `server_url`; the exact command that installs the module."""
        self.cli_config.write_text(CLI_CONFIG % (HOST, server_url.rstrip("/")))
        return f"cd {self.root_module} && TF_CLI_CONFIG_FILE={self.cli_config} terraform init"

    def clean_up(self) -> str:
        """Remove a temporary demo; what stopping left behind, as a sentence."""
        if self.temporary:
            shutil.rmtree(self.directory, ignore_errors=True)
            return (
                f"removed {self.directory} (the demo repository, gitreg's storage, the Terraform files); nothing else"
            )
        return f"left {self.directory} (the demo repository, gitreg's storage, the Terraform files): rm -r it when done"


def prepare(directory: str | None, git: GitConfig) -> Demo:
    """Build the demo in `directory` (replacing an earlier demo there) or in a new temporary one."""
    if directory is None:
        demo = Demo(Path(tempfile.mkdtemp(prefix="gitreg-demo-")), temporary=True)
    else:
        demo = Demo(Path(directory).absolute(), temporary=False)
        if demo.directory.exists() and not (demo.directory / MARKER).is_file():
            raise DemoError(f"{demo.directory} exists and is not a gitreg demo directory; choose another --dir")
        shutil.rmtree(demo.directory, ignore_errors=True)
        demo.directory.mkdir(parents=True)
    (demo.directory / MARKER).touch()
    demo.root_module.mkdir()
    (demo.root_module / "main.tf").write_text(ROOT_MAIN)
    with tempfile.TemporaryDirectory(prefix="gitreg-home-") as home:
        mirror = MirrorGit(GitAdapter(GitRunner(git, (), home)))
        try:
            mirror.init(str(demo.repository))
            mirror.import_history(str(demo.repository), history())
        except (GitregError, OSError) as e:
            if demo.temporary:
                shutil.rmtree(demo.directory, ignore_errors=True)
            raise DemoError(f"could not build the demo repository: {getattr(e, 'message', e)}") from None
    return demo


def history() -> bytes:
    """A `git fast-import` stream: one commit and one annotated tag per version, on branch main."""
    out: list[bytes] = []

    def data(text: str) -> None:
        raw = text.encode()
        out.append(b"data %d\n%s\n" % (len(raw), raw))

    for i, version in enumerate(VERSIONS):
        when = f"{1767225600 + i * 86400} +0000"  # 2026-01-01, a day apart: the same commits everywhere
        out.append(
            f"commit refs/heads/main\nmark :{i + 1}\ncommitter gitreg-demo <demo@gitreg.invalid> {when}\n".encode()
        )
        data(f"hello {version}")
        out.append(b"M 644 inline README.md\n")
        data(MODULE_README)
        out.append(b"M 644 inline main.tf\n")
        data(MODULE_MAIN % version)
        out.append(f"\ntag v{version}\nfrom :{i + 1}\ntagger gitreg-demo <demo@gitreg.invalid> {when}\n".encode())
        data(f"hello {version}")
    return b"".join(out)
