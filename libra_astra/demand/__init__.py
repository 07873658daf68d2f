"""Demand: the collective traffic per network dimension, read from a file or derived from traces."""
