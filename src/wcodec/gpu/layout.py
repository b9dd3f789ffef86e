"""Descriptor layouts shared by the host planner (numpy) and the Triton kernels."""

LANES = 32

# Chunk descriptor fields (int64 each, one row per chunk). Units: element indices into the view
# named in the comment.
D_OUT = 0      # output element index of the chunk's first value (out view; bytes for MODE_BYTES)
D_N = 1        # symbols in the chunk (0 for padding rows)
D_STATES = 2   # buf32 index of the chunk's 32 initial states
D_WBEG = 3     # buf16 index of the chunk's first word
D_WEND = 4     # buf16 index one past the chunk's last word
D_LUT = 5      # lut index of the chunk's decode table (2**prob_bits packed u32 entries)
D_PB = 6       # prob_bits
D_ALPH = 7     # buf16 index of the head alphabet (float modes)
D_ALPHN = 8    # alphabet size (1..256)
D_HSHIFT = 9   # M - head_bits: shift of the head value in the output bits
D_TAILBIT = 10  # absolute bit position in buf of the chunk's first tail field
D_R = 11       # tail bits R
D_LOW1 = 12    # buf8 index of the chunk's low byte 1 (F32): raw section or decoded scratch
D_LOW0 = 13    # buf8 index of the chunk's low byte 0 (F32)
NF = 14

MODE_BYTES = 0    # rANS symbols -> uint8 (int8 residuals, F32 low planes)
MODE_F16BITS = 1  # BF16 / F16: head + tail -> 16-bit patterns
MODE_F32BITS = 2  # F32: head + tail + two low bytes -> 32-bit patterns

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
T_TILE0 = 11    # index of the tensor's first tile in the launch
NT = 12

OUT_I8 = 0
OUT_BF16 = 1
OUT_F16 = 2
OUT_F32 = 3
