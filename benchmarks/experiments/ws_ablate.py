"""Where the warp-specialised kernel's time goes: ``gpu/fixed_ws.py`` rebuilt with parts of its
work left out (a copy of its source with ``ABL`` switches, written to a temporary module), each
timed as ``ws_kernel.py`` times it, one process. The outputs are wrong by design (only the
baseline, ABL 0, is checked against fp32). ABL bits: 1 the decoder neither decodes nor stores W's
tile, 2 W's words are not copied (the decoder decodes stale shared memory), 4 x's tiles are not
copied, 8 the consumer issues no wgmma. Needs an sm_90 GPU.

    PYTHONPATH=src python3 benchmarks/experiments/ws_ablate.py [--shapes 0,2] [--ms 64,128] [--abl 0,1,2,4,8,6,15]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fused_matmul import graph_time  # noqa: E402
from serving_kernels import SHAPES, rel  # noqa: E402
from ws_kernel import call, weights  # noqa: E402

from wcodec.gpu import fixed as fx  # noqa: E402
from wcodec.gpu import fixed_ws  # noqa: E402

#: (text in fixed_ws.py, its replacement): each must match once
EDITS = [
    ("from .fixed_mma import", "from wcodec.gpu.fixed_mma import"),
    ("from .fixed_wgmma import", "from wcodec.gpu.fixed_wgmma import"),
    ("XL: gl.constexpr, VG: gl.constexpr, EW: gl.constexpr):",
     "XL: gl.constexpr, VG: gl.constexpr, EW: gl.constexpr, ABL: gl.constexpr):"),
    ("HAS_BIAS: gl.constexpr, EPI: gl.constexpr, EW: gl.constexpr):",
     "HAS_BIAS: gl.constexpr, EPI: gl.constexpr, EW: gl.constexpr, ABL: gl.constexpr):"),
    ("g_hi, BM, BN, BG, HAS_BIAS, EPI, EW))", "g_hi, BM, BN, BG, HAS_BIAS, EPI, EW, ABL))"),
    ("g_lo, g_hi, BM, BN, BG, DW, XL, VG, EW))", "g_lo, g_hi, BM, BN, BG, DW, XL, VG, EW, ABL))"),
    ("HAS_BIAS, EPI, EW), _consumer,", "HAS_BIAS, EPI, EW, ABL), _consumer,"),
    ("XL, VG, EW), [_decoder, _escaper]", "XL, VG, EW, ABL), [_decoder, _escaper]"),
    ("XL, VG, EW), [_decoder], [DW]", "XL, VG, EW, ABL), [_decoder], [DW]"),
    ("WS_LIST: gl.constexpr = _WS_LIST):", "WS_LIST: gl.constexpr = _WS_LIST, ABL: gl.constexpr = 0):"),
    ("        _x_copy(x_s.index(nxt), xrow, xk, xmask, g0 + XL * BG, K)",
     "        if ABL & 4:\n            cp.commit_group()\n        else:\n"
     "            _x_copy(x_s.index(nxt), xrow, xk, xmask, g0 + XL * BG, K)"),
    ("        _w_copies(nib_s.index((i + WST - 1) % WST), lo_s.index((i + WST - 1) % WST), nib_ptr, lo_ptr, roff, rmask,\n"
     "                  gi, g0 + (WST - 1) * BG, g_hi)",
     "        if ABL & 2:\n            cp.commit_group()\n        else:\n"
     "            _w_copies(nib_s.index((i + WST - 1) % WST), lo_s.index((i + WST - 1) % WST), nib_ptr, lo_ptr, roff,\n"
     "                      rmask, gi, g0 + (WST - 1) * BG, g_hi)"),
    ("        w_s.index(s).store(_decode_rows(nw, lo, base4))",
     "        if not (ABL & 1):\n            w_s.index(s).store(_decode_rows(nw, lo, base4))"),
    ("        acc = warpgroup_mma(w_s.index(s), x_s.index(s).permute((1, 0)), acc, is_async=True)\n"
     "        # the previous step's product is done: its buffer goes back to the decoder\n"
     "        acc = warpgroup_mma_wait(num_outstanding=1, deps=[acc])",
     "        if not (ABL & 8):\n"
     "            acc = warpgroup_mma(w_s.index(s), x_s.index(s).permute((1, 0)), acc, is_async=True)\n"
     "            acc = warpgroup_mma_wait(num_outstanding=1, deps=[acc])"),
]


def ablation_module():
    """fixed_ws's source with the ABL switches, imported from a temporary file (Gluon reads a
    kernel's source from its file)."""
    src = Path(fixed_ws.__file__).read_text()
    for old, new in EDITS:
        assert old in src, old  # fixed_ws.py changed: update EDITS
        src = src.replace(old, new)
    path = Path(tempfile.mkdtemp()) / "ws_ablated.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("ws_ablated", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="0,2")
    ap.add_argument("--ms", default="64,128")
    ap.add_argument("--abl", default="0,1,2,4,8,6,15")
    a = ap.parse_args(argv)
    mod = ablation_module()
    abls = [int(v) for v in a.abl.split(",")]
    rows = []
    for si in map(int, a.shapes.split(",")):
        N, K = SHAPES[si]
        w, ws_, fws, rep, g = weights(si, "normal")
        for M in map(int, a.ms.split(",")):
            x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
            ref = x.float() @ w.float().T
            cub = graph_time(torch, [lambda w_=w_: F.linear(x, w_) for w_ in ws_] * rep) * 1e6
            bm = max(32, fx._pow2(M))
            for ci in ((0, 5) if bm <= 64 else (0,)):
                cfg = fixed_ws.configs(bm)[ci]
                split = fx._ws_split(N, K, fx._sm_count(x.device))
                y = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
                wsb = torch.empty((split, M, N), dtype=torch.float32, device="cuda") if split > 1 else y
                row = dict(N=N, K=K, M=M, cfg=ci, split=split, cublas=round(cub, 2))
                for abl in abls:
                    def run(f, abl=abl):
                        call(x, f, cfg, split, y, wsb, kernel=mod.fixed_ws_kernel, ABL=abl)
                    try:
                        run(fws[0])
                        torch.cuda.synchronize()
                    except Exception as e:
                        row[f"abl{abl}"] = f"FAIL {type(e).__name__}"
                        print("FAIL", abl, str(e)[:1500], flush=True)
                        continue
                    if abl == 0:
                        row["rel"] = round(rel(y, ref), 5)
                    row[f"abl{abl}"] = round(graph_time(torch, [lambda f=f: run(f) for f in fws] * rep) * 1e6, 2)
                rows.append(row)
                print(row, flush=True)
    print("\n| W | M | cfg | split | cuBLAS | " + " | ".join(f"ABL {v}" for v in abls) + " |")
    print("|---|---:|---:|---:|---:|" + "---:|" * len(abls))
    for r in rows:
        print(f"| {r['N']}x{r['K']} | {r['M']} | c{r['cfg']} | {r['split']} | {r['cublas']} | "
              + " | ".join(str(r.get(f"abl{v}")) for v in abls) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
