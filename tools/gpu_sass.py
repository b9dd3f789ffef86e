"""Compile the rANS decode kernel for sm_90 without a GPU (triton's bundled ptxas) and report,
per variant, the registers and the SASS instructions of the unmasked main loop (the loop body
between the loop's label and its back-branch): an instruction budget per decode step.

    python tools/gpu_sass.py [--dump DIR]
"""
import argparse
import os
import re
import subprocess
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
from wcodec.gpu import kernels as KK  # noqa: E402
from wcodec.gpu import layout as K  # noqa: E402


def compile_variant(mode, R, PB, W, S, asm, smem=0, pf=0, maxnreg=None, pair=0):
    out_t = {0: "*u8", 1: "*i16", 2: "*i32"}[mode]
    sig = {"desc_ptr": "*i64", "n_items": "i32", "buf8_ptr": "*u8", "buf16_ptr": "*i16",
           "buf32_ptr": "*i32", "lut_ptr": "*i64", "lut_addr": "i64", "out_ptr": out_t, "status_ptr": "*i32",
           "MODE": "constexpr", "R": "constexpr", "PB": "constexpr", "W": "constexpr",
           "S": "constexpr", "NFIELDS": "constexpr", "ASM": "constexpr", "SMEM": "constexpr",
           "PF": "constexpr", "PAIR": "constexpr"}
    const = {"MODE": mode, "R": R, "PB": PB, "W": W, "S": S, "NFIELDS": K.NF, "ASM": asm, "SMEM": int(smem),
             "PF": bool(pf), "PAIR": bool(pair)}
    src = ASTSource(KK.rans_chunks_kernel, sig, const)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": W, **({"maxnreg": maxnreg} if maxnreg else {})})


def sass(k):
    cubin = k.asm["cubin"]
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    nvd = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
    return subprocess.run([nvd, "-c", f.name], capture_output=True, text=True).stdout


def resources(k):
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(k.asm["cubin"])
    cuo = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    r = subprocess.run([cuo, "-res-usage", f.name], capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+)", r)
    return f"REG {m.group(1)} STACK {m.group(2)} SHARED {m.group(3)}" if m else r


def main_loop_count(text):
    """Instructions of the biggest backward-branch loop (the unmasked main loop)."""
    lines = [l for l in text.splitlines()]
    instr = []  # (label or None, addr, text)
    labels = {}
    for l in lines:
        m = re.match(r"\s*(\.L_x_\d+):", l)
        if m:
            labels[m.group(1)] = len(instr)
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", l)
        if m:
            instr.append(m.group(2))
    best = (0, None)
    for i, ins in enumerate(instr):
        m = re.search(r"BRA\s+(?:`\()?(\.L_x_\d+)", ins)
        if m and m.group(1) in labels and labels[m.group(1)] <= i:
            body = instr[labels[m.group(1)]:i + 1]
            if len(body) > best[0]:
                best = (len(body), body)
    return best


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", default=None)
    ap.add_argument("--variants", default="1,5,12,4,2,1;1,5,12,4,2,0;1,5,12,4,1,1;1,5,12,4,4,1;1,5,12,1,2,1;1,5,12,8,2,1;0,0,12,4,2,1;2,5,12,4,2,1")
    a = ap.parse_args()
    for v in a.variants.split(";"):
        mode, R, PB, W, S, asm, smem, pf, mr, pair = (int(x) for x in (v + ",0,0,0,0").split(",")[:10])
        k = compile_variant(mode, R, PB, W, S, bool(asm), smem, pf, mr or None, pair)
        t = sass(k)
        n, body = main_loop_count(t)
        regs = resources(k)
        kinds = {}
        for b in body or []:
            op = b.split()[0] if not b.startswith("@") else b.split()[1]
            op = op.split(".")[0]
            kinds[op] = kinds.get(op, 0) + 1
        nst = kinds.get("STG", 0) // (2 if mode == 2 else 1)  # chunk-steps (a pair stores twice)
        top = ", ".join(f"{o}:{c}" for o, c in sorted(kinds.items(), key=lambda x: -x[1])[:12])
        print(f"mode={mode} R={R} PB={PB} W={W} S={S} asm={asm} smem={smem} pf={pf} maxnreg={mr} pair={pair}: {regs}, "
              f"main loop {n} instr, {nst} steps = {n / max(nst, 1):.1f} per step | {top}")
        if a.dump:
            os.makedirs(a.dump, exist_ok=True)
            tag = f"m{mode}_R{R}_W{W}_S{S}_a{asm}_s{smem}"
            open(os.path.join(a.dump, tag + ".sass"), "w").write(t)
            open(os.path.join(a.dump, tag + ".ttgir"), "w").write(k.asm["ttgir"])
            open(os.path.join(a.dump, tag + ".ptx"), "w").write(k.asm["ptx"])
