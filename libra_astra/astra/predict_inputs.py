"""ASTRA-sim's inputs read for ``predict``: the files the simulator would be given (workload
prefix, analytical network YAML, system.json, communicator groups, ``--num-queues-per-dim``), or
an emitted run directory's (its manifest's simulator arguments), turned into the demand and the
:class:`~libra_astra.timing.astra_durations.AstraSystem` that timing/astra_predict.py answers
with. What ASTRA-sim would refuse, never finish or run with settings not modeled is refused here
with one line naming the file and the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from ..demand.from_traces import demand_from_traces
from ..demand.groups import comm_groups_from_dict
from ..demand.summary import TraceSummary
from ..demand.types import Demand
from ..errors import LibraError
from ..files import load_yaml, read_json
from ..model.network import Network, network_from_dict
from ..model.numbers import check_number
from ..model.collectives import P2P
from ..timing.astra_aware import check_aware_links
from ..timing.astra_collective import Link, astra_bw_gbps
from ..timing.astra_durations import AstraSystem
from ..timing.astra_predict import AstraPrediction, predict_astra
from ..timing.astra_settings import IMPLEMENTATION_KEYS, KINDS, settings_from_json
from .manifest import load_manifest

# Simulator flags that change nothing predict models, with their defaults (CmdLineParser.cc).
_SIM_DEFAULTS = {"comm-scale": "1", "injection-scale": "1", "rendezvous-protocol": "false", "compute-scale": "1"}
_PATH_FLAGS = ("workload-configuration", "network-configuration", "system-configuration",
               "comm-group-configuration")
_IGNORED_FLAGS = ("remote-memory-configuration", "logging-configuration", "logging-folder")


@dataclass(frozen=True)
class SimInputs:
    """The simulator's inputs, as its command line names them."""

    workload: str                                   # PREFIX of PREFIX.RANK.et
    network: str                                    # analytical network YAML (or libra_astra's)
    system: str                                     # system.json
    comm_groups: str | None = None                  # --comm-group-configuration
    queues_per_dim: int = 1                         # --num-queues-per-dim
    bandwidth_gbps: tuple[float, ...] | None = None  # for a libra_astra network file (it has none)
    run_dir: str | None = None                      # the emitted directory they came from
    flags: Mapping[str, str] = field(default_factory=dict)   # other simulator flags, checked
    backend: str = "unaware"                        # the analytical binary: congestion-unaware | -aware


@dataclass(frozen=True)
class Predicted:
    inputs: SimInputs
    network: Network
    system: AstraSystem
    demand: Demand
    summary: TraceSummary
    prediction: AstraPrediction
    notes: tuple[str, ...] = ()


def inputs_from_args(args: Mapping[str, str], base: Path, where: str) -> SimInputs:
    """SimInputs from simulator flags (``{"workload-configuration": ..., ...}``), paths relative to ``base``."""
    for key in _PATH_FLAGS[:3]:
        if not args.get(key):
            raise LibraError(f"{where}: the simulator call has no --{key}; re-emit the directory")
    groups = args.get("comm-group-configuration")
    if groups is not None and "empty" in groups:
        groups = None       # ASTRA-sim's "no groups" (any name with "empty" in it)
    queues = args.get("num-queues-per-dim", "1")
    if not queues.isdigit() or int(queues) < 1:
        raise LibraError(f"{where}: --num-queues-per-dim must be a positive integer, got {queues!r}")
    rest = {k: v for k, v in args.items() if k not in _PATH_FLAGS and k not in _IGNORED_FLAGS
            and k != "num-queues-per-dim"}
    return SimInputs(str(base / args["workload-configuration"]), str(base / args["network-configuration"]),
                     str(base / args["system-configuration"]), str(base / groups) if groups else None,
                     int(queues), None, None, rest)


def inputs_from_run_dir(run_dir: str | Path) -> SimInputs:
    """The inputs the simulator call in an emitted directory's manifest names."""
    m = load_manifest(run_dir)
    args: dict[str, str] = {}
    for a in m.simulator.args:
        key, eq, value = a.lstrip("-").partition("=")
        if not a.startswith("--") or not eq:
            raise LibraError(f"{Path(run_dir) / 'manifest.json'}: simulator argument {a!r} is not --key=value; "
                             "re-emit the directory")
        args[key] = value
    base = Path(run_dir) / m.simulator.run_from
    return replace(inputs_from_args(args, base, str(Path(run_dir) / "manifest.json")), run_dir=str(run_dir))


