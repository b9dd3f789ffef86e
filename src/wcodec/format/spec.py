"""Constants of the .wcodec container (docs/FORMAT.md is normative) and header validation.

File layout: a 64-byte preamble, then 64-byte aligned sections, then the JSON header at the end
(so that a writer streams tensors in one pass). Validation here runs before any section is
touched: every offset, size, dtype and shape is checked against the file size, so a corrupt
header raises a :class:`~wcodec.errors.WcodecError` naming the tensor instead of a crash or a
huge allocation.
"""

from __future__ import annotations

import struct

import numpy as np

from .. import native
from ..errors import ChecksumError, CorruptDataError, FormatError
from . import _io
from .params import check_params, check_sections

MAGIC = b"\x89WCODEC\n"
#: the newest container version this package reads and writes; it reads every one in VERSIONS.
#: A writer stores the lowest version its records need (record_version), so files without a
#: version-2 record stay readable by version-1 readers, byte for byte as before.
FORMAT_VERSION = 2
VERSIONS = (1, 2)
ALIGN = 64
PREAMBLE_SIZE = 64
# magic, version u32, flags u32, header offset u64, header size u64, header crc32 u32, 28 zeros
PREAMBLE = struct.Struct("<8sIIQQI28x")
MAX_HEADER_SIZE = 100 << 20
MAX_NDIM = 32
#: a coded tensor may not claim more decoded bytes than this many times its compressed bytes
#: (+ MAX_RATIO_SLACK): far above what any codec reaches, far below a denial-of-service shape
MAX_RATIO = 1 << 16
MAX_RATIO_SLACK = 1 << 20
#: tighter per-codec bounds on decoded bytes per compressed byte. float: the raw tail alone
#: costs >= 4 of 16 bits (measured <= 8x even on constant tensors); int8 / int8-quant / fp8: a
#: constant plane costs 132 bytes (32 states + an offset) per chunk of 32 x chunk_steps
#: symbols, 248 symbols per byte at the encoder's default 1024 steps (its densest: larger planes
#: get fewer steps), so 256 symbols per byte takes every file the encoder writes by default and
#: bounds what a small file can make the decoder allocate to ~256 x its peak bytes per element
#: (was 1024: a 34 KB int8 file cost 130 MB, issue 27). fixed: >= 12 bits stored per 16-bit weight,
#: fixed16 >= 14.
#: Values: (decoded bytes or symbols per compressed byte, counted in "bytes" or "symbols").
SYMBOLS_PER_BYTE = 256
CODEC_RATIO = {"raw": (1, "bytes"), "float": (16, "bytes"), "int8": (SYMBOLS_PER_BYTE, "symbols"),
               "int8-quant": (SYMBOLS_PER_BYTE, "symbols"), "fp8": (SYMBOLS_PER_BYTE, "symbols"),
               "fixed": (2, "bytes"), "fixed16": (2, "bytes")}
INDEX_SUFFIX = ".wcodec.index.json"

#: section dtypes (safetensors names) -> numpy little-endian dtypes
SECTION_DTYPES = {
    "U8": "<u1", "I8": "<i1", "U16": "<u2", "I16": "<i2", "U32": "<u4", "I32": "<i4",
    "U64": "<u8", "I64": "<i8", "F16": "<f2", "F32": "<f4", "F64": "<f8",
}
_NP_TO_SECTION = {np.dtype(v).str: k for k, v in SECTION_DTYPES.items()}
#: the numpy dtype and bytes per item of each section dtype (np.dtype() from a string costs ~1 us,
#: paid per section on every read)
SECTION_NP = {k: np.dtype(v) for k, v in SECTION_DTYPES.items()}
SECTION_ITEMSIZE = {k: v.itemsize for k, v in SECTION_NP.items()}
# tensor dtypes: same names as wcodec.codecs.base.DTYPES (kept here so the reader needs no codecs)
TENSOR_ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "I32": 4, "U32": 4,
                   "I64": 8, "U64": 8, "F16": 2, "BF16": 2, "F32": 4, "F64": 8,
                   "F8_E4M3": 1, "F8_E5M2": 1, "F8_E4M3FNUZ": 1, "F8_E5M2FNUZ": 1, "F8_E8M0": 1,
                   "F4_X2": 1, "C64": 8}


