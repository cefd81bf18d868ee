"""The signing key gitreg keeps in its storage when `[auth] signing_key` is not set (archive mode by default)."""

from __future__ import annotations

import stat
import threading

import pytest

from gitreg.storage.signing_key import KEY_FILE, DamagedKey, stored_key, with_stored_key
from tests.support.app import make_config

TOKEN = "a-registry-token-for-tests-1234"


def test_a_key_is_made_once_with_mode_0600_and_read_back_at_the_next_start(tmp_path):
    key = stored_key(tmp_path)
    path = tmp_path / KEY_FILE
    assert len(key) == 64 and int(key, 16) >= 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stored_key(tmp_path) == key  # a restart reads it back
    assert [p.name for p in tmp_path.iterdir()] == [KEY_FILE]  # no temporary file left


def test_starts_racing_for_the_first_key_all_keep_the_one_that_got_there_first(tmp_path):
    found: list[str] = []
    threads = [threading.Thread(target=lambda: found.append(stored_key(tmp_path))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(found) == 8 and len(set(found)) == 1
    assert (tmp_path / KEY_FILE).read_text().strip() == found[0]


def test_a_damaged_key_file_is_a_clear_error_and_is_not_replaced(tmp_path):
    (tmp_path / KEY_FILE).write_text("not a key\n")
    with pytest.raises(DamagedKey, match="remove it to make a new one"):
        stored_key(tmp_path)
    assert (tmp_path / KEY_FILE).read_text() == "not a key\n"


def test_only_a_config_with_registry_auth_and_no_signing_key_gets_the_stored_key(tmp_path):
    rule = {"namespace": "demo", "repository": "file:///r.git"}
    store = {"path": str(tmp_path / "store")}
    open_config = make_config([rule], storage=store)
    assert with_stored_key(open_config) is open_config
    keyed = make_config([rule], storage=store, auth={"tokens": [TOKEN], "signing_key": "k" * 40})
    assert with_stored_key(keyed) is keyed
    assert not (tmp_path / "store" / KEY_FILE).exists()
    generated = with_stored_key(make_config([rule], storage=store, auth={"tokens": [TOKEN]}))
    assert generated.auth.signing_key == (tmp_path / "store" / KEY_FILE).read_text().strip()
    assert generated.auth.signing_key not in repr(generated)
