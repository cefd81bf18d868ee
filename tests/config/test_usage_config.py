"""`[usage]`: the scan off by default, its hosts from public_url unless given, bad values named."""

from __future__ import annotations

import pytest

from gitreg.config.parse import parse_config
from gitreg.core.errors import ConfigError


def test_usage_is_off_by_default_and_its_hosts_default_to_public_urls_host() -> None:
    assert parse_config({}, {}).usage.scan is False
    config = parse_config({"server": {"public_url": "https://Registry.Example.com:8443"}, "usage": {"scan": True}}, {})
    assert config.usage.hosts == ("registry.example.com:8443",)
    given = parse_config({"usage": {"scan": True, "hosts": ["TF.example.com", "registry.example.com"]}}, {})
    assert given.usage.hosts == ("tf.example.com", "registry.example.com")


@pytest.mark.parametrize(
    ("usage", "fragment"),
    [
        ({"scan": True}, "usage.hosts: is needed when scan = true and [server] public_url is not set"),
        ({"hosts": ["https://registry.example.com"]}, "usage.hosts: 'https://registry.example.com' is not a host"),
        ({"scan": "yes"}, "usage.scan"),
        ({"scna": True}, "usage.scna"),
    ],
)
def test_a_bad_usage_section_is_refused_with_the_key_named(usage: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config({"usage": usage}, {})
    assert fragment in str(raised.value)
