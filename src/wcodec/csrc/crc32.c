/* CRC-32 as zlib computes it (reflected, polynomial 0xEDB88320, initial and final XOR ~0), for
 * the .wcodec container's checksums of sections and decoded tensors (docs/FORMAT.md).
 *
 * Why here: zlib 1.2.13's crc32 (what Python's zlib module links) ran at 0.8-1.3 GB/s on the
 * 2-vCPU VM, one thread; load_file checks the compressed sections and the decoded tensor, so
 * two passes at that speed cost more than the decode itself (issue 30). This file folds 64
 * bytes per step with carry-less multiplies (PCLMULQDQ; Intel's "Fast CRC Computation for
 * Generic Polynomials Using PCLMULQDQ", the constants of Chromium's zlib), slice-by-8 tables
 * elsewhere, and splits large buffers into pieces over the extension's threads, joined with
 * zlib's crc32_combine (x^(8 len) mod P by squaring).
 */
#define PY_SSIZE_T_CLEAN
#include "crc32.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#ifndef _WIN32
#include <unistd.h>
#endif

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) && !defined(WCODEC_NO_SIMD)
#define WC_CRC_X86 1
#include <immintrin.h>
#endif

#define POLY 0xEDB88320u

static uint32_t g_table[8][256]; /* slice-by-8 */
static uint32_t g_x2n[32];       /* x^(2^k) mod P */

/* a * b mod P (reflected bit order, zlib's multmodp) */
static uint32_t multmodp(uint32_t a, uint32_t b) {
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
    }
    return p;
}

/* x^(n * 2^k) mod P */
static uint32_t x2nmodp(int64_t n, unsigned k) {
    uint32_t p = 1u << 31; /* x^0 */
    while (n) {
        if (n & 1) p = multmodp(g_x2n[k & 31], p);
        n >>= 1;
        k++;
    }
    return p;
}

static void init_tables(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        g_table[0][i] = c;
    }
    for (int i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) g_table[t][i] = (g_table[t - 1][i] >> 8) ^ g_table[0][g_table[t - 1][i] & 0xFF];
    uint32_t p = 1u << 30; /* x^1 */
    g_x2n[0] = p;
    for (int k = 1; k < 32; k++) g_x2n[k] = p = multmodp(p, p);
}

uint32_t wc_crc32_combine(uint32_t crc_a, uint32_t crc_b, int64_t len_b) {
    return multmodp(x2nmodp(len_b, 3), crc_a) ^ crc_b;
}

uint32_t wc_crc32_join(const uint32_t *crcs, int64_t n, int64_t piece, int64_t last) {
    if (n <= 0) return 0;
    uint32_t shift = x2nmodp(piece, 3), c = 0;
    for (int64_t i = 0; i + 1 < n; i++) c = multmodp(shift, c) ^ crcs[i];
    return wc_crc32_combine(c, crcs[n - 1], last);
}

/* the register form (pre- and post-inverted by the caller), slice-by-8 */
static uint32_t crc_tables(uint32_t c, const uint8_t *buf, int64_t len) {
    while (len && ((uintptr_t)buf & 7)) {
        c = (c >> 8) ^ g_table[0][(c ^ *buf++) & 0xFF];
        len--;
    }
    for (; len >= 8; len -= 8, buf += 8) {
        uint64_t w;
        memcpy(&w, buf, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);
#endif
        w ^= c;
        c = g_table[7][w & 0xFF] ^ g_table[6][(w >> 8) & 0xFF] ^ g_table[5][(w >> 16) & 0xFF] ^
            g_table[4][(w >> 24) & 0xFF] ^ g_table[3][(w >> 32) & 0xFF] ^ g_table[2][(w >> 40) & 0xFF] ^
            g_table[1][(w >> 48) & 0xFF] ^ g_table[0][w >> 56];
    }
    while (len--) c = (c >> 8) ^ g_table[0][(c ^ *buf++) & 0xFF];
    return c;
}

#ifdef WC_CRC_X86
#if (defined(__clang__) && __clang_major__ >= 13) || (!defined(__clang__) && __GNUC__ >= 11)
#define WC_CRC_VPCLMUL 1 /* compilers that know the 256-bit carry-less multiply and its CPU flag */
#endif
static int g_pclmul, g_vpclmul, g_vpclmul512;

/* The register form over len bytes, len >= 64 and a multiple of 16: four 128-bit lanes folded
 * 64 bytes at a time, then into one, then Barrett-reduced to 32 bits. */
