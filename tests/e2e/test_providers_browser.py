"""The provider pages in a real headless Chromium against a real `gitreg serve`: axe-core finds no
serious violation in the light or the dark colour scheme, nothing overflows a 390 px phone, and
the README of the release's tag is shown inert (sanitized, nothing of it runs).

Screenshots are saved under the test's tmp directory (`.../screenshots/*.png`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from tests.support.app import GIT_PASSWORD, GIT_USER
from tests.support.browser import axe_violations, page_overflow, sized_chromium
from tests.support.forges import FakeForge
from tests.support.process import GitregProcess
from tests.support.releases import goreleaser_assets
from tests.support.repos import GitRepo

# A real headless Chromium and a real gitreg process.
pytestmark = pytest.mark.slow

TOKEN = "ghp_providerpagesreader00001"
README = """# Widget provider

Manages widgets of the Acme widget service. See [the docs](docs/index.md).

| Resource | What |
| -------- | ---- |
| `widget_thing_with_a_rather_long_name_that_must_wrap` | one widget |

```hcl
provider "widget" { endpoint = "https://widgets.acme.example/api/v1/with/a/long/path/that/must/not/overflow" }
```

<script>window.pwned = "script";</script>
<img src="x.png" alt="a diagram" onerror="window.pwned='img'">
[click me](javascript:window.pwned='link')
"""


@pytest.fixture
def server(git_http, release_key, tmp_path: Path) -> Iterator[GitregProcess]:
    repo = GitRepo(git_http.root, "terraform-provider-widget")
    repo.commit({"README.md": README})
    repo.tag("v1.2.0")
    forge = FakeForge("github", git_http, "acme", token=TOKEN)
    with forge.in_thread():  # (releases added once it listens: their asset URLs name its port)
        forge.add("terraform-provider-widget")
        forge.add_release("terraform-provider-widget", "v1.2.0", goreleaser_assets("widget", "1.2.0", release_key))
        forge.add_release("terraform-provider-widget", "v1.1.0", goreleaser_assets("widget", "1.1.0", None))
        config = tmp_path / "gitreg.toml"
        config.write_text(
            f'[[providers]]\nnamespace = "acme"\ntype = "*"\n'
            f'repository = "{forge.base_url}/acme/terraform-provider-{{type}}"\n'
            f'keys = "{release_key.write(tmp_path / "keys.asc")}"\nprovider = "github"\napi_url = "{forge.api_url}"\n'
            f'[[orgs]]\nprovider = "github"\napi_url = "{forge.api_url}"\ngroup = "acme"\nnamespace = "acme"\n'
            f'token = "{TOKEN}"\n'
            f'[[credentials]]\nurl = "{git_http.base_url}/"\nusername = "{GIT_USER}"\npassword = "${{GIT_PASSWORD}}"\n'
            f'[git]\nprotocols = ["http"]\n[index]\nenabled = false\n[storage]\npath = "{tmp_path / "state"}"\n'
        )
        with GitregProcess("--config", str(config), env={"GIT_PASSWORD": GIT_PASSWORD}) as proc:
            yield proc


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_provider_pages_are_accessible_and_fit_a_phone(server, tmp_path, scheme):
    shots = tmp_path / "screenshots"
    shots.mkdir()
    for width in (1280, 390):
        driver = sized_chromium(width, scheme)
        try:
            for path, name in (("/providers", "providers"), ("/providers/acme/widget", "provider")):
                driver.get(server.url + path)
                driver.save_screenshot(str(shots / f"{name}-{width}-{scheme}.png"))
                assert axe_violations(driver) == [], (path, width, scheme)
                assert page_overflow(driver) <= 0, (path, width, scheme)
            readme = driver.find_element(By.CSS_SELECTOR, ".markdown")
            assert "Manages widgets of the Acme widget service." in readme.text
            assert driver.execute_script("return window.pwned === undefined")
            assert readme.find_elements(By.CSS_SELECTOR, "script, img[onerror]") == []
            for link in readme.find_elements(By.TAG_NAME, "a"):
                assert not (link.get_attribute("href") or "").lower().startswith("javascript:")
        finally:
            driver.quit()
