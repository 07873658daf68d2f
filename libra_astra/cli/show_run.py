"""``show DIR``: a run directory as text: what was emitted, predicted and (if it ran) simulated."""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING, Any, Mapping

from .format import fmt_ms, fmt_ranges, fmt_usd, table

if TYPE_CHECKING:  # the library is imported by the command that runs
    from ..astra.record import RunRecord, SimRecord

# system.json values with a unit (as emit documents them)
_UNITS = {"endpoint-delay": "ns", "local-mem-bw": "GB/s", "peak-perf": "TFLOPS"}
_IMPLEMENTATIONS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")


def _num(v: Any, spec: str) -> str:
    """A number from the manifest, or '?' where a hand-edited one holds something else."""
    return format(v, spec) if isinstance(v, (int, float)) and not isinstance(v, bool) else "?"


def _value(v: Any) -> str:
    if isinstance(v, list):
        return _value(v[0]) if v and all(x == v[0] for x in v) else ",".join(map(_value, v))
    # 1e9, not 1e+09 (as the settings line writes it)
    return re.sub(r"e\+?(-?)0*(\d)", r"e\1\2", format(v, "g")) if isinstance(v, float) else str(v)


def format_system(system: Mapping[str, Any]) -> str:
    """system.json on one line; the four collective implementations merged when they agree."""
    impl = {k: system.get(f"{k}-implementation") for k in _IMPLEMENTATIONS}
    merged = len({repr(v) for v in impl.values()}) == 1 and impl["all-reduce"] is not None
    parts = []
    for key, v in system.items():
        if merged and key.endswith("-implementation"):
            if key == "all-reduce-implementation":
                parts.append(f"collectives {_value(v)}")
            continue
        unit = _UNITS.get(key)
        parts.append(f"{key} {_value(v)}" + (f" {unit}" if unit else ""))
    return " | ".join(parts)


def _network(net: Mapping[str, Any]) -> list[str]:
    dims = net.get("dimensions") if isinstance(net.get("dimensions"), list) else []
    split = bool(net.get("split"))
    head = ["dimension", "topology", "npus", "GB/s per NPU", "GiB/s written", "latency ns/hop"]
    rows = [head + (["piece of", "stride"] if split else [])]
    for d in dims:
        d = d if isinstance(d, dict) else {}
        row = [str(d.get("name", "?")), str(d.get("topology", "?")), str(d.get("npus", "?")),
               _num(d.get("bandwidth_gbps"), ".4f"), _num(d.get("bandwidth_config_gibps"), ".4f"),
               _num(d.get("latency_ns"), "g")]
        rows.append(row + ([str(d.get("physical_name", "?")), str(d.get("stride", "?"))] if split else []))
    return table(rows, right={2, 3, 4, 5, 7})


def _simulated(rec: RunRecord, sim: SimRecord | None) -> list[str]:
    if sim is None:
        return [f"simulated: not yet; run libra-astra simulate {shlex.quote(rec.run_dir)}"]
    if sim.output_error:
        return [f"simulated: no usable output: {sim.output_error}"]
    if not sim.complete:
        missing = sim.missing
        return [f"simulated: did not finish: {len(sim.ranks)} of {sim.npus_count} NPUs reported 'finished' (missing "
                f"ranks {fmt_ranges(missing)}); see {sim.sim_dir}/stderr.txt and stdout.txt"]
    slowest = max(sim.ranks, key=lambda r: r.finished_ns)
    host = f"; host time {sim.wall_seconds:.2f} s" if sim.wall_seconds is not None else ""
    lines = [f"simulated: {fmt_ms(slowest.finished_ns)} (slowest rank {slowest.rank}; all {sim.npus_count} NPUs "
             f"finished{host}) from {sim.sim_dir}/stdout.txt"]
    if not sim.accepted:
        lines.append("  (simulate did not accept this run: there is no result.json, so the simulator exited with an "
                     f"error or was stopped; see {sim.sim_dir}/stderr.txt)")
    return lines


def _obj(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def format_run(rec: RunRecord) -> str:
    m = rec.manifest
    design, wl, stats = _obj(m.design), _obj(m.workload), _obj(m.workload_stats)
    chakra = f", mlc-chakra {m.mlc_chakra_version}" if m.mlc_chakra_version else ""
    lines = [f"run directory {rec.run_dir} (emitted by libra_astra {m.libra_astra_version or '?'}{chakra})"]
    net = _obj(design.get("network"))
    cost = f", cost {fmt_usd(design['cost_usd'])}" if _num(design.get("cost_usd"), "g") != "?" else ""
    lines.append(f"design {design.get('name', '?')!r} for network {net.get('name', '?')!r}, objective "
                 f"{design.get('objective', '?')}{cost}")
    counts = ", ".join(f"{_num(stats.get(k), ',')} {label}" for k, label in
                       (("ranks", "ranks"), ("nodes_written", "nodes"), ("collectives", "collectives")) if k in stats)
    lines.append(f"workload {wl.get('name', '?')!r} from {wl.get('source', '?')} {wl.get('path', '?')}"
                 + (f": {counts}" if counts else ""))
    if wl.get("comm_groups"):
        lines.append(f"  communicator groups: {wl['comm_groups']}")
    lines.append(f"network as emitted ({m.npus_count:,} NPUs):")
    lines += _network(_obj(m.network))
    lines.append(f"system: {format_system(_obj(m.system))}")
    run_from = shlex.quote(rec.run_dir) if m.simulator.run_from == "." else m.simulator.run_from
    lines.append(f"command (from {run_from}; ${m.simulator.binary_env} picks the binary): {m.simulator.command_line}")
    pred = _obj(m.prediction)
    if m.predicted_time_ns is not None:
        lines.append(f"predicted: {fmt_ms(float(m.predicted_time_ns))} (libra_astra at emit)")
        if pred.get("model"):
            lines.append(f"  with {pred['model']}")
    else:
        lines.append(f"predicted: unavailable ({pred.get('unavailable') or 'no demand was read'})")
    lines += _simulated(rec, rec.sim)
    if rec.sim is not None and rec.sim.backend == "aware":
        # emit's model has no link contention: simulate compared with the aware backend's exact model
        shown = rec.sim.backend_predicted_ns
        lines.append("simulated on the congestion-aware backend; its exact model (predict --backend aware) "
                     + (f"predicted {fmt_ms(shown)}" if shown is not None else "refused this run"))
    err = rec.prediction_error
    if err is not None:
        lines.append(f"error: {err:+.3%} (predicted against simulated)")
    lines += [f"note: {n}" for n in m.notes]
    return "\n".join(lines)
