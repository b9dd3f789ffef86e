"""Triton decode kernels: interleaved rANS chunks fused with the float plane merge, and the int8
inverse prediction over 2-D tiles.

Imported only by ``wcodec.gpu`` functions (triton and torch are heavy). Every kernel works on one
uploaded byte buffer ``buf`` seen through three typed views (``buf8`` uint8, ``buf16`` int16,
``buf32`` int32 of the same storage): sections start on 16-byte boundaries, so each section is an
element range of the view of its dtype. Offsets come from descriptor tables built on the host
(``wcodec.gpu.plan``) from validated metadata; the kernels still clamp every data-dependent read
(word positions; table slots are masked to 2**prob_bits, and symbols outside a float head's
alphabet are flagged in the table) to its valid range, so that a corrupt stream can only produce
a non-zero status, never an out-of-bounds access.

The rANS layout (32 lanes of a chunk sharing one word stream, each step's reads compacted by an
exclusive prefix count over the lanes that renormalise) is DietGPU's (Meta, 2021). As in DietGPU,
each warp decodes its own chunk: a program is a [W, 32] tile, W warps, one chunk per row, so the
prefix count is a warp ballot + popc (``ASM``; on the GPU only) or ``tl.cumsum`` over the lane
axis (portable, the interpreter's path).
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import layout as _L

# layout constants as compile-time constants (jit functions read only constexpr globals)
_NAMES = ("D_OUT", "D_N", "D_STATES", "D_WBEG", "D_WEND", "D_LUT", "D_TAILW", "D_LOW1", "D_LOW0",
          "ST_READ_PAST", "ST_FINAL", "ST_INIT", "ST_SYMBOL", "T_COLS", "T_ROWS", "T_TH", "T_TW", "T_NTW",
          "T_RES", "T_OUT", "T_MODES", "T_SIGNED", "T_SCALES", "T_NSCALES", "T_TILE0")
(D_OUT, D_N, D_STATES, D_WBEG, D_WEND, D_LUT, D_TAILW, D_LOW1, D_LOW0,
 ST_READ_PAST, ST_FINAL, ST_INIT, ST_SYMBOL, T_COLS, T_ROWS, T_TH, T_TW, T_NTW,
 T_RES, T_OUT, T_MODES, T_SIGNED, T_SCALES, T_NSCALES, T_TILE0) = (tl.constexpr(getattr(_L, n)) for n in _NAMES)
T_NF = tl.constexpr(_L.NT)


@triton.jit
def _lane_prefix(need, lt, W: tl.constexpr, ASM: tl.constexpr):
    """(count of reading lanes below each lane, count in the chunk), both int32 [W * 32]."""
    if ASM:
        # DietGPU's vote.ballot + popc: element i is on thread i (see rans_chunks_kernel)
        before, total = tl.inline_asm_elementwise(
            "{ .reg .pred p; .reg .b32 b, m; setp.ne.s32 p, $2, 0; "
            "vote.sync.ballot.b32 b, p, 0xffffffff; and.b32 m, b, $3; popc.b32 $0, m; "
            "popc.b32 $1, b; }",
            "=r,=r,r,r", [need.to(tl.int32), lt], dtype=(tl.int32, tl.int32), is_pure=True, pack=1)
    else:
        cnt = tl.reshape(need.to(tl.int32), [W, 32])
        before = tl.reshape(tl.cumsum(cnt, axis=1) - cnt, [W * 32])
        total = tl.reshape(tl.broadcast_to(tl.sum(cnt, axis=1, keep_dims=True), [W, 32]), [W * 32])
    return before, total


@triton.jit
def _funnel(w0, w1, sh, ASM: tl.constexpr):
    """Low 32 bits of ``(w1:w0) >> sh`` for sh in [0, 32) (uint32)."""
    if ASM:
        r = tl.inline_asm_elementwise("shf.r.wrap.b32 $0, $1, $2, $3;", "=r,r,r,r", [w0, w1, sh],
                                      dtype=tl.uint32, is_pure=True, pack=1)
    else:
        r = (w0 >> sh) | ((w1 << 1) << (31 - sh))
    return r


@triton.jit
def _tab(x, lut_row, tbase, PB: tl.constexpr, SMEM: tl.constexpr):
    """The decode table entry of each lane's state (int64)."""
    slot = x & ((1 << PB) - 1)
    if SMEM == 2:
        # every row of the program uses the table in shared memory: ld.shared with a 32-bit
        # address (one IMAD instead of 64-bit generic address math; no generic-to-shared window
        # check). tbase is the table's shared-window address here.
        e = tl.inline_asm_elementwise("ld.shared.b64 $0, [$1];", "=l,r", [tbase + (slot << 3).to(tl.int32)],
                                      dtype=tl.int64, is_pure=False, pack=1)
    elif SMEM:
        # generic-address load: the program's table in shared memory, or a row's own in global
        # (not pure: must stay after the fill's barrier)
        e = tl.inline_asm_elementwise("ld.b64 $0, [$1];", "=l,l", [tbase + (slot.to(tl.int64) << 3)],
                                      dtype=tl.int64, is_pure=False, pack=1)
    else:
        e = tl.load(lut_row + slot.to(tl.int32))
    return e


