"""Schema checks of the ``params`` of each built-in codec, run when a header is parsed.

Every integer is range-checked here, before it can reach numba (where 2**64 raises a typing or
overflow error) or a numpy allocation, and every field is type-checked (a list where a float
decoder wants a dict raised AttributeError). Codec ids without a schema here (codecs added by
other modules) are checked by their own decoders; ``decode_tensor`` also calls
:func:`check_params`. Pure Python: the reader stays free of numba.
"""

from __future__ import annotations

from ..errors import CorruptDataError

#: rANS plane limits (mirrors wcodec.rans: chunk steps, alphabet, prob_bits, tables)
MAX_SYMBOLS = 1 << 40
MAX_CHUNK_STEPS = 1 << 16
MAX_CHUNKS_PER_TABLE = 1 << 32
PROB_BITS = (11, 12)
MAX_TILE = 1 << 16
#: float layouts: dtype -> (mantissa bits, low byte planes), as wcodec.codecs.float.LAYOUT
FLOAT_LAYOUT = {"BF16": (7, 0), "F16": (10, 0), "F32": (23, 2)}
MAX_HEAD_BITS = 4
#: as wcodec.codecs.base.FP8_DTYPES (no numpy import here)
FP8_DTYPES = ("F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ")


def _int(p: dict, key: str, lo: int, hi: int, where: str) -> int:
    v = p.get(key) if isinstance(p, dict) else None
    if type(v) is not int or not (lo <= v <= hi):
        raise CorruptDataError(f"{where}: '{key}' must be an integer in [{lo}, {hi}], got {v!r}"[:300])
    return v


def _bool(p: dict, key: str, where: str) -> bool:
    v = p.get(key)
    if type(v) is not bool:
        raise CorruptDataError(f"{where}: '{key}' must be true or false, got {v!r}"[:300])
    return v


def _obj(p, where: str) -> dict:
    if not isinstance(p, dict):
        raise CorruptDataError(f"{where}: must be an object, got {type(p).__name__}")
    return p


def check_plane(p, n_symbols: int | None, where: str) -> None:
    """An rANS plane's params: integer fields in range, ``n_symbols`` as expected (if given)."""
    _obj(p, where)
    n = _int(p, "n_symbols", 0, MAX_SYMBOLS - 1, where)
    if p.get("prob_bits") not in PROB_BITS or type(p.get("prob_bits")) is not int:
        raise CorruptDataError(f"{where}: 'prob_bits' must be 11 or 12, got {p.get('prob_bits')!r}"[:300])
    _int(p, "chunk_steps", 1, MAX_CHUNK_STEPS, where)
    _int(p, "chunks_per_table", 1, MAX_CHUNKS_PER_TABLE, where)
    _int(p, "alphabet_size", 1, 256, where)
    if n_symbols is not None and n != n_symbols:
        raise CorruptDataError(f"{where}: plane holds {n} symbols, expected {n_symbols}")


def _float(params: dict, dtype: str, shape: list, numel: int) -> None:
    if dtype not in FLOAT_LAYOUT:
        raise CorruptDataError(f"float codec: dtype {dtype} not supported")
    M, L = FLOAT_LAYOUT[dtype]
    j = _int(params, "head_bits", 0, MAX_HEAD_BITS, "float params")
    _int(params, "tail_bits", 1 + M - 8 * L - j, 1 + M - 8 * L - j, "float params")
    check_plane(params.get("head"), numel, "float params 'head'")
    low = params.get("low")
    joint = params.get("low_joint")  # format version 2 (CODEC_LAYOUT.md): F32's low bytes as one plane
    if joint is not None:
        if L != 2 or low != []:
            raise CorruptDataError("float params: 'low_joint' needs F32 and an empty 'low'")
        where = "float params 'low_joint'"
        if _int(_obj(joint, where), "n_symbols", 0, MAX_SYMBOLS - 1, where) != numel:
            raise CorruptDataError(f"{where}: plane holds {joint['n_symbols']} symbols, expected {numel}")
        _int(joint, "prob_bits", 16, 28, where)
        _int(joint, "chunk_steps", 1, MAX_CHUNK_STEPS, where)
        _int(joint, "chunks_per_table", 1, MAX_CHUNKS_PER_TABLE, where)
        if "flat_raw" in joint:  # raw chunks (CODEC_LAYOUT.md); absent in the first v2 files
            _int(joint, "flat_raw", 0, 1, where)
        return
    if not isinstance(low, list) or len(low) != L:
        raise CorruptDataError(f"float params: 'low' must be a list of {L} objects for {dtype}")
    for k, lp in enumerate(low):
        where = f"float params 'low'[{k}]"
        if _bool(_obj(lp, where), "coded", where):
            check_plane(lp, numel, where)


