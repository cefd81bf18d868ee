"""Tests of gitreg/providers/."""
