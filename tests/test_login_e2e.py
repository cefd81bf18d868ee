"""End to end: the real Terraform CLI runs `terraform login` against a real gitreg over HTTPS, the
test playing the browser through the fake Git host's consent; then `terraform init` installs with
the token it saved. Also: two replicas sharing a real Redis, `gitreg tokens` as a real process,
and "Sign in with GitLab" in a real headless Chromium.
"""

from __future__ import annotations

import json
import re
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from tests.gitreg_process import GitregProcess, run_gitreg
from tests.support.oauth import FakeOAuthHost
from tests.support.repos import GitRepo
from tests.support.terraform import TerraformClient, clean_env, require_clients, terraform_clients
from tests.support.tls import write_tls_files

pytestmark = pytest.mark.slow

CLIENTS = terraform_clients()
STATIC = "static-token-for-automation-0123456789"
SIGNING_KEY = "e2e-signing-key-" + "x" * 32


@pytest.fixture(
    params=cast("list[TerraformClient | None]", CLIENTS) or [None], ids=lambda c: c.name if c else "no-client"
)
def client(request) -> TerraformClient:
    if request.param is None:
        require_clients()
    return request.param


@pytest.fixture
def gitlab() -> Iterator[FakeOAuthHost]:
    with FakeOAuthHost("gitlab").in_thread() as fake:
        yield fake


def module_repo(base: Path) -> GitRepo:
    repo = GitRepo(base, "hello")
    repo.commit({"main.tf": 'output "version" { value = "1.0.0" }\n'})
    repo.tag("v1.0.0")
    return repo


def write_config(tmp_path: Path, fake: FakeOAuthHost, repo: GitRepo, extra: str = "", tls: bool = True) -> Path:
    server = f'tls_cert = "{tmp_path / "cert.pem"}"\ntls_key = "{tmp_path / "key.pem"}"\n' if tls else ""
    config = tmp_path / "gitreg.toml"
    config.write_text(
        f"[server]\n{server}"
        f'[storage]\npath = "{tmp_path / "state"}"\n'
        '[git]\nprotocols = ["https", "http", "file"]\n'
        f'{extra}[auth]\ntokens = ["{STATIC}"]\nsigning_key = "{SIGNING_KEY}"\n'
        + fake.forge_toml()
        + f'[[modules]]\nnamespace = "demo"\nname = "hello"\nsystem = "null"\nrepository = "{repo.url}"\n'
    )
    return config


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def browse(url: str, ca: Path | None = None, data: dict[str, str] | None = None) -> tuple[int, str, str]:
    """One browser step without following redirects: (status, Location, body)."""
    opener = urllib.request.build_opener(
        _NoRedirect(), urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=ca) if ca else None)
    )
    body = urlencode(data).encode() if data is not None else None
    try:
        with opener.open(urllib.request.Request(url, data=body), timeout=30) as resp:
            return resp.status, resp.headers.get("Location", ""), resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Location", ""), e.read().decode()


def play_browser(authorize_url: str, ca: Path) -> None:
    """The person's browser: gitreg -> the host's consent (approve) -> gitreg's callback -> Terraform's listener."""
    status, host_page, _ = browse(authorize_url, ca)
    assert status == 302, host_page
    status, _, page = browse(host_page)
    assert status == 200 and "Authorize" in page
    parts = urlsplit(host_page)
    form = {k: v[0] for k, v in parse_qs(parts.query).items()}
    status, callback, _ = browse(f"{parts.scheme}://{parts.netloc}{parts.path}", data=form)
    assert status == 302 and "/oauth/callback" in callback
    status, local, body = browse(callback, ca)
    assert status == 302 and local.startswith("http://localhost:100"), body
    status, _, _ = browse(local.replace("http://localhost:", "http://127.0.0.1:", 1))
    assert status == 200  # Terraform's own "return to the terminal" page


