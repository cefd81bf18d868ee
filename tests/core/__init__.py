"""Tests of gitreg/core/."""
