"""Tests of gitreg/registry/."""