def _int8(params: dict, dtype: str, shape: list, numel: int, where: str = "int8 params") -> None:
    _obj(params, where)
    rows = _int(params, "rows", 0, MAX_SYMBOLS, where)
    cols = _int(params, "cols", 0, MAX_SYMBOLS, where)
    if rows * cols != numel:
        raise CorruptDataError(f"{where}: rows x cols = {rows} x {cols} is not the {numel} elements of the shape")
    _int(params, "tile_h", 1, MAX_TILE, where)
    _int(params, "tile_w", 1, MAX_TILE, where)
    _bool(params, "signed", where)
    _bool(params, "all_none", where)
    check_plane(params.get("res"), numel, f"{where} 'res'")
    if "hi" in params:  # transform modes' high parts (wcodec.codecs.transform)
        check_plane(params["hi"], None, f"{where} 'hi'")


def _quant(params: dict, dtype: str, shape: list, numel: int) -> None:
    if dtype not in FLOAT_LAYOUT:
        raise CorruptDataError(f"int8-quant codec: dtype {dtype} not supported")
    _int8(params.get("q"), "I8", shape, numel, "int8-quant params 'q'")
    if "scale_table" in params:  # the steps as a table + a byte per row (CODEC_LAYOUT.md, int8-quant)
        _int(params, "scale_table", 1, 256, "int8-quant params")


def _raw(params: dict, dtype: str, shape: list, numel: int) -> None:
    pass


def _int8_dtype(params, dtype, shape, numel):
    if dtype not in ("I8", "U8"):
        raise CorruptDataError(f"int8 codec: dtype {dtype} not supported")
    _int8(params, dtype, shape, numel)


def _fp8(params: dict, dtype: str, shape: list, numel: int) -> None:
    if dtype not in FP8_DTYPES:
        raise CorruptDataError(f"fp8 codec: dtype {dtype} not supported")
    check_plane(params.get("data"), numel, "fp8 params 'data'")


def _fixed(params: dict, dtype: str, shape: list, numel: int, codec: str = "fixed") -> None:
    """Types and ranges; the fit to the shape is wcodec.codecs.fixed.check_record's (numpy-free here).
    codec "fixed16" (F16): the same fields, base at most 23 (codecs.fixed16)."""
    want, max_base = ("F16", 23) if codec == "fixed16" else ("BF16", 119)
    if dtype != want:
        raise CorruptDataError(f"{codec} codec: dtype must be {want}, got {dtype}")
    _int(params, "base", 0, max_base, f"{codec} params")
    _int(params, "kpad", 0, MAX_SYMBOLS, f"{codec} params")
    _int(params, "n_escapes", 0, max(numel, 0), f"{codec} params")
    if params.get("col_bits") not in (16, 32) or type(params.get("col_bits")) is not int:
        raise CorruptDataError(f"{codec} params: 'col_bits' must be 16 or 32, got {params.get('col_bits')!r}"[:300])


_PLANE_SECTIONS = {"freqs": "U8", "freqs_big": "U16", "states": "U32", "offsets": "U32", "words": "U16"}


def _plane_sections(*prefixes: str) -> dict:
    return {f"{p}.{k}": v for p in prefixes for k, v in _PLANE_SECTIONS.items()}


#: section name -> dtype of each built-in codec (what its encoder writes; sections may be absent)
SECTIONS = {
    "raw": {"data": "U8"},
    "float": {"head.alphabet": "U16", "tail": "U8", "low1.raw": "U8", "low0.raw": "U8",
              **_plane_sections("head", "low1", "low0"),
              **{f"low16.{k}": v for k, v in (("default", "U32"), ("exc_offsets", "U32"), ("exc_symbols", "U16"),
                                              ("exc_freqs", "U32"), ("states", "U64"), ("offsets", "U32"),
                                              ("words", "U16"))}},
    "int8": {"modes": "U8", **_plane_sections("res", "hi")},
    "int8-quant": {"modes": "U8", "scales": "F32", "scale_table": "F32", "scale_index": "U8",
                   **_plane_sections("res", "hi")},
    "fp8": _plane_sections("data"),
}


def check_sections(codec: str, dtypes: dict) -> None:
    """Section names and dtypes ({name: dtype name}) of a built-in codec's record.

    Raises CorruptDataError for a name the codec does not write or a dtype it does not use
    (e.g. an F32 ``modes`` section, which report code would misread)."""
    known = SECTIONS.get(codec)
    if known is None:
        return
    for name, dt in dtypes.items():
        if name not in known:
            raise CorruptDataError(f"{codec} codec: unknown section {name!r}"[:300])
        if dt != known[name]:
            raise CorruptDataError(f"{codec} codec: section '{name}' must be {known[name]}, got {dt!r}"[:300])


CHECKS = {"float": _float, "int8": _int8_dtype, "int8-quant": _quant, "raw": _raw, "fp8": _fp8, "fixed": _fixed,
          "fixed16": lambda *a: _fixed(*a, codec="fixed16")}


def check_params(codec: str, dtype: str, shape, params) -> None:
    """Schema-check the params of a record of a built-in codec (others pass through).

    shape: the tensor's shape (already validated: non-negative ints). Raises CorruptDataError.
    """
    fn = CHECKS.get(codec)
    if fn is None:
        return
    if not isinstance(params, dict):
        raise CorruptDataError(f"{codec} codec: params must be an object")
    numel = 1
    for d in shape:
        numel *= int(d)
    fn(params, dtype, list(shape), numel)