@triton.jit
def _renorm(e, x, pos, bad, idx, n, lt, words_row, wlast, PB: tl.constexpr, W: tl.constexpr,
            MASKED: tl.constexpr, ASM: tl.constexpr):
    """State update from the table entry, then the renormalisation read. Returns (x, pos, bad,
    output value, active mask)."""
    lo = e.to(tl.uint32)
    val = (e >> 32).to(tl.uint32)
    xn = (lo & 0x1FFF) * (x >> PB) + (lo >> 13)
    need = xn < 65536
    act = idx < n
    if MASKED:
        need = need & act
    before, total = _lane_prefix(need, lt, W, ASM)
    w = tl.load(words_row + tl.minimum(pos + before, wlast), mask=need, other=0)
    xn = tl.where(need, (xn << 16) | w.to(tl.uint16, bitcast=True).to(tl.uint32), xn)
    pos += total
    if MASKED:
        x = tl.where(act, xn, x)
        bad |= tl.where(act, val, 0)
    else:
        x = xn
        bad |= val
    return x, pos, bad, val, act


@triton.jit
def _tails(t, act, tail_lane, toff, MODE: tl.constexpr, R: tl.constexpr, MASKED: tl.constexpr):
    """Step t's two tail words of each lane (uint32): its 32 R-bit fields are R consecutive
    words, lane k's field at bit k * R (at tail_lane + toff, toff an int32 element offset)."""
    if MODE == 0:
        w0 = act.to(tl.uint32)
        w1 = w0
    else:
        tp = tail_lane + (toff + t * R)
        if MASKED:
            w0 = tl.load(tp, mask=act, other=0).to(tl.uint32, bitcast=True)
            w1 = tl.load(tp + 1, mask=act, other=0).to(tl.uint32, bitcast=True)
        else:
            w0 = tl.load(tp).to(tl.uint32, bitcast=True)
            w1 = tl.load(tp + 1).to(tl.uint32, bitcast=True)
    return w0, w1


@triton.jit
def _emit(val, act, idx, w0, w1, tsh, out_row, ooff, low1_row, low0_row, MODE: tl.constexpr,
          R: tl.constexpr, MASKED: tl.constexpr, ASM: tl.constexpr):
    """Merge each lane's value with its tail (and low bytes) and store it at out_row + ooff + idx."""
    oi = ooff + idx
    if MODE == 0:
        if MASKED:
            tl.store(out_row + oi, val.to(tl.uint8), mask=act)
        else:
            tl.store(out_row + oi, val.to(tl.uint8))
    else:
        tail = _funnel(w0, w1, tsh, ASM)
        mant = tail & ((1 << (R - 1)) - 1)
        sign = (tail >> (R - 1)) & 1
        if MODE == 1:
            bits = (val | (sign << 15) | mant).to(tl.uint16).to(tl.int16, bitcast=True)
        else:
            if MASKED:
                b1 = tl.load(low1_row + idx, mask=act, other=0).to(tl.uint32)
                b0 = tl.load(low0_row + idx, mask=act, other=0).to(tl.uint32)
            else:
                b1 = tl.load(low1_row + idx).to(tl.uint32)
                b0 = tl.load(low0_row + idx).to(tl.uint32)
            bits = (val | (sign << 31) | (mant << 16) | (b1 << 8) | b0).to(tl.int32, bitcast=True)
        if MASKED:
            tl.store(out_row + oi, bits, mask=act)
        else:
            tl.store(out_row + oi, bits)


@triton.jit
def _step(t, x, pos, bad, lanes, n, lt, lut_row, tbase, words_row, wlast, tail_lane, tsh, out_row,
          low1_row, low0_row, MODE: tl.constexpr, R: tl.constexpr, PB: tl.constexpr,
          W: tl.constexpr, MASKED: tl.constexpr, ASM: tl.constexpr, SMEM: tl.constexpr):
    """Decode step t (32 symbols) of every row. MASKED: the chunk may end inside this step."""
    idx = t * 32 + lanes  # chunk-relative symbol index (int32)
    e = _tab(x, lut_row, tbase, PB, SMEM)
    x, pos, bad, val, act = _renorm(e, x, pos, bad, idx, n, lt, words_row, wlast, PB, W, MASKED, ASM)
    w0, w1 = _tails(t, act, tail_lane, 0, MODE, R, MASKED)
    _emit(val, act, idx, w0, w1, tsh, out_row, 0, low1_row, low0_row, MODE, R, MASKED, ASM)
    return x, pos, bad


@triton.jit
def _prefetch(it, pos, words_row, wlast, tail_lane, toff, MODE: tl.constexpr, R: tl.constexpr,
              S: tl.constexpr):
    """Pull the word and tail lines a few steps ahead into L1: their first touch is otherwise an
    L2 round trip inside the state-update chain (ncu: 66% of stalls on L1TEX)."""
    wp = words_row + tl.minimum(pos + 128, wlast)
    if MODE == 0 or MODE == 3:  # byte planes have no tail stream
        tl.inline_asm_elementwise("prefetch.global.L1 [$1]; mov.u32 $0, 0;", "=r,l",
                                  [wp.to(tl.int64)], dtype=tl.int32, is_pure=False, pack=1)
    else:
        tp = tail_lane + (toff + (it * S + 8) * R)
        tl.inline_asm_elementwise("prefetch.global.L1 [$1]; prefetch.global.L1 [$2]; mov.u32 $0, 0;",
                                  "=r,l,l", [wp.to(tl.int64), tp.to(tl.int64)], dtype=tl.int32,
                                  is_pure=False, pack=1)


