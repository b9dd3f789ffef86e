"""Host side of the batched GPU decode: validate records, lay out one upload buffer and build the
descriptor tables that the kernels of ``wcodec.gpu.kernels`` walk (numpy only, no torch).

One plan covers a batch of tensors: all their sections in one byte buffer (each section at a
16-byte aligned offset, so that typed views of the buffer address it by element index), a device
scratch area after the uploaded bytes for decoded byte planes (int8 residuals, coded F32 low
bytes), and one output allocation holding every tensor at a 256-byte aligned offset.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import rans
from ..codecs.base import DTYPES, EncodedTensor, itemsize
# dtype -> (total bits W, exponent bits E, mantissa bits M, low byte planes L); CODEC_LAYOUT.md
from ..codecs.float import parse as parse_float
from ..codecs.quant import checked_scales
from ..codecs import transform as TR
from ..errors import CorruptDataError, UnsupportedError
from . import layout as K

SECTION_ALIGN = 16
OUT_ALIGN = 256
LUT_STRIDE = 1 << 12  # entries per decode table slot (prob_bits <= 12)
MAX_TILE = 128  # int8 tiles decode as one [BH, BW] block per program
TILE_BLOCK = 4096  # int8 tile kernel: tiles per program = TILE_BLOCK // (BH * BW), at least 1
AVG = 3  # the int8 codec's AVG mode (codecs._predict_reference), inverted by its own kernel
#: decode all-NONE int8 planes of 32-wide tiles straight to the output (MODE_TILED) rather than
#: into scratch + the tile kernel
TILED = True
TB = 4  # transform block table fields
OUT_KIND = {"BF16": K.OUT_BF16, "F16": K.OUT_F16, "F32": K.OUT_F32}


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


def transform_blocks(rows: int, cols: int, th: int, tw: int, modes: np.ndarray, res: int, hi: int) -> np.ndarray:
    """int64[n_blocks, TB] rows of the block table (res index, hi index, row stride, kind; read by
    ``wcodec.gpu.transform_kernels``) of one tensor's transform tiles. res, hi: buf8
    indices of its decoded residual and hi planes. modes must be validated (transform.hi_offsets
    raises CorruptDataError for transform tiles that are not whole 8x8 blocks)."""
    hi_off, _ = TR.hi_offsets(rows, cols, th, tw, modes)
    hs, ws = TR.tile_sizes(rows, cols, th, tw)
    t = np.flatnonzero(modes >= TR.DCT)
    ntw = -(-cols // tw)
    r0, c0, h, w = (t // ntw) * th, (t % ntw) * tw, hs[t], ws[t]
    nb = (h // 8) * (w // 8)  # blocks per tile, row-major within the tile
    tb = np.repeat(np.arange(t.size), nb)
    j = np.arange(tb.size) - np.repeat(np.cumsum(nb) - nb, nb)
    k = (j // (w // 8)[tb]) * 8 * w[tb] + (j % (w // 8)[tb]) * 8  # block origin within the tile
    d = np.empty((tb.size, TB), dtype=np.int64)
    d[:, 0] = res + (r0 * cols + h * c0)[tb] + k
    d[:, 1] = hi + hi_off[t][tb] + k
    d[:, 2] = w[tb]
    d[:, 3] = modes[t][tb].astype(np.int64) - TR.DCT
    return d


def tiled_place(g: np.ndarray, rows: int, cols: int, th: int) -> tuple:
    """Place of tile rows ``g`` (int64, counted tile-major) of a [rows, cols] tensor in 32-wide
    tiles of height th (cols % 32 == 0): (row within the tile, tile's first column, band's first
    row, band height), each like g. MODE_TILED's chunk starts (layout.py)."""
    per_band = th * (cols // 32)
    br = (g // per_band) * th
    h = np.minimum(th, rows - br)
    j = g - (br // th) * per_band
    return j % h, (j // h) * 32, br, h


@dataclass
class Output:
    name: str
    dtype: str
    shape: tuple
    offset: int   # byte offset in the output allocation
    nbytes: int


@dataclass
class Plan:
    """Everything needed to decode a batch, as numpy arrays (see module docstring).

    sections: (byte offset in the upload buffer, array) pairs. upload_nbytes: bytes to upload;
    buf_nbytes: device buffer size (upload + scratch, multiple of 16). freqs: [T, 256] uint16
    frequency tables, prob_bits: [T] int, vals: [T, 256] uint32 output value of each symbol (high
    word of the decode table entries, layout.py). desc: (MODE, R, PB) -> int64[n_chunks, NF] chunk
    descriptors (R: tail bits of float modes, 0 for bytes; PB: prob_bits), one launch per key, in
    key order (byte planes first: F32 low planes and int8 residuals are decoded into scratch
    before their consumers run); owner: same keys -> int32[n_chunks] index into outputs. int8:
    (BH, BW, OUT, PRED) -> (int64[k, NT] tensor descriptors, int32[n_programs] program -> tensor
    row, int32[k] index into outputs, int64[n_avg, 2] AVG tiles (tensor row, tile), buf8 index of
    their skew scratch) for the tile kernels; tiled: int64[k, NT] descriptors of the int8 tensors
    decoded by MODE_TILED launches (no tile kernel). raw: (buffer byte offset, output byte offset,
    nbytes) copies.
    """

    outputs: list = field(default_factory=list)
    out_nbytes: int = 0
    sections: list = field(default_factory=list)
    upload_nbytes: int = 0
    buf_nbytes: int = 0
    freqs: list = field(default_factory=list)
    prob_bits: list = field(default_factory=list)
    vals: list = field(default_factory=list)
    desc: dict = field(default_factory=dict)
    owner: dict = field(default_factory=dict)
    int8: dict = field(default_factory=dict)
    tiled: list = field(default_factory=list)
    raw: list = field(default_factory=list)
    #: int64[n_blocks, TB] 8x8 blocks of the int8 transform tiles, inverted before the tile kernel
    transform: list = field(default_factory=list)
    scratch_nbytes: int = 0
    # offsets recorded relative to the scratch start, fixed up in finish(): (key, block, field)
    # for chunk descriptor blocks, (key, row) for int8 tensor descriptors
    _fix: list = field(default_factory=list)
    _int8_res: list = field(default_factory=list)
    _raw_scratch: list = field(default_factory=list)  # (scratch offset, output offset, nbytes)
    section_owners: list = field(default_factory=list)  # (tensor name, section name) per section
    _cur: str = ""

    # ---- building -------------------------------------------------------------------------
    def _put(self, arr: np.ndarray, sec: str | None = None) -> int:
        """Place a section (named ``sec`` in the record) in the upload buffer; returns its byte offset."""
        arr = np.ascontiguousarray(arr).reshape(-1)
        off = self.upload_nbytes
        self.sections.append((off, arr))
        self.section_owners.append((self._cur, sec))
        self.upload_nbytes = _align(off + arr.nbytes, SECTION_ALIGN)
        return off

    def _scratch(self, nbytes: int) -> int:
        """Reserve device scratch bytes; returns an offset relative to the scratch start."""
        off = self.scratch_nbytes
        self.scratch_nbytes = _align(off + nbytes, SECTION_ALIGN)
        return off

    def _plane(self, plane: rans.RansPlane, prefix: str, rec: EncodedTensor, vals=None) -> tuple:
        """Upload a plane's states/words, register its tables (``vals``: [256] output value of
        each symbol, default the symbol). Returns per-chunk arrays."""
        if vals is None:
            vals = np.arange(256, dtype=np.uint32)
        st = self._put(plane.states, f"{prefix}.states")
        wd = self._put(plane.words, f"{prefix}.words") if plane.words.size else self._put(np.zeros(1, np.uint16))
        t0 = len(self.freqs)
        for t in plane.full_tables().reshape(-1, 256):
            self.freqs.append(t)
            self.prob_bits.append(plane.prob_bits)
            self.vals.append(vals)
        c = np.arange(plane.n_chunks, dtype=np.int64)
        cs = plane.chunk_size
        n = np.minimum(cs, plane.n_symbols - c * cs)
        offs = plane.offsets.astype(np.int64)
        return c, n, st // 4 + c * 32, wd // 2 + offs[:-1], wd // 2 + offs[1:], \
            (t0 + c // plane.chunks_per_table) * LUT_STRIDE, plane.prob_bits

    def _rows(self, key, n_chunks, oi, **cols) -> None:
        d = np.zeros((n_chunks, K.NF), dtype=np.int64)
        for k, v in cols.items():
            d[:, getattr(K, "D_" + k)] = v
        self.desc.setdefault(key, []).append(d)
        self.owner.setdefault(key, []).append(np.full(n_chunks, oi, dtype=np.int32))

    def _byte_plane(self, plane: rans.RansPlane, prefix: str, rec, oi) -> int:
        """Queue a MODE_BYTES decode of a plane into scratch; returns the scratch-relative offset.
        The output index is fixed up to an absolute buf8 index in finish()."""
        sc = self._scratch(plane.n_symbols)
        c, n, st, wb, we, lut, pb = self._plane(plane, prefix, rec)
        key = (K.MODE_BYTES, 0, int(pb))
        self._fix.append((key, len(self.desc.get(key, [])), K.D_OUT))
        self._rows(key, c.size, oi, OUT=sc + c * plane.chunk_size, N=n, STATES=st,
                   WBEG=wb, WEND=we, LUT=lut)
        return sc

    def add(self, name: str, rec: EncodedTensor) -> None:
        if rec.dtype not in DTYPES:
            raise UnsupportedError(f"tensor '{name}': dtype {rec.dtype} is not supported")
        nbytes = rec.numel * itemsize(rec.dtype)
        self._cur = name
        out = Output(name, rec.dtype, tuple(rec.shape), self.out_nbytes, nbytes)
        oi = len(self.outputs)
        self.outputs.append(out)
        self.out_nbytes = _align(self.out_nbytes + nbytes, OUT_ALIGN)
        try:
            if rec.codec == "raw":
                data = rec.section("data", np.uint8, nbytes)
                if nbytes:
                    self.raw.append((self._put(data, "data"), out.offset, nbytes))
            elif rec.codec == "float":
                self._add_float(rec, out, oi)
            elif rec.codec in ("int8", "int8-quant"):
                self._add_int8(rec, out, oi)
            elif rec.codec == "fp8":
                self._add_fp8(rec, out, oi)
            else:
                raise UnsupportedError(f"codec {rec.codec!r} has no GPU decoder")
        except CorruptDataError as e:
            raise type(e)(f"tensor '{name}': {e}") from None
        except (KeyError, ValueError, TypeError, IndexError) as e:
            raise CorruptDataError(f"tensor '{name}': malformed record ({type(e).__name__}: {e})") from None

    def _add_float(self, rec: EncodedTensor, out: Output, oi: int) -> None:
        parts = parse_float(rec)
        W, E, M, L = parts.layout
        p, n, j, R = rec.params, rec.numel, parts.head_bits, parts.tail_bits
        alphabet, head, tail = parts.alphabet, parts.head, parts.tail
        if n == 0:
            return
        lows = []
        if parts.joint is not None:
            # format version 2's joint low plane: no Triton decoder yet, so decoded on the CPU here
            # and uploaded as the two raw byte planes the kernels read (the head stays on the GPU)
            from ..rans import joint as rans_joint

            low16 = rans_joint.decode(parts.joint, where="low16 plane")
            lows = [("buf", self._put((low16 >> 8).astype(np.uint8))),
                    ("buf", self._put((low16 & 0xFF).astype(np.uint8)))]
        for k, lname in enumerate(("low1", "low0")[:L] if parts.joint is None else ()):
            lp = p["low"][k]
            if lp.get("coded"):
                lplane = rans.RansPlane.from_sections(lp, rec.sections, lname)
                if lplane.n_symbols != n or lplane.chunk_steps != head.chunk_steps:
                    raise CorruptDataError(f"float codec: {lname} plane does not match the head plane")
                lows.append(("scratch", self._byte_plane(lplane, lname, rec, oi)))
            else:
                lows.append(("buf", self._put(rec.section(f"{lname}.raw", np.uint8, n), f"{lname}.raw")))
        tl_ = self._put(tail, "tail")
        # head value of each symbol, pre-shifted into place; symbols outside the alphabet flagged
        vals = np.full(256, K.LUT_BAD, dtype=np.uint32)
        vals[:alphabet.size] = alphabet.astype(np.uint32) << np.uint32(M - j)
        c, cn, st, wb, we, lut, pb = self._plane(head, "head", rec, vals)
        cs = head.chunk_size
        mode = K.MODE_F16BITS if W == 16 else K.MODE_F32BITS
        key = (mode, R, int(pb))
        # a chunk's tail fields start at bit c * cs * R, a whole number of 32-bit words (cs = 32 *
        # chunk_steps), and the section starts 16-byte aligned
        cols = dict(OUT=out.offset // (W // 8) + c * cs, N=cn, STATES=st, WBEG=wb, WEND=we,
                    LUT=lut, TAILW=tl_ // 4 + c * (cs // 32) * R)
        for fld, (kind, off) in zip(("LOW1", "LOW0"), lows):
            cols[fld] = off + c * cs
            if kind == "scratch":
                self._fix.append((key, len(self.desc.get(key, [])), getattr(K, "D_" + fld)))
        self._rows(key, c.size, oi, **cols)

    def _add_fp8(self, rec: EncodedTensor, out: Output, oi: int) -> None:
        """FP8: the byte plane decodes into scratch (MODE_BYTES, as int8 residuals), then one copy
        to the output, after every kernel of the batch (run() copies raw entries last)."""
        from ..codecs.fp8 import parse as parse_fp8
        plane = parse_fp8(rec)
        if rec.numel:
            self._raw_scratch.append((self._byte_plane(plane, "data", rec, oi), out.offset, rec.numel))

    def _add_int8(self, rec: EncodedTensor, out: Output, oi: int) -> None:
        quant = rec.codec == "int8-quant"
        p = rec.params["q"] if quant else rec.params
        rows, cols, th, tw = (int(p[k]) for k in ("rows", "cols", "tile_h", "tile_w"))
        n = rec.numel
        if rows < 0 or cols < 0 or rows * cols != n or th < 1 or tw < 1:
            raise CorruptDataError("int8 codec: view or tile size inconsistent with the shape")
        if th > MAX_TILE or tw > MAX_TILE:
            raise UnsupportedError(f"int8 codec: tiles of {th}x{tw} exceed the GPU decoder's {MAX_TILE}")
        n_tw, n_th = -(-cols // tw), -(-rows // th)
        modes, ms = -1, np.zeros(0, np.uint8)
        if not p["all_none"]:
            ms = rec.section("modes", np.uint8, n_th * n_tw)
            if ms.size and int(ms.max()) > (TR.ADST if "hi" in p else TR.DCT - 1):
                raise CorruptDataError("int8 codec: unknown prediction mode")
            modes = self._put(ms, "modes")
        has_tr = bool(ms.size) and int(ms.max()) >= TR.DCT
        if has_tr != ("hi" in p):
            raise CorruptDataError("int8 codec: transform modes and the hi plane must come together")
        plane = rans.RansPlane.from_sections(p["res"], rec.sections, "res")
        if plane.n_symbols != n:
            raise CorruptDataError(f"int8 codec: residual plane has {plane.n_symbols} symbols, tensor {n}")
        if has_tr:
            _, n_hi = TR.hi_offsets(rows, cols, th, tw, ms)
            hplane = rans.RansPlane.from_sections(p["hi"], rec.sections, "hi")
            if hplane.n_symbols != n_hi:
                raise CorruptDataError(f"int8 codec: hi plane has {hplane.n_symbols} symbols, transform tiles {n_hi}")
        scales, n_scales = -1, 0
        if quant:
            if rec.dtype not in OUT_KIND:
                raise CorruptDataError(f"int8-quant codec: dtype {rec.dtype} not supported")
            s = checked_scales(rec, rows)
            scales, n_scales = self._put(s, "scales") // 4, s.size
            kind, o = OUT_KIND[rec.dtype], out.offset // itemsize(rec.dtype)
        else:
            if rec.dtype not in ("I8", "U8"):
                raise CorruptDataError(f"int8 codec: dtype {rec.dtype} not supported")
            kind, o = K.OUT_I8, out.offset
        if n == 0:
            return
        signed = bool(p["signed"])
        if TILED and p["all_none"] and tw == 32 and cols % 32 == 0:
            self._tiled_plane(plane, rec, oi, rows, cols, th, kind, o, signed, scales, n_scales)
            return
        res = self._byte_plane(plane, "res", rec, oi)
        if has_tr:  # scratch-relative indices, fixed in finish()
            self.transform.append(transform_blocks(rows, cols, th, tw, ms, res, self._byte_plane(hplane, "hi", rec, oi)))
        bh, bw = 1 << max(0, (th - 1).bit_length()), 1 << max(0, (tw - 1).bit_length())
        pred = bool(ms.size) and bool(np.any((ms > 0) & (ms < TR.DCT)))
        key = (bh, bw, kind, pred)
        rowsd, progs, owners, avg = self.int8.setdefault(key, ([], [], [], []))
        t0 = sum(len(g) for g in progs)
        d = self._tensor_row(cols, rows, th, tw, n_tw, res, o, modes, signed, scales, n_scales, t0)
        self._int8_res.append((key, len(rowsd)))
        rowsd.append(d)
        g = max(1, TILE_BLOCK // (bh * bw))
        progs.append(np.full(-(-n_th * n_tw // g), len(rowsd) - 1, dtype=np.int32))
        owners.append(oi)
        t = np.flatnonzero(ms == AVG)
        avg.append(np.stack([np.full(t.size, len(rowsd) - 1), t], axis=1).astype(np.int64))

    @staticmethod
    def _tensor_row(cols, rows, th, tw, n_tw, res, o, modes, signed, scales, n_scales, t0) -> np.ndarray:
        d = np.zeros(K.NT, dtype=np.int64)
        d[[K.T_COLS, K.T_ROWS, K.T_TH, K.T_TW, K.T_NTW, K.T_RES, K.T_OUT, K.T_MODES, K.T_SIGNED,
           K.T_SCALES, K.T_NSCALES, K.T_TILE0]] = [cols, rows, th, tw, n_tw, res, o, modes,
                                                   int(signed), scales, n_scales, t0]
        return d

    def _tiled_plane(self, plane, rec, oi, rows, cols, th, kind, o, signed, scales, n_scales) -> None:
        """Queue a MODE_TILED decode (layout.py): an all-NONE int8 plane of 32-wide tiles over
        whole tile columns, its symbols written straight to their row-major place in the output.
        Each chunk starts on a tile row (chunks hold 32 * steps symbols); its descriptor carries
        that place, from which the kernel steps on row by row, tile by tile, band by band."""
        c, n, st, wb, we, lut, pb = self._plane(plane, "res", rec)
        r, tc, br, h = tiled_place(c * (plane.chunk_size // 32), rows, cols, th)
        ti = len(self.tiled)
        self.tiled.append(self._tensor_row(cols, rows, th, 32, cols // 32, 0, o, -1, signed, scales,
                                           n_scales, 0))
        self._rows((K.MODE_TILED, kind, int(pb)), c.size, oi, OUT=o, N=n, STATES=st, WBEG=wb,
                   WEND=we, LUT=lut, TAILW=ti, LOW1=r | (h << 32), LOW0=br | (tc << 32))

    def finish(self) -> "Plan":
        """Fix scratch-relative offsets to buf8 indices and stack the tables."""
        base = _align(self.upload_nbytes, SECTION_ALIGN)
        self.buf_nbytes = _align(base + self.scratch_nbytes + 16, SECTION_ALIGN)
        for key, block, fld in self._fix:
            self.desc[key][block][:, fld] += base
        self.desc = {k: np.concatenate(self.desc[k]) for k in sorted(self.desc)}
        self.owner = {k: np.concatenate(self.owner[k]) for k in sorted(self.owner)}
        self.raw += [(base + sc, dst, n) for sc, dst, n in self._raw_scratch]
        for key, row in self._int8_res:
            self.int8[key][0][row][K.T_RES] += base
        self.transform = np.concatenate(self.transform) if self.transform else np.zeros((0, TB), np.int64)
        self.transform[:, :2] += base
        for key in list(self.int8):
            rowsd, progs, owners, avg = self.int8[key]
            avg = np.concatenate(avg)
            bh, bw = key[:2]
            skew = self.buf_nbytes  # each AVG tile's skewed diagonals (int8_avg_kernel)
            self.buf_nbytes = _align(skew + avg.shape[0] * (bh + bw) * bh, SECTION_ALIGN)
            self.int8[key] = (np.stack(rowsd), np.concatenate(progs), np.asarray(owners, np.int32),
                              avg, skew)
        self.tiled = np.stack(self.tiled) if self.tiled else np.zeros((1, K.NT), np.int64)
        self.freqs = np.stack(self.freqs) if self.freqs else np.zeros((0, 256), np.uint16)
        self.prob_bits = np.asarray(self.prob_bits, dtype=np.int64)
        self.vals = np.stack(self.vals) if self.vals else np.zeros((0, 256), np.uint32)
        return self
