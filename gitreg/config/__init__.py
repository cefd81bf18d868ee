"""Configuration: the frozen model (`model`), TOML parsing and validation, and which rule
serves an address (`rules`).

May import: `gitreg.core`.
"""
