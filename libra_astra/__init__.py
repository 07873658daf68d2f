"""libra_astra: LIBRA bandwidth optimization from Chakra ET traces to ASTRA-sim inputs."""

__version__ = "0.1.0"
