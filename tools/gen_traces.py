#!/usr/bin/env python3
"""Generate synthetic Chakra ET traces from a model spec.

Example: python tools/gen_traces.py traces/gpt3_tp8_dp8/spec.yml --out traces/gpt3_tp8_dp8/gpt3 --force
"""

from libra_astra.tracegen.cli import generate_command

if __name__ == "__main__":
    generate_command(prog_name="gen_traces.py")
