"""Bandwidth optimization: constraints, the convex problem, its solver, and the design file."""
