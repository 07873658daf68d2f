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

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

import click

from ..errors import LibraError
from ..timing.settings import DEFAULT_LOCAL_MEM_BW_GBPS, DEFAULT_MODEL, DEFAULT_SPLITS, MODELS, resolve_model
from .numbers import FiniteFloat

if TYPE_CHECKING:  # the library is imported by the command that runs, not to list the commands
    from ..demand.workload import Workload
    from ..model.cost import CostModel
    from ..model.network import Network
    from ..model.power import PowerModel
    from ..optimize.optimizer import Constraints
    from ..doctor.system_model import UserSystem
    from ..timing.model import TimeModel


class Inputs(NamedTuple):
    net: Network
    cost: CostModel
    workloads: list[Workload]
    constraints: Constraints


@dataclass
class SharedOptions:
    traces: tuple[str, ...] = ()
    network_path: str = ""
    cost_classes: str | None = None
    cost_path: str = ""
    demands: tuple[str, ...] = ()
    weights: tuple[float, ...] = ()
    comm_groups: str | None = None
    type_cpu_collectives: bool = False
    cpu_collective_groups: str | None = None
    total_bw: float | None = None
    total_bw_max: float | None = None
    exprs: tuple[str, ...] = ()
    constraints_file: str | None = None
    # None: not given, so the shared defaults apply and options the model ignores can be refused.
    model: str | None = None
    splits: int | None = None
    local_mem_bw: float | None = None
    overlap: bool | None = None
    system_path: str | None = None
    user_system: UserSystem | None = None      # read by time_model()
    power_path: str | None = None
    samples_per_step: float | None = None
    tokens_per_step: float | None = None
    power_max: float | None = None
    power_scope: str = "cluster"
    usd_per_kwh: float | None = None
    lifetime_years: float | None = None
    run_steps: float = 1.0
    usd_per_provisioned_w: float = 0.0
    npu_usd: float = 0.0
    energy_max: float | None = None
    tco_max: float | None = None

    def constraints(self, net: Network, budget: float | None, time_target: float | None) -> Constraints:
        from ..optimize.constraints import load_constraints_file, parse_constraints
        from ..optimize.optimizer import Constraints

        if self.total_bw is not None and self.total_bw_max is not None:
            raise LibraError("give either --total-bw (equality) or --total-bw-max (upper bound), not both")
        linear = parse_constraints(self.exprs, net)
        if self.constraints_file:
            linear += load_constraints_file(self.constraints_file, net)
        total = self.total_bw if self.total_bw is not None else self.total_bw_max
        return Constraints(total, self.total_bw_max is not None, budget, time_target, linear)

    def load(self, budget: float | None = None, time_target: float | None = None, *,
             objective: str = "perf", prices_for: str | None = None) -> Inputs:
        """Network, cost model, workloads and constraints named by the options. What needs unit
        prices (a cost objective, ``prices_for``: a command) is refused without --cost, and the
        prices are checked for ``objective``, before the workloads are read."""
        from ..demand.workload import load_workloads
        from ..model.cost import load_cost, unpriced
        from ..model.network import load_network
        from .progress import Progress

        net = load_network(self.network_path)
        if self.cost_classes is not None:
            from ..model.network import with_cost_classes
            net = with_cost_classes(net, [c.strip() for c in self.cost_classes.split(",")])
        if objective in ("perf-per-cost", "min-cost", "min-tco"):
            prices_for = f"--objective {objective}"
        if self.cost_path:
            cost = load_cost(self.cost_path)
        elif prices_for or budget is not None:
            raise LibraError(f"{prices_for or '--budget'} needs unit prices: give --cost FILE "
                             f"(e.g. network_configs/cost.yml)")
        else:
            cost = unpriced(net)
        cost.check_priced(net, objective)
        with Progress("reading") as p:
            workloads = load_workloads(self.traces, self.demands, self.weights, net, self.comm_groups,
                                       on_progress=lambda prefix, done, total: p(done, total, prefix),
                                       type_cpu_collectives=self.type_cpu_collectives,
                                       cpu_collective_groups=self.cpu_collective_groups)
        cons = self.constraints(net, budget, time_target)
        if self.power_max is not None:
            from ..optimize.energy import power_constraint
            cons = replace(cons, linear=cons.linear + (power_constraint(net, self.power(net), self.power_max,
                                                                        self.power_scope),))
        if self.energy_max is not None or self.tco_max is not None:
            if not self.power_path:
                raise LibraError(f"{'--energy-max' if self.energy_max is not None else '--tco-max'} needs power figures: "
                                 "give --power FILE (e.g. network_configs/power.yml)")
            cons = replace(cons, energy_max_j=self.energy_max, tco_max_usd=self.tco_max)
        return Inputs(net, cost, workloads, cons)

    def tco(self):
        """TcoSettings from the TCO options, or None when the price or the lifetime is not given."""
        if self.usd_per_kwh is None or self.lifetime_years is None:
            return None
        from ..optimize.tco import TcoSettings

        return TcoSettings(self.usd_per_kwh, self.lifetime_years, self.run_steps, self.usd_per_provisioned_w,
                           self.npu_usd)

    def power(self, net: Network) -> PowerModel | None:
        """The --power file, checked against the network's cost classes (None without --power)."""
        if not self.power_path:
            if self.power_max is not None:
                raise LibraError("--power-max needs power figures: give --power FILE (e.g. network_configs/power.yml)")
            return None
        from ..model.power import load_power

        model = load_power(self.power_path)
        model.check(net)
        return model

    def time_model(self) -> TimeModel:
        """The model the options name (timing/settings.py); options it ignores are refused. With
        --system, the model takes the file's splits and local-mem-bw (``user_system``)."""
        splits, mem = self.splits, self.local_mem_bw
        if self.system_path is not None:
            if self.model == "libra":
                raise LibraError("--system applies to --model pipelined only (the LIBRA model has no chunks, "
                                 "latency or local reduction cost); drop --system or use --model pipelined")
            from ..model.network import load_network
            dims = load_network(self.network_path).dims
            self.user_system = read_system_option(self.system_path, dims, splits, mem)
            splits, mem = self.user_system.splits, self.user_system.local_mem_bw_gbps
            return resolve_model(self.model, splits, mem, self.overlap, self.user_system.timing)
        return resolve_model(self.model, splits, mem, self.overlap)


