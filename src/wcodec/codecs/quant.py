"""int8 quantization (lossy front end): symmetric per-output-channel scales, then lossless int8.

scale[row] = max |w[row, :]| / 127 (one scale for 0-d and 1-d tensors), q = round-half-even(w /
scale) clipped to [-127, 127], coded by the int8 codec (tiles + intra prediction + rANS).
Decoding computes ``float32(q) * scale`` in float32 and rounds to the tensor's dtype (round to
nearest even), so CPU and GPU decoders agree bit for bit. The record's ``info`` reports the
error: ``snr_db`` (signal-to-noise ratio in dB) and ``max_abs_error``.
"""

from __future__ import annotations

import numpy as np

from ..errors import CorruptDataError
from . import lossy
from .base import DTYPES, Codec, EncodedTensor, register
from .int8 import Int8Codec, decode_int8, view_2d


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> float32 values (exact)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), round to nearest even; NaN stays NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        rounded[nan] = ((u[nan] >> 16) | 0x0040).astype(np.uint16)
    return rounded


def to_f32(array: np.ndarray, dtype: str) -> np.ndarray:
    return bf16_to_f32(array) if dtype == "BF16" else np.asarray(array, dtype=np.float32)


def from_f32(x: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "BF16":
        return f32_to_bf16(x)
    return x.astype(np.float16 if dtype == "F16" else np.float32)


#: a scale table holds at most this many values (its index is one byte per row)
MAX_SCALE_TABLE = 256


def checked_scales(record, rows: int) -> np.ndarray:
    """The record's [rows] float32 scales: section ``scales``, or with params ``scale_table`` = k
    the table ``scale_table`` f32[k] indexed by ``scale_index`` u8[rows] (docs/CODEC_LAYOUT.md).
    Raises CorruptDataError for a non-finite scale (the encoder never writes one: it takes finite
    weights only, and NaN products carry platform-dependent bits: a GPU's multiply returns a
    canonical NaN, x86 the operand's), an index past the table, or sections of both forms."""
    k = record.params.get("scale_table")
    if k is None:
        if "scale_table" in record.sections or "scale_index" in record.sections:
            raise CorruptDataError("int8-quant codec: scale table sections without params 'scale_table'")
        return _finite(record.section("scales", np.float32, rows), "scale of row")
    if "scales" in record.sections:
        raise CorruptDataError("int8-quant codec: both a 'scales' section and a scale table")
    if type(k) is not int or not 1 <= k <= MAX_SCALE_TABLE:
        raise CorruptDataError(f"int8-quant codec: 'scale_table' must be an integer in [1, {MAX_SCALE_TABLE}]")
    table = _finite(record.section("scale_table", np.float32, k), "scale table entry")
    index = record.section("scale_index", np.uint8, rows)
    if index.size and int(index.max()) >= k:
        raise CorruptDataError(f"int8-quant codec: scale index {int(index.max())} past the table's {k} entries")
    return table[index]


def _finite(s: np.ndarray, what: str) -> np.ndarray:
    bad = np.flatnonzero(~np.isfinite(s))
    if bad.size:
        raise CorruptDataError(f"int8-quant codec: {what} {int(bad[0])} is not finite ({s[bad[0]]})")
    return s


def scale_sections(scales: np.ndarray) -> tuple[dict, dict]:
    """(params, sections) storing [rows] float32 scales: a table of the distinct values and a
    byte per row where that is smaller than a float32 per row (at most MAX_SCALE_TABLE distinct
    values), else the plain ``scales`` section (every file before the table; old readers read it)."""
    table, index = np.unique(scales, return_inverse=True)
    if table.size <= MAX_SCALE_TABLE and 4 * table.size + scales.size < 4 * scales.size:
        return ({"scale_table": int(table.size)},
                {"scale_table": table.astype(np.float32), "scale_index": index.reshape(-1).astype(np.uint8)})
    return {}, {"scales": scales}


def dequantize(q: np.ndarray, scales: np.ndarray, rows: int, dtype: str) -> np.ndarray:
    """q: [rows*cols] int8, scales: [rows] float32 -> [rows*cols] values of dtype (BF16 as uint16)."""
    with np.errstate(over="ignore"):  # a huge (finite) scale may overflow to inf: the format's product
        x = q.reshape(rows, -1).astype(np.float32) * scales.reshape(-1, 1)
    return from_f32(x.reshape(-1), dtype)


#: rows of a dequantization block are chosen so that a block holds about this many weights
#: (its float32 temporary stays small and in cache)
BLOCK_WEIGHTS = 1 << 14


def dequantize_into(q: np.ndarray, scales: np.ndarray, rows: int, dtype: str, out: np.ndarray) -> None:
    """:func:`dequantize` written into ``out`` ([rows*cols] of dtype's numpy dtype), a block of
    rows at a time: the same float32 products and rounding, element by element, so bit-identical."""
    cols = q.size // rows if rows else 0
    q2, o2 = q.reshape(rows, cols), out.reshape(rows, cols)
    step = max(1, BLOCK_WEIGHTS // max(cols, 1))
    for r0 in range(0, rows, step):
        o2[r0:r0 + step] = dequantize(q2[r0:r0 + step].reshape(-1), scales[r0:r0 + step],
                                      min(step, rows - r0), dtype).reshape(-1, cols)


def quantize_codes(array: np.ndarray, dtype: str, qp: float | None = None, target_snr_db: float | None = None,
                   rounding: float | None = None, row_weight: np.ndarray | None = None,
                   scale_grid: int | None = None, inverse_hessian=None) -> tuple:
    """The int8-quant record's numbers for :meth:`QuantCodec.encode`'s options, before any coding:
    (w float32 [numel] the weights, scales float32 [rows], q int8 [rows, cols], info dict, grid
    int). Raises ValueError (non-finite weights, bad options)."""
    w = to_f32(np.ascontiguousarray(array).reshape(-1), dtype)
    if not np.all(np.isfinite(w)):
        raise ValueError("int8 quantization needs finite weights (found NaN or inf)")
    rows, cols = view_2d(array.shape)
    w2 = w.reshape(rows, cols)
    info, grid = {}, 0
    if qp is None and target_snr_db is None:
        if inverse_hessian is not None:
            raise ValueError("error compensation (inverse_hessian) takes a qp")
        absmax = np.abs(w2).max(axis=1) if cols else np.zeros(rows, np.float32)
        scales = np.where(absmax > 0, absmax / 127.0, 1.0).astype(np.float32)
        q = np.clip(np.rint(w2 / scales[:, None]), -127, 127).astype(np.int8)
        return w, scales, q, info, grid

    def reconstruct(qq, ss):
        return to_f32(dequantize(qq.reshape(-1), ss, rows, dtype), dtype).reshape(rows, cols)

    r = lossy.DEFAULT_ROUNDING if rounding is None else float(rounding)
    info = {"qp": qp} if qp is not None else {"target_snr_db": target_snr_db}
    grid = lossy.SCALE_GRID if scale_grid is None else int(scale_grid)
    if grid < 0:
        raise ValueError(f"scale_grid must be >= 0, got {scale_grid}")
    to_dtype = None if dtype == "F32" else (lambda x: to_f32(from_f32(x, dtype), dtype))
    scales, q, wsnr = lossy.choose_steps(w2, reconstruct, qp, target_snr_db, r, row_weight, grid,
                                         inverse_hessian, to_dtype)
    if row_weight is not None:
        info["weighted_snr_db"] = wsnr
    if inverse_hessian is not None:
        info["error_compensation"] = "gptq"
    return w, scales, q, info, grid


def decoded_values(array: np.ndarray, dtype: str, **options) -> np.ndarray:
    """What an int8-quant record encoded from ``array`` (BF16 as uint16 bits, F16, F32; not
    modified) with :meth:`QuantCodec.encode`'s ``options`` decodes to, without coding it: an
    array of the tensor's shape and dtype, bit-identical to ``decode_tensor(encode_tensor(...))``
    (e.g. the lossy search's round-to-nearest reference). Raises ValueError as encode does."""
    _, scales, q, _, _ = quantize_codes(array, dtype, **options)
    return dequantize(q.reshape(-1), scales, scales.size, dtype).reshape(array.shape)


class QuantCodec(Codec):
    id = "int8-quant"

    def encode(self, array: np.ndarray, dtype: str, qp: float | None = None,
               target_snr_db: float | None = None, rounding: float | None = None,
               row_weight: np.ndarray | None = None, scale_grid: int | None = None,
               inverse_hessian=None, **options) -> EncodedTensor:
        """array: BF16 (uint16 bits), F16 or F32 tensor; must be finite. Not modified.

        Without qp / target_snr_db: int8 absmax per row (scale = absmax / 127, round half even).
        With one of them: the rate-controlled dead-zone quantizer of :mod:`.lossy` (qp: step
        from the tensor's rms; target_snr_db: coarsest step meeting it; rounding: dead-zone
        rounding offset; row_weight: [rows] importance of each row, steps ~ weight ** -1/2 and
        the row-weighted SNR is the one met; scale_grid: steps on a log grid of that many values
        per octave, None: ``lossy.SCALE_GRID``, 0: exact; inverse_hessian: with qp, a
        :class:`wcodec.codecs.gptq.InverseHessian` of the layer's inputs, the codes chosen by
        GPTQ's error compensation at the same steps). Both write the same record layout; the
        scales go into a table + a byte per row where that is smaller (:func:`scale_sections`).
        """
        w, scales, q, info, grid = quantize_codes(array, dtype, qp, target_snr_db, rounding, row_weight,
                                                  scale_grid, inverse_hessian)
        rows = scales.size
        inner = Int8Codec().encode(q.reshape(array.shape), "I8", **options)
        decoded = dequantize(q.reshape(-1), scales, rows, dtype)
        w_hat = to_f32(decoded, dtype)
        err = w_hat.astype(np.float64) - w
        info = {"snr_db": lossy.snr_db(w, w_hat), "max_abs_error": float(np.abs(err).max()) if err.size else 0.0,
                **info, "modes": inner.info["modes"]}
        # the table only for grid steps (few distinct values): plain int8 files stay readable by every reader
        sparams, ssections = scale_sections(scales) if grid and rows > 1 else ({}, {"scales": scales})
        return EncodedTensor(self.id, dtype, tuple(array.shape), {"q": inner.params, **sparams},
                             {**inner.sections, **ssections}, info=info)

    def decode(self, record: EncodedTensor, out: np.ndarray | None = None) -> np.ndarray:
        """out: see Codec.decode; dequantized into it block by block (no full-size float32
        temporary: the int8 plane and the residual plane, 1 byte/weight each, are the only ones)."""
        if record.dtype not in ("BF16", "F16", "F32"):
            raise CorruptDataError(f"int8-quant codec: dtype {record.dtype} not supported")
        rows, cols = view_2d(record.shape)
        scales = checked_scales(record, rows)
        q = decode_int8(record, record.params["q"]).view(np.int8)
        if out is None:
            out = np.empty(record.numel, DTYPES[record.dtype])
        dequantize_into(q, scales, rows, record.dtype, out.view(DTYPES[record.dtype]))
        return out.reshape(record.shape)


register(QuantCodec())