def terraform_login(client: TerraformClient, host: str, home: Path, ca: Path) -> str:
    """`terraform login <host>` answered "yes", the browser played: its output (it must succeed)."""
    empty = home.parent / "no-browser"  # no xdg-open on PATH: Terraform prints the URL instead
    empty.mkdir(exist_ok=True)
    env = clean_env(home, SSL_CERT_FILE=str(ca), PATH=str(empty))
    env.pop("TF_INPUT")
    (home / ".terraform.d").mkdir(exist_ok=True)  # where Terraform saves the token (a real home has it)
    proc = client.start(["login", host], cwd=home, env=env)
    assert proc.stdin and proc.stdout
    proc.stdin.write("yes\n")
    proc.stdin.flush()
    output: list[str] = []
    found = threading.Event()
    url: list[str] = []

    def pump() -> None:
        assert proc.stdout
        for line in proc.stdout:
            output.append(line)
            m = re.search(r"(https://\S+/oauth/authorize\?\S+)", line)
            if m and not url:
                url.append(m.group(1))
                found.set()
        found.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        assert found.wait(60) and url, "".join(output)
        play_browser(url[0], ca)
        assert proc.wait(60) == 0, "".join(output)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    return "".join(output)


def init(client: TerraformClient, work: Path, host: str, home: Path, ca: Path) -> subprocess.CompletedProcess[str]:
    work.mkdir(parents=True, exist_ok=True)
    (work / "main.tf").write_text(f'module "hello" {{\n  source  = "{host}/demo/hello/null"\n  version = "1.0.0"\n}}\n')
    return client.run(["init", "-input=false", "-no-color"], cwd=work, env=clean_env(home, SSL_CERT_FILE=str(ca)))


def test_terraform_login_then_init_with_the_token_it_saved(client, tmp_path, gitlab):
    repo = module_repo(tmp_path / "repos")
    write_tls_files(tmp_path)
    ca = tmp_path / "ca.pem"
    with GitregProcess("--config", str(write_config(tmp_path, gitlab, repo))) as server:
        host = server.url.removeprefix("https://")
        refused = init(client, tmp_path / "before", host, tmp_path / "nobody", ca)
        assert refused.returncode != 0  # no credentials: the registry is closed
        home = tmp_path / "home"
        output = terraform_login(client, host, home, ca)
        assert "Success!" in output
        saved = json.loads((home / ".terraform.d" / "credentials.tfrc.json").read_text())
        token = saved["credentials"][host]["token"]
        assert token.startswith("gitreg_")
        installed = init(client, tmp_path / "work", host, home, ca)
        assert installed.returncode == 0, installed.stdout + installed.stderr
        log = "".join(server.log)
    assert token not in log and gitlab.grants[0].access not in log
    listed = run_gitreg("tokens", "list", "--config", str(tmp_path / "gitreg.toml"))
    assert listed.returncode == 0 and "alice" in listed.stdout and token not in listed.stdout


def _login_over_http(server_url: str, fake: FakeOAuthHost) -> str:
    """A `terraform login` as Terraform's oauth2 library does it (for the replica tests)."""
    import base64
    import hashlib
    import secrets

    verifier = secrets.token_urlsafe(40)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    query = {
        "client_id": "terraform-cli",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "redirect_uri": "http://localhost:10003/login",
        "response_type": "code",
        "state": "s-1",
    }
    status, host_page, _ = browse(f"{server_url}/oauth/authorize?{urlencode(query)}")
    parts = urlsplit(host_page)
    form = {k: v[0] for k, v in parse_qs(parts.query).items()}
    _, callback, _ = browse(f"{parts.scheme}://{parts.netloc}{parts.path}", data=form)
    _, local, _ = browse(callback)
    code = parse_qs(urlsplit(local).query)["code"][0]
    redeem = {"grant_type": "authorization_code", "code": code, "code_verifier": verifier}
    status, _, body = browse(
        f"{server_url}/oauth/token",
        data={**redeem, "redirect_uri": query["redirect_uri"], "client_id": "terraform-cli"},
    )
    assert status == 200, body
    return str(json.loads(body)["access_token"])


