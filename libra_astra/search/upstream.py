"""Every name the search takes from the rest of libra_astra, imported in this one place.

The search is a client of the pipeline (spec -> demand -> optimize -> emit -> simulate); keeping
the imports together means a change of module layout touches only this file.
"""

from __future__ import annotations

from ..astra.emit import emit
from ..collectives import hierarchical_traffic_bytes, ring_steps
from ..astra.run import resolve_binary, simulate
from ..cost import CostModel, UnitPrices, load_cost
from ..demand import Collective, Dag, Demand, RankClass, default_hops
from ..design import Design, WorkloadRef
from ..errors import InfeasibleError, LibraError
from ..fileio import check_writable, write_json_atomic, write_text_atomic
from ..groups import group_label, p2p_collective, p2p_dims
from ..demand import make_collective
from ..network import TOPOLOGIES, Dimension, Network, load_network, load_yaml
from ..optimize import OBJECTIVES, Constraints, OptimizeResult, Workload, optimize
from ..predict import predict
from ..timing import TimeModel, simulator_model
from ..trace_demand import demand_from_traces
from ..tracegen.generate import assign_groups, build_plan, generate
from ..tracegen.placement import Layout, place_axes
from ..tracegen.program import COLL, COMP, RECV, SEND, Plan
from ..tracegen.spec import DlrmModel, Parallel, ResNet50Model, TraceSpec, TransformerModel, load_spec

__all__ = [
    "COLL", "COMP", "Collective", "Constraints", "CostModel", "Dag", "Demand", "Design", "Dimension", "DlrmModel",
    "InfeasibleError", "Layout", "LibraError", "Network", "OBJECTIVES", "OptimizeResult", "Parallel", "Plan",
    "RECV", "RankClass", "ResNet50Model", "SEND", "TOPOLOGIES", "TimeModel", "TraceSpec", "TransformerModel",
    "UnitPrices", "Workload", "WorkloadRef", "assign_groups", "build_plan", "check_writable", "default_hops",
    "demand_from_traces", "emit", "generate", "group_label", "hierarchical_traffic_bytes", "load_cost", "ring_steps", "load_network", "load_spec", "load_yaml",
    "make_collective", "optimize", "p2p_collective", "p2p_dims", "place_axes", "predict", "resolve_binary",
    "simulate", "simulator_model", "write_json_atomic", "write_text_atomic",
]
