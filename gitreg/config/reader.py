"""Reading one TOML table of the config: typed values, `${VAR}` expansion, problems by key path.

A reader never raises: every problem is recorded under its key path (`modules[2].repository:
missing`) in one shared list, so `gitreg check` can list them all at once.
"""

from __future__ import annotations

import builtins
import difflib
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from gitreg.config.model import MAX_TIMEOUT

Choice = TypeVar("Choice", bound=str)
# Keys whose value is a secret: a `${VAR}` in one that is set but empty is a problem (#33).
SECRET_KEYS = frozenset(
    {"token", "tokens", "password", "signing_key", "metrics_token", "github_secret", "gitlab_token"}
    | {"oauth_client_secret"}  # [[auth.forges]]
)
_ENV_RE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# A value still to be chosen: example files (deploy/kubernetes/secret.yaml) ship secrets that
# start with this, in any case, and gitreg refuses to start with one, wherever it is used.
UNSET_MARKER = "CHANGE-ME"


class TableReader:
    """Reads one TOML table, recording problems under its key path instead of raising."""

    # The methods `str`, `int` and `bool` shadow the built-in types in this class's body: the
    # annotations after them spell the types `builtins.str` and so on.

    def __init__(self, table: Any, path: str, problems: list[str], env: Mapping[str, str]) -> None:
        self.path = path
        self.problems = problems
        self.env = env
        self.seen: set[str] = set()
        if not isinstance(table, dict):
            self.error("", f"must be a table, not {type_name(table)}")
            table = {}
        self.table: dict[str, Any] = table

    def key(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path and key else (self.path or key)

    def error(self, key: str, reason: str) -> None:
        self.problems.append(f"{self.key(key)}: {reason}")

    def raw(self, key: str, required: bool) -> Any:
        """The value as decoded (any type), marked as read; None when absent."""
        self.seen.add(key)
        if key not in self.table:
            if required:
                self.error(key, "missing")
            return None
        return self.table[key]

    def str(self, key: str, default: str | None = None, required: bool = False) -> str | None:
        value = self.raw(key, required)
        if value is None:
            return default
        if not isinstance(value, str):
            self.error(key, f"must be a string, not {type_name(value)}")
            return default
        return self.expand(key, value, default)

    def expand(self, key: builtins.str, value: builtins.str, default: builtins.str | None) -> builtins.str | None:
        """`value` with `${VAR}` expanded; `default` when a variable is unset (reported once, here).

        A value missing its variable is not checked further: "${TOKEN} is not set" is the one
        problem, not also "shorter than 16 characters" or "not a Git URL". Nor is a placeholder
        (`CHANGE-ME...`, as written or in a variable): the problem is that it was never set.
        """
        failed: list[str] = []
        if _unset(value):
            failed.append(f"is a placeholder ({UNSET_MARKER}...): set the real value")
        expanded = expand_env(value, self.env, failed.append)
        if not failed and not expanded and key.partition("[")[0] in SECRET_KEYS:
            # `GITHUB_TOKEN=` (a secret store's missing entry) would make gitreg silently anonymous (#33).
            for var in sorted({m[1] for m in _ENV_RE.finditer(value) if m[1] and self.env.get(m[1]) == ""}):
                failed.append(f"environment variable {var} is set but empty: set the secret, or leave the key out")
        for reason in failed:
            self.error(key, reason)
        return default if failed else expanded

    def number(self, key: builtins.str, default: float, minimum: float = 0.0, maximum: float = MAX_TIMEOUT) -> float:
        """A finite number in [minimum, maximum]; nan, inf and out-of-range values are problems."""
        value = self.raw(key, False)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.error(key, f"must be a number, not {type_name(value)}")
            return default
        # `not minimum <= value <= maximum` is also true for nan; an int beyond any float compares exactly.
        if not minimum <= value <= maximum:
            self.error(key, f"must be a number between {minimum:g} and {maximum:g}, not {_shown(value)}")
            return default
        return float(value)

    def int(
        self, key: builtins.str, default: builtins.int, minimum: builtins.int = 0, maximum: builtins.int = 2**53
    ) -> builtins.int:
        value = self.raw(key, False)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(key, f"must be an integer, not {type_name(value)}")
            return default
        if not minimum <= value <= maximum:
            self.error(key, f"must be between {minimum} and {maximum}, not {_shown(value)}")
            return default
        return value

    def bool(self, key: builtins.str, default: builtins.bool) -> builtins.bool:
        value = self.raw(key, False)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.error(key, f"must be true or false, not {type_name(value)}")
            return default
        return value

    def str_list(self, key: builtins.str, default: tuple[builtins.str, ...] = ()) -> tuple[builtins.str, ...]:
        value = self.raw(key, False)
        if value is None:
            return default
        if not isinstance(value, list):
            self.error(key, f"must be a list of strings, not {type_name(value)}")
            return default
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, str):
                self.error(f"{key}[{i}]", f"must be a string, not {type_name(item)}")
                continue
            expanded = self.expand(f"{key}[{i}]", item, None)
            if expanded is not None:
                out.append(expanded)
        return tuple(out)

    def section(self, key: builtins.str) -> TableReader:
        """A reader of the table `key` (an empty one when absent), sharing this one's problems."""
        return TableReader(self.raw(key, False) or {}, self.key(key), self.problems, self.env)

    def table_list(self, key: builtins.str) -> list[Any]:
        value = self.raw(key, False)
        if value is None:
            return []
        if not isinstance(value, list):
            self.error(key, f"must be an array of tables ([[{key}]]), not {type_name(value)}")
            return []
        return value

    def problems_for(self, key: builtins.str) -> builtins.bool:
        """True when a problem was already recorded for `key` or a key inside it."""
        full = self.key(key)
        return any(p.startswith((f"{full}:", f"{full}.", f"{full}[")) for p in self.problems)

    def finish(self) -> None:
        """Report keys nobody asked for: a typo must not be silently ignored."""
        for key in self.table:
            if key not in self.seen:
                self.error(key, "unknown key" + did_you_mean(key, self.seen))