def read_network(path: str, bandwidth_gbps: tuple[float, ...] | None) -> tuple[Network, tuple[Link, ...]]:
    """The network and its links as ASTRA-sim reads them: an analytical YAML's ``bandwidth`` is
    GiB/s (astra_bw_gbps); a libra_astra network file has none, so ``bandwidth_gbps`` (GB/s) is needed."""
    data = load_yaml(path, "network")
    net = network_from_dict(data, path)
    astra = isinstance(data, Mapping) and "npus_count" in data and "dimensions" not in data
    if astra and bandwidth_gbps is not None:
        raise LibraError(f"{path}: an ASTRA-sim network file gives its bandwidth; leave out --bandwidth")
    if astra:
        raw = data.get("bandwidth")
        if not isinstance(raw, list) or len(raw) != net.num_dims:
            raise LibraError(f"{path}: 'bandwidth' must list one value per dimension (GiB/s, as ASTRA-sim reads it), "
                             f"got {raw!r}")
        bws = [astra_bw_gbps(check_number(v, path, f"bandwidth[{i}]", minimum=0, strict=True))
               for i, v in enumerate(raw)]
    else:
        if bandwidth_gbps is None or len(bandwidth_gbps) != net.num_dims:
            raise LibraError(f"{path}: a libra_astra network file has no bandwidths; give --bandwidth with "
                             f"{net.num_dims} values in GB/s (one per dimension), or ASTRA-sim's network.yml")
        bws = [check_number(v, path, f"--bandwidth[{i}]", minimum=0, strict=True) for i, v in enumerate(bandwidth_gbps)]
    return net, tuple(Link(d.topology, d.npus, b, float(d.latency_ns)) for d, b in zip(net.dims, bws))


def read_system(path: str, queues_per_dim: int, flags: Mapping[str, str]) -> tuple[Any, tuple[float, float] | None]:
    """(SystemSettings, (peak-perf TFLOPS, local-mem-bw GB/s) when roofline-enabled) of a system.json."""
    data = read_json(path, "system configuration")
    if isinstance(data, Mapping):
        if "per-node-custom-implementation" in data:
            raise LibraError(f"{path}: 'per-node-custom-implementation': custom programs per workload node are not "
                             "modeled; use the *-implementation-custom keys or the native ones")
        if data.get("replay-only", 0) not in (0, False):
            raise LibraError(f"{path}: 'replay-only' is set: ASTRA-sim then replays recorded durations for "
                             "communication too, which is not modeled; set it to 0")
    for key, v in flags.items():
        if key not in _SIM_DEFAULTS:
            raise LibraError(f"simulator flag --{key} is not one ASTRA-sim's analytical binary reads; remove it")
        try:
            default = float(v) == 1.0 if key != "rendezvous-protocol" else v.lower() in ("false", "0")
        except ValueError:
            default = False
        if not default:
            raise LibraError(f"simulator flag --{key}={v} is not modeled; leave it at {_SIM_DEFAULTS[key]}")
    settings = settings_from_json(data, path, queues_per_dim)
    roofline = None
    if data.get("roofline-enabled", 0) not in (0, False):
        peak, mem = data.get("peak-perf"), data.get("local-mem-bw")
        for key, v in (("peak-perf", peak), ("local-mem-bw", mem)):
            check_number(v, path, key, minimum=0, strict=True)
        roofline = (float(peak), float(mem))
    return settings, roofline


def read_custom(path: str, base: Path) -> tuple[tuple[str, str], ...]:
    """(collective kind, ET prefix) of a system.json's ``*-implementation-custom`` keys, each prefix
    relative to ``base`` (the simulator's working directory) unless absolute."""
    data = read_json(path, "system configuration")
    out = []
    for kind in KINDS:
        key = IMPLEMENTATION_KEYS[kind] + "-custom"
        if key not in data:
            continue
        v = data[key]
        if not isinstance(v, list) or len(v) != 1 or not isinstance(v[0], str):
            raise LibraError(f"{path}: {key!r} must list exactly one ET prefix (PREFIX of PREFIX.RANK.et; ASTRA-sim "
                             f"throws otherwise), got {v!r}")
        out.append((kind, v[0] if Path(v[0]).is_absolute() else str(base / v[0])))
    return tuple(out)


def read_groups(path: str | None) -> dict[str, tuple[int, ...]]:
    """The communicator groups of a --comm-group-configuration file, checked, with their members
    in the file's order: the order of ASTRA-sim's ring over them."""
    if path is None:
        return {}
    data = read_json(path, "comm-group")
    comm_groups_from_dict(data, path)
    return {str(int(k)): tuple(v) for k, v in data.items()}