@triton.jit
def _chunk_loop(x, pos, bad, full, n_steps, lanes, n, lt, lut_row, tbase, words_row, wlast,
                tail_lane, tsh, out_row, low1_row, low0_row, MODE: tl.constexpr, R: tl.constexpr,
                PB: tl.constexpr, W: tl.constexpr, S: tl.constexpr, ASM: tl.constexpr,
                SMEM: tl.constexpr, PF: tl.constexpr):
    """The decode loop: ``full`` unmasked iterations of S steps, then the masked remainder."""
    for it in range(0, full):
        if PF:
            _prefetch(it, pos, words_row, wlast, tail_lane, 0, MODE, R, S)
        for s in tl.static_range(S):
            x, pos, bad = _step(it * S + s, x, pos, bad, lanes, n, lt, lut_row, tbase, words_row,
                                wlast, tail_lane, tsh, out_row, low1_row, low0_row, MODE, R, PB,
                                W, False, ASM, SMEM)
    for t in range(full * S, n_steps):
        x, pos, bad = _step(t, x, pos, bad, lanes, n, lt, lut_row, tbase, words_row, wlast,
                            tail_lane, tsh, out_row, low1_row, low0_row, MODE, R, PB, W, True,
                            ASM, SMEM)
    return x, pos, bad


@triton.jit
def _step2(t, xa, posa, bada, xb, posb, badb, lanes, na, nb, lt, luta, lutb, tba, tbb, wr, wla,
           wlb, tl_, tob, tsh, orow, oob, l1a, l1b, l0a, l0b, MODE: tl.constexpr,
           R: tl.constexpr, PB: tl.constexpr, W: tl.constexpr, MASKED: tl.constexpr,
           ASM: tl.constexpr, SMEM: tl.constexpr):
    """Step t of two chunks per warp (chains a and b), phase by phase: each chain's step is a
    dependent chain of loads (table -> state -> ballot -> word) that mostly waits on memory; two
    independent chains in one instruction stream put the other's loads in that wait.

    Chain b is addressed through chain a's 64-bit bases (wr, tl_, orow) plus int32 offsets: its
    word position posb and clamp wlb include its offset, tob / oob offset its tails and outputs
    (the host checks that they fit, decode._pair_fits). Three 64-bit pointers fewer to keep live:
    without this the loop spilled at the 40-register cap that fits 3 programs of 16 warps per SM."""
    idx = t * 32 + lanes
    ea = _tab(xa, luta, tba, PB, SMEM)
    eb = _tab(xb, lutb, tbb, PB, SMEM)
    xa, posa, bada, va, acta = _renorm(ea, xa, posa, bada, idx, na, lt, wr, wla, PB, W, MASKED, ASM)
    xb, posb, badb, vb, actb = _renorm(eb, xb, posb, badb, idx, nb, lt, wr, wlb, PB, W, MASKED, ASM)
    w0a, w1a = _tails(t, acta, tl_, 0, MODE, R, MASKED)
    _emit(va, acta, idx, w0a, w1a, tsh, orow, 0, l1a, l0a, MODE, R, MASKED, ASM)
    w0b, w1b = _tails(t, actb, tl_, tob, MODE, R, MASKED)
    _emit(vb, actb, idx, w0b, w1b, tsh, orow, oob, l1b, l0b, MODE, R, MASKED, ASM)
    return xa, posa, bada, xb, posb, badb


@triton.jit
def _chunk_loop2(xa, posa, bada, xb, posb, badb, full, n_steps, lanes, na, nb, lt, luta, lutb,
                 tba, tbb, wr, wla, wlb, tl_, tob, tsh, orow, oob, l1a, l1b, l0a, l0b,
                 MODE: tl.constexpr, R: tl.constexpr, PB: tl.constexpr, W: tl.constexpr,
                 S: tl.constexpr, ASM: tl.constexpr, SMEM: tl.constexpr, PF: tl.constexpr):
    """_chunk_loop for two chunks per warp (_step2)."""
    for it in range(0, full):
        if PF:
            _prefetch(it, posa, wr, wla, tl_, 0, MODE, R, S)
            _prefetch(it, posb, wr, wlb, tl_, tob, MODE, R, S)
        for s in tl.static_range(S):
            xa, posa, bada, xb, posb, badb = _step2(
                it * S + s, xa, posa, bada, xb, posb, badb, lanes, na, nb, lt, luta, lutb, tba, tbb,
                wr, wla, wlb, tl_, tob, tsh, orow, oob, l1a, l1b, l0a, l0b, MODE, R, PB, W,
                False, ASM, SMEM)
    for t in range(full * S, n_steps):
        xa, posa, bada, xb, posb, badb = _step2(
            t, xa, posa, bada, xb, posb, badb, lanes, na, nb, lt, luta, lutb, tba, tbb, wr, wla,
            wlb, tl_, tob, tsh, orow, oob, l1a, l1b, l0a, l0b, MODE, R, PB, W, True, ASM, SMEM)
    return xa, posa, bada, xb, posb, badb


@triton.jit
def _put_values(ptr, x, m, signed, s, OUT: tl.constexpr, CVT: tl.constexpr = False):
    """Store bytes x (int32 in [0, 256)) at ptr under mask m (None: all): as uint8 (OUT_I8), or
    dequantised, ``float32(q) * s`` rounded to the output dtype (round to nearest even), q the
    byte read as int8 when ``signed``. CVT: bf16 by the hardware conversion (one instruction; the
    same bits as the integer rounding for every non-NaN value, and decoders refuse non-finite
    scales, so no NaN reaches it)."""
    if OUT == 0:
        tl.store(ptr, x.to(tl.uint8), mask=m)
    else:
        q = tl.where((x >= 128) & (signed != 0), x - 256, x).to(tl.float32)
        v = q * s
        if OUT == 1 and CVT:
            tl.store(ptr, v.to(tl.bfloat16).to(tl.int16, bitcast=True), mask=m)
        elif OUT == 1:
            # round to nearest even by integer ops (as wcodec.codecs.quant.f32_to_bf16; NaN
            # stays NaN), the same on every backend
            u = v.to(tl.uint32, bitcast=True)
            b = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
            b = tl.where((u & 0x7FFFFFFF) > 0x7F800000, (u >> 16) | 0x40, b)
            tl.store(ptr, b.to(tl.uint16).to(tl.int16, bitcast=True), mask=m)
        elif OUT == 2:
            tl.store(ptr, v.to(tl.float16), mask=m)
        else:
            tl.store(ptr, v, mask=m)


