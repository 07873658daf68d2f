"""Emit ready-to-run ASTRA-sim inputs (analytical backend) for one workload of a design.

The emitted directory, built in a temporary sibling and renamed into place::

    DIR/network.yml         topology, npus_count, bandwidth (GiB/s, see below), latency (ns per hop)
    DIR/system.json         ring collectives, one chunk in flight per dimension, localBWAware
    DIR/memory.json         {"memory-type": "NO_MEMORY_EXPANSION"}
    DIR/workload/NAME.r.et  one Chakra ET file per NPU (rewrite.py from traces, synthesize.py from a demand)
    DIR/comm_groups.json    only if some communicator group must stay a flat ring
    DIR/manifest.json       design, versions, logical network, settings, command line, notes
    DIR/run.sh              the simulator command, runnable by hand from anywhere

Choices that make the simulated time comparable with the time model:

- Bandwidth: ASTRA-sim reads the ``bandwidth`` values as GiB/s (value * 2^30 / 1e9 bytes per ns), so
  the design's B GB/s is written as B * 1e9 / 2^30; a comment keeps the GB/s value.
- ``ring`` for every collective and dimension, ``active-chunks-per-dimension`` 1 and one queue per
  dimension: the analytical backend gives concurrent chunks the full link bandwidth each, so
  anything else would simulate more bandwidth than the design has.
- ``preferred-dataset-splits`` k (default 1): with k = 1 a multi-dimensional collective takes the sum
  of its per-dimension times; with larger k chunks pipeline across dimensions and the time tends to
  the slowest dimension's (LIBRA's max).
- All-to-all with ``ring`` forwards data around the ring: ASTRA-sim charges m (p - 1) / 2 bytes per NPU
  in a dimension of p, not the m (p - 1) / p of a direct exchange (``direct`` would give each
  concurrent message the full bandwidth instead).
- ``local-mem-bw`` large by default, since every reducing step costs 3 * bytes / local-mem-bw.
- ``endpoint-delay`` 1 ns by default: a dimension with latency 0 and endpoint-delay 0 aborts the
  simulator, which is refused here.

Communicator groups that cover part of a dimension are made whole by splitting that dimension in
the emitted logical network (logical.py); the manifest records the split.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .. import __version__
from .. import limits, publish
from ..traces import chakra_io as cio
from ..traces import completion
from ..traces.cpu_groups import GroupMap, load_group_map
from ..traces.files import rank_files
from ..demand.types import Demand, load_demand
from ..optimize.design import Design, WorkloadRef, design_to_dict, load_design
from ..errors import LibraError
from ..demand.groups import load_comm_groups
from ..timing.predict import predict
from ..timing.model import simulator_model
from ..timing.settings import describe_model, emit_settings, model_settings
from ..demand.from_traces import demand_from_traces
from . import rundir
from .logical import LogicalNetwork, plan_for_demand, plan_for_groups
from .manifest import BINARY_ENV, DEFAULT_BINARY, Manifest, SimulatorCall, write_manifest
from .rewrite import rewrite_traces
from .stats import WorkloadStats
from .synthesize import synthesize
from .trace_groups import trace_metadata_groups
from .user_system import user_system_config

SCHEDULING_POLICIES = ("LIFO", "FIFO")


@dataclass(frozen=True)
class EmitResult:
    """What :func:`emit` wrote. ``args`` are the simulator flags, relative to ``path``."""

    path: Path
    workload: str
    source: str
    network: LogicalNetwork
    splits: int
    args: tuple[str, ...]
    logging_folder: str
    notes: tuple[str, ...]
    stats: dict[str, Any]
    prediction: dict[str, Any] | None = None     # manifest.json's "prediction"
    local_mem_bw_gbps: float | None = None

    @property
    def npus_count(self) -> int:
        return self.network.npus_count

    @property
    def command_line(self) -> str:
        return shlex.join((DEFAULT_BINARY,) + self.args + (f"--logging-folder={self.logging_folder}",))


def _pick_workload(design: Design, name: str | None) -> WorkloadRef:
    names = [w.name for w in design.workloads]
    if not design.workloads:
        raise LibraError(f"design {design.name!r} has no workload to emit; optimize it for a demand or traces first")
    if name is None:
        if len(design.workloads) > 1:
            raise LibraError(f"design {design.name!r} has {len(names)} workloads {names}; choose one with --workload NAME")
        return design.workloads[0]
    for w in design.workloads:
        if w.name == name:
            return w
    raise LibraError(f"design {design.name!r} has no workload {name!r}; choose one of {names}")


def _num_list(xs: Sequence[float]) -> str:
    return "[ " + ", ".join(repr(float(x)) for x in xs) + " ]"


def network_yaml(lnet: LogicalNetwork, design_name: str) -> str:
    """ASTRA-sim network YAML for the logical network (bandwidth converted to GiB/s)."""
    lines = [
        f"# ASTRA-sim analytical network for design {design_name!r}, emitted by libra_astra {__version__}.",
        "# ASTRA-sim reads 'bandwidth' as GiB/s (2^30 bytes/s): each value is the design's GB/s * 1e9 / 2^30.",
    ]
    for i, d in enumerate(lnet.dims):
        phys = lnet.physical.dims[d.physical_dim]
        piece = "" if len(lnet.pieces(d.physical_dim)) == 1 else f", piece of '{phys.name}' with stride {d.stride}"
        lines.append(f"# dim {i} '{d.name}': {d.topology} of {d.npus}, {d.bw_gbps!r} GB/s, "
                     f"latency {d.latency_ns!r} ns per hop{piece}")
    lines += [
        "topology: [ " + ", ".join(d.topology for d in lnet.dims) + " ]",
        "npus_count: [ " + ", ".join(str(d.npus) for d in lnet.dims) + " ]",
        f"bandwidth: {_num_list(d.bw_config_gibps for d in lnet.dims)}"
        f"  # GB/s: {_num_list(d.bw_gbps for d in lnet.dims)}",
        f"latency: {_num_list(d.latency_ns for d in lnet.dims)}  # ns per hop",
    ]
    return "\n".join(lines) + "\n"


def system_config(num_dims: int, *, splits: int, endpoint_delay_ns: int, local_mem_bw_gbps: float,
                  peak_perf_tflops: float, scheduling_policy: str) -> dict[str, Any]:
    ring = ["ring"] * num_dims
    return {
        "scheduling-policy": scheduling_policy,
        "endpoint-delay": endpoint_delay_ns,
        "active-chunks-per-dimension": 1,
        "preferred-dataset-splits": splits,
        "all-reduce-implementation": ring,
        "all-gather-implementation": list(ring),
        "reduce-scatter-implementation": list(ring),
        "all-to-all-implementation": list(ring),
        "collective-optimization": "localBWAware",
        "local-mem-bw": local_mem_bw_gbps,
        "roofline-enabled": 0,
        "peak-perf": peak_perf_tflops,
    }


# ASTRA-sim reads preferred-dataset-splits and endpoint-delay into C ints (Sys.hh): a larger
# value wraps around instead of failing.
_SIM_INT_MAX = 2 ** 31 - 1


def _check_sim_int(value, minimum: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= _SIM_INT_MAX:
        raise LibraError(f"{what} from {minimum} to {_SIM_INT_MAX:,} (ASTRA-sim's int), got {value!r}")


def _check_options(splits: int, endpoint_delay_ns: int, local_mem_bw_gbps: float, peak_perf_tflops: float,
                   scheduling_policy: str, max_repeats: int) -> None:
    _check_sim_int(splits, 1, "splits (preferred-dataset-splits) must be an integer")
    _check_sim_int(endpoint_delay_ns, 0, "endpoint delay must be an integer number of ns")
    if not local_mem_bw_gbps > 0:
        raise LibraError(f"local memory bandwidth must be > 0 GB/s (ASTRA-sim divides by it), got {local_mem_bw_gbps!r}")
    if not peak_perf_tflops > 0:
        raise LibraError(f"peak performance must be > 0 TFLOPS, got {peak_perf_tflops!r}")
    if scheduling_policy not in SCHEDULING_POLICIES:
        raise LibraError(f"scheduling policy must be one of {list(SCHEDULING_POLICIES)}, got {scheduling_policy!r}")
    if isinstance(max_repeats, bool) or not isinstance(max_repeats, int) or max_repeats < 1:
        raise LibraError(f"max_repeats must be an integer >= 1, got {max_repeats!r}")


@lru_cache(maxsize=None)
def _version(dist: str) -> str | None:
    # reading the installed metadata costs a few ms, a large share of a small emit; it cannot
    # change while the process runs
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _workload_notes(source: str, lnet: LogicalNetwork, stats: WorkloadStats, splits: int,
                    user_system: bool = False) -> list[str]:
    notes = []
    if user_system:
        notes.append(f"preferred-dataset-splits {splits}: chunks go through your system.json's implementations and "
                     "queues (docs/astra-sim-settings.md)")
    elif splits == 1:
        notes.append("preferred-dataset-splits 1: a multi-dimensional collective takes the sum of its per-dimension times")
    else:
        notes.append(f"preferred-dataset-splits {splits}: chunks pipeline across dimensions (all-reduce: "
                     "max_i(T_i + sum_{j<i} T_j / k); reduce-scatter, all-gather, all-to-all: "
                     "max_i(T_i + sum_{j!=i} T_j / k))")
    if lnet.is_split:
        shape = " x ".join(f"{d.name}({d.npus})" for d in lnet.dims)
        notes.append(f"dimensions split so communicator groups are whole logical dimensions: {shape}; NPU ids unchanged; "
                     "each piece keeps its physical dimension's bandwidth, Ring pieces the latency of 'stride' hops")
    return notes + stats.notes(source, splits)


def _run_sh(args: Sequence[str], logging_folder: str) -> str:
    return (
        "#!/bin/sh\n"
        "# Runs ASTRA-sim on the inputs in this directory. Set ASTRA_SIM_BIN to the binary if it is not on PATH.\n"
        "# The logging folder's parent must exist; unknown flags are silently ignored by the simulator.\n"
        # $(...) drops trailing newlines, which a directory name may end with: keep them behind a '.'
        'here=$(dirname -- "$0"; printf .) && here=${here%??} && cd -- "$here" || exit 1\n'
        f'exec "${{{BINARY_ENV}:-{DEFAULT_BINARY}}}" \\\n'
        + "".join(f"  {shlex.quote(a)} \\\n" for a in args)
        + f"  {shlex.quote('--logging-folder=' + logging_folder)}\n"
    )


def _safe_name(name: str) -> str:
    out = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip(".")
    return out or "workload"


@dataclass(frozen=True)
class _Inputs:
    """The workload of a design, read and planned onto the logical network."""

    source: str                                       # "traces" or "demand"
    groups: dict[int, tuple[int, ...]]                # communicator groups of the traces
    lnet: LogicalNetwork
    masks: dict[int, tuple[bool, ...] | None]         # involved_dim per group (None: flat ring)
    demand: Demand | None                             # for the prediction
    prediction_unavailable: str = ""                  # why there is no demand, if there is none
    file_groups: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # the comm-groups file's
    cpu_groups: GroupMap | None = None                # the process groups of typed gloo collectives


def _load_workload(design: Design, wl: WorkloadRef, demand: Demand | None) -> _Inputs:
    net, bw = design.network, design.bandwidth_gbps
    groups: dict[int, tuple[int, ...]] = {}
    file_groups: Mapping[str, tuple[int, ...]] = {}
    prediction_unavailable = ""
    # read before the demand, whose errors only take the prediction away: the rewrite needs the map too
    cpu_groups = load_group_map(wl.cpu_collective_groups) if wl.traces and wl.cpu_collective_groups else None
    if cpu_groups is not None:
        cpu_groups.check_npus(net.npus_count)
    if wl.traces:
        source = "traces"
        file_groups = load_comm_groups(wl.comm_groups) if wl.comm_groups else {}
        groups = {int(k): v for k, v in file_groups.items()}
        meta_groups: Mapping[str, tuple[int, ...]] = {}
        if demand is None:
            try:
                demand, summary = demand_from_traces(wl.traces, net, comm_groups=wl.comm_groups,
                                                     type_cpu_collectives=wl.type_cpu_collectives,
                                                     cpu_collective_groups=cpu_groups)
            except LibraError as err:
                # The rewrite tolerates some of what the demand reader refuses; emit anyway and say
                # why there is no prediction.
                prediction_unavailable = str(err)
            else:
                meta_groups = summary.metadata_groups
        else:
            # The caller's demand is the traces' (it read them, or made them): only the groups
            # are left to read, as the demand reader would have found them.
            try:
                meta_groups = trace_metadata_groups(wl.traces, net.npus_count, file_groups)
            except LibraError:
                pass
        # Process groups recorded in the traces' METADATA are the groups the collectives
        # name: the simulator needs them in its comm-group file.
        for key, members in meta_groups.items():
            if key.isdigit() and int(key) > 0 and int(key) not in groups:
                groups[int(key)] = tuple(members)
        lnet, masks = plan_for_groups(net, bw, groups)
    elif wl.demand:
        source = "demand"
        demand = load_demand(wl.demand)
        demand.check_network(net, wl.demand)
        lnet, masks = plan_for_demand(net, bw, demand), {}
    else:
        raise LibraError(f"design {design.name!r}: workload {wl.name!r} names neither traces nor a demand file; "
                         f"nothing to emit")
    return _Inputs(source, groups, lnet, masks, demand, prediction_unavailable, file_groups, cpu_groups)


def emit(design: Design | str | Path, out_dir: str | Path, *, splits: int | None = None,
         workload: str | None = None, overwrite: bool = False, endpoint_delay_ns: int = 1,
         local_mem_bw_gbps: float | None = None, peak_perf_tflops: float = 1000.0, scheduling_policy: str = "LIFO",
         max_repeats: int = 256, demand: Demand | None = None, system: Mapping[str, Any] | None = None,
         on_progress: Callable[[int, int], None] | None = None) -> EmitResult:
    """Write ASTRA-sim inputs for one workload of ``design`` into the new directory ``out_dir``.

    Parameters
    ----------
    design
        A Design, or the path of a design JSON file.
    out_dir
        Directory to create; an existing one is refused unless ``overwrite``.
    splits, local_mem_bw_gbps
        ``preferred-dataset-splits`` k (chunks per collective) and ``local-mem-bw``; None takes the
        design's (the settings it was optimized for); a value that differs from them is refused.
    workload
        Name of the design's workload to emit; needed when it has several.
    endpoint_delay_ns, local_mem_bw_gbps, peak_perf_tflops, scheduling_policy
        System settings (see the module docstring).
    max_repeats
        Most runs of one demand collective with a large ``count`` (synthesis only).
    system
        The user's system.json as a design records it (``{"path", "settings"}``) [default: the
        design's, if it was optimized with one]: written back with every key kept, only the
        implementation lists (one entry per emitted dimension) and preferred-dataset-splits set
        (user_system.py); its endpoint-delay replaces ``endpoint_delay_ns``. The caller checks
        that its splits and local-mem-bw are the design's (pass them as ``splits`` and
        ``local_mem_bw_gbps``).
    demand
        The workload's demand, if the caller has it (the traces' demand, as ``loop`` read it or
        ``search`` built it from the spec): the traces are then not read again for the
        prediction recorded in the manifest, only scanned for METADATA process groups.
    on_progress
        Called as ``on_progress(ranks_written, ranks)`` while the workload files are written.

    Raises
    ------
    LibraError
        Bad options, a missing or inconsistent workload, or an existing ``out_dir``.
    """
    if not isinstance(design, Design):
        design = load_design(design)
    splits, local_mem_bw_gbps, settings_notes = emit_settings(design.name, design.time_model_settings, splits,
                                                              local_mem_bw_gbps)
    system = system if system is not None else design.system
    if system is not None:
        endpoint_delay_ns = system["settings"].get("endpoint-delay", 10)   # a C int: a float truncates
        endpoint_delay_ns = int(endpoint_delay_ns) if isinstance(endpoint_delay_ns, float) else endpoint_delay_ns
    _check_options(splits, endpoint_delay_ns, local_mem_bw_gbps, peak_perf_tflops, scheduling_policy, max_repeats)
    out = Path(out_dir)
    if os.path.lexists(out) and not overwrite:
        raise LibraError(f"{out}: already exists; choose another directory or pass --force to replace it")
    if os.path.lexists(out) and not (out / "manifest.json").is_file():
        raise LibraError(f"{out}: exists and is not an emitted directory (no manifest.json); refusing to replace it")
    parent = out.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)     # like loop's --out and generate's prefix
    except OSError as e:
        raise LibraError(f"{out}: cannot create its parent directory {parent} ({e.strerror}); choose another --out") \
            from None
    wl = _pick_workload(design, workload)
    net, bw = design.network, design.bandwidth_gbps
    for d, b in zip(net.dims, bw):
        if not b > 0:
            raise LibraError(f"design {design.name!r}: dimension {d.name!r} has {b:g} GB/s, which ASTRA-sim cannot "
                             "simulate; give it a positive bw_min_gbps in the network file and optimize again")

    w = _load_workload(design, wl, demand)
    source, groups, lnet, masks, demand = w.source, w.groups, w.lnet, w.masks, w.demand
    prediction_unavailable = w.prediction_unavailable
    if lnet.npus_count > limits.value(limits.MAX_RANKS):
        raise limits.exceeded(limits.MAX_RANKS, f"design {design.name!r}", f"the network has {lnet.npus_count:,} NPUs")
    if lnet.npus_count + 8 > limits.value(limits.MAX_EMIT_FILES):
        raise limits.exceeded(limits.MAX_EMIT_FILES, f"{out}", f"the run needs {lnet.npus_count + 8:,} files "
                              f"({lnet.npus_count:,} rank files)")
    marker = completion.check_complete(wl.traces) if wl.traces else None
    if marker is not None:
        completion.expected_digests(wl.traces, rank_files(wl.traces, lnet.npus_count, f"design {design.name!r}"),
                                    marker)
    if endpoint_delay_ns == 0 and any(d.latency_ns == 0 for d in lnet.dims):
        raise LibraError("ASTRA-sim aborts when a dimension has latency 0 and endpoint-delay is 0; "
                         "use an endpoint delay of at least 1 ns (--endpoint-delay) or give every dimension a latency")

    name = _safe_name(Path(wl.traces).name if wl.traces else wl.name)
    flat_groups = {g: m for g, m in groups.items() if masks.get(g) is None}
    args = [f"--workload-configuration=workload/{name}", "--system-configuration=system.json",
            "--network-configuration=network.yml", "--remote-memory-configuration=memory.json"]
    if flat_groups:
        args.append("--comm-group-configuration=comm_groups.json")
    logging_folder = "log"
    user_record = system
    if system is not None:
        system, system_notes = user_system_config(system["settings"], lnet, splits, system["path"])
    else:
        system_notes = []
        system = system_config(lnet.num_dims, splits=splits, endpoint_delay_ns=endpoint_delay_ns,
                               local_mem_bw_gbps=float(local_mem_bw_gbps), peak_perf_tflops=float(peak_perf_tflops),
                               scheduling_policy=scheduling_policy)

    tmp = publish.temp_dir(out)
    with publish.building(tmp, out):
        (tmp / "workload").mkdir()
        if source == "traces":
            stats = rewrite_traces(wl.traces, tmp / "workload" / name, lnet, groups, masks, splits, on_progress,
                                   type_cpu_collectives=wl.type_cpu_collectives,
                                   cpu_groups=w.cpu_groups, file_groups=w.file_groups)
        else:
            stats = synthesize(demand, tmp / "workload" / name, lnet, wl.demand, max_repeats=max_repeats,
                               splits=splits, on_progress=on_progress)
        completion.finish(tmp / "workload" / name,
                          [completion.record(tmp / "workload" / f"{name}.{r}.et") for r in range(lnet.npus_count)],
                          "libra-astra emit")
        if flat_groups:
            cio.write_comm_groups(tmp / "comm_groups.json", flat_groups)
        (tmp / "network.yml").write_text(network_yaml(lnet, design.name))
        (tmp / "system.json").write_text(json.dumps(system, indent=1) + "\n")
        (tmp / "memory.json").write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}) + "\n")
        notes = settings_notes + system_notes + _workload_notes(source, lnet, stats, splits, user_record is not None)
        prediction = (_prediction(demand, design, splits, float(local_mem_bw_gbps), user_record) if demand is not None
                      else {"time_ns": None, "unavailable": prediction_unavailable})
        result = EmitResult(out, wl.name, source, lnet, splits, tuple(args), logging_folder, tuple(notes),
                            stats.to_dict(), prediction, float(local_mem_bw_gbps))
        manifest = Manifest(
            __version__, _version("mlc-chakra"), design_to_dict(design),
            {"name": wl.name, "source": source, "path": wl.traces if source == "traces" else wl.demand,
             "comm_groups": wl.comm_groups, "prefix": f"workload/{name}", "flat_ring_groups": sorted(flat_groups)},
            lnet.to_dict(), splits, system, SimulatorCall(tuple(args), logging_folder, result.command_line),
            stats.to_dict(), prediction, tuple(notes))
        write_manifest(tmp, manifest)
        run_sh = tmp / "run.sh"
        run_sh.write_text(_run_sh(args, logging_folder))
        run_sh.chmod(run_sh.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    # Re-checked now, not only at the start: the destination may have appeared meanwhile.
    if overwrite and os.path.lexists(out):
        rundir.replace_own(tmp, out)
    else:
        rundir.publish_new(tmp, out)
    return result


def _prediction(demand: Demand, design: Design, splits: int, local_mem_bw_gbps: float,
                system: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What libra_astra predicts the simulator will report for these settings (``system``: the
    user's system.json as the design records it)."""
    model = simulator_model(splits, local_mem_bw_gbps, system=system)
    p = predict(demand, design.bandwidth_gbps, design.network, model)
    if not p.overlap_aware:
        model = replace(model, overlap=False)   # no dependency graph: the replay sums
    return {"time_ns": p.time_ns, "class_times_ns": list(p.class_times_ns), "model": describe_model(model),
            "time_model_settings": model_settings(model)}
