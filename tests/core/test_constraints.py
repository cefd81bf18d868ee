"""Terraform version constraints as Terraform (hashicorp/go-version) reads them."""

from __future__ import annotations

import pytest

from gitreg.core.constraints import ConstraintError, parse_constraint

VERSIONS = ["0.9.0", "1.0.0", "1.2.0", "1.2.5", "1.3.0", "1.4.2", "1.9.9", "2.0.0-rc.1", "2.0.0", "2.1.0", "3.0.0"]


@pytest.mark.parametrize(
    ("constraint", "allowed"),
    [
        ("~> 1.2", ["1.2.0", "1.2.5", "1.3.0", "1.4.2", "1.9.9"]),
        ("~> 1.2.0", ["1.2.0", "1.2.5"]),
        ("~> 1", ["1.0.0", "1.2.0", "1.2.5", "1.3.0", "1.4.2", "1.9.9", "2.0.0", "2.1.0", "3.0.0"]),
        ("< 2.0.0", ["0.9.0", "1.0.0", "1.2.0", "1.2.5", "1.3.0", "1.4.2", "1.9.9"]),
        (">= 1.2, < 1.4", ["1.2.0", "1.2.5", "1.3.0"]),
        ("= 1.4.2", ["1.4.2"]),
        ("1.4.2", ["1.4.2"]),
        ("v1.4.2", ["1.4.2"]),
        ("!= 1.4.2, >= 1.3", ["1.3.0", "1.9.9", "2.0.0", "2.1.0", "3.0.0"]),
        ("= 2.0.0-rc.1", ["2.0.0-rc.1"]),
        (">= 2.0.0-rc.1", ["2.0.0-rc.1"]),  # a prerelease term meets only prereleases of its numbers
        ("> 1.9.9", ["2.0.0", "2.1.0", "3.0.0"]),  # a release term never meets a prerelease
    ],
)
def test_a_constraint_allows_what_terraform_would_install(constraint: str, allowed: list[str]) -> None:
    parsed = parse_constraint(constraint)
    assert [v for v in VERSIONS if parsed.allows(v)] == allowed


def test_newest_is_the_version_terraform_picks() -> None:
    assert parse_constraint("~> 1.2").newest(VERSIONS) == "1.9.9"
    assert parse_constraint("~> 1.2").newest([v for v in VERSIONS if v != "1.9.9"]) == "1.4.2"
    assert parse_constraint("> 5").newest(VERSIONS) is None
    assert parse_constraint(">= 1.0").allows("1.2.0+build.5")


@pytest.mark.parametrize("text", ["", "  ", "latest", "~> 1.2 || 2", ">> 1", "1.2.3.4", "~> 1-beta", "x" * 600, "=="])
def test_a_bad_constraint_is_refused_with_its_part(text: str) -> None:
    with pytest.raises(ConstraintError) as caught:
        parse_constraint(text)
    assert "constraint" in str(caught.value)
