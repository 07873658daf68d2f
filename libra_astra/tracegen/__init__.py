"""Synthetic training-step traces (Chakra ET) for transformer, DLRM and ResNet-50 workloads."""

from .generate import GeneratedTraces, build_plan, generate
from .spec import TraceSpec, load_spec, spec_from_dict

__all__ = ["GeneratedTraces", "TraceSpec", "build_plan", "generate", "load_spec", "spec_from_dict"]
