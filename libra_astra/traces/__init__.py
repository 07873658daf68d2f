"""Chakra execution traces: finding the rank files, decoding them, and writing real ET."""