/* Fold constants: x^(D+32) and x^(D-32) mod P, bit-reflected and shifted left by one, for a fold
 * over D bits (k1k2: D = 512, k3k4: 128, k5: the 64-bit step; k1k2_1024: D = 1024, the 256-bit
 * loop's eight lanes). Checked against zlib in tests/native/test_crc32.py. */
#define K1K2 0x01c6e41596, 0x0154442bd4
#define K1K2_1024 0x014a7fe880, 0x01e88ef372
#define K1K2_2048 0x01322d1430, 0x011542778a /* D = 2048: the 512-bit loop's sixteen lanes */

__attribute__((target("pclmul,sse4.1")))
static uint32_t crc_fold4(__m128i x1, __m128i x2, __m128i x3, __m128i x4, const uint8_t *buf, int64_t len);

/* The register form over len bytes, len >= 64 and a multiple of 16: four 128-bit lanes folded
 * 64 bytes at a time, then into one, then Barrett-reduced to 32 bits. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc_pclmul(uint32_t c, const uint8_t *buf, int64_t len) {
    __m128i x1 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)buf), _mm_cvtsi32_si128((int)c));
    return crc_fold4(x1, _mm_loadu_si128((const __m128i *)(buf + 16)), _mm_loadu_si128((const __m128i *)(buf + 32)),
                     _mm_loadu_si128((const __m128i *)(buf + 48)), buf + 64, len - 64);
}

#ifdef WC_CRC_VPCLMUL
static uint32_t crc_vpclmul_lanes(__m256i y0, __m256i y1, __m256i y2, __m256i y3, const uint8_t *buf, int64_t len);

/* As crc_pclmul for len >= 128: eight 128-bit lanes in four 256-bit registers folded 128 bytes
 * at a time (twice the bytes per multiply), then folded into crc_pclmul's four lanes. */
__attribute__((target("vpclmulqdq,avx2,pclmul,sse4.1")))
static uint32_t crc_vpclmul(uint32_t c, const uint8_t *buf, int64_t len) {
    __m256i y0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)buf), _mm256_zextsi128_si256(_mm_cvtsi32_si128((int)c)));
    return crc_vpclmul_lanes(y0, _mm256_loadu_si256((const __m256i *)(buf + 32)),
                             _mm256_loadu_si256((const __m256i *)(buf + 64)),
                             _mm256_loadu_si256((const __m256i *)(buf + 96)), buf + 128, len - 128);
}

/* As crc_vpclmul for len >= 256 on AVX-512: sixteen 128-bit lanes in four 512-bit registers folded
 * 256 bytes at a time (twice the bytes per multiply again: the decoded-tensor and section CRCs of
 * a load run over data still in cache, where the multiplies were the bound), then folded onto
 * crc_vpclmul's eight lanes. */
__attribute__((target("vpclmulqdq,avx512f,avx2,pclmul,sse4.1")))
static uint32_t crc_vpclmul512(uint32_t c, const uint8_t *buf, int64_t len) {
    const __m512i k = _mm512_set_epi64(K1K2_2048, K1K2_2048, K1K2_2048, K1K2_2048);
    __m512i z0 = _mm512_xor_si512(_mm512_loadu_si512((const void *)buf), _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)c)));
    __m512i z1 = _mm512_loadu_si512((const void *)(buf + 64));
    __m512i z2 = _mm512_loadu_si512((const void *)(buf + 128));
    __m512i z3 = _mm512_loadu_si512((const void *)(buf + 192));
    buf += 256;
    len -= 256;
    /* a ^ b ^ d in one ternary-logic op (0x96: the three-way xor) */
#define WC_FOLD512(z, k, d) _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(z, k, 0x00), \
                                                      _mm512_clmulepi64_epi128(z, k, 0x11), d, 0x96)
    for (; len >= 256; len -= 256, buf += 256) {
        z0 = WC_FOLD512(z0, k, _mm512_loadu_si512((const void *)buf));
        z1 = WC_FOLD512(z1, k, _mm512_loadu_si512((const void *)(buf + 64)));
        z2 = WC_FOLD512(z2, k, _mm512_loadu_si512((const void *)(buf + 128)));
        z3 = WC_FOLD512(z3, k, _mm512_loadu_si512((const void *)(buf + 192)));
    }
    /* lanes of z0, z1 lie 128 bytes before those of z2, z3: fold them onto those */
    const __m512i k1024 = _mm512_set_epi64(K1K2_1024, K1K2_1024, K1K2_1024, K1K2_1024);
    z2 = WC_FOLD512(z0, k1024, z2);
    z3 = WC_FOLD512(z1, k1024, z3);
