"""Tests of gitreg/storage/."""
