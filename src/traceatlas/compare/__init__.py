"""Comparing runs: per-entity statistics, the regression gate, and matching of entities."""