#undef WC_FOLD512
    return crc_vpclmul_lanes(_mm512_castsi512_si256(z2), _mm512_extracti64x4_epi64(z2, 1),
                             _mm512_castsi512_si256(z3), _mm512_extracti64x4_epi64(z3, 1), buf, len);
}

/* eight lanes y0..y3 holding the 128 bytes before buf: fold the remaining len bytes (a multiple
 * of 16) 128 at a time, then into crc_fold4's four lanes */
__attribute__((target("vpclmulqdq,avx2,pclmul,sse4.1")))
static uint32_t crc_vpclmul_lanes(__m256i y0, __m256i y1, __m256i y2, __m256i y3, const uint8_t *buf, int64_t len) {
    const __m256i k = _mm256_set_epi64x(K1K2_1024, K1K2_1024);
#define WC_FOLD256(y, k, d) _mm256_xor_si256(_mm256_xor_si256(_mm256_clmulepi64_epi128(y, k, 0x00), \
                                                               _mm256_clmulepi64_epi128(y, k, 0x11)), d)
    for (; len >= 128; len -= 128, buf += 128) {
        y0 = WC_FOLD256(y0, k, _mm256_loadu_si256((const __m256i *)buf));
        y1 = WC_FOLD256(y1, k, _mm256_loadu_si256((const __m256i *)(buf + 32)));
        y2 = WC_FOLD256(y2, k, _mm256_loadu_si256((const __m256i *)(buf + 64)));
        y3 = WC_FOLD256(y3, k, _mm256_loadu_si256((const __m256i *)(buf + 96)));
    }
    /* lanes 0-3 are 64 bytes before lanes 4-7: fold them onto those */
    const __m256i k512 = _mm256_set_epi64x(K1K2, K1K2);
    y0 = WC_FOLD256(y0, k512, y2);
    y1 = WC_FOLD256(y1, k512, y3);
#undef WC_FOLD256
    return crc_fold4(_mm256_castsi256_si128(y0), _mm256_extracti128_si256(y0, 1), _mm256_castsi256_si128(y1),
                     _mm256_extracti128_si256(y1, 1), buf, len);
}
#endif

/* four lanes x1..x4 holding the bytes before buf: fold the remaining len bytes (a multiple of 16)
 * and reduce */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc_fold4(__m128i x1, __m128i x2, __m128i x3, __m128i x4, const uint8_t *buf, int64_t len) {
    const __m128i k1k2 = _mm_set_epi64x(K1K2);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124);
    const __m128i poly = _mm_set_epi64x(0x01f7011641, 0x01db710641);
    __m128i x0, x5, x6, x7, x8;
    x0 = k1k2;
    for (; len >= 64; len -= 64, buf += 64) {
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), _mm_loadu_si128((const __m128i *)buf));
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), _mm_loadu_si128((const __m128i *)(buf + 16)));
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), _mm_loadu_si128((const __m128i *)(buf + 32)));
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), _mm_loadu_si128((const __m128i *)(buf + 48)));
    }
    x0 = k3k4; /* four lanes into one */
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, x0, 0x11), x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, x0, 0x11), x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, x0, 0x11), x4), x5);
    for (; len >= 16; len -= 16, buf += 16) {
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, x0, 0x11),
                                         _mm_loadu_si128((const __m128i *)buf)), x5);
    }
    /* 128 -> 64 bits */
    const __m128i lo32 = _mm_setr_epi32(~0, 0, ~0, 0);
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, lo32), k5k0, 0x00), x2);
    /* Barrett reduction to 32 bits */
    x2 = _mm_clmulepi64_si128(_mm_and_si128(x1, lo32), poly, 0x10);
    x2 = _mm_clmulepi64_si128(_mm_and_si128(x2, lo32), poly, 0x00);
    return (uint32_t)_mm_extract_epi32(_mm_xor_si128(x1, x2), 1);
}
#endif

uint32_t wc_crc32(const uint8_t *buf, int64_t len, uint32_t crc) {
    uint32_t c = ~crc;
#ifdef WC_CRC_X86
    if (g_pclmul && wc_isa() > 0 && len >= 64) { /* WCODEC_ISA=scalar: the tables */
        int64_t head = len & ~(int64_t)15;
#ifdef WC_CRC_VPCLMUL
        if (g_vpclmul512 && wc_isa() >= 2 && len >= 256)
            c = crc_vpclmul512(c, buf, head);
        else if (g_vpclmul && len >= 128)
            c = crc_vpclmul(c, buf, head);
        else
#endif
            c = crc_pclmul(c, buf, head);
        buf += head;
        len -= head;
    }
#endif
    return ~crc_tables(c, buf, len);
}

