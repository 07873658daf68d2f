"""ASTRA-sim's own example workloads (examples/workload/microbenchmarks of its repository) and
networks to run them on: input that libra_astra did not write, for tools/validate_sim.py and
tests/test_astra_examples.py.

The workloads are not shipped here; point ASTRA_SIM_EXAMPLES (or --examples) at an ASTRA-sim
checkout or at its examples/ folder.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from libra_astra.errors import LibraError
from libra_astra.model.network import Network, network_from_dict

EXAMPLES_ENV = "ASTRA_SIM_EXAMPLES"
_SET = re.compile(r"(\d+)npus_\w+")


class Example(NamedTuple):
    label: str        # e.g. "all_reduce/8npus_1MB"
    prefix: Path      # PREFIX of PREFIX.r.et
    npus: int


def find_examples(root: str | Path) -> list[Example]:
    """Every microbenchmark trace set below ``root`` (a checkout, its examples/ or the
    microbenchmarks folder itself), smallest first."""
    base = Path(root)
    for sub in ("examples/workload/microbenchmarks", "workload/microbenchmarks", "microbenchmarks", "."):
        if (base / sub).is_dir() and any((base / sub).glob("*/*npus_*")):
            base = base / sub
            break
    else:
        raise LibraError(f"{root}: no ASTRA-sim microbenchmark workloads (examples/workload/microbenchmarks/"
                         f"KIND/Nnpus_SIZE/KIND.r.et) below it; point {EXAMPLES_ENV} at an ASTRA-sim checkout")
    found = []
    for d in sorted(base.glob("*/*npus_*")):
        m = _SET.fullmatch(d.name)
        if m and (d / f"{d.parent.name}.0.et").is_file():
            found.append(Example(f"{d.parent.name}/{d.name}", d / d.parent.name, int(m.group(1))))
    return sorted(found, key=lambda e: (e.npus, e.label))


def _net(name: str, dims: list[tuple[str, int, float]]) -> Network:
    return network_from_dict({"name": name, "dimensions": [
        {"name": f"d{i}", "topology": t, "npus": n, "latency_ns": lat, "cost_class": "InterNode"}
        for i, (t, n, lat) in enumerate(dims)]})


def example_networks(npus: int) -> list[Network]:
    """The ring of ASTRA-sim's own example network (examples/network/analytical/Ring_Nnpus.yml:
    500 ns per hop), and a two-dimensional network of the same size whose bandwidth split matters."""
    nets = [_net(f"ring{npus}", [("Ring", npus, 500.0)])]
    two = {4: [("Ring", 2, 500.0), ("Ring", 2, 500.0)],
           8: [("Ring", 2, 500.0), ("Ring", 4, 500.0)],
           16: [("FullyConnected", 4, 200.0), ("Switch", 4, 700.0)]}.get(npus)
    if two:
        nets.append(_net("x".join(f"{t[0]}{n}" for t, n, _ in two), two))
    return nets
