"""End to end: the real Terraform CLI runs `terraform login` against a real gitreg over HTTPS, the
test playing the browser through the fake Git host's consent; then `terraform init` installs, with
the token it saved, a module whose repository that person can read on the host, and is refused one
they cannot. The host drops the person from a project: within recheck_seconds `terraform init`
fails and the pages hide the module; restoring them restores both. Also: two replicas sharing a
real Redis, `gitreg tokens` as a real process, and "Sign in with GitLab" in a real headless
Chromium, the index showing only that person's modules.

The Git host (tests/support/oauth.py `git_host`) is one fake: its OAuth pages, its REST API
(answering for the access tokens its OAuth issued, with each person's visibility) and the
module repositories over smart HTTP, all on 127.0.0.1 (the browser test: localhost).
"""

from __future__ import annotations

import http.client
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
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from tests.support.oauth import FakeOAuthHost, git_host
from tests.support.process import GitregProcess, run_gitreg
from tests.support.terraform import (
    REGISTRY_HOST,
    TerraformClient,
    clean_env,
    cli_config,
    require_clients,
)
from tests.support.tls import write_tls_files

pytestmark = pytest.mark.slow

STATIC = "static-token-for-automation-0123456789"
SIGNING_KEY = "e2e-signing-key-" + "x" * 32


@pytest.fixture
def gitlab(tmp_path: Path) -> Iterator[FakeOAuthHost]:
    """A GitLab: modules demo/hello/null (alice reads its repository) and demo/secret/null (only bob)."""
    with git_host("gitlab", tmp_path / "gitlab") as fake:
        yield fake


def write_config(tmp_path: Path, fake: FakeOAuthHost, extra: str = "", tls: bool = True) -> Path:
    server = f'tls_cert = "{tmp_path / "cert.pem"}"\ntls_key = "{tmp_path / "key.pem"}"\n' if tls else ""
    config = tmp_path / "gitreg.toml"
    config.write_text(
        f"[server]\n{server}"
        f'[storage]\npath = "{tmp_path / "state"}"\n'
        '[git]\nprotocols = ["https", "http"]\n'
        f'{extra}[auth]\ntokens = ["{STATIC}"]\nsigning_key = "{SIGNING_KEY}"\n'
        + fake.forge_toml(recheck_seconds=10)
        + fake.modules_toml()
    )
    return config


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def fetch(
    url: str, ca: Path | None = None, data: dict[str, str] | None = None, cookie: str = ""
) -> tuple[int, Any, str]:
    """One browser step without following redirects: (status, response headers, body)."""
    opener = urllib.request.build_opener(
        _NoRedirect(), urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=ca) if ca else None)
    )
    body = urlencode(data).encode() if data is not None else None
    request = urllib.request.Request(url, data=body, headers={"Cookie": cookie} if cookie else {})
    try:
        with opener.open(request, timeout=30) as resp:
            return resp.status, resp.headers, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def browse(url: str, ca: Path | None = None, data: dict[str, str] | None = None) -> tuple[int, str, str]:
    """One browser step without following redirects: (status, Location, body)."""
    status, headers, body = fetch(url, ca, data)
    return status, headers.get("Location", ""), body


def consent(host_page: str) -> str:
    """The person approves on the host's consent page: where the host sends the browser next."""
    status, _, page = browse(host_page)
    assert status == 200 and "Authorize" in page
    parts = urlsplit(host_page)
    form = {k: v[0] for k, v in parse_qs(parts.query).items()}
    status, callback, _ = browse(f"{parts.scheme}://{parts.netloc}{parts.path}", data=form)
    assert status == 302 and "/oauth/callback" in callback
    return callback


def cookie_of(headers: Any, name: str) -> str:
    """`name=value` of the cookie `name` a response sets."""
    for header in headers.get_all("Set-Cookie") or []:
        if header.startswith(name + "="):
            return header.split(";", 1)[0]
    raise AssertionError(f"no {name} cookie set: {headers}")


def sign_in_page(server_url: str) -> str:
    """ "Sign in with GitLab" on the pages, the host's consent approved: the session cookie (`name=value`)."""
    status, headers, _ = fetch(f"{server_url}/login/with/0?next=/")
    assert status == 302
    callback = consent(headers["Location"])
    status, headers, page = fetch(callback, cookie=cookie_of(headers, "gitreg_signin"))
    assert status == 200 and "Signed in as" in page, page
    return cookie_of(headers, "gitreg_session")


