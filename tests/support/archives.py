"""Archive mode: a monorepo of modules, its rule, the archives' bytes."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import IO, cast

from tests.support.repos import GitRepo


def file_text(data: bytes, name: str) -> str:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return cast(IO[bytes], tar.extractfile(name)).read().decode()


def stored_bytes(store: Path) -> int:
    """What [storage] max_bytes bounds: every file under the mirrors and archives directories."""
    return sum(p.lstat().st_size for d in ("mirrors", "archives") for p in (store / d).rglob("*") if p.is_file())


def mono_repo(base: Path, name: str = "mono") -> GitRepo:
    """A monorepo: modules/network (tagged network/v1.0.0 and network/v1.1.0) and modules/compute."""
    repo = GitRepo(base, name)
    repo.commit(
        {
            "modules/network/main.tf": 'output "v" { value = "net-1.0.0" }\n',
            "modules/network/sub/vars.tf": 'variable "x" {}\n',
            "modules/compute/main.tf": 'output "v" { value = "compute" }\n',
            "README.md": "# mono\n",
        }
    )
    repo.tag("network/v1.0.0")
    repo.commit({"modules/network/main.tf": 'output "v" { value = "net-1.1.0" }\n'})
    repo.tag("network/v1.1.0", annotated=True, message="1.1.0")
    return repo


def mono_rule(url: str, **extra: object) -> dict[str, object]:
    return {
        "namespace": "acme",
        "name": "network",
        "system": "aws",
        "repository": url,
        "path": "modules/network",
        "tag_prefix": "network/",
        "download": "archive",
        **extra,
    }