/* ---- many buffers, in pieces on the extension's threads ------------------------------------- */

/* pieces of this many bytes (the last of a buffer shorter): small enough to share a large
 * matrix between threads, large enough that a piece's start-up is noise */
#define PIECE ((int64_t)1 << 18)
/* below this many bytes in one call, the calling thread alone: loaders already run tensors in
 * parallel, and a hand-off to helper threads costs a wake-up and a wait each time (on a loaded
 * machine a time slice) for work of well under a millisecond */
#define PARALLEL_BYTES ((int64_t)4 << 20)

typedef struct {
    const uint8_t **bufs;
    int64_t *lens, *first; /* first[b]: index of buffer b's first piece; first[n_bufs]: total */
    int64_t *owner;        /* piece -> buffer */
    uint32_t *crc;         /* piece -> its CRC (from 0) */
} many_ctx;

static void piece_task(void *vctx, int64_t i) {
    many_ctx *m = vctx;
    int64_t b = m->owner[i], off = (i - m->first[b]) * PIECE;
    int64_t len = m->lens[b] - off < PIECE ? m->lens[b] - off : PIECE;
    m->crc[i] = wc_crc32(m->bufs[b] + off, len, 0);
}

/* CRCs of n buffers into out[n], computed in PIECE-byte pieces on up to `threads` threads
 * (<= 0: the default), GIL released by the caller; -1 when out of memory */
static int crc_many(const uint8_t **bufs, int64_t *lens, int64_t n, uint32_t *out, int threads) {
    int64_t *first = malloc((size_t)(n + 1) * sizeof *first);
    if (!first) return -1;
    first[0] = 0;
    for (int64_t b = 0; b < n; b++) first[b + 1] = first[b] + (lens[b] + PIECE - 1) / PIECE;
    int64_t total = first[n];
    int64_t *owner = malloc((size_t)(total ? total : 1) * sizeof *owner);
    uint32_t *crc = malloc((size_t)(total ? total : 1) * sizeof *crc);
    if (!owner || !crc) {
        free(first);
        free(owner);
        free(crc);
        return -1;
    }
    for (int64_t b = 0; b < n; b++)
        for (int64_t i = first[b]; i < first[b + 1]; i++) owner[i] = b;
    many_ctx m = {bufs, lens, first, owner, crc};
    int64_t bytes = 0;
    for (int64_t b = 0; b < n; b++) bytes += lens[b];
    if (total) wc_run_parallel(piece_task, &m, total, bytes < PARALLEL_BYTES ? 1 : threads);
    uint32_t shift = x2nmodp(PIECE, 3); /* every piece but a buffer's last is PIECE bytes */
    for (int64_t b = 0; b < n; b++) {
        uint32_t c = 0;
        for (int64_t i = first[b]; i < first[b + 1]; i++) {
            int64_t len = i + 1 < first[b + 1] ? PIECE : lens[b] - (i - first[b]) * PIECE;
            c = (len == PIECE ? multmodp(shift, c) : wc_crc32_combine(c, 0, len)) ^ crc[i];
        }
        out[b] = c;
    }
    free(first);
    free(owner);
    free(crc);
    return 0;
}

/* the bytes of a C-contiguous buffer; -1 with an exception if it is not one */
static int get_bytes(PyObject *obj, Py_buffer *view) {
    return PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS);
}

void wc_crc32_init(void) {
    init_tables();
#ifdef WC_CRC_X86
    __builtin_cpu_init();
    g_pclmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#ifdef WC_CRC_VPCLMUL
    g_vpclmul = g_pclmul && __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("avx2");
    g_vpclmul512 = g_vpclmul && __builtin_cpu_supports("avx512f");
#endif
#endif
}

/* [crc[0], ..., crc[n - 1]] as a list of ints, or NULL with an exception */
static PyObject *crc_list(const uint32_t *crc, Py_ssize_t n) {
    PyObject *res = PyList_New(n);
    for (Py_ssize_t i = 0; res && i < n; i++) {
        PyObject *v = PyLong_FromUnsignedLong(crc[i]);
        if (!v) {
            Py_CLEAR(res);
            break;
        }
        PyList_SET_ITEM(res, i, v);
    }
    return res;
}

