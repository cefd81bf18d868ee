"""The module browser: repositories to browse, a signed-in session, README samples."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from tests.support.repos import GitRepo

# What terraform-docs writes (its default `markdown table` output inside the markers), under a
# hand-written top with a centred banner and a table of contents.
TERRAFORM_DOCS_README = """# AWS VPC Terraform module

<p align="center"><img src="docs/diagram.png" width="480" alt="Architecture diagram"></p>

Creates a VPC. See [Inputs](#inputs), the [guide](docs/guide.md) and <kbd>Ctrl</kbd>+<kbd>C</kbd>.

<details><summary>More</summary>

~~Old~~ text with H<sub>2</sub>O.

</details>

<!-- BEGIN_TF_DOCS -->
## Requirements

| Name | Version |
|------|---------|
| <a name="requirement_terraform"></a> [terraform](#requirement\\_terraform) | >= 1.3 |
| <a name="requirement_aws"></a> [aws](#requirement\\_aws) | >= 5.0 |

## Inputs

| Name | Description | Type | Default | Required |
|------|-------------|------|---------|:--------:|
| <a name="input_cidr"></a> [cidr](#input\\_cidr) | The CIDR.<br>A /16. | `string` | `"10.0.0.0/16"` | no |
| <a name="input_name"></a> [name](#input\\_name) | Name tag. | `string` | n/a | yes |

## Outputs

| Name | Description |
|------|-------------|
| <a name="output_vpc_id"></a> [vpc\\_id](#output\\_vpc\\_id) | The VPC ID. |
<!-- END_TF_DOCS -->
"""


SVG = (
    b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
    b"<script>alert(1)</script></svg>"
)


def png(width: int, height: int = 1) -> bytes:
    """A valid PNG of `width` x `height` grey pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


TOKEN_ALL = "ui-token-everything-987654321"


def repos(tmp_path: Path) -> dict[str, GitRepo]:
    found = {}
    for name in ("vpc", "net"):
        repo = GitRepo(tmp_path / "repos", name)
        repo.commit({"README.md": f"# {name}\n\nThe {name} module. [guide](docs/guide.md)\n", "main.tf": "# m\n"})
        repo.tag("v1.0.0")
        found[name] = repo
    return found


def rules(found: dict[str, GitRepo]) -> list[dict]:
    return [
        {"namespace": "acme", "name": "vpc", "system": "aws", "repository": found["vpc"].url},
        {"namespace": "other", "name": "net", "system": "azurerm", "repository": found["net"].url},
    ]


def origin(client) -> dict[str, str]:
    return {"Origin": f"http://{client.server.host}:{client.server.port}"}


async def login(client, token: str) -> None:
    resp = await client.post(
        "/login", data={"token": token, "next": "/"}, headers=origin(client), allow_redirects=False
    )
    assert resp.status == 302, await resp.text()