@triton.jit
def _tstep(t, x, pos, bad, r, tc, br, h, lanes, n, lt, lut_row, tbase, words_row, wlast, out_row,
           scl, cols, rows, th, sg, OUT: tl.constexpr, PB: tl.constexpr, W: tl.constexpr,
           MASKED: tl.constexpr, ASM: tl.constexpr, SMEM: tl.constexpr, CVT: tl.constexpr):
    """MODE_TILED step t: 32 symbols, one row of a 32-wide tile (row r of the tile at column tc
    of the band starting at row br, of height h), written to their row-major place; then the
    place of the next step (next row; next tile at the tile's end; next band at the band's
    end). Counters past the tensor's end (rows padded with steps of other chunks) are harmless:
    those lanes are inactive and the scale row is clamped."""
    idx = t * 32 + lanes
    e = _tab(x, lut_row, tbase, PB, SMEM)
    x, pos, bad, val, act = _renorm(e, x, pos, bad, idx, n, lt, words_row, wlast, PB, W, MASKED, ASM)
    row = br + r
    s = 1.0
    if OUT != 0:
        s = tl.load(scl + tl.minimum(row, rows - 1))
    _put_values(out_row + (row * cols + tc + lanes), val.to(tl.int32), act if MASKED else None,
                sg, s, OUT, CVT)
    r1 = r + 1
    nt = r1 == h
    r = tl.where(nt, 0, r1)
    tc1 = tl.where(nt, tc + 32, tc)
    nb = tc1 == cols
    tc = tl.where(nb, 0, tc1)
    br = tl.where(nb, br + th, br)
    h = tl.where(nb, tl.minimum(th, rows - br), h)
    return x, pos, bad, r, tc, br, h


@triton.jit
def _tiled_loop(x, pos, bad, full, n_steps, lanes, n, lt, lut_row, tbase, words_row, wlast, out_row,
                tiled, OUT: tl.constexpr, PB: tl.constexpr, W: tl.constexpr, S: tl.constexpr,
                ASM: tl.constexpr, SMEM: tl.constexpr, PF: tl.constexpr, CVT: tl.constexpr):
    """_chunk_loop of MODE_TILED (tiled: _tiled_rows)."""
    r, tc, br, h, scl, cols, rows, th, sg = tiled
    for it in range(0, full):
        if PF:
            _prefetch(it, pos, words_row, wlast, words_row, 0, 3, 0, S)
        for s in tl.static_range(S):
            x, pos, bad, r, tc, br, h = _tstep(it * S + s, x, pos, bad, r, tc, br, h, lanes, n, lt,
                                               lut_row, tbase, words_row, wlast, out_row, scl, cols,
                                               rows, th, sg, OUT, PB, W, False, ASM, SMEM, CVT)
    for t in range(full * S, n_steps):
        x, pos, bad, r, tc, br, h = _tstep(t, x, pos, bad, r, tc, br, h, lanes, n, lt, lut_row,
                                           tbase, words_row, wlast, out_row, scl, cols, rows, th,
                                           sg, OUT, PB, W, True, ASM, SMEM, CVT)
    return x, pos, bad


@triton.jit
def _loop(x, pos, bad, full, n_steps, lanes, n, lt, lut_row, tbase, words_row, wlast, tail_lane,
          tsh, out_row, low1_row, low0_row, tiled, MODE: tl.constexpr, R: tl.constexpr,
          PB: tl.constexpr, W: tl.constexpr, S: tl.constexpr, ASM: tl.constexpr,
          SMEM: tl.constexpr, PF: tl.constexpr, CVT: tl.constexpr):
    """One chunk per warp: _chunk_loop, or _tiled_loop for MODE_TILED (R: its OUT kind)."""
    if MODE == 3:
        x, pos, bad = _tiled_loop(x, pos, bad, full, n_steps, lanes, n, lt, lut_row, tbase,
                                  words_row, wlast, out_row, tiled, R, PB, W, S, ASM, SMEM, PF, CVT)
    else:
        x, pos, bad = _chunk_loop(x, pos, bad, full, n_steps, lanes, n, lt, lut_row, tbase,
                                  words_row, wlast, tail_lane, tsh, out_row, low1_row, low0_row,
                                  MODE, R, PB, W, S, ASM, SMEM, PF)
    return x, pos, bad


