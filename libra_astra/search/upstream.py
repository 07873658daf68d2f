"""Every name the search takes from the rest of libra_astra, imported in this one place.

The search is a client of the pipeline (spec -> demand -> optimize -> emit -> simulate); keeping
the imports together means a change of module layout touches only this file.
"""

from __future__ import annotations

from ..astra.emit import emit, system_config
from ..astra.run import resolve_binary, simulate
from ..demand.from_traces import demand_from_traces
from ..demand.groups import group_label, p2p_collective, p2p_dims
from ..demand.types import Collective, Dag, Demand, RankClass, default_hops, load_demand, make_collective
from ..demand.workload import Workload
from ..errors import InfeasibleError, LibraError
from ..files import check_writable, load_yaml, write_json_atomic, write_text_atomic
from ..model.collectives import hierarchical_traffic_bytes, ring_steps
from ..model.cost import CostModel, UnitPrices, load_cost
from ..model.network import TOPOLOGIES, Dimension, Network, load_network
from ..model.numbers import check_number
from ..model.power import PowerModel, load_power
from ..optimize.algorithms import candidates as implementation_candidates, choose_algorithms
from ..optimize.energy import energy_rate
from ..optimize.tco import TcoSettings, tco_rate
from ..optimize.design import Design, WorkloadRef
from ..optimize.optimizer import OptimizeResult, optimize
from ..optimize.problem import OBJECTIVES, Constraints
from ..timing.astra_settings import IMPLEMENTATION_KEYS, KINDS
from ..timing.model import TimeModel, simulator_model
from ..timing.predict import predict
from ..timing.system_phases import SystemTiming, chunk_count, chunk_steps, phase
from ..tracegen.generate import assign_groups, build_plan, generate
from ..tracegen.placement import Layout, place_axes
from ..tracegen.program import COLL, COMP, RECV, SEND, Plan
from ..tracegen.schedule import in_flight
from ..tracegen.spec import (DlrmModel, Parallel, ResNet50Model, TraceSpec, TransformerModel, load_spec,
                             transformer_problem)
from ..tracegen.transformer import (chain_bytes, embedding_params, h_kv, layer_params, model_flops_per_step, path_bytes,
                                     stage_compute_ns, stage_pass_ns)

__all__ = [
    "COLL", "COMP", "Collective", "Constraints", "CostModel", "Dag", "Demand", "Design", "Dimension", "DlrmModel",
    "InfeasibleError", "Layout", "LibraError", "Network", "OBJECTIVES", "OptimizeResult", "Parallel", "Plan",
    "RECV", "RankClass", "ResNet50Model", "SEND", "TOPOLOGIES", "TimeModel", "TraceSpec", "TransformerModel",
    "UnitPrices", "Workload", "WorkloadRef", "assign_groups", "build_plan", "chain_bytes", "check_writable", "default_hops",
    "demand_from_traces", "embedding_params", "emit", "h_kv", "in_flight", "layer_params",
    "model_flops_per_step", "generate", "group_label", "hierarchical_traffic_bytes", "load_cost", "load_demand", "ring_steps", "load_network", "load_spec", "load_yaml",
    "make_collective", "optimize", "PowerModel", "load_power", "TcoSettings", "check_number", "energy_rate", "tco_rate", "p2p_collective", "p2p_dims", "path_bytes", "place_axes", "predict", "resolve_binary",
    "simulate", "simulator_model", "system_config", "implementation_candidates", "choose_algorithms",
    "IMPLEMENTATION_KEYS", "KINDS", "SystemTiming", "chunk_count", "chunk_steps", "phase", "stage_compute_ns", "stage_pass_ns", "transformer_problem", "write_json_atomic", "write_text_atomic",
]
