"""Measured runs: Kineto profiles read, steps and collectives measured, the network calibrated."""
