"""Triton decode kernels: interleaved rANS chunks fused with the float plane merge, and the int8
inverse prediction over 2-D tiles.

Imported only by ``wcodec.gpu`` functions (triton and torch are heavy). Every kernel works on one
uploaded byte buffer ``buf`` seen through three typed views (``buf8`` uint8, ``buf16`` int16,
``buf32`` int32 of the same storage): sections start on 16-byte boundaries, so each section is an
element range of the view of its dtype. Offsets come from descriptor tables built on the host
(``wcodec.gpu.plan``) from validated metadata; the kernels still mask every read of data-dependent
positions (word positions, alphabet indices, tail words) to its valid range, so that a corrupt
stream can only produce a non-zero status, never an out-of-bounds access.

The rANS layout (32 lanes of a chunk sharing one word stream, each step's reads compacted by an
exclusive prefix count over the lanes that renormalise) is DietGPU's (Meta, 2021); here the
prefix count is ``tl.cumsum`` over the lane axis, which Triton lowers to warp shuffles.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .layout import *  # noqa: F401,F403  (descriptor field indices, modes)


@triton.jit
def rans_chunks_kernel(desc_ptr, n_items, buf8_ptr, buf16_ptr, buf32_ptr, n_buf32, lut_ptr,
                       out_ptr, status_ptr,
                       MODE: tl.constexpr, G: tl.constexpr, NFIELDS: tl.constexpr,
                       BALLOT: tl.constexpr = False):
    """Decode G chunks per program (G independent 32-lane chains: latency hiding by ILP).

    desc_ptr: int64[n_items, NFIELDS] chunk descriptors. out_ptr: uint8 (MODE_BYTES), int16
    (MODE_F16BITS) or int32 (MODE_F32BITS) output view. status_ptr: int32[n_items].
    """
    pid = tl.program_id(0)
    item = pid * G + tl.arange(0, G)
    valid = item < n_items
    d = desc_ptr + tl.minimum(item, n_items - 1).to(tl.int64) * NFIELDS
    n = tl.where(valid, tl.load(d + 1), 0)
    out_off = tl.load(d + 0)
    st_off = tl.load(d + 2)
    pos = tl.load(d + 3)
    w_end = tl.load(d + 4)
    lut_off = tl.load(d + 5)
    pb = tl.load(d + 6).to(tl.uint32)

    lanes = tl.arange(0, 32)
    x = tl.load(buf32_ptr + st_off[:, None] + lanes[None, :]).to(tl.uint32, bitcast=True)
    init_bad = tl.max((x < 65536).to(tl.int32), axis=1)
    pbm = ((tl.full((G,), 1, tl.uint32) << pb) - 1)[:, None]
    pb2 = pb[:, None]
    lut_row = lut_ptr + lut_off[:, None]
    words = buf16_ptr + tl.zeros([G, 32], tl.int64)
    read_past = tl.zeros([G, 32], tl.int32)

    if MODE != 0:
        alph = buf16_ptr + tl.load(d + 7)[:, None]
        alph_n = tl.load(d + 8).to(tl.uint32)[:, None]
        hshift = tl.load(d + 9).to(tl.uint32)[:, None]
        tbit0 = tl.load(d + 10)[:, None]
        R = tl.load(d + 11)[:, None]
        Ru = R.to(tl.uint64)
        tmask = (tl.full((G, 1), 1, tl.uint64) << Ru) - 1
        lowm = (tl.full((G, 1), 1, tl.uint32) << (Ru - 1).to(tl.uint32)) - 1
        sym_bad = tl.zeros([G, 32], tl.int32)
        if MODE == 2:
            low1 = buf8_ptr + tl.load(d + 12)[:, None]
            low0 = buf8_ptr + tl.load(d + 13)[:, None]
    out_base = out_ptr + out_off[:, None]

    n_steps = tl.max((n + 31) // 32)
    for t in range(0, n_steps):
        idx = t * 32 + lanes[None, :]
        act = idx < n[:, None]
        e = tl.load(lut_row + (x & pbm)).to(tl.uint32, bitcast=True)
        sym = e & 0xFF
        xn = (((e >> 8) & 0xFFF) + 1) * (x >> pb2) + (e >> 20)
        need = (xn < 65536) & act
        cnt = need.to(tl.int32)
        if BALLOT:
            # DietGPU's ballot/popc: needs the chunk row on the 32 threads of the one warp (G ==
            # num_warps == 1; G == num_warps == 2 measured wrong); GPU only (no inline asm in the interpreter)
            before, total = tl.inline_asm_elementwise(
                "{ .reg .pred p; .reg .b32 b, lt; setp.ne.s32 p, $2, 0; "
                "vote.sync.ballot.b32 b, p, 0xffffffff; mov.u32 lt, %lanemask_lt; "
                "and.b32 lt, lt, b; popc.b32 $0, lt; popc.b32 $1, b; }",
                "=r,=r,r", [cnt], dtype=(tl.int32, tl.int32), is_pure=True, pack=1)
            wi = pos[:, None] + before
            step_reads = tl.max(total, axis=1)
        else:
            wi = pos[:, None] + (tl.cumsum(cnt, axis=1) - cnt)
            step_reads = tl.sum(cnt, axis=1)
        ok = wi < w_end[:, None]
        w = tl.load(words + wi, mask=need & ok, other=0).to(tl.uint16, bitcast=True).to(tl.uint32)
        xn = tl.where(need, (xn << 16) | w, xn)
        x = tl.where(act, xn, x)
        read_past |= (need & ~ok).to(tl.int32)
        pos += step_reads
        if MODE == 0:
            tl.store(out_base + idx, sym.to(tl.uint8), mask=act)
        else:
            sym_bad |= ((sym >= alph_n) & act).to(tl.int32)
            head = tl.load(alph + tl.minimum(sym, alph_n - 1)).to(tl.uint16, bitcast=True)
            # tail field: R bits at bit tbit0 + idx*R, read as two aligned 32-bit words
            bit = tbit0 + idx.to(tl.int64) * R
            wd = tl.minimum(bit >> 5, n_buf32 - 2)
            w0 = tl.load(buf32_ptr + wd, mask=act, other=0).to(tl.uint32, bitcast=True).to(tl.uint64)
            w1 = tl.load(buf32_ptr + wd + 1, mask=act, other=0).to(tl.uint32, bitcast=True).to(tl.uint64)
            tv = (((w1 << 32) | w0) >> (bit & 31).to(tl.uint64)) & tmask
            tail = tv.to(tl.uint32)
            sign = tail >> (Ru - 1).to(tl.uint32)
            mant = tail & lowm
            if MODE == 1:
                bits = (head.to(tl.uint32) << hshift) | (sign << 15) | mant
                tl.store(out_base + idx, bits.to(tl.uint16).to(tl.int16, bitcast=True), mask=act)
            else:
                b1 = tl.load(low1 + idx, mask=act, other=0).to(tl.uint32)
                b0 = tl.load(low0 + idx, mask=act, other=0).to(tl.uint32)
                bits = (head.to(tl.uint32) << hshift) | (sign << 31) | (mant << 16) | (b1 << 8) | b0
                tl.store(out_base + idx, bits.to(tl.int32, bitcast=True), mask=act)

    final_bad = tl.max((x != 65536).to(tl.int32), axis=1) | (pos != w_end).to(tl.int32)
    status = tl.where(init_bad != 0, 3, tl.where(tl.max(read_past, axis=1) != 0, 1,
                                                 tl.where(final_bad != 0, 2, 0)))
    if MODE != 0:
        status = tl.where((status == 0) & (tl.max(sym_bad, axis=1) != 0), 4, status)
    tl.store(status_ptr + item, status, mask=valid)


@triton.jit
def int8_tiles_kernel(tdesc_ptr, prog_tensor_ptr, buf8_ptr, buf32f_ptr, out_ptr,
                      BH: tl.constexpr, BW: tl.constexpr, OUT: tl.constexpr, NTF: tl.constexpr):
    """Inverse intra prediction of one tile per program, optionally dequantised.

    prog_tensor_ptr: int32[n_programs], the tensor (row of tdesc) of each program's tile. The
    residual plane is reconstructed in place (AVG needs already reconstructed neighbours), then
    written to out (uint8 view for OUT_I8, else the float view) as ``float32(q) * scale[row]``
    rounded to the output dtype (round to nearest even).
    """
    pid = tl.program_id(0)
    tsr = tl.load(prog_tensor_ptr + pid).to(tl.int64)
    d = tdesc_ptr + tsr * NTF
    cols = tl.load(d + 0)
    rows = tl.load(d + 1)
    th = tl.load(d + 2)
    tw = tl.load(d + 3)
    ntw = tl.load(d + 4)
    local = pid - tl.load(d + 11)
    ti = local // ntw
    tj = local % ntw
    r0 = ti * th
    c0 = tj * tw
    h = tl.minimum(th, rows - r0)
    w = tl.minimum(tw, cols - c0)
    res = buf8_ptr + tl.load(d + 5) + r0 * cols + c0 * h  # tiles of band ti have height h
    modes_off = tl.load(d + 7)
    mode = 0
    if modes_off >= 0:
        mode = tl.load(buf8_ptr + modes_off + local).to(tl.int32)
    signed = tl.load(d + 8)

    rr = tl.arange(0, BH)[:, None]
    cc = tl.arange(0, BW)[None, :]
    m = (rr < h) & (cc < w)
    r = tl.load(res + rr * w + cc, mask=m, other=0).to(tl.int32)
    if mode == 1:
        x = tl.cumsum(r, axis=1)
    elif mode == 2:
        x = tl.cumsum(r, axis=0)
    elif mode == 4:
        x = tl.cumsum(tl.cumsum(r, axis=1), axis=0)
    elif mode == 3:
        # AVG is a nonlinear recurrence: a wavefront over anti-diagonals k = row + col, one
        # element per row per step; the top neighbour is re-read from the reconstructed plane.
        rv = tl.arange(0, BH)
        left = tl.zeros([BH], tl.int32)
        for k in range(0, h + w - 1):
            c = k - rv
            on = (c >= 0) & (c < w) & (rv < h)
            p = res + rv * w + c
            rk = tl.load(p, mask=on, other=0).to(tl.int32)
            top = tl.load(p - w, mask=on & (rv > 0), other=0).to(tl.int32)
            lf = tl.where(c > 0, left, 0)
            if signed != 0:
                top = tl.where(top >= 128, top - 256, top)
                lf = tl.where(lf >= 128, lf - 256, lf)
            xv = (rk + ((lf + top) >> 1)) & 0xFF
            tl.store(p, xv.to(tl.uint8), mask=on)
            left = tl.where(on, xv, left)
            tl.debug_barrier()
        x = tl.load(res + rr * w + cc, mask=m, other=0).to(tl.int32)
    else:
        x = r
    x = x & 0xFF
    grow = r0 + rr
    o = tl.load(d + 6) + grow * cols + c0 + cc
    if OUT == 0:
        tl.store(out_ptr + o, x.to(tl.uint8), mask=m)
    else:
        q = tl.where((x >= 128) & (signed != 0), x - 256, x).to(tl.float32)
        sidx = tl.minimum(grow, tl.load(d + 10) - 1)
        s = tl.load(buf32f_ptr + tl.load(d + 9) + sidx, mask=m, other=0.0)
        v = q * s
        if OUT == 1:
            # round to nearest even by integer ops (as wcodec.codecs.quant.f32_to_bf16; NaN
            # stays NaN), the same on every backend
            u = v.to(tl.uint32, bitcast=True)
            b = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
            b = tl.where((u & 0x7FFFFFFF) > 0x7F800000, (u >> 16) | 0x40, b)
            tl.store(out_ptr + o, b.to(tl.uint16).to(tl.int16, bitcast=True), mask=m)
        elif OUT == 2:
            tl.store(out_ptr + o, v.to(tl.float16), mask=m)
        else:
            tl.store(out_ptr + o, v, mask=m)