def read_system_option(path: str, dims: tuple, splits: int | None, local_mem_bw: float | None) -> UserSystem:
    """The --system file for a network with dimensions ``dims``; a --splits or --local-mem-bw
    that differs from the file's value is refused. The keys ASTRA-sim ignores are noted on stderr
    (kept out of --json output)."""
    from ..doctor.system_model import read_user_system

    user = read_user_system(path, dims)
    for option, given, key, value in (("--splits", splits, "preferred-dataset-splits", user.splits),
                                      ("--local-mem-bw", local_mem_bw, "local-mem-bw", user.local_mem_bw_gbps)):
        if given is not None and given != value:
            written = "absent (free reductions)" if value is None else f"{value:g}"
            raise LibraError(f"{option} {given:g} conflicts with {path}'s {key} {written}; drop {option} "
                             f"(the file sets it) or change the file")
    for note in user.notes:
        click.echo(f"note: {note}", err=True)
    return user


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
    _shared("--cost-classes", metavar="A,B,...",
            help="The cost class of each dimension, innermost first (e.g. InterNode,InterPod), replacing the network "
                 "file's [default for an ASTRA-sim network file, which names none: InterChiplet, InterPackage, "
                 "InterNode, InterPod for the outermost four levels, InterNode for one dimension]."),
    _shared("--cost", "cost_path", type=click.Path(exists=True, dir_okay=False),
            help="Cost model YAML with unit prices per cost class (network_configs/cost.yml) [default: none, "
                 "for --objective perf: no prices, so no cost is reported]."),
    _shared("--demand", "demands", multiple=True, type=click.Path(exists=True, dir_okay=False),
            help="Demand JSON (repeatable: several workloads)."),
    _shared("--weight", "weights", multiple=True, type=FiniteFloat(),
            help="Weight per workload, in order: trace prefixes, then --demand files."),
    _shared("--comm-groups", type=click.Path(exists=True, dir_okay=False),
            help="ASTRA-sim communicator-group JSON for the trace prefixes [default: PREFIX.groups.json "
                 "when it exists]."),
    _shared("--type-cpu-collectives", is_flag=True,
            help="Count the gloo collectives, sends and receives that PyTorch's Chakra converter leaves as "
                 "CPU ops (c10d::*, gloo:*) as communication, in the model and in emitted runs."),
    _shared("--cpu-collective-groups", type=click.Path(exists=True, dir_okay=False),
            help="The process group of each typed gloo collective the trace leaves open: a YAML/JSON list of "
                 "{op, [nth], [size_bytes], ranks | group | desc} entries (README: typed gloo collectives); "
                 "implies --type-cpu-collectives."),
    _shared("--total-bw", type=FiniteFloat(), help="Total bandwidth per NPU over all dimensions, GB/s (equality)."),
    _shared("--total-bw-max", type=FiniteFloat(), help="Upper bound on total bandwidth per NPU, GB/s."),
    _shared("--constraint", "exprs", multiple=True, metavar="EXPR",
            help="Linear constraint, e.g. 'bw[0] >= bw[1]' or 'bw[pod] + bw[node] == 200' (repeatable)."),
    _shared("--constraints-file", type=click.Path(exists=True, dir_okay=False),
            help="File with one constraint per line ('#' starts a comment)."),
])