def align_up(n: int, a: int = ALIGN) -> int:
    return -(-n // a) * a


def crc32(data) -> int:
    """zlib CRC-32 of a bytes-like object or a numpy array (its raw C-order bytes), computed by
    :func:`wcodec.native.crc32` (the C extension's threads, or zlib)."""
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    return native.crc32(data)


def section_dtype_name(arr: np.ndarray) -> str:
    """Safetensors-style name of a section array's dtype; raises ValueError if not allowed."""
    key = arr.dtype.newbyteorder("<").str if arr.dtype.byteorder not in "|" else arr.dtype.str
    try:
        return _NP_TO_SECTION[key]
    except KeyError:
        raise ValueError(f"section dtype {arr.dtype} is not allowed in a .wcodec file") from None


def record_version(codec: str, params: dict) -> int:
    """The lowest container version that can hold a record: 2 for a float record with a joint
    low plane (``low_joint``, CODEC_LAYOUT.md) and for codec "fixed16", else 1."""
    if codec == "fixed16":
        return 2
    return 2 if codec == "float" and isinstance(params, dict) and "low_joint" in params else 1


def pack_preamble(header_offset: int, header_size: int, header_crc: int, version: int = FORMAT_VERSION) -> bytes:
    return PREAMBLE.pack(MAGIC, version, 0, header_offset, header_size, header_crc)


def parse_preamble(raw: bytes, file_size: int) -> tuple[int, int, int]:
    """Check magic, version, flags and header bounds. Returns (header_offset, header_size, crc)."""
    if len(raw) < PREAMBLE_SIZE:
        raise FormatError(f"not a .wcodec file: {file_size} bytes, shorter than the {PREAMBLE_SIZE}-byte preamble")
    magic, version, flags, h_off, h_size, h_crc = PREAMBLE.unpack(raw[:PREAMBLE_SIZE])
    if magic != MAGIC:
        raise FormatError(f"not a .wcodec file: bad magic {magic!r}")
    if version not in VERSIONS:
        newer = "newer than" if version > FORMAT_VERSION else "unknown to"
        raise FormatError(f"format version {version} is {newer} this reader (version {FORMAT_VERSION})")
    if flags:
        raise FormatError(f"unknown flags 0x{flags:x} in the preamble")
    if h_size > MAX_HEADER_SIZE:
        raise FormatError(f"header size {h_size} exceeds the limit of {MAX_HEADER_SIZE} bytes")
    if h_off < PREAMBLE_SIZE or h_off % ALIGN:
        raise CorruptDataError(f"header offset {h_off} is not a {ALIGN}-byte aligned offset after the preamble")
    if h_off + h_size != file_size:
        what = "truncated" if h_off + h_size > file_size else "has trailing bytes"
        raise CorruptDataError(f"file {what}: header spans [{h_off}, {h_off + h_size}) but the file has {file_size} bytes")
    return h_off, h_size, h_crc


def parse_header(raw: bytes, crc: int) -> dict:
    """Decode and structurally check the JSON header bytes (crc32 checked first)."""
    if crc32(raw) != crc:
        raise ChecksumError("header checksum mismatch: the header is corrupt")
    header = _io.loads(raw, "header")
    if not isinstance(header, dict) or header.get("format") != "wcodec":
        raise FormatError("header: 'format' must be \"wcodec\"")
    if header.get("format_version") not in VERSIONS or type(header.get("format_version")) is not int:
        raise FormatError(f"header: format_version {header.get('format_version')!r} is not one of {VERSIONS}")
    meta = header.get("metadata", {})
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise CorruptDataError("header: 'metadata' must map strings to strings")
    if not isinstance(header.get("tensors"), dict):
        raise CorruptDataError("header: 'tensors' must be an object")
    return header


def check_versions(preamble: bytes, header: dict) -> None:
    """The header's format_version equals the preamble's, and no tensor needs a later version
    (``record_version``). Raises FormatError / CorruptDataError."""
    version = PREAMBLE.unpack(preamble[:PREAMBLE_SIZE])[1]
    if header["format_version"] != version:
        raise FormatError(f"header: format_version {header['format_version']} does not match the preamble's {version}")
    for name, e in header["tensors"].items():
        if isinstance(e, dict) and record_version(e.get("codec"), e.get("params")) > version:
            raise CorruptDataError(f"tensor '{name}': needs format version "
                                   f"{record_version(e.get('codec'), e.get('params'))}, the file says {version}")


def _is_int(x, lo: int = 0, hi: int = 1 << 63) -> bool:
    return type(x) is int and lo <= x < hi


def validate_entry(name: str, e, data_end: int) -> None:
    """Check one non-alias tensor entry against the data region [PREAMBLE_SIZE, data_end)."""
    def bad(msg):
        raise CorruptDataError(f"tensor '{name}': {msg}")

    if not isinstance(e, dict):
        bad("entry is not an object")
    if not isinstance(e.get("dtype"), str) or e["dtype"] not in TENSOR_ITEMSIZE:
        bad(f"unknown dtype {e.get('dtype')!r}")
    shape = e.get("shape")
    if not isinstance(shape, list) or len(shape) > MAX_NDIM or not all(_is_int(d, 0, 1 << 48) for d in shape):
        bad(f"bad shape {shape!r}")
    if not isinstance(e.get("codec"), str) or not isinstance(e.get("params", {}), dict):
        bad("codec must be a string and params an object")
    if not _is_int(e.get("crc32"), 0, 1 << 32):
        bad("missing or bad crc32 of the decoded bytes")
    if not isinstance(e.get("info", {}), dict):
        bad("info must be an object")
    secs = e.get("sections")
    if not isinstance(secs, dict):
        bad("sections must be an object")
    total = 0
    for sname, s in secs.items():
        if not isinstance(s, dict) or not isinstance(s.get("dtype"), str) or s["dtype"] not in SECTION_DTYPES:
            bad(f"section '{sname}': bad or missing dtype")
        off, size = s.get("offset"), s.get("size")
        if not _is_int(off) or not _is_int(size) or not _is_int(s.get("crc32"), 0, 1 << 32):
            bad(f"section '{sname}': offset, size and crc32 must be non-negative integers")
        if off < PREAMBLE_SIZE or off % ALIGN:
            bad(f"section '{sname}': offset {off} is not {ALIGN}-byte aligned after the preamble")
        if off + size > data_end:
            bad(f"section '{sname}': [{off}, {off + size}) runs past the data region end {data_end}")
        if size % SECTION_ITEMSIZE[s["dtype"]]:
            bad(f"section '{sname}': size {size} is not a multiple of its {s['dtype']} item size")
        total += size
    try:
        check_sections(e["codec"], {k: s["dtype"] for k, s in secs.items()})
    except CorruptDataError as err:
        bad(str(err))
    check_plausible(e["codec"], e["dtype"], shape, e.get("params", {}), total, bad)


def check_plausible(codec: str, dtype: str, shape, params, total: int, bad) -> None:
    """Bounds shared by the reader and the writer: decoded size against ``total`` compressed
    bytes (MAX_RATIO, CODEC_RATIO; raw must match exactly) and the codec's params schema.
    Calls ``bad(message)``, which raises."""
    numel = 1
    for d in shape:
        numel *= d
    raw = numel * TENSOR_ITEMSIZE[dtype]
    if codec == "raw" and total != raw:
        bad(f"raw codec holds {total} bytes, expected {raw}")
    ratio, unit = CODEC_RATIO.get(codec, (MAX_RATIO, "bytes"))
    if raw > total * MAX_RATIO + MAX_RATIO_SLACK or (raw if unit == "bytes" else numel) > total * ratio + MAX_RATIO_SLACK:
        bad(f"implausible shape {list(shape)}: {raw} decoded bytes from {total} compressed bytes "
            f"(the {codec} codec's bound is {ratio} {unit} per compressed byte + {MAX_RATIO_SLACK})")
    try:
        check_params(codec, dtype, shape, params)
    except CorruptDataError as err:
        bad(str(err))


def validate_tensors(tensors: dict, data_end: int) -> None:
    """Validate every entry and alias, and that no two sections overlap."""
    spans = []
    for name, e in tensors.items():
        if not name or "\x00" in name:
            raise CorruptDataError(f"header: tensor name {name!r} is empty or holds a NUL byte")
        if isinstance(e, dict) and "alias_of" in e:
            target = tensors.get(e["alias_of"]) if isinstance(e["alias_of"], str) else None
            if not isinstance(target, dict) or "alias_of" in target or len(e) != 1:
                raise CorruptDataError(f"tensor '{name}': alias_of must name a stored (non-alias) tensor")
            continue
        validate_entry(name, e, data_end)
        spans += [(s["offset"], s["offset"] + s["size"], name) for s in e["sections"].values() if s["size"]]
    spans.sort()
    for (a0, a1, an), (b0, b1, bn) in zip(spans, spans[1:]):
        if b0 < a1:
            raise CorruptDataError(f"tensor '{bn}': a section overlaps one of tensor '{an}'")
