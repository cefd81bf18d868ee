"""Git hosts' REST APIs (GitHub, GitLab): listings, payloads, webhook signatures.

May import: `gitreg.core`, `gitreg.config`.
"""
