"""Org mode: GitLab groups and GitHub organizations listed through their APIs and served as modules.

May import: `gitreg.core`, `gitreg.config`, `gitreg.forges`, `gitreg.storage`.
"""
