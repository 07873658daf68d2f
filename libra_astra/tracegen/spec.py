"""Trace-generator spec (YAML): parse and validate into immutable values.

Every error is a LibraError naming the spec source, the key and the fix. The format is described in
docs/tracegen.md; the three model types are ``transformer``, ``dlrm`` and ``resnet50``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Union

from ..errors import LibraError
from ..files import load_yaml
from ..model.network import Dimension, Network, load_network
from .placement import Layout, all_ranks_layout, place_axes

_MISSING = object()


@dataclass(frozen=True)
class TransformerModel:
    layers: int
    hidden_size: int
    heads: int
    ffn_hidden_size: int
    seq_length: int
    vocab_size: int
    micro_batch: int
    global_batch: int
    bytes_per_element: int
    grad_bytes_per_element: int
    kv_heads: int = 0                # grouped-query attention: K/V heads (0: as many as heads)
    gated_mlp: bool = False          # SwiGLU-style MLP: three weight matrices instead of two
    experts: int = 0                 # routed experts per MoE layer (0: a dense model)
    top_k: int = 1                   # experts each token is routed to
    capacity_factor: float = 1.0     # tokens an expert takes, relative to an even share
    shared_experts: int = 0          # experts every token goes through (MoE layers)
    expert_hidden_size: int = 0      # FFN hidden size of one expert (0: ffn_hidden_size)
    moe_layer_freq: int = 1          # every k-th layer (after the first dense ones) is an MoE layer
    first_dense_layers: int = 0      # leading layers that stay dense

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def f_expert(self) -> int:
        return self.expert_hidden_size or self.ffn_hidden_size

    def is_moe(self, layer: int) -> bool:
        """Whether layer ``layer`` (0-based) is an MoE layer."""
        g = layer - self.first_dense_layers
        return self.experts > 0 and g >= 0 and g % self.moe_layer_freq == 0


@dataclass(frozen=True)
class DlrmModel:
    batch_per_npu: int
    dense_features: int
    bottom_mlp: tuple[int, ...]
    top_mlp: tuple[int, ...]
    num_tables: int
    embedding_dim: int
    pooling_factor: int
    bytes_per_element: int
    grad_bytes_per_element: int


@dataclass(frozen=True)
class ResNet50Model:
    batch_per_npu: int
    image_size: int
    bytes_per_element: int
    grad_bytes_per_element: int


Model = Union[TransformerModel, DlrmModel, ResNet50Model]


@dataclass(frozen=True)
class Parallel:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    sequence_parallel: bool = False
    grad_bucket_bytes: int = 0  # 0: one gradient all-reduce per layer
    cp: int = 1                 # context parallel (K/V all-gathered over the cp group)
    ep: int = 1                 # expert parallel (MoE layers' experts split over the ep group)
    schedule: str = "gpipe"     # gpipe | 1f1b | interleaved
    virtual_stages: int = 1     # model chunks per pipeline rank (interleaved)
    zero: int = 0               # ZeRO stage 0..3 over the data-parallel replicas
    recompute: str = "none"     # none | selective | full

    @property
    def replicas(self) -> int:
        """Data-parallel replicas of the dense weights (cp x ep x dp ranks hold the same ones)."""
        return self.cp * self.ep * self.dp


SCHEDULES = ("gpipe", "1f1b", "interleaved")
RECOMPUTE = ("none", "selective", "full")
AXES = ("tp", "cp", "ep", "pp", "dp")


@dataclass(frozen=True)
class TraceSpec:
    source: str
    name: str
    model: Model
    layout: Layout
    parallel: Parallel
    tflops: float            # sustained FLOP rate per NPU, 1e12 FLOP/s
    mem_bw_gbps: float       # sustained memory bandwidth per NPU (DLRM embedding lookups), 1e9 B/s
    iterations: int
    hbm_gb: float | None = None   # device memory per NPU, 1e9 B (the search's memory limit); None: not given

    @property
    def net(self) -> Network:
        return self.layout.net


def _mapping(value: Any, where: str, allowed: set[str]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise LibraError(f"{where}: expected a mapping, got {value!r}")
    bad = sorted(set(map(str, value)) - allowed)
    if bad:
        raise LibraError(f"{where}: unknown key(s) {bad}; allowed: {sorted(allowed)}")
    return value


def _int(m: Mapping, key: str, where: str, default: Any = _MISSING, minimum: int = 1) -> int:
    if key not in m:
        if default is _MISSING:
            raise LibraError(f"{where}: missing {key!r} (an integer >= {minimum})")
        return default
    v = m[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise LibraError(f"{where}: {key} must be an integer >= {minimum}, got {v!r}")
    return v


def _num(m: Mapping, key: str, where: str, default: Any = _MISSING) -> float:
    if key not in m:
        if default is _MISSING:
            raise LibraError(f"{where}: missing {key!r} (a number > 0)")
        return default
    v = m[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise LibraError(f"{where}: {key} must be a finite number >= 0, got {v!r}")
    return float(v)


def _int_list(m: Mapping, key: str, where: str) -> tuple[int, ...]:
    v = m.get(key)
    if not isinstance(v, list) or not v or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in v):
        raise LibraError(f"{where}: {key} must be a non-empty list of integers >= 1, got {v!r}")
    return tuple(v)


def _bytes_per_element(m: Mapping, where: str) -> tuple[int, int]:
    b = _int(m, "bytes_per_element", where)
    return b, _int(m, "grad_bytes_per_element", where, default=b)


def _transformer(m: Mapping, where: str) -> TransformerModel:
    _mapping(m, where, {"type", "layers", "hidden_size", "heads", "ffn_hidden_size", "seq_length", "vocab_size",
                        "micro_batch", "global_batch", "bytes_per_element", "grad_bytes_per_element", "kv_heads",
                        "gated_mlp", "experts", "top_k", "capacity_factor", "shared_experts",
                        "expert_hidden_size", "moe_layer_freq", "first_dense_layers"})
    h = _int(m, "hidden_size", where)
    heads = _int(m, "heads", where)
    if h % heads:
        raise LibraError(f"{where}: hidden_size {h} is not a multiple of heads {heads}; change one of them")
    kv = _int(m, "kv_heads", where, default=heads)
    if heads % kv:
        raise LibraError(f"{where}: kv_heads {kv} must divide heads {heads} (query heads share K/V heads in "
                         f"equal groups); change kv_heads")
    gated = m.get("gated_mlp", False)
    if not isinstance(gated, bool):
        raise LibraError(f"{where}: gated_mlp must be true or false, got {gated!r}")
    experts = _int(m, "experts", where, default=0, minimum=0)
    top_k = _int(m, "top_k", where, default=1)
    if experts and top_k > experts:
        raise LibraError(f"{where}: top_k {top_k} exceeds experts {experts}; lower top_k")
    cf = _num(m, "capacity_factor", where, default=1.0)
    if cf <= 0:
        raise LibraError(f"{where}: capacity_factor must be > 0, got {cf:g}")
    layers = _int(m, "layers", where)
    first_dense = _int(m, "first_dense_layers", where, default=0, minimum=0)
    if experts and first_dense >= layers:
        raise LibraError(f"{where}: first_dense_layers {first_dense} leaves no MoE layer of {layers}; lower it")
    b, gb = _bytes_per_element(m, where)
    return TransformerModel(
        layers=layers, hidden_size=h, heads=heads,
        ffn_hidden_size=_int(m, "ffn_hidden_size", where, default=4 * h),
        seq_length=_int(m, "seq_length", where), vocab_size=_int(m, "vocab_size", where),
        micro_batch=_int(m, "micro_batch", where), global_batch=_int(m, "global_batch", where),
        bytes_per_element=b, grad_bytes_per_element=gb, kv_heads=kv, gated_mlp=gated, experts=experts,
        top_k=top_k, capacity_factor=cf, shared_experts=_int(m, "shared_experts", where, default=0, minimum=0),
        expert_hidden_size=_int(m, "expert_hidden_size", where, default=0, minimum=0),
        moe_layer_freq=_int(m, "moe_layer_freq", where, default=1), first_dense_layers=first_dense)


def _dlrm(m: Mapping, where: str) -> DlrmModel:
    _mapping(m, where, {"type", "batch_per_npu", "dense_features", "bottom_mlp", "top_mlp", "num_tables",
                        "embedding_dim", "pooling_factor", "bytes_per_element", "grad_bytes_per_element"})
    bottom = _int_list(m, "bottom_mlp", where)
    d = _int(m, "embedding_dim", where)
    if bottom[-1] != d:
        raise LibraError(f"{where}: bottom_mlp must end with embedding_dim {d} (its output joins the "
                         f"embeddings), got {list(bottom)}; make the last entry {d}")
    b, gb = _bytes_per_element(m, where)
    return DlrmModel(
        batch_per_npu=_int(m, "batch_per_npu", where), dense_features=_int(m, "dense_features", where),
        bottom_mlp=bottom, top_mlp=_int_list(m, "top_mlp", where), num_tables=_int(m, "num_tables", where),
        embedding_dim=d, pooling_factor=_int(m, "pooling_factor", where, default=1),
        bytes_per_element=b, grad_bytes_per_element=gb)


def _resnet50(m: Mapping, where: str) -> ResNet50Model:
    _mapping(m, where, {"type", "batch_per_npu", "image_size", "bytes_per_element", "grad_bytes_per_element"})
    size = _int(m, "image_size", where, default=224)
    if size % 32:
        raise LibraError(f"{where}: image_size must be a multiple of 32 (ResNet-50 downsamples 32x), got {size}")
    b, gb = _bytes_per_element(m, where)
    return ResNet50Model(batch_per_npu=_int(m, "batch_per_npu", where), image_size=size,
                         bytes_per_element=b, grad_bytes_per_element=gb)


_MODELS = {"transformer": _transformer, "dlrm": _dlrm, "resnet50": _resnet50}


def _network(raw: Any, where: str, base: Path) -> Network:
    if isinstance(raw, str):
        path = Path(raw)
        if not path.is_absolute():
            path = base / path
        return load_network(path)
    m = _mapping(raw, where, {"npus_per_dim"})
    shape = m.get("npus_per_dim")
    if (not isinstance(shape, list) or not shape
            or any(isinstance(n, bool) or not isinstance(n, int) or n < 2 for n in shape)):
        raise LibraError(f"{where}: npus_per_dim must be a non-empty list of integers >= 2, e.g. [8, 8], "
                         f"got {shape!r}; or give network: path/to/network.yml")
    dims = tuple(Dimension(f"dim{i}", "Ring", n) for i, n in enumerate(shape))
    return Network("x".join(map(str, shape)), dims)


def _parallel(raw: Any, where: str, model: Model) -> tuple[Parallel, dict[str, int | None]]:
    transformer = isinstance(model, TransformerModel)
    allowed = ({"tp", "pp", "dp", "cp", "ep", "sequence_parallel", "grad_bucket_mb", "schedule", "virtual_stages",
                "zero", "recompute"} if transformer else {"grad_bucket_mb"})
    m = _mapping(raw if raw is not None else {}, where, allowed)
    degrees = {a: _int(m, a, where, default=None) for a in AXES} if transformer else {}
    sp = m.get("sequence_parallel", False)
    if not isinstance(sp, bool):
        raise LibraError(f"{where}: sequence_parallel must be true or false, got {sp!r}")
    bucket = _num(m, "grad_bucket_mb", where, default=0.0)
    schedule = m.get("schedule", "gpipe")
    if schedule not in SCHEDULES:
        raise LibraError(f"{where}: schedule must be one of {list(SCHEDULES)}, got {schedule!r}")
    recompute = m.get("recompute", "none")
    if recompute not in RECOMPUTE:
        raise LibraError(f"{where}: recompute must be one of {list(RECOMPUTE)}, got {recompute!r}")
    zero = _int(m, "zero", where, default=0, minimum=0)
    if zero > 3:
        raise LibraError(f"{where}: zero must be 0, 1, 2 or 3 (the ZeRO stage), got {zero}")
    vs = _int(m, "virtual_stages", where, default=1)
    if vs > 1 and schedule != "interleaved":
        raise LibraError(f"{where}: virtual_stages {vs} needs schedule: interleaved; set it or drop virtual_stages")
    return Parallel(sequence_parallel=sp, grad_bucket_bytes=int(round(bucket * 1e6)), schedule=schedule,
                    virtual_stages=vs, zero=zero, recompute=recompute), degrees


def transformer_problem(m: TransformerModel, p: Parallel) -> str | None:
    """Why the generator cannot run ``p`` on ``m`` (a short reason naming the keys), or None."""
    if m.kv % p.tp:
        return f"tp {p.tp} must divide model.kv_heads {m.kv} (and heads {m.heads})"
    if m.ffn_hidden_size % p.tp or (m.experts and m.f_expert % p.tp):
        return f"tp {p.tp} must divide model.ffn_hidden_size (and expert_hidden_size)"
    if m.layers % (p.pp * p.virtual_stages):
        return f"pp x virtual_stages = {p.pp} x {p.virtual_stages} must divide model.layers {m.layers} (equal stages)"
    if p.schedule == "interleaved" and p.pp < 2:
        return "schedule interleaved needs pp >= 2"
    if m.global_batch % (m.micro_batch * p.dp * p.ep):
        return f"model.global_batch {m.global_batch} must be a multiple of micro_batch * dp * ep"
    if p.schedule == "interleaved" and (m.global_batch // (m.micro_batch * p.dp * p.ep)) % p.pp:
        return "schedule interleaved needs the micro-batches per replica to be a multiple of pp"
    if p.sequence_parallel and m.seq_length % (p.tp * p.cp):
        return f"sequence_parallel needs tp x cp to divide model.seq_length {m.seq_length}"
    if m.seq_length % p.cp:
        return f"cp {p.cp} must divide model.seq_length {m.seq_length}"
    if p.ep > 1 and not m.experts:
        return "ep > 1 needs an MoE model (model.experts)"
    if m.experts and m.experts % p.ep:
        return f"ep {p.ep} must divide model.experts {m.experts}"
    if m.experts and p.tp > 1 and not p.sequence_parallel:
        return "an MoE model with tp > 1 needs sequence_parallel: true (tokens are split over tp before dispatch)"
    return None


def _check_transformer(src: str, m: TransformerModel, p: Parallel) -> None:
    why = transformer_problem(m, p)
    if why:
        raise LibraError(f"{src}: parallel: {why}; change the parallel degrees or the model")


def spec_from_dict(data: Any, source: str = "<spec>", base_dir: str | Path = ".") -> TraceSpec:
    """Validate a parsed spec; relative network paths resolve against ``base_dir``."""
    src = source
    top = _mapping(data, src, {"name", "description", "model", "network", "parallel", "placement", "compute",
                               "iterations"})
    for key in ("model", "network", "compute"):
        if key not in top:
            raise LibraError(f"{src}: missing section {key!r}; see docs/tracegen.md for the spec format")
    mraw = top["model"]
    if not isinstance(mraw, Mapping):
        raise LibraError(f"{src}: model: expected a mapping with a 'type' key, got {mraw!r}")
    kind = mraw.get("type")
    if kind not in _MODELS:
        raise LibraError(f"{src}: model: type must be one of {sorted(_MODELS)}, got {kind!r}")
    model = _MODELS[kind](mraw, f"{src}: model")
    net = _network(top["network"], f"{src}: network", Path(base_dir))
    par, degrees = _parallel(top.get("parallel"), f"{src}: parallel", model)
    compute = _mapping(top["compute"], f"{src}: compute", {"tflops", "mem_bw_gbps", "hbm_gb"})
    tflops = _num(compute, "tflops", f"{src}: compute")
    if tflops <= 0:
        raise LibraError(f"{src}: compute: tflops must be > 0 (sustained TFLOPS per NPU), got {tflops:g}")
    mem_bw = _num(compute, "mem_bw_gbps", f"{src}: compute", default=0.0)
    if isinstance(model, DlrmModel) and mem_bw <= 0:
        raise LibraError(f"{src}: compute: mem_bw_gbps (sustained memory GB/s per NPU, > 0) is needed for "
                         f"DLRM embedding lookups, e.g. mem_bw_gbps: 1000")
    hbm = _num(compute, "hbm_gb", f"{src}: compute", default=None)
    if hbm is not None and hbm <= 0:
        raise LibraError(f"{src}: compute: hbm_gb must be > 0 (device memory per NPU, GB), got {hbm:g}")
    if isinstance(model, TransformerModel):
        placement = top.get("placement")
        if not isinstance(placement, Mapping) or not placement:
            raise LibraError(f"{src}: placement: missing; map each parallel axis to network dimensions, "
                             f"e.g. placement: {{tp: [0], dp: [1]}}")
        for a in AXES:
            if degrees[a] is None and a not in placement:
                degrees[a] = 1
        if all(v is not None for v in degrees.values()):
            prod = math.prod(degrees.values())
            if prod != net.npus_count:
                used = [a for a in AXES if a in ("tp", "pp", "dp") or degrees[a] > 1]
                raise LibraError(
                    f"{src}: parallel: {'*'.join(used)} = {'*'.join(str(degrees[a]) for a in used)} = {prod} but "
                    f"the network has {net.npus_count} NPUs; make the product equal the NPU count")
        layout = place_axes(net, degrees, placement, src)
        par = replace(par, **{a: layout.axis(a).degree for a in AXES})
        _check_transformer(src, model, par)
    else:
        if "placement" in top:
            raise LibraError(f"{src}: placement: not used by model type {kind!r} (it runs data parallel over all "
                             f"NPUs); remove the placement section")
        layout = all_ranks_layout(net, "dp")
        par = Parallel(dp=net.npus_count, grad_bucket_bytes=par.grad_bucket_bytes)
    name = top.get("name", Path(source).stem if source != "<spec>" else kind)
    if not isinstance(name, str) or not name:
        raise LibraError(f"{src}: name must be a non-empty string, got {name!r}")
    return TraceSpec(source=src, name=name, model=model, layout=layout, parallel=par, tflops=tflops,
                     mem_bw_gbps=mem_bw, iterations=_int(top, "iterations", src, default=1), hbm_gb=hbm)


def load_spec(spec: str | Path | Mapping[str, Any]) -> TraceSpec:
    """A spec from a YAML file path or an already-parsed mapping."""
    if isinstance(spec, Mapping):
        return spec_from_dict(spec)
    path = Path(spec)
    return spec_from_dict(load_yaml(path, "trace spec"), str(path), path.parent)
