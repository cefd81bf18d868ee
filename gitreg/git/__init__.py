"""Git: the one bounded pool that runs blocking git work (`pool`) and the one runner that
starts git processes (`runner`). The only package that starts git.

May import: `gitreg.core`, `gitreg.config`.
"""
