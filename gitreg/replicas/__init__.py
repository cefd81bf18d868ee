"""State several replicas share (Redis), or this process alone keeps (memory).

May import: `gitreg.core`, `gitreg.config`, `gitreg.git`.
"""