def index_page(server_url: str, cookie: str) -> str:
    """The index page, as the signed-in browser sees it."""
    status, _, page = fetch(f"{server_url}/", cookie=cookie)
    assert status == 200, page
    return page


def play_browser(authorize_url: str, ca: Path) -> None:
    """The person's browser: gitreg -> the host's consent (approve) -> gitreg's callback -> Terraform's listener."""
    status, host_page, _ = browse(authorize_url, ca)
    assert status == 302, host_page
    status, local, body = browse(consent(host_page), ca)
    assert status == 302 and local.startswith("http://localhost:100"), body
    try:
        status, _, _ = browse(local.replace("http://localhost:", "http://127.0.0.1:", 1))
    except (http.client.RemoteDisconnected, ConnectionResetError):
        # Terraform may close its listener as soon as it has the code, before its page is sent (seen
        # under load): what counts is that it got the code, which `terraform_login` checks by its output.
        return
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


def init(
    client: TerraformClient, work: Path, host: str, home: Path, ca: Path, name: str = "hello"
) -> subprocess.CompletedProcess[str]:
    """`terraform init` of module demo/<name>/null from `host`, with the credentials saved in `home`."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "main.tf").write_text(f'module "m" {{\n  source  = "{host}/demo/{name}/null"\n  version = "1.0.0"\n}}\n')
    return client.run(["init", "-input=false", "-no-color"], cwd=work, env=clean_env(home, SSL_CERT_FILE=str(ca)))


def test_terraform_login_then_init_installs_what_the_person_can_read_and_nothing_else(
    terraform_client, tmp_path, gitlab
):
    write_tls_files(tmp_path)
    ca = tmp_path / "ca.pem"
    with GitregProcess("--config", str(write_config(tmp_path, gitlab))) as server:
        host = server.url.removeprefix("https://")
        refused = init(terraform_client, tmp_path / "before", host, tmp_path / "nobody", ca)
        assert refused.returncode != 0  # no credentials: the registry is closed
        home = tmp_path / "home"
        output = terraform_login(terraform_client, host, home, ca)
        assert "Success!" in output
        saved = json.loads((home / ".terraform.d" / "credentials.tfrc.json").read_text())
        token = saved["credentials"][host]["token"]
        assert token.startswith("gitreg_")
        installed = init(terraform_client, tmp_path / "work", host, home, ca)
        assert installed.returncode == 0, installed.stdout + installed.stderr
        assert (tmp_path / "work/.terraform/modules/m/main.tf").exists()
        # alice cannot read acme/secret on the host: Terraform is refused it (403; Terraform shows the
        # status only, the error body says why).
        secret = init(terraform_client, tmp_path / "secret", host, home, ca, "secret")
        out = secret.stdout + secret.stderr
        assert secret.returncode != 0 and "403 Forbidden" in out, out
        assert not (tmp_path / "secret/.terraform/modules/m").exists()
        status, body = api(f"{server.url}/v1/modules/demo/secret/null/versions", token, ca)
        assert status == 403 and "alice@127.0.0.1 cannot read acme/secret" in body and "ask for access" in body, body
        # The access log names alice, and /metrics counts the requests as login ones (never by person).
        status, metrics = api(f"{server.url}/metrics", None, ca)
        assert 'gitreg_requests_by_credential_total{kind="login"}' in metrics
        assert "alice" not in metrics
    log = "".join(server.log)
    # One name per person: `alice@<host>`, as her own GitLab token is named.
    assert re.search(r' - alice@127\.0\.0\.1 \[[^]]+\] "GET /v1/modules/demo/hello/null/versions ', log), log[-3000:]
    assert token not in log and all(g.access not in log for g in gitlab.grants)
    listed = run_gitreg("tokens", "list", "--config", str(tmp_path / "gitreg.toml"))
    assert listed.returncode == 0 and "alice" in listed.stdout and token not in listed.stdout


def api(url: str, token: str | None, ca: Path | None = None) -> tuple[int, str]:
    """(status, body) of a GET with the registry token `token`."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    context = ssl.create_default_context(cafile=ca) if ca else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10, context=context) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_dropping_the_person_from_a_project_cuts_their_login_token_and_pages_within_recheck_seconds(tmp_path, gitlab):
    terraform = require_clients()[0]
    with GitregProcess("--config", str(write_config(tmp_path, gitlab, tls=False))) as server:
        server.wait_indexed()
        token = _login_over_http(server.url)
        cookie = sign_in_page(server.url)  # the same person on the pages

        def install(name: str) -> tuple[int, str]:
            work = tmp_path / name
            work.mkdir()
            (work / "main.tf").write_text(f'module "m" {{\n  source  = "{REGISTRY_HOST}/demo/hello/null"\n}}\n')
            env = clean_env(
                tmp_path / "home",
                TF_CLI_CONFIG_FILE=str(cli_config(tmp_path / f"{name}.tfrc", server.url)),
                TF_TOKEN_registry_example_test=token,
            )
            result = terraform.run(["init", "-input=false", "-no-color"], cwd=work, env=env)
            return result.returncode, result.stdout + result.stderr

        code, out = install("before")
        assert code == 0, out
        assert "demo/hello/null" in index_page(server.url, cookie)
        gitlab.forge.revoke("alice", "hello")  # dropped from the project on the host
        time.sleep(11)  # recheck_seconds = 10
        code, out = install("revoked")
        assert code != 0 and "403 Forbidden" in out, out
        page = index_page(server.url, cookie)
        assert "Signed in as" in page and "demo/hello/null" not in page
        gitlab.forge.grant("alice", "hello")
        time.sleep(11)
        code, out = install("restored")
        assert code == 0, out
        assert "demo/hello/null" in index_page(server.url, cookie)


