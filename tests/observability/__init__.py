"""Tests of gitreg/observability/."""
