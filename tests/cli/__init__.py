"""Tests of gitreg/cli/."""