@triton.jit
def _tiled_rows(desc_ptr, row, tdesc_ptr, scales_ptr, NFIELDS: tl.constexpr, NTF: tl.constexpr):
    """MODE_TILED per-lane fields of each row's chunk (layout.py): its starting place (r, tc,
    br, h), the scales base, and its tensor's cols, rows, tile_h and signedness (int32)."""
    d = desc_ptr + row.to(tl.int64) * NFIELDS
    a = tl.load(d + D_LOW1)
    b = tl.load(d + D_LOW0)
    td = tdesc_ptr + tl.load(d + D_TAILW) * NTF
    scl = scales_ptr + tl.maximum(tl.load(td + T_SCALES), 0)
    return ((a & 0x7FFFFFFF).to(tl.int32), (b >> 32).to(tl.int32), (b & 0x7FFFFFFF).to(tl.int32),
            (a >> 32).to(tl.int32), scl, tl.load(td + T_COLS).to(tl.int32),
            tl.load(td + T_ROWS).to(tl.int32), tl.load(td + T_TH).to(tl.int32),
            tl.load(td + T_SIGNED).to(tl.int32))


@triton.jit
def _chunk_rows(desc_ptr, row, lanes, buf8_ptr, buf16_ptr, buf32_ptr, out_ptr, MODE: tl.constexpr,
                R: tl.constexpr, NFIELDS: tl.constexpr):
    """Per-lane fields of the chunk of each row (row: int32 [W * 32], already clamped).

    Returns n, wlen, wlast, x, lut_off, words_row, out_row, tail_lane, low1_row, low0_row, and
    the int64 indices behind the first three pointers (wbeg, out, tail word)."""
    d = desc_ptr + row.to(tl.int64) * NFIELDS
    n = tl.load(d + D_N).to(tl.int32)
    wbeg = tl.load(d + D_WBEG)
    wlen = (tl.load(d + D_WEND) - wbeg).to(tl.int32)
    wlast = tl.maximum(wlen - 1, 0)  # clamp: a corrupt stream reads in bounds, then fails
    x = tl.load(buf32_ptr + tl.load(d + D_STATES) + lanes).to(tl.uint32, bitcast=True)
    lut_off = tl.load(d + D_LUT)
    words_row = buf16_ptr + wbeg
    oo = tl.load(d + D_OUT)
    out_row = out_ptr + oo
    if MODE == 1 or MODE == 2:
        tw = tl.load(d + D_TAILW)
        tail_lane = buf32_ptr + tw + ((lanes * R) >> 5)
    else:
        tw = oo * 0
        tail_lane = buf32_ptr
    if MODE == 2:
        low1_row = buf8_ptr + tl.load(d + D_LOW1)
        low0_row = buf8_ptr + tl.load(d + D_LOW0)
    else:
        low1_row = buf8_ptr
        low0_row = buf8_ptr
    return n, wlen, wlast, x, lut_off, words_row, out_row, tail_lane, low1_row, low0_row, wbeg, oo, tw


@triton.jit
def _init_bad(x, W: tl.constexpr):
    """[W] nonzero where a row's initial states are out of range."""
    return tl.max(tl.reshape((x < 65536).to(tl.int32), [W, 32]), axis=1)


@triton.jit
def _chunk_status(init_bad, x, pos, wlen, bad, W: tl.constexpr):
    """int32 [W] status of each row's chunk (layout.py) from its final state (init_bad: _init_bad)."""
    p = tl.max(tl.reshape(pos, [W, 32]), axis=1)
    wl = tl.max(tl.reshape(wlen, [W, 32]), axis=1)
    final_bad = tl.max(tl.reshape((x != 65536).to(tl.int32), [W, 32]), axis=1) | (p != wl).to(tl.int32)
    status = tl.where(init_bad != 0, ST_INIT, tl.where(p > wl, ST_READ_PAST,
                                                       tl.where(final_bad != 0, ST_FINAL, 0)))
    return tl.where((status == 0) & (tl.max(tl.reshape(bad >> 31, [W, 32]), axis=1) != 0),
                    ST_SYMBOL, status)


