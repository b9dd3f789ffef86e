"""Host time per call of a torch.compile'd model against the number of tensors each layer hands
its custom op: why CompressedLinear keeps its fixed layout in one buffer (wcodec.gpu.fixed.pack).

A model of ``--layers`` layers, each calling one trivial custom op with x and ``k`` buffers of
its own, compiled (inductor, default mode), on the CPU: every tensor a layer passes is one more
graph input that the compiled wrapper gathers and checks on every call. Prints ms per call for
each k. CPU only, no GPU needed.

    python benchmarks/experiments/compile_inputs.py --layers 225 --ks 1,2,6
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn


@torch.library.custom_op("wcodec_bench::passthrough", mutates_args=())
def passthrough(x: torch.Tensor, bufs: list[torch.Tensor]) -> torch.Tensor:
    return x.clone()


@passthrough.register_fake
def _(x, bufs):
    return torch.empty_like(x)


class Layer(nn.Module):
    def __init__(self, k: int):
        super().__init__()
        self.k = k
        for i in range(k):
            self.register_buffer(f"b{i}", torch.zeros(8))

    def forward(self, x):
        return passthrough(x, [getattr(self, f"b{i}") for i in range(self.k)])


class Model(nn.Module):
    def __init__(self, layers: int, k: int):
        super().__init__()
        self.layers = nn.ModuleList(Layer(k) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=225, help="225: the linear layers of a 7B Llama")
    ap.add_argument("--ks", default="1,2,6", help="tensors per layer, comma-separated")
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    x = torch.zeros(4)
    rows = []
    for k in map(int, args.ks.split(",")):
        torch._dynamo.reset()
        model = torch.compile(Model(args.layers, k))
        for _ in range(3):
            model(x)
        t = time.perf_counter()
        for _ in range(args.calls):
            model(x)
        rows.append((k, 1e3 * (time.perf_counter() - t) / args.calls))
    print(f"torch {torch.__version__}, {args.layers} layers, CPU")
    print("| tensors per layer | graph inputs | ms per call |\n|---:|---:|---:|")
    for k, ms in rows:
        print(f"| {k} | {args.layers * k + 1} | {ms:.3f} |")
    if len(rows) > 1:
        (k0, a), (k1, b) = rows[0], rows[-1]
        print(f"per extra input: {1e3 * (b - a) / (args.layers * (k1 - k0)):.2f} us")


if __name__ == "__main__":
    main()