def _versions(server_url: str, token: str) -> int:
    request = urllib.request.Request(
        f"{server_url}/v1/modules/demo/hello/null/versions", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return e.code


def test_a_login_on_one_replica_works_on_another_and_a_revocation_reaches_it_within_a_second(
    tmp_path, gitlab, redis_server
):
    repo = module_repo(tmp_path / "repos")
    cache = f'[cache]\nbackend = "redis"\nredis_url = "{redis_server.url}"\n'
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir()
    b_dir.mkdir()
    config_a = write_config(a_dir, gitlab, repo, cache, tls=False)
    config_b = write_config(b_dir, gitlab, repo, cache, tls=False)
    with GitregProcess("--config", str(config_a)) as a, GitregProcess("--config", str(config_b)) as b:
        token = _login_over_http(a.url, gitlab)
        assert _versions(b.url, token) == 200  # issued on A, accepted on B
        # Revoked through replica A's storage (the CLI writes Redis too): B refuses it within a second.
        revoked = run_gitreg("tokens", "revoke", "alice", "--config", str(config_a))
        assert revoked.returncode == 0, revoked.stderr
        start = time.monotonic()
        while _versions(b.url, token) == 200:
            assert time.monotonic() - start < 1.5, "B still accepts a token revoked a second ago"
            time.sleep(0.05)
        assert _versions(a.url, token) == 401
        listed = run_gitreg("tokens", "list", "--config", str(config_b))
    assert listed.returncode == 0 and "alice" in listed.stdout  # B's CLI sees A's tokens through Redis


def test_sign_in_with_gitlab_in_a_real_browser_then_sign_out(tmp_path):
    # The host on another site than gitreg's 127.0.0.1, as in real life: its consent page -> gitreg's
    # callback is a cross-site redirect chain, after which a SameSite=Strict cookie is withheld.
    with FakeOAuthHost("gitlab", host="localhost").in_thread() as gitlab:
        signed_in_through(tmp_path, gitlab)


def signed_in_through(tmp_path: Path, gitlab: FakeOAuthHost) -> None:
    """Sign in through the host's consent, land signed in (the Strict cookie sent), sign out."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.support.browser import axe_violations, chromium_driver

    repo = module_repo(tmp_path / "repos")
    config = write_config(tmp_path, gitlab, repo, tls=False)
    gitlab.approver = "bob"
    with GitregProcess("--config", str(config)) as server:
        server.wait_indexed()
        driver = chromium_driver()
        wait = WebDriverWait(driver, 10)

        def path_is(path: str) -> Any:
            return lambda d: (
                urlsplit(d.current_url).path == path and d.execute_script("return document.readyState") == "complete"
            )

        try:
            driver.get(server.url + "/")
            wait.until(path_is("/login"))
            assert axe_violations(driver) == [], "the login page with its sign-in button"
            driver.find_element(By.LINK_TEXT, "Sign in with GitLab").click()
            wait.until(lambda d: "Authorize gitreg to read as bob" in d.page_source)
            driver.find_element(By.ID, "approve").click()
            # Landed on the index, the SameSite=Strict session cookie sent: signed in, not sent back to /login.
            wait.until(lambda d: "Signed in as bob" in d.find_element(By.TAG_NAME, "header").text)
            assert urlsplit(driver.current_url).path == "/", driver.current_url
            assert "demo/hello/null" in driver.page_source
            assert axe_violations(driver) == [], "the index, signed in"
            driver.find_element(By.CSS_SELECTOR, ".logout button").click()
            wait.until(path_is("/login"))
            driver.get(server.url + "/")
            wait.until(path_is("/login"))  # signed out
        finally:
            driver.quit()
