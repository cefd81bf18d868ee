"""Metrics (`/metrics`, `/readyz`) and log formats.

May import: everything below the web layer.
"""