def predict_inputs(inputs: SimInputs, on_progress: Callable[[int, int], None] | None = None) -> Predicted:
    """What ASTRA-sim would print for ``inputs``, predicted.

    Raises
    ------
    LibraError
        A file missing or malformed; a setting, flag or collective not modeled; a collective
        ASTRA-sim never finishes or exits on (each as one line naming the file and the key).
    """
    net, links = read_network(inputs.network, inputs.bandwidth_gbps)
    if inputs.backend == "aware":
        check_aware_links(links, inputs.network)
    settings, roofline = read_system(inputs.system, inputs.queues_per_dim, inputs.flags)
    ordered = read_groups(inputs.comm_groups)
    peak, mem = roofline if roofline else (None, None)
    prefix = inputs.workload
    demand, summary = demand_from_traces(prefix, net, comm_groups=inputs.comm_groups,
                                         peak_tflops=peak, mem_bw_gbps=mem, on_progress=on_progress)
    zero = sum(v for k, v in summary.skipped.items() if k.startswith("COMP without num_ops or tensor_size"))
    if roofline and zero:
        raise LibraError(f"{inputs.system}: roofline-enabled, and {zero} GPU compute node(s) of {prefix} have no num_ops "
                         "or tensor_size: ASTRA-sim skips them (or divides 0 by 0) and then never finishes their "
                         "ranks; give them both, or set roofline-enabled to 0")
    # METADATA groups (sorted, as PyTorch lists them) and the file's, in its order
    groups = {**summary.metadata_groups, **ordered}
    base = Path(inputs.run_dir) / load_manifest(inputs.run_dir).simulator.run_from if inputs.run_dir else Path()
    system = AstraSystem(net, links, settings, groups, inputs.system,
                         inputs.comm_groups or "the traces' METADATA process groups", inputs.backend,
                         read_custom(inputs.system, base))
    notes = []
    gz = summary.gzipped_files
    if gz:
        notes.append(f"{gz} rank file(s) of {prefix} are gzipped, which ASTRA-sim cannot read (it opens "
                     "PREFIX.RANK.et): these are its times for them unpacked ('libra-astra doctor --fix' writes them so)")
    if inputs.backend == "aware" and any(c.algorithm == "p2p" or c.type == P2P
                                         for rc in demand.rank_classes for c in rc.collectives):
        notes.append("sends are timed alone on their links: on the congestion-aware backend a send that overlaps "
                     "other traffic on a link can take longer than predicted")
    return Predicted(inputs, net, system, demand, summary, predict_astra(demand, system), tuple(notes))


def skew_notes(pr: AstraPrediction) -> list[str]:
    """What the prediction cannot say exactly, in words (empty when it is exact)."""
    if not pr.skewed:
        return []
    return [f"at {pr.skewed} collective(s) shared by rank classes the ranks arrive up to {pr.skew_ns:,} ns apart: "
            "predicted as starting when the last arrives, while ASTRA-sim lets the early ranks begin, so its finish "
            "times can differ from these, by at most about that spread per such collective"]


def prediction_to_dict(p: Predicted) -> dict[str, Any]:
    """The prediction as JSON: ASTRA-sim's per-rank figures and ours."""
    pr = p.prediction
    slow = pr.slowest
    return {
        "inputs": {"workload": p.inputs.workload, "network": p.inputs.network, "system": p.inputs.system,
                   "comm_groups": p.inputs.comm_groups, "num_queues_per_dim": p.inputs.queues_per_dim,
                   "run_dir": p.inputs.run_dir},
        "simulator": f"astra-sim 518bd51, analytical congestion-{p.inputs.backend}",
        "backend": p.inputs.backend,
        "et_nodes": p.summary.nodes_total,
        "time_ns": pr.time_ns, "slowest_rank": slow.rank, "mean_ns": pr.mean_ns,
        "exposed_comm_ns": slow.exposed_comm_ns,
        "skewed_collectives": pr.skewed, "arrival_skew_ns": pr.skew_ns,
        "classes": [{"ranks": list(rc.ranks), "finished_ns": f, "compute_ns": c, "exposed_comm_ns": f - c,
                     "uneven": ci in pr.uneven_classes}
                    for ci, (rc, f, c) in enumerate(zip(p.demand.rank_classes, pr.class_finish_ns,
                                                        pr.class_compute_ns))],
        "ranks": [{"rank": r.rank, "finished_ns": r.finished_ns, "exposed_comm_ns": r.exposed_comm_ns}
                  for r in pr.ranks],
        "notes": list(p.notes) + skew_notes(pr),
    }
