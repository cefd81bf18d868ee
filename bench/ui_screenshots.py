"""Regenerate the README's screenshots of the module page (docs/images/module-page*.png).

A realistic module (tests/support/realistic.py: a terraform-docs README, 30 inputs, submodules,
examples, a dependency served by the same registry) on a real `gitreg serve` whose `[server]
public_url` is https://registry.example.com, so the copy-ready sources show that host and not a
test port; headless Chromium at 1280 px and at 390 px (a phone), in the light and the dark
colour scheme (`prefers-color-scheme`, as the visitor's system sets it).

    python bench/ui_screenshots.py [--out docs/images] [--extra-inputs 0]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.browser import chromium_driver
from tests.support.process import GitregProcess
from tests.support.realistic import labels_module, write_vpc_module
from tests.support.repos import GitRepo

HOST = "registry.example.com"
# (file name, viewport width, height, device scale, the page's fragment, colour scheme)
SHOTS = (
    ("module-page.png", 1280, 900, 1, "", "light"),
    ("module-page-inputs.png", 1280, 900, 1, "#inputs", "light"),
    ("module-page-phone.png", 390, 844, 2, "", "light"),
    *(
        (f"module-page-{width}-{scheme}.png", width, height, scale, "", scheme)
        for width, height, scale in ((1280, 900, 1), (390, 844, 2))
        for scheme in ("light", "dark")
    ),
)


def write_config(work: Path, vpc: GitRepo, labels: GitRepo) -> Path:
    """The registry's config: the two modules, the public URL, the page title."""
    text = (
        f'[server]\npublic_url = "https://{HOST}"\n[storage]\npath = "{work / "state"}"\n[ui]\ntitle = "Acme modules"\n'
        f'[[modules]]\nnamespace = "acme"\nname = "vpc"\nsystem = "aws"\nrepository = "{vpc.url}"\n'
        'clone_url = "https://github.com/acme/terraform-aws-vpc.git"\n'
        f'[[modules]]\nnamespace = "acme"\nname = "labels"\nsystem = "null"\nrepository = "{labels.url}"\n'
    )
    path = work / "gitreg.toml"
    path.write_text(text)
    return path


def main(argv: list[str] | None = None) -> int:
    """Serve the module, take the screenshots, write them to `--out`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    parser.add_argument("--extra-inputs", type=int, default=0, help="more inputs beyond the module's 30")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        vpc = GitRepo(work / "repos", "terraform-aws-vpc")
        for version in ("5.3.0", "5.3.1", "5.4.0"):
            write_vpc_module(vpc, HOST, args.extra_inputs)
            vpc.commit({"CHANGELOG.md": f"## {version}\n"}, f"release {version}")
            vpc.tag(f"v{version}")
        labels = labels_module(work / "repos")
        with GitregProcess("--config", str(write_config(work, vpc, labels))) as server:
            server.wait_indexed()
            for name, width, height, scale, fragment, scheme in SHOTS:
                driver = chromium_driver(width, height)
                try:
                    driver.execute_cdp_cmd(
                        "Emulation.setDeviceMetricsOverride",
                        {"width": width, "height": height, "deviceScaleFactor": scale, "mobile": width < 600},
                    )
                    driver.execute_cdp_cmd(
                        "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]}
                    )
                    driver.get(f"{server.url}/modules/acme/vpc/aws{fragment}")
                    driver.save_screenshot(str(args.out / name))
                finally:
                    driver.quit()
                print(args.out / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
