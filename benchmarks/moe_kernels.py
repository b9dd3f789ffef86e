"""Compressed MoE experts (``wcodec.gpu.fixed_grouped``) against transformers' bf16 experts
implementations on a Mixtral-shaped experts block (8 experts, hidden 4096, intermediate 14336,
top-2), at decode batches and a prefill (issue 28). Needs a CUDA GPU.

    PYTHONPATH=src python3 benchmarks/moe_kernels.py [--tokens 1,16,512] [--out DIR]

One experts forward = gate_up (E x [28672, 4096]), SiLU(gate) * up, down (E x [4096, 14336]),
the routing weights and the sum over each token's experts. Variants: transformers'
``MixtralExperts`` in bf16 under each registered experts implementation (eager, batched_mm,
grouped_mm); ours: the grouped fused kernel for both projections (``grouped``), and all
experts decoded into a bf16 scratch in one launch (``fixed_grouped.decode_experts``) then
``torch._grouped_mm`` (``decode+grouped_mm``).
Routing is random top-2 (fixed seed), the same for all. Times: median per forward of a CUDA
graph replaying 5 forwards (``fused_matmul.graph_time``: one layer is 2.8 GB, far past the L2);
transformers' eager implementation (a host sync per expert: not capturable) by the median of
CUDA-event timed eager calls (marked). Every output is checked against an fp32 reference first. Synthetic
weights (normal, std 0.02). Prints one table last; rows to DIR/moe_kernels.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fused_matmul import graph_time  # noqa: E402
from gpu_decode import bench_call  # noqa: E402

from wcodec.gpu import fixed as fx  # noqa: E402
from wcodec.gpu import fixed_grouped as fg  # noqa: E402

E, H, I, TOP = 8, 4096, 14336, 2


def sorted_routing(top_k_index: torch.Tensor):
    """(order, offsets, perm) as transformers' grouped_mm path sorts: no host sync (histc)."""
    ids = top_k_index.reshape(-1)
    ids_g, perm = torch.sort(ids, stable=True)
    counts = torch.histc(ids_g.int(), bins=E, min=0, max=E - 1).to(torch.int64)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64, device=ids.device), counts.cumsum(0)])
    return perm // TOP, offsets, perm


def ours_grouped(x, idx, wts, gu, down):
    order, offsets, perm = sorted_routing(idx)
    gate_up = fg.grouped_linear(x, gu, order, offsets)
    gate, up = gate_up.chunk(2, dim=-1)
    h = F.silu(gate) * up
    y = fg.grouped_linear(h, down, torch.arange(h.shape[0], device=x.device), offsets)
    y = y * wts.reshape(-1)[perm, None]
    return torch.zeros_like(x).index_add_(0, order, y.to(x.dtype))


def ours_decode_grouped(x, idx, wts, gu, down, scratch):
    """Each expert decoded into scratch [E, N, K] bf16, then torch._grouped_mm (prefill route)."""
    order, offsets, perm = sorted_routing(idx)
    offs = offsets[1:].to(torch.int32)

    def mm(inp, ex, buf):
        return torch._grouped_mm(inp, fg.decode_experts(ex, buf).transpose(-2, -1), offs=offs)

    gate_up = mm(x[order], gu, scratch[0])
    gate, up = gate_up.chunk(2, dim=-1)
    y = mm((F.silu(gate) * up).contiguous(), down, scratch[1]) * wts.reshape(-1)[perm, None]
    return torch.zeros_like(x).index_add_(0, order, y.to(x.dtype))


