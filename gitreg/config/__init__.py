"""Configuration: what a config file may say, how it is read, and which rule serves an address.

- `model`: the frozen dataclasses (`Config` and its sections), their defaults and the bounds
  of their values, including the git pool's defaults that depend on `[git] max_concurrency`.
- `parse`: TOML -> `Config`: `load_config`, `parse_config` (one function per section), the
  validation of every key, and `module_rule_from_flag` for `--module`; what serves modules is
  read by `module_rules` (`[[modules]]`) and `orgs` (`[[orgs]]`), the identities `[auth]` opens
  the registry to by `identity` (`[[auth.forges]]`, `[[auth.oidc]]`), the providers served from
  releases by `providers` (`[[providers]]`).
- `reader`: `TableReader`, which reads one TOML table, expands `${VAR}` and records each problem
  under its key path (`modules[2].repository: missing`) instead of raising.
- `rules`: the `{namespace}`/`{name}`/`{system}` template syntax (`TEMPLATE_RE`, `fill_template`)
  and which `[[modules]]` rule serves an address (`RuleIndex`).

May import: `gitreg.core` only. Everything else in gitreg imports config, never the reverse:
defaults that other packages use (the git pool's sizes) are computed here.
"""
