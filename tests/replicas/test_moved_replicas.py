"""A moved tag is shown by every replica, also one that never served the version (issue 35): the
first commit served is the pin another replica recorded in Redis."""

from __future__ import annotations

import asyncio
import time

import pytest

from gitreg.web.keys import PUBLISHER
from tests.support.app import indexed, make_config, version_details
from tests.support.repos import GitRepo

pytestmark = pytest.mark.slow  # a real Redis

DOWNLOAD = "/v1/modules/demo/hello/null/1.0.0/download"


@pytest.mark.parametrize("download", ["archive", "git"])
async def test_a_replica_that_never_served_a_moved_tag_shows_it_from_the_pin_in_redis(
    serve_client, redis_server, tmp_path, download
):
    repo = GitRepo(tmp_path / "repos", "hello")
    first = repo.commit({"main.tf": "# first\n"})
    repo.tag("v1.0.0")
    rule = {"namespace": "demo", "name": "hello", "system": "null", "repository": repo.url, "download": download}
    cache = {"backend": "redis", "redis_url": redis_server.url, "ttl_seconds": 0}

    def config(name: str):
        return make_config([rule], cache=cache, storage={"path": str(tmp_path / name)})

    a = await indexed(await serve_client(config("a")))  # the index leader
    assert (await a.get(DOWNLOAD)).status == 200  # replica a pins v1.0.0 at `first` (disk and Redis)
    b = await serve_client(config("b"))  # never serves v1.0.0
    second = repo.commit({"main.tf": "# second\n"})
    repo.tag("v1.0.0")  # force-moved
    await a.app[PUBLISHER].repositories_changed([repo.url])  # what a push webhook to a does
    await asyncio.sleep(0.5)
    await indexed(a)  # a indexes v1.0.0 at `second`; b loads a's index
    deadline = time.monotonic() + 20
    while True:
        resp = await version_details(b, "/v1/modules/demo/hello/null/1.0.0")
        body = await resp.json()
        if (resp.status == 200 and body["moved"] is not None) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    assert resp.status == 200, body
    assert body["moved"] is not None, body["commit"] + " first " + first + " second " + second
    assert (body["moved"]["first_commit"], body["moved"]["current_commit"]) == (first, second)
    assert body["commit"] == (first if download == "archive" else second)
    page = await (await b.get("/modules/demo/hello/null/1.0.0")).text()
    assert 'id="moved-tag"' in page and first in page and second in page
