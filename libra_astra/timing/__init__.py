"""Time models: how long collectives and rank classes take at given bandwidths, and the replay."""
