"""Tests of gitreg/git/."""