@triton.jit
def rans_chunks_kernel(desc_ptr, n_items, buf8_ptr, buf16_ptr, buf32_ptr, lut_ptr, lut_addr,
                       out_ptr, status_ptr, tdesc_ptr, scales_ptr, MODE: tl.constexpr, R: tl.constexpr, PB: tl.constexpr,
                       W: tl.constexpr, S: tl.constexpr, NFIELDS: tl.constexpr,
                       ASM: tl.constexpr = False, SMEM: tl.constexpr = False,
                       PF: tl.constexpr = False, PAIR: tl.constexpr = False,
                       CVT: tl.constexpr = False):
    """Decode W chunks per program, one per warp (launch with num_warps=W), S steps per iteration;
    PAIR: 2 * W chunks per program, two per warp (rows pid*2W + w and pid*2W + W + w), decoded
    in one interleaved loop (_step2).

    Every tensor is 1-D of W * 32 elements (element i: lane i % 32 of chunk i // 32). With one
    element per thread that has a single blocked layout, element i on thread i, so a chunk is
    one warp in lane order, as the ballot needs, whatever layouts Triton picks. (2-D [W, 32]
    tiles got 4 rows per warp from Triton 3.6's coalescing of the table gathers.) PAIR keeps two
    such sets of tensors rather than one of 2 * W * 32 elements, whose layout could put two
    lanes of one chunk on a thread.

    CVT: MODE_TILED's bf16 by the hardware conversion (_put_values).

    SMEM: 0 tables read from global memory; 1 the first row's table in shared memory, read with
    generic loads (rows on other tables read theirs from global); 2 as 1, but programs whose rows
    all use that table read it with ld.shared.

    desc_ptr: int64[n_items, NFIELDS] chunk descriptors (layout.py). lut_ptr: int64 decode
    tables, lut_addr: the same as an integer address (SMEM). out_ptr: uint8 (MODE_BYTES), int16 (MODE_F16BITS) or int32 (MODE_F32BITS) output
    view; for MODE_TILED the view of its OUT kind (R), tdesc_ptr its int8 tensor table
    (int64[k, T fields]) and scales_ptr the float32 view of buf (scales of int8-quant). status_ptr:
    int32[n_items]. R: tail bits (float modes), PB: prob_bits. Per-chunk 64-bit
    bases are formed once; the loop works on 32-bit chunk-relative offsets.
    """
    pid = tl.program_id(0)
    el = tl.arange(0, W * 32)
    lanes = el % 32
    CPP: tl.constexpr = 2 * W if PAIR else W  # chunks per program
    # rows past the end repeat the last chunk (same values to the same places; status masked),
    # so the unmasked main loop needs no row mask. Every lane loads its chunk's fields (one
    # broadcast transaction per warp, once).
    rowa = pid * CPP + el // 32
    na, wlena, wlasta, xa, luta_off, wra, ora, tla, l1a, l0a, wba, ooa, twa = _chunk_rows(
        desc_ptr, tl.minimum(rowa, n_items - 1), lanes, buf8_ptr, buf16_ptr, buf32_ptr, out_ptr,
        MODE, R, NFIELDS)
    init_ba = _init_bad(xa, W)
    tiled = (na, na, na, na, scales_ptr, na, na, na, na)  # MODE_TILED's fields; unused otherwise
    if MODE == 3:
        tiled = _tiled_rows(desc_ptr, tl.minimum(rowa, n_items - 1), tdesc_ptr, scales_ptr,
                            NFIELDS, T_NF)
    if PAIR:
        nb, wlenb, wlastb, xb, lutb_off, _wrb, _orb, _tlb, l1b, l0b, wbb, oob, twb = _chunk_rows(
            desc_ptr, tl.minimum(rowa + W, n_items - 1), lanes, buf8_ptr, buf16_ptr, buf32_ptr,
            out_ptr, MODE, R, NFIELDS)
        # chain b relative to chain a's bases (int32; the host checked they fit): its word
        # position and clamp, tail and output offsets
        dwb = (wbb - wba).to(tl.int32)
        wlastb = wlastb + dwb
        tob = (twb - twa).to(tl.int32)
        oob = (oob - ooa).to(tl.int32)
        init_bb = _init_bad(xb, W)
        n_min = tl.minimum(tl.min(na), tl.min(nb))
        n_max = tl.maximum(tl.max(na), tl.max(nb))
    else:
        n_min = tl.min(na)
        n_max = tl.max(na)
    lt = lanes
    if ASM:
        # lanes below this one (the input only makes it a per-lane tensor op)
        lt = tl.inline_asm_elementwise("mov.u32 $0, %lanemask_lt;", "=r,r", [lt], dtype=tl.int32,
                                       is_pure=True, pack=1)
    tsh = ((lanes * R) & 31).to(tl.uint32)
    posa = tl.zeros([W * 32], tl.int32)
    bada = tl.zeros([W * 32], tl.uint32)
    full = n_min // (32 * S)  # iterations in which every row has S full steps
    n_steps = tl.cdiv(n_max, 32)

    luta = lut_ptr + luta_off
    tba = tl.zeros([W * 32], tl.int64)
    if PAIR:
        lutb = lut_ptr + lutb_off
        tbb = tba
        posb = dwb
        badb = bada
    if SMEM:
        # The first row's decode table goes to shared memory (a 32-lane gather from a 16-32 KB
        # table touches ~30 L1 lines, ~4 shared-memory wavefronts). tl.gather lowers to "store the
        # source row-major at the start of the scratch area, barrier, load": the store is the
        # fill, and the loop reads it with ld; nothing else in the loop uses shared memory, and
        # Triton puts a barrier before any later op that reuses that scratch. Rows whose chunk
        # has another table read their own from global memory (generic addresses).
        lut0 = tl.load(desc_ptr + pid * CPP * NFIELDS + D_LUT)
        if SMEM == 2:
            # before the fill: this reduction's scratch is where the table goes
            on0 = (luta_off == lut0).to(tl.int32)
            if PAIR:
                on0 = on0 & (lutb_off == lut0).to(tl.int32)
            uni = tl.min(on0) == 1
        tbl = tl.load(lut_ptr + lut0 + tl.arange(0, 1 << PB))
        keep = tl.gather(tbl, tl.zeros([32], tl.int32), 0)
        sbase = tl.inline_asm_elementwise(
            "{ .reg .u64 a; mov.u64 a, global_smem; cvta.shared.u64 $0, a; }", "=l,r", [lt],
            dtype=tl.int64, is_pure=True, pack=1)
        tba = tl.where(luta_off == lut0, sbase, lut_addr + luta_off * 8)
        if PAIR:
            tbb = tl.where(lutb_off == lut0, sbase, lut_addr + lutb_off * 8)
        if SMEM == 2:
            sbase32 = tl.inline_asm_elementwise("mov.u32 $0, global_smem;", "=r,r", [lt],
                                                dtype=tl.int32, is_pure=True, pack=1)

    if PAIR:
        if SMEM == 2:
            # as below: ld.shared when all 2W rows use the shared-memory table
            if uni:
                xa, posa, bada, xb, posb, badb = _chunk_loop2(
                    xa, posa, bada, xb, posb, badb, full, n_steps, lanes, na, nb, lt, luta, lutb,
                    sbase32, sbase32, wra, wlasta, wlastb, tla, tob, tsh, ora, oob, l1a, l1b,
                    l0a, l0b, MODE, R, PB, W, S, ASM, 2, PF)
            else:
                xa, posa, bada, xb, posb, badb = _chunk_loop2(
                    xa, posa, bada, xb, posb, badb, full, n_steps, lanes, na, nb, lt, luta, lutb,
                    tba, tbb, wra, wlasta, wlastb, tla, tob, tsh, ora, oob, l1a, l1b, l0a, l0b,
                    MODE, R, PB, W, S, ASM, 1, PF)
        else:
            xa, posa, bada, xb, posb, badb = _chunk_loop2(
                xa, posa, bada, xb, posb, badb, full, n_steps, lanes, na, nb, lt, luta, lutb,
                tba, tbb, wra, wlasta, wlastb, tla, tob, tsh, ora, oob, l1a, l1b, l0a, l0b,
                MODE, R, PB, W, S, ASM, SMEM, PF)
    elif SMEM == 2:
        # all rows on the shared-memory table (the usual case: a table covers many programs):
        # ld.shared; else the generic loads above. uni was reduced before the fill (the
        # reduction's scratch is the table's).
        if uni:
            xa, posa, bada = _loop(xa, posa, bada, full, n_steps, lanes, na, lt, luta, sbase32,
                                   wra, wlasta, tla, tsh, ora, l1a, l0a, tiled,
                                   MODE, R, PB, W, S, ASM, 2, PF, CVT)
        else:
            xa, posa, bada = _loop(xa, posa, bada, full, n_steps, lanes, na, lt, luta, tba,
                                   wra, wlasta, tla, tsh, ora, l1a, l0a, tiled,
                                   MODE, R, PB, W, S, ASM, 1, PF, CVT)
    else:
        xa, posa, bada = _loop(xa, posa, bada, full, n_steps, lanes, na, lt, luta, tba,
                               wra, wlasta, tla, tsh, ora, l1a, l0a, tiled,
                               MODE, R, PB, W, S, ASM, SMEM, PF, CVT)

    status = _chunk_status(init_ba, xa, posa, wlena, bada, W)
    if SMEM:
        # keeps the fill alive; no table entry is -1 (the low word is < 2**25)
        status = tl.where(tl.max(keep) == -1, ST_FINAL, status)
    item = pid * CPP + tl.arange(0, W)
    tl.store(status_ptr + item, status, mask=item < n_items)
    if PAIR:
        tl.store(status_ptr + item + W, _chunk_status(init_bb, xb, posb - dwb, wlenb, badb, W),
                 mask=item + W < n_items)


