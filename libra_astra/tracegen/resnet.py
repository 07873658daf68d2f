"""Data-parallel ResNet-50 training step: per-layer compute and weight-gradient all-reduces.

Layers: the 54 weighted layers of ResNet-50 (torchvision v1.5 layout: stride on the 3x3 conv):
conv1 (7x7, 3 -> 64), 16 bottleneck blocks (1x1, 3x3, 1x1 convs; stages of 3, 4, 6, 3 blocks with
widths 64, 128, 256, 512 and expansion 4), one 1x1 downsample conv per stage, and the 1000-way fc.
Each conv carries its batch norm (2 parameters per output channel). Parameters: k^2 c_in c_out +
2 c_out per conv, 2048 * 1000 + 1000 for fc: 25,557,032 in all. Forward FLOPs per image:
2 k^2 c_in c_out H_out W_out per conv, 2 * 2048 * 1000 for fc (about 8.2 GFLOPs at 224 x 224);
pooling, batch-norm and activation arithmetic are not counted.

Per iteration: forward of every layer (b images each, FLOPs / sustained rate), then backward in
reverse order (2 x forward FLOPs), each layer's weight gradient (params * e_g bytes) all-reduced
over all NPUs as soon as its backward is done (or merged into buckets of ``grad_bucket_mb``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .program import GradBuckets, Plan, ProgramBuilder
from .spec import ResNet50Model, TraceSpec


@dataclass(frozen=True)
class Layer:
    name: str
    params: int
    flops_per_sample: int   # forward
    act_in: int             # elements per sample
    act_out: int


def resnet50_layers(image_size: int = 224) -> tuple[Layer, ...]:
    layers: list[Layer] = []

    def conv(name: str, cin: int, cout: int, k: int, h_in: int, h_out: int) -> None:
        layers.append(Layer(name, k * k * cin * cout + 2 * cout, 2 * k * k * cin * cout * h_out * h_out,
                            cin * h_in * h_in, cout * h_out * h_out))

    size = image_size // 2
    conv("conv1", 3, 64, 7, image_size, size)
    size //= 2  # max pool
    cin = 64
    for stage, (width, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
        for blk in range(blocks):
            h_in = size
            h_out = size // 2 if (stage > 0 and blk == 0) else size
            pre = f"s{stage + 1}b{blk}"
            conv(f"{pre}.conv1", cin, width, 1, h_in, h_in)
            conv(f"{pre}.conv2", width, width, 3, h_in, h_out)
            conv(f"{pre}.conv3", width, 4 * width, 1, h_out, h_out)
            if blk == 0:
                conv(f"{pre}.down", cin, 4 * width, 1, h_in, h_out)
            cin, size = 4 * width, h_out
    layers.append(Layer("fc", 2048 * 1000 + 1000, 2 * 2048 * 1000, 2048, 1000))
    return tuple(layers)


def resnet50_plan(spec: TraceSpec) -> Plan:
    m: ResNet50Model = spec.model  # type: ignore[assignment]
    b, e, ge = m.batch_per_npu, m.bytes_per_element, m.grad_bytes_per_element
    layers = resnet50_layers(m.image_size)
    bld = ProgramBuilder(spec.tflops)

    def tensor_bytes(lay: Layer) -> int:
        return (lay.params + b * (lay.act_in + lay.act_out)) * e

    for it in range(spec.iterations):
        bld.prefix = f"it{it}." if spec.iterations > 1 else ""
        bld.gate = bld.last_coll
        for lay in layers:
            bld.comp(f"{lay.name}.fwd", b * lay.flops_per_sample, tensor_bytes(lay))
        grads = GradBuckets(bld, "dp", spec.parallel.grad_bucket_bytes, enabled=spec.layout.num_ranks > 1)
        for lay in reversed(layers):
            c = bld.comp(f"{lay.name}.bwd", 2 * b * lay.flops_per_sample, tensor_bytes(lay))
            grads.add(lay.name, lay.params * ge, c)
        grads.flush()
    return Plan({0: tuple(bld.ops)}, (0,) * spec.layout.num_ranks)
