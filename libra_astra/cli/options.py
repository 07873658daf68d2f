"""Options shared by ``optimize``, ``pareto`` and ``loop``, gathered on one context object.

Each shared option stores its value on :class:`SharedOptions` (``ctx.obj``) instead of becoming
a parameter, so a command takes only its own options and reads the rest with ``click.pass_obj``::

    @click.command("mine", cls=Command)
    @workload_options
    @click.option("--mine", ...)
    @click.pass_obj
    def mine_command(shared: SharedOptions, mine): ...
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import click

from ..demand.workload import Workload, load_workloads
from ..errors import LibraError
from ..model.cost import CostModel, load_cost
from ..model.network import Network, load_network
from ..optimize.constraints import load_constraints_file, parse_constraints
from ..optimize.optimizer import Constraints
from ..timing.model import MODELS, TimeModel


class Inputs(NamedTuple):
    net: Network
    cost: CostModel
    workloads: list[Workload]
    constraints: Constraints


@dataclass
class SharedOptions:
    traces: tuple[str, ...] = ()
    network_path: str = ""
    cost_path: str = ""
    demands: tuple[str, ...] = ()
    weights: tuple[float, ...] = ()
    comm_groups: str | None = None
    total_bw: float | None = None
    total_bw_max: float | None = None
    exprs: tuple[str, ...] = ()
    constraints_file: str | None = None
    model: str = "libra"
    splits: int = 1
    local_mem_bw: float | None = None
    overlap: bool = False

    def constraints(self, net: Network, budget: float | None, time_target: float | None) -> Constraints:
        if self.total_bw is not None and self.total_bw_max is not None:
            raise LibraError("give either --total-bw (equality) or --total-bw-max (upper bound), not both")
        linear = parse_constraints(self.exprs, net)
        if self.constraints_file:
            linear += load_constraints_file(self.constraints_file, net)
        total = self.total_bw if self.total_bw is not None else self.total_bw_max
        return Constraints(total, self.total_bw_max is not None, budget, time_target, linear)

    def load(self, budget: float | None = None, time_target: float | None = None) -> Inputs:
        """Network, cost model, workloads and constraints named by the options."""
        net = load_network(self.network_path)
        cost = load_cost(self.cost_path)
        workloads = load_workloads(self.traces, self.demands, self.weights, net, self.comm_groups)
        return Inputs(net, cost, workloads, self.constraints(net, budget, time_target))

    def time_model(self) -> TimeModel:
        return TimeModel(self.model, splits=self.splits, overlap=self.overlap, local_mem_bw_gbps=self.local_mem_bw)


def _store(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    setattr(ctx.ensure_object(SharedOptions), param.name, value)
    return value


def _shared(*decls: str, **attrs: Any) -> Callable:
    return click.option(*decls, expose_value=False, callback=_store, **attrs)


def _apply(decorators: list[Callable]) -> Callable:
    def deco(f: Callable) -> Callable:
        for d in reversed(decorators):
            f = d(f)
        return f
    return deco


# The workloads, the network they run on, its cost and the constraints on its bandwidth.
workload_options = _apply([
    click.argument("traces", nargs=-1, metavar="[PREFIX]...", expose_value=False, callback=_store),
    _shared("--network", "-n", "network_path", required=True, type=click.Path(exists=True, dir_okay=False),
            help="Network YAML (network_configs/*.yml)."),
    _shared("--cost", "cost_path", required=True, type=click.Path(exists=True, dir_okay=False),
            help="Cost model YAML with unit prices per cost class."),
    _shared("--demand", "demands", multiple=True, type=click.Path(exists=True, dir_okay=False),
            help="Demand JSON (repeatable: several workloads)."),
    _shared("--weight", "weights", multiple=True, type=float,
            help="Weight per workload, in order: trace prefixes, then --demand files."),
    _shared("--comm-groups", type=click.Path(exists=True, dir_okay=False),
            help="ASTRA-sim communicator-group JSON for the trace prefixes [default: PREFIX.groups.json "
                 "when it exists]."),
    _shared("--total-bw", type=float, help="Total bandwidth per NPU over all dimensions, GB/s (equality)."),
    _shared("--total-bw-max", type=float, help="Upper bound on total bandwidth per NPU, GB/s."),
    _shared("--constraint", "exprs", multiple=True, metavar="EXPR",
            help="Linear constraint, e.g. 'bw[0] >= bw[1]' or 'bw[pod] + bw[node] == 200' (repeatable)."),
    _shared("--constraints-file", type=click.Path(exists=True, dir_okay=False),
            help="File with one constraint per line ('#' starts a comment)."),
])

# The time model the optimizer minimizes (``loop`` sets its own from the simulator's settings).
time_model_options = _apply([
    _shared("--model", type=click.Choice(MODELS), default="libra", show_default=True,
            help="Time model: LIBRA's max over dimensions, or ASTRA-sim's chunk pipeline."),
    _shared("--splits", type=click.IntRange(min=1), default=1, show_default=True,
            help="Chunks per collective for --model pipelined (ASTRA-sim preferred-dataset-splits)."),
    _shared("--local-mem-bw", "local_mem_bw", type=click.FloatRange(min=0, min_open=True),
            help="For --model pipelined: local memory GB/s that each reduction step reads and writes "
                 "(ASTRA-sim's local-mem-bw) [default: unlimited]."),
    _shared("--overlap/--no-overlap", default=False, show_default=True,
            help="Time a rank by its longest dependency path (compute/communication overlap) instead of "
                 "summing; uses the traces' dependency graphs."),
])