@triton.jit
def _tile_geom(d, local):
    """Place of tile ``local`` (int32, tile-major) of the tensor at descriptor d: first row
    (int64), first column, height and width (int32), and the buf8 index of its residuals (int64;
    tiles of band ti have its height). Offsets inside a tile are int32 from here on: 64-bit
    index math doubled the registers and instructions of the tile kernels (ncu)."""
    cols = tl.load(d + T_COLS)
    ntw = tl.load(d + T_NTW).to(tl.int32)
    th = tl.load(d + T_TH).to(tl.int32)
    tw = tl.load(d + T_TW).to(tl.int32)
    ti = local // ntw
    c0 = (local - ti * ntw) * tw
    r0 = ti.to(tl.int64) * th
    h = tl.minimum(tl.load(d + T_ROWS) - r0, th).to(tl.int32)
    w = tl.minimum(cols.to(tl.int32) - c0, tw)
    return r0, c0, h, w, tl.load(d + T_RES) + r0 * cols + c0 * h


@triton.jit
def _tile_out(d, out_ptr, buf32f_ptr, r0, c0, rr, cc, x, m, signed, OUT: tl.constexpr):
    """Write reconstructed bytes x of the tile at (r0, c0) of the tensor at descriptor d, its
    rows rr and columns cc (int32, broadcastable), to out, dequantised with each row's scale
    for int8-quant."""
    cols = tl.load(d + T_COLS)
    s = 1.0
    if OUT != 0:
        sp = buf32f_ptr + tl.load(d + T_SCALES) + r0
        s = tl.load(sp + tl.minimum(rr, (tl.load(d + T_NSCALES) - 1 - r0).to(tl.int32)), mask=m, other=0.0)
    _put_values(out_ptr + (tl.load(d + T_OUT) + r0 * cols + c0) + (rr * cols.to(tl.int32) + cc), x, m,
                signed, s, OUT)


