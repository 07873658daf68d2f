"""The model of the machine: the network and its grid, the cost of building it, the collectives it runs."""
