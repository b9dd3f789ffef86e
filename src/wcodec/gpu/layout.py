"""Descriptor layouts shared by the host planner (numpy) and the Triton kernels."""

LANES = 32

# Chunk descriptor fields (int64 each, one row per chunk). Units: element indices into the view
# named in the comment. Launches are grouped by (mode, tail bits R, prob_bits), which the kernel
# takes as compile-time constants, so those are not per-row fields.
D_OUT = 0      # output element index of the chunk's first value (out view; bytes for MODE_BYTES)
D_N = 1        # symbols in the chunk (0 for padding rows)
D_STATES = 2   # buf32 index of the chunk's 32 initial states
D_WBEG = 3     # buf16 index of the chunk's first word
D_WEND = 4     # buf16 index one past the chunk's last word
D_LUT = 5      # lut index of the chunk's decode table (2**prob_bits packed u64 entries)
D_TAILW = 6    # buf32 index of the chunk's first tail word (chunks hold 32*steps symbols, so
               # every chunk's tail fields start on a 32-bit word)
D_LOW1 = 7     # buf8 index of the chunk's low byte 1 (F32): raw section or decoded scratch
D_LOW0 = 8     # buf8 index of the chunk's low byte 0 (F32)
NF = 9

# Decode table entry (int64, one per slot of a table): low word ``freq | (slot - cum) << 13``
# (freq <= 4096 needs 13 bits, slot - cum < 4096), high word the symbol's output value: the
# symbol itself for byte planes, ``alphabet[sym] << (M - head_bits)`` for a float head plane, with
# bit 31 set for a symbol outside the alphabet (corrupt table). The output value in the table
# saves the alphabet gather in the decode loop.
LUT_BAD = 1 << 31

MODE_BYTES = 0    # rANS symbols -> uint8 (int8 residuals, F32 low planes)
MODE_F16BITS = 1  # BF16 / F16: head + tail -> 16-bit patterns
MODE_F32BITS = 2  # F32: head + tail + two low bytes -> 32-bit patterns
# int8 / int8-quant with every tile NONE, 32-wide tiles and whole tile columns: rANS symbols
# (tile-major) go straight to their row-major place in the output, dequantised for int8-quant.
# The key's R is the OUT_* kind; D_TAILW is the tensor's row in the plan's int8 tensor table and
# D_LOW1 / D_LOW0 the chunk's starting place: row within its tile | band height << 32, and
# band's first row | tile's first column << 32 (the chunk's first symbol starts a tile row).
MODE_TILED = 3

# Status codes, per chunk (0 = ok); names in wcodec.gpu.decode.STATUS.
ST_READ_PAST = 1
ST_FINAL = 2
ST_INIT = 3
ST_SYMBOL = 4


# Int8 tensor descriptor fields (int64 each, one row per int8 / int8-quant tensor).
T_COLS = 0      # columns of the 2-D view (row stride of the output)
T_ROWS = 1
T_TH = 2        # tile_h
T_TW = 3        # tile_w
T_NTW = 4       # tiles per tile row
T_RES = 5       # buf8 index of the decoded residual plane (tile-major, each tile row-major)
T_OUT = 6       # output element index of the tensor
T_MODES = 7     # buf8 index of the modes section, -1 when all tiles are NONE
T_SIGNED = 8    # 1 for I8 (signed prediction arithmetic), 0 for U8
T_SCALES = 9    # buf32 index of the f32 scales (int8-quant), -1 for plain int8
T_NSCALES = 10  # number of scales (rows, or 1)
T_TILE0 = 11    # index of the tensor's first program in the tile kernel's launch
NT = 12

OUT_I8 = 0
OUT_BF16 = 1
OUT_F16 = 2
OUT_F32 = 3
