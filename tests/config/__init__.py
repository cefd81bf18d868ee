"""Tests of gitreg/config/."""
