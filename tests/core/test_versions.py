"""Which tags count as versions, and in which order (SemVer 2.0, not PEP 440)."""

from __future__ import annotations

import random

import semver
from hypothesis import given, settings
from hypothesis import strategies as st

from gitreg.core.versions import is_canonical, parse_version, select_versions

SHA = "0" * 40


def listed(tags: list[str], prefix: str = "") -> list[str]:
    return [tv.canonical for tv in select_versions(dict.fromkeys(tags, SHA), prefix).versions]


def test_semver_precedence_follows_the_spec_example():
    spec_order = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
    ]
    shuffled = spec_order[:]
    random.Random(4).shuffle(shuffled)
    assert listed(shuffled) == list(reversed(spec_order))


def test_versions_skip_tags_that_are_not_semver_and_say_why():
    result = select_versions(dict.fromkeys(["v1.2", "01.0.0", "v1.0.0-01", "release", "v1.0.0"], SHA))
    assert [tv.canonical for tv in result.versions] == ["1.0.0"]
    reasons = {s.tag: s.reason for s in result.skipped}
    assert "exactly three numbers" in reasons["v1.2"]
    assert "leading zero" in reasons["01.0.0"]
    assert "prerelease" in reasons["v1.0.0-01"]
    assert set(reasons) == {"v1.2", "01.0.0", "v1.0.0-01", "release"}


def test_leading_v_is_dropped_from_listed_versions():
    assert listed(["v2.1.0", "v2.1.0-rc.1"]) == ["2.1.0", "2.1.0-rc.1"]


def test_duplicate_tags_of_one_version_serve_one_deterministically():
    for order in (["v1.2.0", "1.2.0"], ["1.2.0", "v1.2.0"]):
        result = select_versions({t: t for t in order})
        assert [(tv.canonical, tv.tag) for tv in result.versions] == [("1.2.0", "1.2.0")]
        assert [s.tag for s in result.skipped] == ["v1.2.0"]
        assert "duplicate of version 1.2.0" in result.skipped[0].reason


def test_build_metadata_does_not_make_a_second_version():
    result = select_versions({"v1.0.0+b1": SHA, "v1.0.0+b2": SHA})
    assert len(result.versions) == 1
    assert len(result.skipped) == 1


def test_tag_prefix_selects_a_monorepo_modules_tags():
    tags = ["network/v1.4.0", "network/v1.5.0-rc.1", "compute/v9.0.0", "v3.0.0", "network/latest"]
    result = select_versions(dict.fromkeys(tags, SHA), "network/")
    assert [tv.canonical for tv in result.versions] == ["1.5.0-rc.1", "1.4.0"]
    # other modules' tags are not this module's business; a bad tag with our prefix is.
    assert [s.tag for s in result.skipped] == ["network/latest"]


def test_latest_prefers_releases_over_prereleases():
    assert select_versions({"v2.0.0-rc.1": SHA, "v1.9.0": SHA}).latest().canonical == "1.9.0"
    assert select_versions({"v2.0.0-rc.1": SHA}).latest().canonical == "2.0.0-rc.1"


def test_find_accepts_the_forms_clients_send():
    result = select_versions({"v1.2.3": "a", "v2.0.0+build.7": "b"})
    assert result.find("1.2.3").tag == "v1.2.3"
    assert result.find("v1.2.3").tag == "v1.2.3"
    assert result.find("2.0.0").tag == "v2.0.0+build.7"
    assert result.find("2.0.0+build.7").tag == "v2.0.0+build.7"
    assert result.find("1.2.4") is None
    assert result.find("1.2") is None


_IDENT = st.one_of(
    st.integers(0, 30).map(str), st.sampled_from(["a", "b", "rc", "alpha", "beta", "x-1", "A", "Z", "a1", "1a"])
)
_VERSION = st.builds(
    lambda major, minor, patch, pre: f"{major}.{minor}.{patch}" + ("-" + ".".join(pre) if pre else ""),
    st.integers(0, 3),
    st.integers(0, 3),
    st.integers(0, 12),
    st.lists(_IDENT, max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_VERSION, min_size=1, max_size=30, unique=True))
def test_listed_order_is_semver_precedence_for_any_versions(versions):
    # gitreg sorts with its own key (fast for 10,000 tags); semver's comparison is the reference.
    expected = [str(v) for v in sorted({semver.Version.parse(v) for v in versions}, reverse=True)]
    assert listed(versions) == expected


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(
        _VERSION,
        _VERSION.map(lambda v: v + "+build.7"),
        _VERSION.map(lambda v: "v" + v),
        st.text(alphabet="0123456789.-+vab\n \u0661", max_size=12),
    )
)
def test_the_fast_check_of_a_persisted_version_agrees_with_the_parser(text):
    # index.json's versions are checked at start with one regex: exactly what the parser
    # accepts as a listed version (SemVer 2.0, no leading `v`), nothing more, nothing less.
    assert is_canonical(text) == (parse_version(text) is not None and not text.startswith("v"))