/* crc32(buffer, value=0, threads=0) -> int, as zlib.crc32 */
PyObject *wc_py_crc32(PyObject *self, PyObject *args) {
    PyObject *obj;
    unsigned int value = 0;
    int threads = 0;
    if (!PyArg_ParseTuple(args, "O|Ii", &obj, &value, &threads)) return NULL;
    Py_buffer view;
    if (get_bytes(obj, &view) < 0) return NULL;
    const uint8_t *buf = view.buf;
    int64_t len = view.len;
    uint32_t c;
    int rc = 0;
    Py_BEGIN_ALLOW_THREADS
    if (threads == 1 || len < PARALLEL_BYTES) {
        c = wc_crc32(buf, len, value);
    } else {
        rc = crc_many(&buf, &len, 1, &c, threads);
        c = wc_crc32_combine(value, c, len);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (rc < 0) return PyErr_NoMemory();
    return PyLong_FromUnsignedLong(c);
}

/* crc32_many(sequence of buffers, threads=0) -> list of ints: one GIL release for them all */
PyObject *wc_py_crc32_many(PyObject *self, PyObject *args) {
    PyObject *seq, *fast = NULL, *res = NULL;
    int threads = 0;
    if (!PyArg_ParseTuple(args, "O|i", &seq, &threads)) return NULL;
    fast = PySequence_Fast(seq, "crc32_many takes a sequence of buffers");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast), got = 0;
    Py_buffer *views = calloc((size_t)(n ? n : 1), sizeof *views);
    const uint8_t **bufs = malloc((size_t)(n ? n : 1) * sizeof *bufs);
    int64_t *lens = malloc((size_t)(n ? n : 1) * sizeof *lens);
    uint32_t *out = malloc((size_t)(n ? n : 1) * sizeof *out);
    if (!views || !bufs || !lens || !out) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < n; got++) {
        if (get_bytes(PySequence_Fast_GET_ITEM(fast, got), &views[got]) < 0) goto done;
        bufs[got] = views[got].buf;
        lens[got] = views[got].len;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = crc_many(bufs, lens, n, out, threads);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyErr_NoMemory();
        goto done;
    }
    res = crc_list(out, n);
done:
    for (Py_ssize_t i = 0; i < got; i++) PyBuffer_Release(&views[i]);
    free(views);
    free(bufs);
    free(lens);
    free(out);
    Py_DECREF(fast);
    return res;
}

#ifndef _WIN32
/* pieces a file span is read in: each is checksummed right after it lands, while in cache (L2) */
#define READ_PIECE ((int64_t)1 << 18)

/* the file's bytes of one READ_PIECE piece into place; 0, an errno, or -1 when the file ends first */
static int read_piece(int fd, uint8_t *dst, int64_t want, int64_t at) {
    int64_t have = 0;
    while (have < want) {
        ssize_t r = pread(fd, dst + have, (size_t)(want - have), (off_t)(at + have));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return r < 0 ? errno : -1;
        have += r;
    }
    return 0;
}

/* a span read in pieces on several threads: each piece's part of each section checksummed from 0
 * (part[piece * n + k]), then joined in order per section */
typedef struct {
    int fd;
    uint8_t *buf;
    int64_t offset, len, n;
    const int64_t *sec; /* [2n]: each section's [start, end) in buf */
    uint32_t *part;
    int err;            /* the first error (atomic): an errno, or -1 when the file ended */
} pread_ctx;

