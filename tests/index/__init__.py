"""Tests of gitreg/index/."""