def _login_over_http(server_url: str) -> str:
    """A `terraform login` as Terraform's oauth2 library does it, the browser played: the registry token."""
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
    _, local, _ = browse(consent(host_page))
    code = parse_qs(urlsplit(local).query)["code"][0]
    redeem = {"grant_type": "authorization_code", "code": code, "code_verifier": verifier}
    status, _, body = browse(
        f"{server_url}/oauth/token",
        data={**redeem, "redirect_uri": query["redirect_uri"], "client_id": "terraform-cli"},
    )
    assert status == 200, body
    return str(json.loads(body)["access_token"])


def _versions(server_url: str, token: str) -> int:
    return api(f"{server_url}/v1/modules/demo/hello/null/versions", token)[0]


def test_a_login_on_one_replica_works_on_another_and_a_revocation_reaches_it_within_a_second(
    tmp_path, gitlab, redis_server
):
    cache = f'[cache]\nbackend = "redis"\nredis_url = "{redis_server.url}"\n'
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir()
    b_dir.mkdir()
    config_a = write_config(a_dir, gitlab, cache, tls=False)
    config_b = write_config(b_dir, gitlab, cache, tls=False)
    with GitregProcess("--config", str(config_a)) as a, GitregProcess("--config", str(config_b)) as b:
        token = _login_over_http(a.url)
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
    with git_host("gitlab", tmp_path / "gitlab", host="localhost") as gitlab:
        signed_in_through(tmp_path, gitlab)


def signed_in_through(tmp_path: Path, gitlab: FakeOAuthHost) -> None:
    """Sign in through the host's consent, land signed in (the Strict cookie sent) on an index of only the
    modules the person can read on the host, sign out."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.support.browser import axe_violations, chromium_driver

    config = write_config(tmp_path, gitlab, tls=False)
    gitlab.approver = "alice"
    with GitregProcess("--config", str(config)) as server:
        server.wait_indexed()
        status, every = api(f"{server.url}/v1/modules", STATIC)
        assert status == 200 and "demo/secret/null" in every and "demo/hello/null" in every
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
            wait.until(lambda d: "Authorize gitreg to read as alice" in d.page_source)
            driver.find_element(By.ID, "approve").click()
            # Landed on the index, the SameSite=Strict session cookie sent: signed in, not sent back to /login.
            wait.until(lambda d: "Signed in as alice" in d.find_element(By.TAG_NAME, "header").text)
            assert urlsplit(driver.current_url).path == "/", driver.current_url
            # Only what alice can read on the host: not acme/secret's module.
            assert "demo/hello/null" in driver.page_source and "demo/secret/null" not in driver.page_source
            assert axe_violations(driver) == [], "the index, signed in"
            driver.find_element(By.CSS_SELECTOR, ".logout button").click()
            wait.until(path_is("/login"))
            driver.get(server.url + "/")
            wait.until(path_is("/login"))  # signed out
        finally:
            driver.quit()