def reference(x, idx, wts, w_gu, w_down):
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for t in range(x.shape[0]):
        for j in range(TOP):
            e = int(idx[t, j])
            g, u = (x[t].float() @ w_gu[e].float().T).chunk(2)
            out[t] += float(wts[t, j]) * ((F.silu(g) * u).to(torch.bfloat16).float() @ w_down[e].float().T)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", default="1,16,512")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args()
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralExperts
    t0 = time.time()
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    g = torch.Generator(device="cuda").manual_seed(0)
    cfg = MixtralConfig(hidden_size=H, intermediate_size=I, num_local_experts=E, num_experts_per_tok=TOP)
    mod = MixtralExperts(cfg).to(device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        mod.gate_up_proj.copy_(torch.randn(mod.gate_up_proj.shape, device="cuda", generator=g) * 0.02)
        mod.down_proj.copy_(torch.randn(mod.down_proj.shape, device="cuda", generator=g) * 0.02)
    gu = fg.stack_experts([fx.encode_weight(mod.gate_up_proj[e]) for e in range(E)])
    down = fg.stack_experts([fx.encode_weight(mod.down_proj[e]) for e in range(E)])
    scratch = (torch.empty_like(mod.gate_up_proj), torch.empty_like(mod.down_proj))
    try:
        from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS
        impls = ["eager"] + [k for k in ("batched_mm", "grouped_mm") if k in ALL_EXPERTS_FUNCTIONS]
    except ImportError:
        impls = ["eager"]
    print(f"experts implementations: {impls}; weights bf16 {2 * (mod.gate_up_proj.numel() + mod.down_proj.numel()) / 1e9:.2f}"
          f" GB, fixed {(gu.lo.numel() * 8 + gu.nib.numel() * 4 + down.lo.numel() * 8 + down.nib.numel() * 4) / 1e9:.2f} GB",
          flush=True)
    rows = []
    for T in (int(t) for t in a.tokens.split(",")):
        x = torch.randn(T, H, device="cuda", generator=g).to(torch.bfloat16)
        logits = torch.randn(T, E, device="cuda", generator=g)
        wts, idx = torch.topk(logits.softmax(-1), TOP, dim=-1)
        wts = (wts / wts.sum(-1, keepdim=True)).to(torch.bfloat16)
        check = min(T, 16)
        ref = reference(x[:check], idx[:check], wts[:check], mod.gate_up_proj, mod.down_proj)
        variants = {}
        for impl in impls:
            def f(impl=impl):
                cfg._experts_implementation = impl
                return mod(x, idx, wts)
            variants[f"bf16 {impl}"] = f
        variants["fixed grouped"] = lambda: ours_grouped(x, idx, wts, gu, down)
        if T * TOP <= fg.GEMV_MAX_SLOTS:  # the per-slot GEMV against the tiled kernel, and GEMV tiles
            def tiled():
                saved, fg.GEMV_MAX_SLOTS = fg.GEMV_MAX_SLOTS, 0
                try:
                    return ours_grouped(x, idx, wts, gu, down)
                finally:
                    fg.GEMV_MAX_SLOTS = saved
            variants["fixed grouped (tiles)"] = tiled
            for tile in ((4, 64), (8, 64), (16, 32), (4, 128)):
                def gemv(tile=tile):
                    saved, fg.GEMV_TILE = fg.GEMV_TILE, tile
                    try:
                        return ours_grouped(x, idx, wts, gu, down)
                    finally:
                        fg.GEMV_TILE = saved
                variants[f"fixed gemv {tile[0]}x{tile[1]}"] = gemv
        variants["fixed decode+grouped_mm"] = lambda: ours_decode_grouped(x, idx, wts, gu, down, scratch)
        row = dict(tokens=T, slots=T * TOP)
        for name, f in variants.items():
            try:
                with torch.no_grad():
                    y = f()
                    err = float((y[:check].float() - ref).norm() / ref.norm())
                    assert err < 2e-2, (name, T, err)
                    if name == "bf16 eager":  # a host sync per expert: not capturable
                        t, how = bench_call(f, torch), "eager"
                    else:
                        t, how = graph_time(torch, [f] * 5, reps=10), "graph"
                row[name] = dict(us=round(t * 1e6, 1), how=how, err=round(err, 5))
            except Exception as e:  # an implementation this transformers/torch cannot run here
                row[name] = dict(error=f"{type(e).__name__}: {str(e)[:200]}")
            print(T, name, row[name], f"{time.time() - t0:.0f} s", flush=True)
        rows.append(row)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "moe_kernels.json"), "w") as f:
        json.dump(rows, f, indent=1)
    names = list(dict.fromkeys(k for r in rows for k in r if k not in ("tokens", "slots")))
    print("\n| tokens | " + " | ".join(names) + " |  (us per experts forward; graph unless marked)")
    print("|---:|" + "---:|" * len(names))
    for r in rows:
        cells = [("-" if n not in r else "error" if "us" not in r[n]
                  else f"{r[n]['us']}{'' if r[n]['how'] == 'graph' else ' (eager)'}") for n in names]
        print(f"| {r['tokens']} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