static void pread_task(void *vctx, int64_t i) {
    pread_ctx *m = vctx;
    int64_t got = i * READ_PIECE, want = m->len - got < READ_PIECE ? m->len - got : READ_PIECE;
    if (__atomic_load_n(&m->err, __ATOMIC_RELAXED)) return;
    int e = read_piece(m->fd, m->buf + got, want, m->offset + got);
    if (e) {
        int zero = 0;
        __atomic_compare_exchange_n(&m->err, &zero, e, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t k = 0; k < m->n; k++) {
        int64_t lo = m->sec[2 * k] > got ? m->sec[2 * k] : got;
        int64_t hi = m->sec[2 * k + 1] < got + want ? m->sec[2 * k + 1] : got + want;
        if (lo < hi) m->part[i * m->n + k] = wc_crc32(m->buf + lo, hi - lo, 0);
    }
}

/* pread_crc(fd, buf, offset, starts, sizes[, threads]) -> list of ints, or None on a short read:
 * fills the writable buffer buf with the file's bytes [offset, offset + len(buf)) and returns the
 * CRC-32 of each section buf[starts[k]:starts[k] + sizes[k]] (any order, overlaps allowed),
 * computed piece by piece as the bytes arrive instead of in a second pass over memory (issue 30:
 * the reader's section checks). None: the file ended early (truncated while open). Raises
 * OSError (errno), ValueError (a section outside buf), TypeError. Called on the loader's threads,
 * one per tensor, with the GIL released; a span of PARALLEL_BYTES or more is read in pieces on
 * up to `threads` threads (0: the default; the extension's budget: none while the others are
 * busy): one large record beside small ones (a format-version-2 embedding) no longer reads on
 * one thread while the other cores wait. */
PyObject *wc_py_pread_crc(PyObject *self, PyObject *args) {
    int fd, threads = 1;
    long long offset;
    PyObject *o_buf, *o_starts, *o_sizes, *fs = NULL, *fz = NULL, *res = NULL;
    if (!PyArg_ParseTuple(args, "iOLOO|i", &fd, &o_buf, &offset, &o_starts, &o_sizes, &threads)) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(o_buf, &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) return NULL;
    int64_t *sec = NULL;
    uint32_t *crc = NULL;
    fs = PySequence_Fast(o_starts, "pread_crc: starts must be a sequence of ints");
    fz = fs ? PySequence_Fast(o_sizes, "pread_crc: sizes must be a sequence of ints") : NULL;
    if (!fz) goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fs);
    if (PySequence_Fast_GET_SIZE(fz) != n || offset < 0) {
        PyErr_SetString(PyExc_ValueError, "pread_crc: starts and sizes differ in length, or a negative offset");
        goto done;
    }
    sec = malloc((size_t)(2 * n + 1) * sizeof *sec);
    crc = calloc((size_t)(n + 1), sizeof *crc);
    if (!sec || !crc) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        long long a = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fs, k));
        long long z = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fz, k));
        if (PyErr_Occurred()) goto done;
        if (a < 0 || z < 0 || a > view.len || z > view.len - a) {
            PyErr_SetString(PyExc_ValueError, "pread_crc: a section lies outside the buffer");
            goto done;
        }
        sec[2 * k] = a;
        sec[2 * k + 1] = a + z;
    }
    uint8_t *buf = view.buf;
    int64_t len = view.len, got = 0;
    int err = 0;
    if (len >= PARALLEL_BYTES && threads != 1) {
        int64_t pieces = (len + READ_PIECE - 1) / READ_PIECE;
        pread_ctx m = {fd, buf, offset, len, n, sec, calloc((size_t)(pieces * n + 1), sizeof(uint32_t)), 0};
        if (!m.part) {
            PyErr_NoMemory();
            goto done;
        }
        Py_BEGIN_ALLOW_THREADS
        wc_run_parallel(pread_task, &m, pieces, threads);
        for (Py_ssize_t k = 0; k < n && !m.err; k++) /* each section's parts, in file order */
            for (int64_t i = sec[2 * k] / READ_PIECE; i * READ_PIECE < sec[2 * k + 1]; i++) {
                int64_t lo = sec[2 * k] > i * READ_PIECE ? sec[2 * k] : i * READ_PIECE;
                int64_t hi = sec[2 * k + 1] < (i + 1) * READ_PIECE ? sec[2 * k + 1] : (i + 1) * READ_PIECE;
                crc[k] = wc_crc32_combine(crc[k], m.part[i * n + k], hi - lo);
            }
        Py_END_ALLOW_THREADS
        err = m.err;
        free(m.part);
        got = len;
    }
    Py_BEGIN_ALLOW_THREADS
    while (got < len) {
        int64_t want = len - got < READ_PIECE ? len - got : READ_PIECE;
        if ((err = read_piece(fd, buf + got, want, offset + got))) break;
        for (Py_ssize_t k = 0; k < n; k++) { /* the part of each section inside this piece */
            int64_t lo = sec[2 * k] > got ? sec[2 * k] : got, hi = sec[2 * k + 1] < got + want ? sec[2 * k + 1] : got + want;
            if (lo < hi) crc[k] = wc_crc32(buf + lo, hi - lo, crc[k]);
        }
        got += want;
    }
    Py_END_ALLOW_THREADS
    if (err > 0) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    if (err < 0) {
        res = Py_NewRef(Py_None);
        goto done;
    }
    res = crc_list(crc, n);
done:
    Py_XDECREF(fs);
    Py_XDECREF(fz);
    free(sec);
    free(crc);
    PyBuffer_Release(&view);
    return res;
}
#endif
