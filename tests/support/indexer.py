"""The index process of a real `gitreg serve`: its config and what it lists."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.app import GIT_PASSWORD
from tests.support.forges import FakeForge
from tests.support.githttp import GitHttpServer
from tests.support.orgs import API_TOKEN, write_config
from tests.support.process import GitregProcess
from tests.support.webhooks import GITHUB_SECRET

ENV = {"ORG_TOKEN": API_TOKEN, "GIT_PASSWORD": GIT_PASSWORD}


def get(server: GitregProcess, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(server.url + path, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def names(server: GitregProcess) -> list[str]:
    status, body = get(server, "/v1/modules")
    assert status == 200, body
    return ["/".join(m["id"].split("/")[:3]) for m in body["modules"]]


def eventually(check, timeout: float = 30.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what or check}"
        time.sleep(0.1)


def config_for(tmp_path: Path, fake: FakeForge, git_http: GitHttpServer, extra: str = "") -> Path:
    webhooks = f'[webhooks]\ngithub_secret = "{GITHUB_SECRET}"\n[cache]\nttl_seconds = 3600\n'
    return write_config(tmp_path, fake, git_http, extra=extra + webhooks if extra else webhooks)