def one_of(r: TableReader, key: str, value: str | None, choices: tuple[Choice, ...]) -> Choice | None:
    """`value` as one of `choices` (typed as the Literal they are); a problem, and None, for any other."""
    if value is None:
        return None
    for choice in choices:
        if value == choice:
            return choice
    expected = " or ".join(f'"{choice}"' for choice in choices)
    r.error(key, f"must be {expected}, not {value!r}")
    return None


def did_you_mean(key: str, known: set[str] | frozenset[str]) -> str:
    """`; did you mean X?` for the known key a typo most likely meant, else "".

    A known key the typo begins (`repo` -> `repository`) comes first, then the closest by
    difflib's ratio (`repsitory`, `tag_prefx`).
    """
    if not known:
        return ""
    lowered = key.lower()
    prefixed = sorted(k for k in known if len(lowered) >= 3 and k.startswith(lowered) and k != lowered)
    close = prefixed[:1] or difflib.get_close_matches(lowered, sorted(known), n=1, cutoff=0.75)
    return f"; did you mean {close[0]}?" if close else ""


def _shown(value: int | float) -> str:
    """A number for a message: TOML integers have no size limit, so a huge one is cut short."""
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return text if len(text) <= 24 else text[:20] + "..."


def type_name(value: Any) -> str:
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a table",
    }.get(type(value), type(value).__name__)


def _unset(value: str) -> bool:
    return value.strip()[: len(UNSET_MARKER)].upper() == UNSET_MARKER


def expand_env(value: str, env: Mapping[str, str], error: Callable[[str], object]) -> str:
    """Replace `${VAR}` with the environment's value; `$$` is a literal `$`.

    An unset variable, or one holding a placeholder (`CHANGE-ME...`), is an `error`.
    """

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        var = match.group(1)
        if var not in env:
            error(f"environment variable {var} is not set")
            return ""
        if _unset(env[var]):
            # Named, never shown: the variable may hold a real secret that merely starts alike.
            error(f"environment variable {var} holds a placeholder ({UNSET_MARKER}...): set the real value")
        return env[var]

    return _ENV_RE.sub(replace, value)
