"""Git URLs and scp-like addresses (gitreg/urls.py): one grammar, and views that agree with it.

Webhook matching, `source` links, log masking, metric host labels, `git::` download
locations and config validation all read a repository address through `urls.parse`. The
properties below generate addresses the way operators and Git hosts spell them (scp-like,
ssh://, https:// with users, passwords, ports, `.git`, odd case) and arbitrary text, and
check what a user would notice: one repository has one host/path, no password is ever shown,
a source link never carries user info, and nothing raises.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from gitreg.config.parse import parse_config
from gitreg.core import urls
from gitreg.core.errors import ConfigError
from gitreg.registry.service import git_location

SETTINGS = settings(max_examples=200, deadline=None, database=None)

hosts = st.from_regex(r"[a-z0-9](?:[a-z0-9-]{0,10}[a-z0-9])?(?:\.[a-z]{2,6}){0,2}", fullmatch=True)
users = st.from_regex(r"[a-z][a-z0-9._-]{0,10}", fullmatch=True)
segments = st.from_regex(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,12}", fullmatch=True).filter(lambda s: s not in (".", ".."))
# (A path starting with `-` is not a Git URL: ssh would take `host:-x` as an option. #22)
paths = st.lists(segments, min_size=1, max_size=4).map("/".join).filter(lambda p: not p.startswith("-"))
ports = st.integers(min_value=1, max_value=65535)
# A password carries a marker no generated user, host or path can contain, so "not shown" is a substring check.
passwords = st.text(st.sampled_from("abcXYZ019-._~!$&'()*+,;=:@%"), max_size=16).map(lambda p: "Zq" + p)
# Arbitrary text, and text made of the characters URLs are made of (reaches the parser's corners).
url_alphabet = st.sampled_from(":/@[]%?#.-_~+ \t\n\x00\u00e9\udcffaAzZ09") | st.characters()
any_text = (
    st.text(st.characters(blacklist_categories=()))
    | st.text(url_alphabet, max_size=40)
    | st.builds(
        lambda scheme, rest: f"{scheme}://{rest}",
        st.sampled_from(["https", "ssh", "git", "file", "HTTP", "git+ssh", "x"]),
        st.text(url_alphabet, max_size=40),
    )
)


@SETTINGS
@given(text=any_text)
@example(text="https://[oops/r.git")
@example(text="https://u:p@host:abc/x.git")
@example(text="ext::sh -c id")
@example(text="git@:")
@example(text="-oProxyCommand=x:y")
def test_arbitrary_text_never_raises_and_every_view_agrees_whether_it_is_a_git_url(text):
    found = urls.parse(text)
    reason = urls.parse_or_reason(text)
    assert (found is None) == isinstance(reason, str)
    host_path, web, label, masked = (
        urls.host_path(text.strip()),
        urls.web_url(text),
        urls.host_label(text),
        urls.mask(text),
    )
    assert urls.as_go_getter(text).startswith("git::")
    if found is None:
        assert urls.transport(text) is None and host_path is None and web == "" and label == "unknown"
        assert urls.as_go_getter(text) == "git::" + text
    else:
        assert urls.transport(text) == found.transport
        assert label == ("local" if found.scheme == "file" else found.host) and "@" not in label and "/" not in label
        assert urls.parse(masked) is not None  # masking keeps a URL a URL


@SETTINGS
@given(user=users, host=hosts, path=paths, port=ports, dotgit=st.booleans(), slash=st.booleans(), upper=st.booleans())
@pytest.mark.slow
def test_scp_ssh_and_https_spellings_of_one_repository_have_one_identity(user, host, path, port, dotgit, slash, upper):
    tail = path + (".git" if dotgit else "") + ("/" if slash else "")
    shown_host = host.upper() if upper else host
    spellings = [
        f"{user}@{shown_host}:{tail}",
        f"ssh://{user}@{shown_host}/{tail}",
        f"ssh://{user}@{host}:{port}/{path}",
        f"https://{shown_host}/{tail}",
        f"https://{user}@{host}:{port}/{path}.git",
        f"git://{host}/{tail}",
    ]
    host_paths = {urls.host_path(s) for s in spellings}
    assert host_paths == {f"{host}/{path.lower()}"}, spellings
    assert urls.transport(spellings[0]) == urls.transport(spellings[1]) == "ssh"


@SETTINGS
@given(host=hosts, path=paths, other=segments)
@pytest.mark.slow
def test_different_repositories_have_different_identities(host, path, other):
    assert urls.host_path(f"https://{host}/{path}") != urls.host_path(f"https://{host}/{path}/{other}")
    assert urls.host_path(f"git@{host}:{path}") != urls.host_path(f"git@{host}x:{path}")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("https://GitHub.com/Acme/VPC.git/", "git@github.com:acme/vpc.git"),
        ("ssh://git@github.com:22/acme/vpc", "https://github.com/acme/vpc"),
        ("git://github.com/acme/vpc.git", "https://user@github.com/acme/vpc/"),
        ("https://gitlab.example.com/a/b/c/d.git", "git@gitlab.example.com:a/b/c/d.git"),
        ("git+ssh://git@github.com/acme/vpc.git", "git@github.com:acme/vpc"),
    ],
)
def test_webhook_spellings_of_one_repository_have_one_identity(a, b):
    assert urls.host_path(a) == urls.host_path(b) is not None


@SETTINGS
@given(
    scheme=st.sampled_from(["https", "http", "ssh", "git+ssh"]),
    user=users,
    password=passwords,
    host=hosts,
    port=st.none() | ports,
    path=paths,
)
@pytest.mark.slow
def test_mask_never_shows_user_info_but_a_plain_login_name_and_changes_nothing_else(
    scheme, user, password, host, port, path
):
    hostport = f"{host}:{port}" if port else host
    url = f"{scheme}://{user}:{password}@{hostport}/{path}.git"
    masked = urls.mask(url)
    assert password not in masked
    assert masked == f"{scheme}://***:***@{hostport}/{path}.git"
    # A token is often the user name (`https://ghp_x@host/...`): only a plain login name stays (at
    # most 32 characters, no Git host's token prefix).
    login = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}", user) and not re.match(
        r"(?i)gh[pousr]_|github_pat_|gl[a-z]{2,6}-", user
    )
    shown = user if login else "***"
    assert urls.mask(f"{scheme}://{user}@{hostport}/{path}") == f"{scheme}://{shown}@{hostport}/{path}"
    assert urls.mask(f"{scheme}://Ghp_{user}@{hostport}/{path}") == f"{scheme}://***@{hostport}/{path}"


@SETTINGS
@given(text=any_text)
@example(text="https://u:p@host:abc/x.git")
@example(text="https://u:p@[::1/x")
def test_mask_of_any_text_leaves_no_user_info_a_password_could_hide_in(text):
    masked = urls.mask(text)
    found = urls.parse(text)
    if found is not None and not urls.has_plain_user(found):
        shown = urls.parse(masked)
        assert shown is not None and shown.user in ("***", "") and shown.password in ("***", None)
        assert shown.user or shown.password  # something was there, and is masked
    elif found is None and "://" in text:
        assert "@" not in masked.split("://", 1)[1].split("***@", 1)[-1]


@SETTINGS
@given(
    scheme=st.sampled_from(["https", "http", "ssh", "git", "git+ssh", "scp"]),
    user=users,
    password=passwords,
    host=hosts,
    port=st.none() | ports,
    path=paths,
)
@pytest.mark.slow
def test_web_url_never_carries_user_info(scheme, user, password, host, port, path):
    # A password that is also part of the host or path would be "in" the URL without leaking.
    assume(password not in host and password not in path)
    if scheme == "scp":
        url = f"{user}@{host}:{path}.git"
    else:
        url = f"{scheme}://{user}:{password}@{host}{f':{port}' if port else ''}/{path}.git"
    web = urls.web_url(url)
    parts = urlsplit(web)
    assert parts.scheme in ("https", "http") and parts.username is None and parts.password is None
    assert password not in web and f"{user}@" not in web
    assert web.endswith(f"/{path}") and parts.hostname == host
    # An ssh or git port is not the web server's; an http(s) one is.
    assert parts.port == (port if scheme in ("https", "http") else None)


@SETTINGS
@given(text=any_text)
def test_web_url_of_any_text_is_empty_or_an_http_url_without_user_info(text):
    web = urls.web_url(text)
    if web:
        parts = urlsplit(web)
        assert parts.scheme in ("https", "http") and parts.username is None and "@" not in parts.netloc


@pytest.mark.parametrize(
    ("clone_url", "web"),
    [
        ("https://github.com/acme/terraform-aws-vpc.git", "https://github.com/acme/terraform-aws-vpc"),
        (
            "https://user:secret@gitlab.example.com:8443/group/sub/vpc.git/",
            "https://gitlab.example.com:8443/group/sub/vpc",
        ),
        ("ssh://git@github.com:22/acme/vpc.git", "https://github.com/acme/vpc"),
        ("git@github.com:acme/vpc.git", "https://github.com/acme/vpc"),
        ("git://git.example.com/acme/vpc", "https://git.example.com/acme/vpc"),
        ("https://[2001:db8::1]:8443/acme/vpc.git", "https://[2001:db8::1]:8443/acme/vpc"),
        ("file:///srv/git/vpc.git", ""),
    ],
)
def test_source_is_the_web_url_of_the_clone_url(clone_url, web):
    assert urls.web_url(clone_url) == web


@SETTINGS
@given(
    user=st.none() | users,
    host=hosts,
    path=paths,
    ref=st.from_regex(r"v[0-9]\.[0-9]\.[0-9](\+[a-z0-9]{1,5})?", fullmatch=True),
)
@pytest.mark.slow
def test_an_scp_like_clone_url_becomes_an_ssh_url_go_getter_reads_as_the_same_repository(user, host, path, ref):
    scp = f"{user}@{host}:{path}.git" if user else f"{host}:{path}.git"
    location = git_location(scp, "", ref)
    address = location.removeprefix("git::").rsplit("?ref=", 1)[0]
    assert location.startswith("git::ssh://") and urls.parse(address).is_scp is False
    assert urls.host_path(address) == urls.host_path(scp)
    assert location.endswith("?ref=" + ref.replace("+", "%2B"))


@pytest.mark.parametrize(
    ("clone_url", "location"),
    [
        ("https://ghp_Token123@h.example/acme/vpc.git", "git::https://h.example/acme/vpc.git"),
        ("https://u:pw@h.example:8443/acme/vpc.git", "git::https://h.example:8443/acme/vpc.git"),
        ("Ghp_Token123@h.example:acme/vpc.git", "git::ssh://h.example/acme/vpc.git"),
        ("git@h.example:acme/vpc.git", "git::ssh://git@h.example/acme/vpc.git"),
        ("ssh://git@h.example/acme/vpc.git", "git::ssh://git@h.example/acme/vpc.git"),
    ],
)
def test_a_download_location_never_carries_user_info_but_an_ssh_login(clone_url, location):
    assert urls.as_go_getter(clone_url) == location


def test_metric_host_labels_are_the_host_alone():
    assert urls.host_label("https://bot:pw@GitHub.com:8443/acme/vpc.git?x=1") == "github.com"
    assert urls.host_label("git@gitlab.example.com:a/b.git") == "gitlab.example.com"
    assert urls.host_label("file:///srv/git/x.git") == "local"
    assert urls.host_label("/srv/git/x.git") == "unknown"


def _rejected(url: str) -> bool:
    """Whether config validation calls `url` no Git URL (or no valid one)."""
    try:
        parse_config(
            {"git": {"protocols": ["https", "http", "ssh", "git", "file"]}, "modules": [{"repository": url}]}, {}
        )
    except ConfigError as e:
        return any("is not a Git URL" in p or "is not a valid URL" in p for p in e.problems)
    return False


@SETTINGS
@given(text=any_text.filter(lambda t: not any(c in t for c in "${}")))
@example(text="git@github.com:acme/vpc.git")
@example(text="github.com:acme/vpc.git")
@example(text="https:///no-host")
def test_config_accepts_exactly_the_addresses_the_url_module_parses(text):
    assert _rejected(text) == (urls.parse(text) is None)