# The time model the optimizer minimizes (``loop`` sets its own from the simulator's settings).
time_model_options = _apply([
    _shared("--model", type=click.Choice(list(MODELS)), default=None,
            help=f"Time model [default: {DEFAULT_MODEL}]: pipelined is what ASTRA-sim computes with the "
                 "settings emit writes (chunk pipeline, per-hop latency); libra is the LIBRA paper's max "
                 "over dimensions of traffic/bandwidth."),
    _shared("--splits", type=click.IntRange(min=1), default=None,
            help=f"For --model pipelined: chunks per collective (ASTRA-sim preferred-dataset-splits); the "
                 f"design keeps it for emit [default: {DEFAULT_SPLITS}]."),
    _shared("--local-mem-bw", "local_mem_bw", type=FiniteFloat(0, strict_min=True),
            help="For --model pipelined: local memory GB/s that each reduction step reads and writes "
                 f"(ASTRA-sim's local-mem-bw) [default: {DEFAULT_LOCAL_MEM_BW_GBPS:g}, as emit writes]."),
    _shared("--system", "system_path", type=click.Path(exists=True, dir_okay=False), default=None,
            help="Your ASTRA-sim system.json, read unmodified: the model follows its implementations (ring, "
                 "direct, halvingDoubling), splits, active chunks, endpoint-delay, local-mem-bw and collective "
                 "optimization; a setting it does not follow is refused; the design keeps the file for emit."),
    _shared("--overlap/--no-overlap", default=None,
            help="Time a rank by its longest dependency path (compute/communication overlap, as the "
                 "simulator runs it) or by the sum [default: overlap for pipelined, sum for libra]."),
])

# Power figures: energy, average and peak power of every design; the energy objectives and the power cap.
power_options = _apply([
    _shared("--power", "power_path", type=click.Path(exists=True, dir_okay=False),
            help="Power YAML: W per NPU, pJ/bit and idle W per GB/s per cost class (network_configs/power.yml); "
                 "adds energy per step (J), average and peak power (W) to the result."),
    _shared("--samples-per-step", type=FiniteFloat(0, strict_min=True),
            help="Samples one step trains, for J per sample."),
    _shared("--tokens-per-step", type=FiniteFloat(0, strict_min=True),
            help="Tokens one step trains, for J per token."),
    _shared("--power-max", type=FiniteFloat(0, strict_min=True),
            help="Upper bound on peak power in W (everything active at once), of --power-scope; needs --power."),
    _shared("--power-scope", type=click.Choice(["cluster", "fabric", "cluster-per-npu", "fabric-per-npu"]),
            default="cluster", show_default=True,
            help="What --power-max bounds: the whole cluster (NPUs, rest of node, fabric) or the fabric only, "
                 "in total or per NPU."),
    _shared("--energy-max", type=FiniteFloat(0, strict_min=True),
            help="Upper bound on the energy of a step, J (with --objective perf: the fastest design under it; "
                 "exact, by bisection on the power level); needs --power."),
    _shared("--tco-max", type=FiniteFloat(0, strict_min=True),
            help="Upper bound on the run's TCO, USD (with --objective perf); needs --power, --cost and the TCO "
                 "settings."),
    _shared("--electricity-usd-per-kwh", "usd_per_kwh", type=FiniteFloat(0),
            help="Electricity price, USD per kWh: with --lifetime-years, adds the run's TCO (USD) to the result; "
                 "needed by --objective min-tco."),
    _shared("--lifetime-years", type=FiniteFloat(0, strict_min=True),
            help="Years over which the cluster's capital (network, NPUs, provisioned power) is amortized."),
    _shared("--run-steps", type=FiniteFloat(0, strict_min=True), default=1.0, show_default=True,
            help="Training steps of the run whose TCO is reported and minimized."),
    _shared("--usd-per-provisioned-w", type=FiniteFloat(0), default=0.0, show_default=True,
            help="Capital per W of peak cluster power (power and cooling plant), USD per W."),
    _shared("--npu-usd", type=FiniteFloat(0), default=0.0, show_default=True,
            help="Capital per NPU with its share of the node, USD."),
])