@triton.jit
def int8_tiles_kernel(tdesc_ptr, prog_tensor_ptr, buf8_ptr, buf32f_ptr, out_ptr,
                      BH: tl.constexpr, BW: tl.constexpr, G: tl.constexpr, OUT: tl.constexpr,
                      PRED: tl.constexpr, NTF: tl.constexpr):
    """Inverse intra prediction of G consecutive tiles of one tensor per program, as a [G, BH, BW]
    block, optionally dequantised; AVG tiles are left to ``int8_avg_kernel``.

    prog_tensor_ptr: int32[n_programs], the tensor (row of tdesc) of each program; the tensor's
    T_TILE0 is its first program. The modes' inverses are prefix sums, computed for the whole
    block and selected per tile (no branch on data): LEFT along rows, TOP along columns, PLANAR
    both (PRED False: a tensor whose tiles are all NONE, nothing computed). Written to out
    (uint8 view for OUT_I8, else the float view) as ``float32(q) * scale[row]`` rounded to the
    output dtype (round to nearest even).
    """
    pid = tl.program_id(0)
    tsr = tl.load(prog_tensor_ptr + pid).to(tl.int64)
    d = tdesc_ptr + tsr * NTF
    n_tiles = (tl.cdiv(tl.load(d + T_ROWS), tl.load(d + T_TH)) * tl.load(d + T_NTW)).to(tl.int32)
    local = (pid - tl.load(d + T_TILE0).to(tl.int32)) * G + tl.arange(0, G)[:, None, None]
    ok = local < n_tiles
    r0, c0, h, w, res = _tile_geom(d, tl.minimum(local, n_tiles - 1))
    mode = tl.zeros([G, 1, 1], tl.int32)
    if PRED:  # the plan sets PRED only for tensors with a modes section
        mode = tl.load(buf8_ptr + tl.load(d + T_MODES) + local, mask=ok, other=0).to(tl.int32)
    signed = tl.load(d + T_SIGNED).to(tl.int32)
    rr = tl.arange(0, BH)[None, :, None]
    cc = tl.arange(0, BW)[None, None, :]
    m = (rr < h) & (cc < w) & ok
    r = tl.load(buf8_ptr + res + (rr * w + cc), mask=m, other=0).to(tl.int32)
    x = r
    if PRED:
        # each prefix sum only where a tile of the program needs it (scalar branches: the row
        # sum is the costly one, a warp shuffle per step)
        if tl.max(((mode == 1) | (mode == 4)).to(tl.int32)) > 0:
            left = tl.cumsum(r, axis=2)
            x = tl.where(mode == 1, left, x)
            if tl.max((mode == 4).to(tl.int32)) > 0:
                x = tl.where(mode == 4, tl.cumsum(left, axis=1), x)
        if tl.max((mode == 2).to(tl.int32)) > 0:
            x = tl.where(mode == 2, tl.cumsum(r, axis=1), x)
        m = m & (mode != 3)
    _tile_out(d, out_ptr, buf32f_ptr, r0, c0, rr, cc, x & 0xFF, m, signed, OUT)


@triton.jit
def int8_avg_kernel(tdesc_ptr, avg_ptr, n_avg, skew, buf8_ptr, buf32f_ptr, out_ptr,
                    BH: tl.constexpr, BW: tl.constexpr, OUT: tl.constexpr, NTF: tl.constexpr,
                    ASM: tl.constexpr):
    """Inverse AVG prediction of one tile per program (one warp), optionally dequantised.

    AVG, ``x = res + ((left + top) >> 1)``, is a nonlinear recurrence: a wavefront over the
    anti-diagonals k = row + col, each row one lane that holds its last value (the next step's
    left); top is the row above's value of the step before, moved one lane down (tl.gather
    along the rows: a warp shuffle). The tile's residuals are prefetched into L1 first and each
    diagonal is loaded a step ahead (a miss would stall the whole chain). Each step's diagonal
    goes to a skewed scratch row (one 32-byte line per step, at skew + tile * (BH + BW) * BH +
    k * BH; storing it straight to the output would touch a line per element), read back as a
    tile at the end. avg_ptr: int64[n_avg, 2] (tensor row of tdesc, tile index). (Several tiles
    per program made Triton convert layouts through shared memory at every step.)
    """
    pid = tl.program_id(0)
    d = tdesc_ptr + tl.load(avg_ptr + 2 * pid) * NTF
    r0, c0, h, w, res = _tile_geom(d, tl.load(avg_ptr + 2 * pid + 1).to(tl.int32))
    signed = tl.load(d + T_SIGNED).to(tl.int32)
    base = buf8_ptr + res
    rv = tl.arange(0, BH)
    if ASM:
        tl.inline_asm_elementwise("prefetch.global.L1 [$1]; mov.u32 $0, 0;", "=r,l",
                                  [(base + tl.minimum(rv, h - 1) * w).to(tl.int64)],
                                  dtype=tl.int32, is_pure=False, pack=1)
    up = tl.maximum(rv - 1, 0)
    sk = buf8_ptr + skew + pid.to(tl.int64) * ((BH + BW) * BH)
    cur = tl.zeros([BH], tl.int32)
    live = rv < h
    rk = tl.load(base + rv * 0, mask=live & (rv == 0), other=0).to(tl.int32)  # diagonal 0: (0, 0)
    for k in range(0, h + w - 1):
        c = k - rv
        on = (c >= 0) & (c < w) & live
        # the next diagonal's residuals, loaded a step ahead: the load is off the chain
        cn = c + 1
        rn = tl.load(base + (rv * w + cn), mask=(cn >= 0) & (cn < w) & live, other=0).to(tl.int32)
        top = tl.where(rv > 0, tl.gather(cur, up, 0), 0)
        lf = tl.where(c > 0, cur, 0)
        if signed != 0:
            top = tl.where(top >= 128, top - 256, top)
            lf = tl.where(lf >= 128, lf - 256, lf)
        cur = tl.where(on, (rk + ((lf + top) >> 1)) & 0xFF, cur)
        tl.store(sk + (k * BH + rv), cur.to(tl.uint8), mask=on)
        rk = rn
    tl.debug_barrier()
    cc = tl.arange(0, BW)[None, :]
    RB: tl.constexpr = min(BH, max(1, 1024 // BW))  # rows per pass: ~32 values per thread
    for rb in tl.static_range(0, BH, RB):
        rr = rb + tl.arange(0, RB)[:, None]
        m = (rr < h) & (cc < w)
        x = tl.load(sk + ((rr + cc) * BH + rr), mask=m, other=0).to(tl.int32)
        _tile_out(d, out_ptr, buf32f_ptr, r0, c0, rr, cc, x, m, signed, OUT)
