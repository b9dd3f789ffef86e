/* wcodec._cext: the CPU hot loops of wcodec in C, bit-identical to the numba kernels
 * (src/wcodec/rans/cpu.py, src/wcodec/codecs/_kernels.py, src/wcodec/rans/_normalize.py) and to
 * the pure-Python specification (src/wcodec/rans/reference.py, docs/CODEC_LAYOUT.md).
 *
 * - interleaved rANS decode of a plane (32 lanes per chunk, 16-bit words): scalar, AVX2 (four
 *   8-lane vectors, gathered lookup, the step's word reads compacted by movemask + popcount + a
 *   permutation table) and AVX-512 (two 16-lane vectors, vpexpandd does the compaction), the
 *   ISA picked at run time (__builtin_cpu_supports) so one binary runs everywhere;
 * - rANS encode, chunk histograms, frequency normalisation, the float split and the fused
 *   float decode + merge;
 * - threads: each call runs its chunks on a few pthreads (work taken from an atomic counter),
 *   with the GIL released; a process-wide budget keeps concurrent calls (tensors decoded in
 *   pool threads) from oversubscribing the cores.
 *
 * Inputs arrive through the buffer protocol (no numpy C API: the module builds without numpy
 * headers). The Python wrapper (wcodec/native.py) validates planes before calling; the entry
 * points still check every size they rely on, and the decoders bound every read by the words
 * array, so corrupt data makes a chunk fail with a status, never an out-of-bounds access.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define WC_X86 1
#include <immintrin.h>
#endif
#ifndef _WIN32
#include <pthread.h>
#define WC_THREADS 1
#endif

#define LANES 32
#define STATE_LOWER (1u << 16)

enum { ISA_SCALAR = 0, ISA_AVX2 = 1, ISA_AVX512 = 2 };
static int g_isa_max = ISA_SCALAR; /* what the CPU supports */
static int g_isa = ISA_SCALAR;     /* what runs (tests lower it) */
static const char *ISA_NAMES[] = {"scalar", "avx2", "avx512"};

/* ------------------------------------------------------------------------------------------ */
/* threads                                                                                    */

typedef void (*task_fn)(void *ctx, int64_t task);
typedef struct {
    task_fn fn;
    void *ctx;
    int64_t n;
    int64_t next;
} job_t;

static void job_drain(job_t *job) {
    for (;;) {
        int64_t i = __atomic_fetch_add(&job->next, 1, __ATOMIC_RELAXED);
        if (i >= job->n) break;
        job->fn(job->ctx, i);
    }
}

#ifdef WC_THREADS
static void *job_worker(void *p) {
    job_drain((job_t *)p);
    return NULL;
}
#endif

/* extra threads (beyond the callers' own) that may run at once, over all concurrent calls */
static int g_spare = 0;

static int reserve_threads(int want) {
    int cur = __atomic_load_n(&g_spare, __ATOMIC_RELAXED);
    for (;;) {
        int take = want < cur ? want : cur;
        if (take <= 0) return 0;
        if (__atomic_compare_exchange_n(&g_spare, &cur, cur - take, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            return take;
    }
}

/* Run fn(ctx, 0..n-1) on the caller's thread plus up to threads-1 more. */
static void run_parallel(task_fn fn, void *ctx, int64_t n, int threads) {
    job_t job = {fn, ctx, n, 0};
    if (threads > n) threads = (int)n;
#ifdef WC_THREADS
    if (threads > 1) {
        int extra = reserve_threads(threads - 1);
        pthread_t tid[256];
        int started = 0;
        if (extra > 256) extra = 256;
        for (int t = 0; t < extra; t++)
            if (pthread_create(&tid[started], NULL, job_worker, &job) == 0) started++;
        job_drain(&job);
        for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
        __atomic_fetch_add(&g_spare, extra, __ATOMIC_RELAXED);
        return;
    }
#endif
    (void)threads;
    job_drain(&job);
}

/* ------------------------------------------------------------------------------------------ */
/* rANS decode of one chunk                                                                   */

typedef struct {
    const uint32_t *states;  /* [n_chunks * 32] */
    const uint32_t *offsets; /* [n_chunks + 1] */
    const uint16_t *words;   /* [words_len], words_len >= 1 */
    int64_t words_len;
    int64_t n;               /* symbols in the plane */
    int64_t chunk_size;
    int64_t chunks_per_table;
    const uint32_t *lookup;  /* [n_tables << prob_bits] */
    int prob_bits;
} plane_t;

/* Scalar steps for symbols [i0, m) of a chunk from the lane states X; the word index is clamped
 * to [0, last] so corrupt data never reads out of bounds (the count pos is what is checked). */
static inline int64_t decode_tail(uint32_t *X, int64_t i0, int64_t m, const uint32_t *lut, int pb,
                                  const uint16_t *words, int64_t pos, int64_t last, uint8_t *out) {
    const uint32_t mask = (1u << pb) - 1;
    for (int64_t i = i0; i < m; i++) {
        int lane = (int)(i & (LANES - 1));
        uint32_t x = X[lane];
        uint32_t e = lut[x & mask];
        out[i] = (uint8_t)e;
        x = (((e >> 8) & 0xFFF) + 1) * (x >> pb) + (e >> 20);
        uint32_t need = x < STATE_LOWER;
        uint32_t w = words[pos < last ? pos : last];
        x = need ? (x << 16) | w : x;
        pos += need;
        X[lane] = x;
    }
    return pos;
}

static inline int finish_chunk(const uint32_t *X, int64_t pos, int64_t end) {
    if (pos > end) return 1;
    if (pos < end) return 2;
    for (int l = 0; l < LANES; l++)
        if (X[l] != STATE_LOWER) return 2;
    return 0;
}

static int decode_chunk_scalar(const plane_t *p, int64_t c, uint8_t *out) {
    const uint32_t *lut = p->lookup + ((c / p->chunks_per_table) << p->prob_bits);
    int64_t start = c * p->chunk_size;
    int64_t m = (p->n < start + p->chunk_size ? p->n : start + p->chunk_size) - start;
    int64_t pos = p->offsets[c], end = p->offsets[c + 1];
    int64_t last = end - 1 > 0 ? end - 1 : 0;
    uint32_t X[LANES];
    for (int l = 0; l < LANES; l++) {
        X[l] = p->states[c * LANES + l];
        if (X[l] < STATE_LOWER) return 3;
    }
    pos = decode_tail(X, 0, m, lut, p->prob_bits, p->words, pos, last, out);
    return finish_chunk(X, pos, end);
}

#ifdef WC_X86
/* lane k of mask mk reads word popcount(mk & ((1 << k) - 1)) of the step's run */
static int32_t g_perm8[256][8];

static void init_perm8(void) {
    for (int mk = 0; mk < 256; mk++) {
        int r = 0;
        for (int k = 0; k < 8; k++) {
            g_perm8[mk][k] = r;
            if (mk >> k & 1) r++;
        }
    }
}

/* 8 (AVX2) / 16 (AVX-512) words from pos, each index clamped to the words array */
static inline void load_words_clamped(uint16_t *dst, const uint16_t *words, int64_t pos, int64_t len, int k) {
    for (int i = 0; i < k; i++) dst[i] = words[pos + i < len ? pos + i : len - 1];
}

__attribute__((target("avx2,popcnt")))
static int decode_chunk_avx2(const plane_t *p, int64_t c, uint8_t *out) {
    const int pb = p->prob_bits;
    const uint32_t *lut = p->lookup + ((c / p->chunks_per_table) << pb);
    int64_t start = c * p->chunk_size;
    int64_t m = (p->n < start + p->chunk_size ? p->n : start + p->chunk_size) - start;
    int64_t pos = p->offsets[c], end = p->offsets[c + 1];
    int64_t last = end - 1 > 0 ? end - 1 : 0;
    const uint16_t *words = p->words;
    const int64_t wlen = p->words_len;
    uint32_t X[LANES];
    for (int l = 0; l < LANES; l++) {
        X[l] = p->states[c * LANES + l];
        if (X[l] < STATE_LOWER) return 3;
    }
    __m256i x[4];
    for (int v = 0; v < 4; v++) x[v] = _mm256_loadu_si256((const __m256i *)(X + 8 * v));
    const __m256i vmask = _mm256_set1_epi32((1 << pb) - 1), v255 = _mm256_set1_epi32(0xFF);
    const __m256i vfff = _mm256_set1_epi32(0xFFF), one = _mm256_set1_epi32(1), zero = _mm256_setzero_si256();
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m128i shift_pb = _mm_cvtsi32_si128(pb);
    int64_t steps = m / LANES;
    for (int64_t t = 0; t < steps; t++) {
        __m256i sym[4];
        for (int v = 0; v < 4; v++) {
            __m256i e = _mm256_i32gather_epi32((const int *)lut, _mm256_and_si256(x[v], vmask), 4);
            sym[v] = _mm256_and_si256(e, v255);
            __m256i f = _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(e, 8), vfff), one);
            __m256i xv = _mm256_add_epi32(_mm256_mullo_epi32(f, _mm256_srl_epi32(x[v], shift_pb)),
                                          _mm256_srli_epi32(e, 20));
            __m256i need = _mm256_cmpeq_epi32(_mm256_srli_epi32(xv, 16), zero);
            unsigned mk = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(need));
            __m128i w16;
            if (pos + 8 <= wlen) {
                w16 = _mm_loadu_si128((const __m128i *)(words + pos));
            } else {
                uint16_t tmp[8];
                load_words_clamped(tmp, words, pos, wlen, 8);
                w16 = _mm_loadu_si128((const __m128i *)tmp);
            }
            __m256i w = _mm256_permutevar8x32_epi32(_mm256_cvtepu16_epi32(w16),
                                                    _mm256_loadu_si256((const __m256i *)g_perm8[mk]));
            x[v] = _mm256_blendv_epi8(xv, _mm256_or_si256(_mm256_slli_epi32(xv, 16), w), need);
            pos += __builtin_popcount(mk);
        }
        __m256i p01 = _mm256_packus_epi32(sym[0], sym[1]), p23 = _mm256_packus_epi32(sym[2], sym[3]);
        __m256i b = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(p01, p23), order);
        _mm256_storeu_si256((__m256i *)(out + t * LANES), b);
    }
    for (int v = 0; v < 4; v++) _mm256_storeu_si256((__m256i *)(X + 8 * v), x[v]);
    /* a corrupt stream may have run pos past the chunk: the tail clamps, the check flags it */
    pos = decode_tail(X, steps * LANES, m, lut, pb, words, pos, last, out);
    return finish_chunk(X, pos, end);
}

__attribute__((target("avx512f,avx512bw,popcnt")))
static int decode_chunk_avx512(const plane_t *p, int64_t c, uint8_t *out) {
    const int pb = p->prob_bits;
    const uint32_t *lut = p->lookup + ((c / p->chunks_per_table) << pb);
    int64_t start = c * p->chunk_size;
    int64_t m = (p->n < start + p->chunk_size ? p->n : start + p->chunk_size) - start;
    int64_t pos = p->offsets[c], end = p->offsets[c + 1];
    int64_t last = end - 1 > 0 ? end - 1 : 0;
    const uint16_t *words = p->words;
    const int64_t wlen = p->words_len;
    uint32_t X[LANES];
    for (int l = 0; l < LANES; l++) {
        X[l] = p->states[c * LANES + l];
        if (X[l] < STATE_LOWER) return 3;
    }
    __m512i x0 = _mm512_loadu_si512(X), x1 = _mm512_loadu_si512(X + 16);
    const __m512i vmask = _mm512_set1_epi32((1 << pb) - 1), v255 = _mm512_set1_epi32(0xFF);
    const __m512i vfff = _mm512_set1_epi32(0xFFF), one = _mm512_set1_epi32(1);
    const __m512i lower = _mm512_set1_epi32((int)STATE_LOWER);
    const __m128i shift_pb = _mm_cvtsi32_si128(pb);
    int64_t steps = m / LANES;
#define WC_STEP512(xr, dst)                                                                     \
    do {                                                                                        \
        __m512i e = _mm512_i32gather_epi32(_mm512_and_si512(xr, vmask), (const int *)lut, 4);   \
        _mm_storeu_si128((__m128i *)(dst), _mm512_cvtepi32_epi8(_mm512_and_si512(e, v255)));    \
        __m512i f = _mm512_add_epi32(_mm512_and_si512(_mm512_srli_epi32(e, 8), vfff), one);     \
        __m512i xv = _mm512_add_epi32(_mm512_mullo_epi32(f, _mm512_srl_epi32(xr, shift_pb)),    \
                                      _mm512_srli_epi32(e, 20));                                \
        __mmask16 need = _mm512_cmplt_epu32_mask(xv, lower);                                    \
        __m256i w16;                                                                            \
        if (pos + 16 <= wlen) {                                                                 \
            w16 = _mm256_loadu_si256((const __m256i *)(words + pos));                           \
        } else {                                                                                \
            uint16_t tmp[16];                                                                   \
            load_words_clamped(tmp, words, pos, wlen, 16);                                      \
            w16 = _mm256_loadu_si256((const __m256i *)tmp);                                     \
        }                                                                                       \
        __m512i w = _mm512_maskz_expand_epi32(need, _mm512_cvtepu16_epi32(w16));                \
        xr = _mm512_mask_or_epi32(xv, need, _mm512_slli_epi32(xv, 16), w);                      \
        pos += __builtin_popcount((unsigned)need);                                              \
    } while (0)
    for (int64_t t = 0; t < steps; t++) {
        WC_STEP512(x0, out + t * LANES);
        WC_STEP512(x1, out + t * LANES + 16);
    }
#undef WC_STEP512
    _mm512_storeu_si512(X, x0);
    _mm512_storeu_si512(X + 16, x1);
    pos = decode_tail(X, steps * LANES, m, lut, pb, words, pos, last, out);
    return finish_chunk(X, pos, end);
}
#endif

/* decode chunk c into out (symbol i of the chunk at out[i]); returns its status */
static int decode_chunk(const plane_t *p, int64_t c, uint8_t *out) {
#ifdef WC_X86
    if (g_isa == ISA_AVX512) return decode_chunk_avx512(p, c, out);
    if (g_isa == ISA_AVX2) return decode_chunk_avx2(p, c, out);
#endif
    return decode_chunk_scalar(p, c, out);
}

/* ------------------------------------------------------------------------------------------ */
/* argument helpers                                                                           */

typedef struct {
    Py_buffer b[16];
    int k;
} bufs_t;

static void bufs_release(bufs_t *bs) {
    for (int i = 0; i < bs->k; i++) PyBuffer_Release(&bs->b[i]);
    bs->k = 0;
}

/* a C-contiguous buffer of items of `itemsize` bytes (0: any); NULL with an exception if not */
static void *get_buf(bufs_t *bs, PyObject *obj, int writable, int itemsize, int64_t *count, const char *what) {
    Py_buffer *b = &bs->b[bs->k];
    if (PyObject_GetBuffer(obj, b, (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    bs->k++;
    if (itemsize && b->itemsize != itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: expected items of %d bytes, got %zd", what, itemsize, b->itemsize);
        return NULL;
    }
    *count = b->itemsize ? (int64_t)(b->len / b->itemsize) : 0;
    return b->buf;
}

static int g_threads_default = 1;

static int pick_threads(int threads, int64_t tasks) {
    if (threads <= 0) threads = g_threads_default;
    if (threads > tasks) threads = (int)(tasks > 0 ? tasks : 1);
    return threads < 1 ? 1 : threads;
}

/* checks a plane's arrays against each other; 0 ok, -1 with ValueError */
static int check_plane(const plane_t *p, int64_t n_states, int64_t n_offsets, int64_t n_lookup) {
    if (p->chunk_size < LANES || p->chunk_size % LANES || p->chunks_per_table < 1 || p->n < 0 ||
        (p->prob_bits != 11 && p->prob_bits != 12) || p->words_len < 1) {
        PyErr_SetString(PyExc_ValueError, "bad rANS plane parameters");
        return -1;
    }
    int64_t n_chunks = (p->n + p->chunk_size - 1) / p->chunk_size;
    int64_t n_tables = n_chunks ? (n_chunks - 1) / p->chunks_per_table + 1 : 0;
    if (n_states != n_chunks * LANES || n_offsets != n_chunks + 1 || n_lookup < (n_tables << p->prob_bits)) {
        PyErr_SetString(PyExc_ValueError, "rANS plane arrays have inconsistent sizes");
        return -1;
    }
    for (int64_t c = 0; c < n_chunks; c++)
        if (p->offsets[c] > p->offsets[c + 1] || (int64_t)p->offsets[c + 1] > p->words_len) {
            PyErr_SetString(PyExc_ValueError, "rANS word offsets out of range");
            return -1;
        }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* decode_chunks(states, offsets, words, n, chunk_size, chunks_per_table, lookup, prob_bits,
 *               out, status, threads)                                                        */

typedef struct {
    plane_t p;
    uint8_t *out;
    int32_t *status;
} dec_ctx;

static void dec_task(void *vctx, int64_t c) {
    dec_ctx *ctx = vctx;
    ctx->status[c] = decode_chunk(&ctx->p, c, ctx->out + c * ctx->p.chunk_size);
}

static PyObject *py_decode_chunks(PyObject *self, PyObject *args) {
    PyObject *o_states, *o_offsets, *o_words, *o_lookup, *o_out, *o_status;
    long long n, cs, cpt;
    int pb, threads;
    if (!PyArg_ParseTuple(args, "OOOLLLOiOOi", &o_states, &o_offsets, &o_words, &n, &cs, &cpt, &o_lookup,
                          &pb, &o_out, &o_status, &threads))
        return NULL;
    bufs_t bs = {.k = 0};
    dec_ctx ctx;
    int64_t ns, no, nl, nout, nst;
    ctx.p.states = get_buf(&bs, o_states, 0, 4, &ns, "states");
    if (!ctx.p.states) goto fail;
    ctx.p.offsets = get_buf(&bs, o_offsets, 0, 4, &no, "offsets");
    if (!ctx.p.offsets) goto fail;
    ctx.p.words = get_buf(&bs, o_words, 0, 2, &ctx.p.words_len, "words");
    if (!ctx.p.words) goto fail;
    ctx.p.lookup = get_buf(&bs, o_lookup, 0, 4, &nl, "lookup");
    if (!ctx.p.lookup) goto fail;
    ctx.out = get_buf(&bs, o_out, 1, 1, &nout, "out");
    if (!ctx.out) goto fail;
    ctx.status = get_buf(&bs, o_status, 1, 4, &nst, "status");
    if (!ctx.status) goto fail;
    ctx.p.n = n;
    ctx.p.chunk_size = cs;
    ctx.p.chunks_per_table = cpt;
    ctx.p.prob_bits = pb;
    if (check_plane(&ctx.p, ns, no, nl) < 0) goto fail;
    int64_t n_chunks = no - 1;
    if (nout != n || nst != n_chunks) {
        PyErr_SetString(PyExc_ValueError, "out must hold n symbols and status n_chunks entries");
        goto fail;
    }
    threads = pick_threads(threads, n_chunks);
    Py_BEGIN_ALLOW_THREADS
    run_parallel(dec_task, &ctx, n_chunks, threads);
    Py_END_ALLOW_THREADS
    bufs_release(&bs);
    Py_RETURN_NONE;
fail:
    bufs_release(&bs);
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* fused float decode + merge:
 * decode_merge_float(states, offsets, words, n, chunk_size, chunks_per_table, lookup, prob_bits,
 *                    placed, tail, tail_bits, tail_shift, sign_shift, low, low_planes, out, status,
 *                    threads)
 * placed: [256] uint64 head value in place, bit 40 set past the alphabet; out: [n] uint16/uint32;
 * low: [low_planes, n] uint8 (low[0] = bits 15..8, low[1] = bits 7..0).                    */

#define BAD_SYMBOL (1ull << 40)

typedef struct {
    plane_t p;
    const uint64_t *placed;
    const uint8_t *tail;
    int64_t n_tail;
    int tail_bits, tail_shift, sign_shift, low_planes, out_bytes;
    const uint8_t *low;
    void *out;
    int32_t *status;
} merge_ctx;

/* the R-bit tail fields of values [i0, i0 + k) (k <= 8, i0 a multiple of 8) */
static inline void tail_fields(const uint8_t *tail, int64_t n_tail, int64_t blk, int R, int k, uint64_t *f) {
    int64_t base = blk * R;
    int nb = (int)(n_tail - base < R ? n_tail - base : R);
    uint64_t lo = 0, hi = 0;
    if (nb == R && R <= 8 && base + 8 <= n_tail) {
        memcpy(&lo, tail + base, 8);
    } else {
        for (int q = 0; q < nb && q < 8; q++) lo |= (uint64_t)tail[base + q] << (8 * q);
        for (int q = 8; q < nb; q++) hi |= (uint64_t)tail[base + q] << (8 * (q - 8));
    }
    const uint64_t fm = (1ull << R) - 1;
    for (int j = 0; j < k; j++) {
        int pos = j * R;
        uint64_t v;
        if (pos >= 64) v = hi >> (pos - 64);
        else if (pos + R <= 64) v = lo >> pos;
        else v = (lo >> pos) | (hi << (64 - pos));
        f[j] = v & fm;
    }
}

/* merge values [a, b) of the tensor; sym[i - a] is the head symbol of value i. Returns the OR of
 * the placed heads (BAD_SYMBOL set if a symbol was outside the alphabet). */
static inline __attribute__((always_inline)) uint64_t merge_range(const merge_ctx *ctx, const uint8_t *sym, int64_t a, int64_t b) {
    const int R = ctx->tail_bits;
    const uint64_t tmask = (1ull << (R - 1)) - 1;
    const int64_t N = ctx->p.n;
    const uint8_t *low1 = ctx->low, *low0 = ctx->low + N;
    uint64_t seen = 0;
    uint64_t f[8];
    for (int64_t i0 = a; i0 < b; i0 += 8) {
        int k = (int)(b - i0 < 8 ? b - i0 : 8);
        tail_fields(ctx->tail, ctx->n_tail, i0 / 8, R, k, f);
        if (ctx->out_bytes == 2) {
            uint16_t *o = (uint16_t *)ctx->out + i0;
            for (int j = 0; j < k; j++) {
                uint64_t h = ctx->placed[sym[i0 - a + j]];
                seen |= h;
                o[j] = (uint16_t)(h | ((f[j] >> (R - 1)) << ctx->sign_shift) | ((f[j] & tmask) << ctx->tail_shift));
            }
        } else {
            uint32_t *o = (uint32_t *)ctx->out + i0;
            for (int j = 0; j < k; j++) {
                uint64_t h = ctx->placed[sym[i0 - a + j]];
                seen |= h;
                uint64_t v = h | ((f[j] >> (R - 1)) << ctx->sign_shift) | ((f[j] & tmask) << ctx->tail_shift);
                if (ctx->low_planes == 2) v |= ((uint64_t)low1[i0 + j] << 8) | low0[i0 + j];
                o[j] = (uint32_t)v;
            }
        }
    }
    return seen;
}

static uint64_t merge_range_scalar(const merge_ctx *ctx, const uint8_t *sym, int64_t a, int64_t b) {
    return merge_range(ctx, sym, a, b);
}
#ifdef WC_X86
__attribute__((target("avx2,bmi2")))
static uint64_t merge_range_avx2(const merge_ctx *ctx, const uint8_t *sym, int64_t a, int64_t b) {
    return merge_range(ctx, sym, a, b);
}
#endif

static void merge_task(void *vctx, int64_t c) {
    merge_ctx *ctx = vctx;
    int64_t cs = ctx->p.chunk_size, start = c * cs;
    int64_t end = ctx->p.n < start + cs ? ctx->p.n : start + cs;
    uint8_t stackbuf[32768];
    uint8_t *buf = cs <= (int64_t)sizeof stackbuf ? stackbuf : malloc((size_t)cs);
    if (!buf) {
        ctx->status[c] = 5;
        return;
    }
    int st = decode_chunk(&ctx->p, c, buf);
    if (st == 0) {
        uint64_t seen;
#ifdef WC_X86
        if (g_isa >= ISA_AVX2) seen = merge_range_avx2(ctx, buf, start, end);
        else
#endif
            seen = merge_range_scalar(ctx, buf, start, end);
        if (seen & BAD_SYMBOL) st = 4;
    }
    ctx->status[c] = st;
    if (buf != stackbuf) free(buf);
}

static PyObject *py_decode_merge_float(PyObject *self, PyObject *args) {
    PyObject *o_states, *o_offsets, *o_words, *o_lookup, *o_placed, *o_tail, *o_low, *o_out, *o_status;
    long long n, cs, cpt;
    int pb, threads;
    merge_ctx ctx;
    if (!PyArg_ParseTuple(args, "OOOLLLOiOOiiiOiOOi", &o_states, &o_offsets, &o_words, &n, &cs, &cpt, &o_lookup,
                          &pb, &o_placed, &o_tail, &ctx.tail_bits, &ctx.tail_shift, &ctx.sign_shift, &o_low,
                          &ctx.low_planes, &o_out, &o_status, &threads))
        return NULL;
    bufs_t bs = {.k = 0};
    int64_t ns, no, nl, np_, nlow, nout, nst;
    ctx.p.states = get_buf(&bs, o_states, 0, 4, &ns, "states");
    if (!ctx.p.states) goto fail;
    ctx.p.offsets = get_buf(&bs, o_offsets, 0, 4, &no, "offsets");
    if (!ctx.p.offsets) goto fail;
    ctx.p.words = get_buf(&bs, o_words, 0, 2, &ctx.p.words_len, "words");
    if (!ctx.p.words) goto fail;
    ctx.p.lookup = get_buf(&bs, o_lookup, 0, 4, &nl, "lookup");
    if (!ctx.p.lookup) goto fail;
    ctx.placed = get_buf(&bs, o_placed, 0, 8, &np_, "placed");
    if (!ctx.placed) goto fail;
    ctx.tail = get_buf(&bs, o_tail, 0, 1, &ctx.n_tail, "tail");
    if (!ctx.tail) goto fail;
    ctx.low = get_buf(&bs, o_low, 0, 1, &nlow, "low");
    if (!ctx.low) goto fail;
    ctx.out = get_buf(&bs, o_out, 1, 0, &nout, "out");
    if (!ctx.out) goto fail;
    ctx.out_bytes = (int)bs.b[bs.k - 1].itemsize;
    ctx.status = get_buf(&bs, o_status, 1, 4, &nst, "status");
    if (!ctx.status) goto fail;
    ctx.p.n = n;
    ctx.p.chunk_size = cs;
    ctx.p.chunks_per_table = cpt;
    ctx.p.prob_bits = pb;
    if (check_plane(&ctx.p, ns, no, nl) < 0) goto fail;
    int64_t n_chunks = no - 1;
    int R = ctx.tail_bits;
    if (np_ != 256 || nout != n || nst != n_chunks || (ctx.out_bytes != 2 && ctx.out_bytes != 4) ||
        R < 1 || R > 16 || ctx.n_tail != (n * R + 7) / 8 || (ctx.low_planes != 0 && ctx.low_planes != 2) ||
        nlow != ctx.low_planes * n || (ctx.low_planes == 2 && ctx.out_bytes != 4) ||
        ctx.sign_shift < 0 || ctx.sign_shift >= 8 * ctx.out_bytes || ctx.tail_shift < 0 || ctx.tail_shift > 16) {
        PyErr_SetString(PyExc_ValueError, "decode_merge_float: inconsistent arguments");
        goto fail;
    }
    threads = pick_threads(threads, n_chunks);
    Py_BEGIN_ALLOW_THREADS
    run_parallel(merge_task, &ctx, n_chunks, threads);
    Py_END_ALLOW_THREADS
    bufs_release(&bs);
    Py_RETURN_NONE;
fail:
    bufs_release(&bs);
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* encode: histograms, normalisation, the float split, rANS encode                           */

typedef struct {
    const uint8_t *sym;
    int64_t n, chunk_size;
    int64_t *counts; /* [n_chunks, 256] */
} hist_ctx;

static void hist_task(void *vctx, int64_t c) {
    hist_ctx *ctx = vctx;
    int64_t a = c * ctx->chunk_size, b = ctx->n < a + ctx->chunk_size ? ctx->n : a + ctx->chunk_size;
    uint32_t h[4][256];
    memset(h, 0, sizeof h);
    int64_t i = a;
    for (; i + 4 <= b; i += 4) { /* four sub-histograms: no store-to-load stalls on repeats */
        h[0][ctx->sym[i]]++;
        h[1][ctx->sym[i + 1]]++;
        h[2][ctx->sym[i + 2]]++;
        h[3][ctx->sym[i + 3]]++;
    }
    for (; i < b; i++) h[0][ctx->sym[i]]++;
    int64_t *row = ctx->counts + c * 256;
    for (int s = 0; s < 256; s++) row[s] = (int64_t)h[0][s] + h[1][s] + h[2][s] + h[3][s];
}

/* chunk_histograms(symbols, chunk_size, counts, threads); counts: [n_chunks * 256] int64 */
static PyObject *py_chunk_histograms(PyObject *self, PyObject *args) {
    PyObject *o_sym, *o_counts;
    long long cs;
    int threads;
    if (!PyArg_ParseTuple(args, "OLOi", &o_sym, &cs, &o_counts, &threads)) return NULL;
    bufs_t bs = {.k = 0};
    hist_ctx ctx;
    int64_t nc;
    ctx.sym = get_buf(&bs, o_sym, 0, 1, &ctx.n, "symbols");
    if (!ctx.sym) goto fail;
    ctx.counts = get_buf(&bs, o_counts, 1, 8, &nc, "counts");
    if (!ctx.counts) goto fail;
    ctx.chunk_size = cs;
    if (cs < 1 || cs > (1 << 24) || nc != ((ctx.n + cs - 1) / cs) * 256) {
        PyErr_SetString(PyExc_ValueError, "chunk_histograms: bad sizes");
        goto fail;
    }
    int64_t n_chunks = nc / 256;
    threads = pick_threads(threads, n_chunks);
    Py_BEGIN_ALLOW_THREADS
    run_parallel(hist_task, &ctx, n_chunks, threads);
    Py_END_ALLOW_THREADS
    bufs_release(&bs);
    Py_RETURN_NONE;
fail:
    bufs_release(&bs);
    return NULL;
}

/* head_histogram(bits, shift, mask, hist, threads): hist[(b >> shift) & mask] += 1 over
 * uint16/uint32 bits; hist: [mask + 1] int64 */
typedef struct {
    const void *bits;
    int bytes, shift;
    uint32_t mask;
    int64_t n, part;
    int64_t *parts; /* [n_parts, mask + 1] */
} hh_ctx;

static void hh_task(void *vctx, int64_t p) {
    hh_ctx *ctx = vctx;
    int64_t a = p * ctx->part, b = ctx->n < a + ctx->part ? ctx->n : a + ctx->part;
    int64_t *h = ctx->parts + p * ((int64_t)ctx->mask + 1);
    if (ctx->bytes == 2) {
        const uint16_t *x = ctx->bits;
        for (int64_t i = a; i < b; i++) h[(x[i] >> ctx->shift) & ctx->mask]++;
    } else {
        const uint32_t *x = ctx->bits;
        for (int64_t i = a; i < b; i++) h[(x[i] >> ctx->shift) & ctx->mask]++;
    }
}

static PyObject *py_head_histogram(PyObject *self, PyObject *args) {
    PyObject *o_bits, *o_hist;
    int shift, threads;
    unsigned int mask;
    if (!PyArg_ParseTuple(args, "OiIOi", &o_bits, &shift, &mask, &o_hist, &threads)) return NULL;
    bufs_t bs = {.k = 0};
    hh_ctx ctx;
    int64_t nh;
    ctx.bits = get_buf(&bs, o_bits, 0, 0, &ctx.n, "bits");
    if (!ctx.bits) goto fail;
    ctx.bytes = (int)bs.b[0].itemsize;
    int64_t *hist = get_buf(&bs, o_hist, 1, 8, &nh, "hist");
    if (!hist) goto fail;
    if ((ctx.bytes != 2 && ctx.bytes != 4) || shift < 0 || shift >= 32 || mask > (1u << 20) || nh != (int64_t)mask + 1) {
        PyErr_SetString(PyExc_ValueError, "head_histogram: bad arguments");
        goto fail;
    }
    ctx.shift = shift;
    ctx.mask = mask;
    int64_t n_parts = ctx.n >= (1 << 18) ? 16 : 1;
    ctx.part = (ctx.n + n_parts - 1) / n_parts;
    if (ctx.part < 1) ctx.part = 1;
    ctx.parts = calloc((size_t)(n_parts * nh), sizeof(int64_t));
    if (!ctx.parts) {
        PyErr_NoMemory();
        goto fail;
    }
    threads = pick_threads(threads, n_parts);
    Py_BEGIN_ALLOW_THREADS
    run_parallel(hh_task, &ctx, n_parts, threads);
    for (int64_t p = 0; p < n_parts; p++)
        for (int64_t s = 0; s < nh; s++) hist[s] += ctx.parts[p * nh + s];
    Py_END_ALLOW_THREADS
    free(ctx.parts);
    bufs_release(&bs);
    Py_RETURN_NONE;
fail:
    bufs_release(&bs);
    return NULL;
}

/* normalize_rows(counts [T*256] int64, prob_bits, out [T*256] uint16): as rans/_normalize.py */
static PyObject *py_normalize_rows(PyObject *self, PyObject *args) {
    PyObject *o_counts, *o_out;
    int pb;
    if (!PyArg_ParseTuple(args, "OiO", &o_counts, &pb, &o_out)) return NULL;
    bufs_t bs = {.k = 0};
    int64_t nc, no;
    const int64_t *counts = get_buf(&bs, o_counts, 0, 8, &nc, "counts");
    if (!counts) goto fail;
    uint16_t *out = get_buf(&bs, o_out, 1, 2, &no, "out");
    if (!out) goto fail;
    if (nc != no || nc % 256 || pb < 1 || pb > 15) {
        PyErr_SetString(PyExc_ValueError, "normalize_rows: bad sizes");
        goto fail;
    }
    const int64_t total_prob = 1 << pb;
    for (int64_t r = 0; r < nc / 256; r++) {
        const int64_t *cr = counts + r * 256;
        int64_t f[256], total = 0;
        int best = 0;
        for (int s = 0; s < 256; s++) {
            total += cr[s];
            if (cr[s] > cr[best]) best = s;
        }
        memset(f, 0, sizeof f);
        if (total == 0) {
            f[0] = total_prob;
        } else {
            int64_t acc = 0;
            for (int s = 0; s < 256; s++)
                if (cr[s] > 0) {
                    int64_t v = cr[s] * total_prob / total;
                    f[s] = v > 1 ? v : 1;
                    acc += f[s];
                }
            int64_t diff = total_prob - acc;
            if (diff > 0) f[best] += diff;
            while (diff < 0) {
                /* symbols by frequency descending, ties by symbol (a stable argsort of -f) */
                int order[256];
                for (int s = 0; s < 256; s++) order[s] = s;
                for (int i = 1; i < 256; i++) { /* insertion sort: stable */
                    int s = order[i], j = i - 1;
                    while (j >= 0 && f[order[j]] < f[s]) {
                        order[j + 1] = order[j];
                        j--;
                    }
                    order[j + 1] = s;
                }
                for (int i = 0; i < 256; i++) {
                    int s = order[i];
                    if (diff == 0 || f[s] <= 1) break;
                    f[s]--;
                    diff++;
                }
            }
        }
        for (int s = 0; s < 256; s++) out[r * 256 + s] = (uint16_t)f[s];
    }
    bufs_release(&bs);
    Py_RETURN_NONE;
fail:
    bufs_release(&bs);
    return NULL;
}

/* split_float(bits, shift, mask, symbol_of, tail_shift, tail_mask, sign_shift, tail_bits,
 *             low_planes, head, tail, low, threads): as codecs/_kernels.split_float          */
typedef struct {
    const void *bits;
    int bytes;
    int64_t n, n_tail;
    int shift, tail_shift, sign_shift, R, low_planes;
    uint32_t mask, tail_mask;
    const uint8_t *symbol_of;
    uint8_t *head, *tail, *low;
} split_ctx;

#define SPLIT_BLOCKS 4096 /* blocks of 8 values per task */

static inline __attribute__((always_inline)) void split_body(split_ctx *ctx, int64_t task) {
    const int R = ctx->R;
    int64_t b0 = task * SPLIT_BLOCKS, n_blocks = (ctx->n + 7) / 8;
    int64_t b1 = n_blocks < b0 + SPLIT_BLOCKS ? n_blocks : b0 + SPLIT_BLOCKS;
    const int64_t n = ctx->n;
    uint8_t *low1 = ctx->low, *low0 = ctx->low + n;
    for (int64_t blk = b0; blk < b1; blk++) {
        int64_t i0 = blk * 8;
        int k = (int)(n - i0 < 8 ? n - i0 : 8);
        uint64_t lo = 0, hi = 0;
        for (int j = 0; j < k; j++) {
            uint32_t b = ctx->bytes == 2 ? ((const uint16_t *)ctx->bits)[i0 + j] : ((const uint32_t *)ctx->bits)[i0 + j];
            ctx->head[i0 + j] = ctx->symbol_of[(b >> ctx->shift) & ctx->mask];
            uint64_t t = ((uint64_t)(b >> ctx->sign_shift) << (R - 1)) | ((b >> ctx->tail_shift) & ctx->tail_mask);
            int pos = j * R;
            if (pos < 64) {
                lo |= t << pos;
                if (pos + R > 64) hi |= t >> (64 - pos);
            } else {
                hi |= t << (pos - 64);
            }
            if (ctx->low_planes == 2) {
                low1[i0 + j] = (uint8_t)(b >> 8);
                low0[i0 + j] = (uint8_t)b;
            }
        }
        /* a block of 8 values fills exactly R bytes (the last block: what is left) */
        int64_t base = blk * R;
        int nb = (int)(ctx->n_tail - base < R ? ctx->n_tail - base : R);
        for (int q = 0; q < nb; q++) ctx->tail[base + q] = (uint8_t)(q < 8 ? lo >> (8 * q) : hi >> (8 * (q - 8)));
    }
}

static void split_task_scalar(void *vctx, int64_t task) { split_body(vctx, task); }
#ifdef WC_X86
__attribute__((target("avx2,bmi2")))
static void split_task_avx2(void *vctx, int64_t task) { split_body(vctx, task); }
#endif

static PyObject *py_split_float(PyObject *self, PyObject *args) {
    PyObject *o_bits, *o_symof, *o_head, *o_tail, *o_low;
    int shift, tail_shift, sign_shift, R, low_planes, threads;
    unsigned int mask, tail_mask;
    if (!PyArg_ParseTuple(args, "OiIOiIiiiOOOi", &o_bits, &shift, &mask, &o_symof, &tail_shift, &tail_mask,
                          &sign_shift, &R, &low_planes, &o_head, &o_tail, &o_low, &threads))
        return NULL;
    bufs_t bs = {.k = 0};
    split_ctx ctx;
    int64_t nsym, nh, nlow;
    ctx.bits = get_buf(&bs, o_bits, 0, 0, &ctx.n, "bits");
    if (!ctx.bits) goto fail;
    ctx.bytes = (int)bs.b[0].itemsize;
    ctx.symbol_of = get_buf(&bs, o_symof, 0, 1, &nsym, "symbol_of");
    if (!ctx.symbol_of) goto fail;
    ctx.head = get_buf(&bs, o_head, 1, 1, &nh, "head");
    if (!ctx.head) goto fail;
    ctx.tail = get_buf(&bs, o_tail, 1, 1, &ctx.n_tail, "tail");
    if (!ctx.tail) goto fail;
    ctx.low = get_buf(&bs, o_low, 1, 1, &nlow, "low");
    if (!ctx.low) goto fail;
    if ((ctx.bytes != 2 && ctx.bytes != 4) || shift < 0 || shift >= 32 || nsym != (int64_t)mask + 1 ||
        nh != ctx.n || R < 1 || R > 16 || ctx.n_tail != (ctx.n * R + 7) / 8 || tail_shift < 0 || tail_shift >= 32 ||
        sign_shift < 0 || sign_shift >= 32 || (low_planes != 0 && low_planes != 2) || nlow != low_planes * ctx.n ||
        (low_planes == 2 && ctx.bytes != 4)) {
        PyErr_SetString(PyExc_ValueError, "split_float: inconsistent arguments");
        goto fail;
    }
    ctx.shift = shift;
    ctx.mask = mask;
    ctx.tail_shift = tail_shift;
    ctx.tail_mask = tail_mask;
    ctx.sign_shift = sign_shift;
    ctx.R = R;
    ctx.low_planes = low_planes;
    int64_t n_tasks = ((ctx.n + 7) / 8 + SPLIT_BLOCKS - 1) / SPLIT_BLOCKS;
    threads = pick_threads(threads, n_tasks);
    Py_BEGIN_ALLOW_THREADS
#ifdef WC_X86
    if (g_isa >= ISA_AVX2) run_parallel(split_task_avx2, &ctx, n_tasks, threads);
    else
#endif
        run_parallel(split_task_scalar, &ctx, n_tasks, threads);
    Py_END_ALLOW_THREADS
    bufs_release(&bs);
    Py_RETURN_NONE;
fail:
    bufs_release(&bs);
    return NULL;
}

/* encode_chunks(symbols, chunk_size, chunks_per_table, freqs [T*256] uint16, prob_bits, states
 * [n_chunks*32] uint32, counts [n_chunks] int64, scratch [max(n,1)] uint16, threads): each chunk's
 * words are written backwards ending at the chunk's end in scratch (so they are in decoder order);
 * counts[c] = words of chunk c. As rans/cpu.encode_chunks.                                    */
typedef struct {
    uint64_t bound; /* 2**32 for a symbol taking the whole range */
    uint32_t freq;
    uint32_t cum;
    double rcp;
} enc_sym;

typedef struct {
    const uint8_t *sym;
    int64_t n, chunk_size, chunks_per_table;
    const enc_sym *tab; /* [T * 256] */
    int pb;
    uint32_t *states;
    int64_t *counts;
    uint16_t *scratch;
    int bad; /* set when a symbol has frequency 0 in its table (cannot be coded) */
} enc_ctx;

static inline __attribute__((always_inline)) void enc_body(enc_ctx *ctx, int64_t c) {
    const enc_sym *tab = ctx->tab + (c / ctx->chunks_per_table) * 256;
    int64_t start = c * ctx->chunk_size;
    int64_t m = (ctx->n < start + ctx->chunk_size ? ctx->n : start + ctx->chunk_size) - start;
    const uint8_t *sym = ctx->sym + start;
    uint16_t *w = ctx->scratch + start + m; /* one past the next word to write */
    uint16_t *lowest = ctx->scratch + start;
    const int pb = ctx->pb;
    uint32_t X[LANES];
    uint32_t absent = 0;
    for (int l = 0; l < LANES; l++) X[l] = STATE_LOWER;
    for (int64_t i = m - 1; i >= 0; i--) {
        const enc_sym *e = &tab[sym[i]];
        absent |= e->freq == 0;
        int lane = (int)(i & (LANES - 1));
        uint32_t x = X[lane];
        int emit = x >= e->bound;
        /* branchless: the store is harmless when nothing is emitted (overwritten later or
         * outside the counted words) */
        *(w - 1 >= lowest ? w - 1 : lowest) = (uint16_t)x;
        w -= emit;
        x >>= 16 * emit;
        /* floor(x / f) through a double reciprocal: exact for f <= 2**12, x < 2**32 */
        uint32_t q = (uint32_t)((double)x * e->rcp + 6.103515625e-05);
        X[lane] = (q << pb) + (x - q * e->freq) + e->cum;
    }
    memcpy(ctx->states + c * LANES, X, sizeof X);
    ctx->counts[c] = (ctx->scratch + start + m) - w;
    if (absent) __atomic_store_n(&ctx->bad, 1, __ATOMIC_RELAXED);
}

static void enc_task_scalar(void *vctx, int64_t c) { enc_body(vctx, c); }

static PyObject *py_encode_chunks(PyObject *self, PyObject *args) {
    PyObject *o_sym, *o_freqs, *o_states, *o_counts, *o_scratch;
    long long cs, cpt;
    int pb, threads;
    if (!PyArg_ParseTuple(args, "OLLOiOOOi", &o_sym, &cs, &cpt, &o_freqs, &pb, &o_states, &o_counts, &o_scratch,
                          &threads))
        return NULL;
    bufs_t bs = {.k = 0};
    enc_ctx ctx;
    int64_t nf, nst, nc, nsc;
    ctx.sym = get_buf(&bs, o_sym, 0, 1, &ctx.n, "symbols");
    if (!ctx.sym) goto fail;
    const uint16_t *freqs = get_buf(&bs, o_freqs, 0, 2, &nf, "freqs");
    if (!freqs) goto fail;
    ctx.states = get_buf(&bs, o_states, 1, 4, &nst, "states");
    if (!ctx.states) goto fail;
    ctx.counts = get_buf(&bs, o_counts, 1, 8, &nc, "counts");
    if (!ctx.counts) goto fail;
    ctx.scratch = get_buf(&bs, o_scratch, 1, 2, &nsc, "scratch");
    if (!ctx.scratch) goto fail;
    ctx.chunk_size = cs;
    ctx.chunks_per_table = cpt;
    ctx.pb = pb;
    int64_t n_chunks = cs > 0 ? (ctx.n + cs - 1) / cs : 0;
    int64_t n_tables = nf / 256;
    if (cs < LANES || cs % LANES || cpt < 1 || (pb != 11 && pb != 12) || nf % 256 ||
        (n_chunks && (n_chunks - 1) / cpt >= n_tables) || nst != n_chunks * LANES || nc != n_chunks ||
        nsc < (ctx.n > 1 ? ctx.n : 1)) {
        PyErr_SetString(PyExc_ValueError, "encode_chunks: inconsistent arguments");
        goto fail;
    }
    enc_sym *tab = calloc((size_t)(n_tables * 256 + 1), sizeof(enc_sym));
    if (!tab) {
        PyErr_NoMemory();
        goto fail;
    }
    for (int64_t t = 0; t < n_tables; t++) {
        uint32_t acc = 0;
        for (int s = 0; s < 256; s++) {
            uint32_t f = freqs[t * 256 + s];
            enc_sym *e = &tab[t * 256 + s];
            e->freq = f;
            e->bound = (uint64_t)f << (32 - pb); /* ((L >> prob_bits) << 16) * f; 0 for absent symbols */
            e->cum = acc;
            e->rcp = f ? 1.0 / f : 0.0;
            acc += f;
        }
    }
    ctx.tab = tab;
    ctx.bad = 0;
    threads = pick_threads(threads, n_chunks);
    Py_BEGIN_ALLOW_THREADS
    run_parallel(enc_task_scalar, &ctx, n_chunks, threads);
    Py_END_ALLOW_THREADS
    free(tab);
    if (ctx.bad) {
        PyErr_SetString(PyExc_ValueError, "encode_chunks: a symbol has zero frequency in its table");
        goto fail;
    }
    bufs_release(&bs);
    Py_RETURN_NONE;
fail:
    bufs_release(&bs);
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* module                                                                                     */

static PyObject *py_isa(PyObject *self, PyObject *args) { return PyUnicode_FromString(ISA_NAMES[g_isa]); }

static PyObject *py_set_isa(PyObject *self, PyObject *args) {
    const char *name;
    if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, ISA_NAMES[i])) {
            if (i > g_isa_max) {
                PyErr_Format(PyExc_ValueError, "this CPU does not support %s", name);
                return NULL;
            }
            g_isa = i;
            Py_RETURN_NONE;
        }
    PyErr_Format(PyExc_ValueError, "unknown ISA %s", name);
    return NULL;
}

static PyObject *py_supported_isas(PyObject *self, PyObject *args) {
    PyObject *l = PyList_New(0);
    for (int i = 0; i <= g_isa_max && l; i++) {
        PyObject *s = PyUnicode_FromString(ISA_NAMES[i]);
        if (!s || PyList_Append(l, s) < 0) {
            Py_XDECREF(s);
            Py_DECREF(l);
            return NULL;
        }
        Py_DECREF(s);
    }
    return l;
}

static PyObject *py_set_threads(PyObject *self, PyObject *args) {
    int t;
    if (!PyArg_ParseTuple(args, "i", &t)) return NULL;
    if (t < 1) t = 1;
    if (t > 256) t = 256;
    int old = g_threads_default;
    g_threads_default = t;
    __atomic_fetch_add(&g_spare, t - old, __ATOMIC_RELAXED);
    Py_RETURN_NONE;
}

static PyObject *py_threads(PyObject *self, PyObject *args) { return PyLong_FromLong(g_threads_default); }

static PyMethodDef methods[] = {
    {"decode_chunks", py_decode_chunks, METH_VARARGS, "rANS decode of a plane's chunks (see module docstring)"},
    {"decode_merge_float", py_decode_merge_float, METH_VARARGS, "fused rANS decode + float merge"},
    {"chunk_histograms", py_chunk_histograms, METH_VARARGS, "per-chunk symbol histograms"},
    {"head_histogram", py_head_histogram, METH_VARARGS, "histogram of (bits >> shift) & mask"},
    {"normalize_rows", py_normalize_rows, METH_VARARGS, "frequency normalisation of count rows"},
    {"split_float", py_split_float, METH_VARARGS, "float split into head symbols, tail bits, low bytes"},
    {"encode_chunks", py_encode_chunks, METH_VARARGS, "rANS encode of a plane's chunks"},
    {"isa", py_isa, METH_NOARGS, "the instruction set in use: scalar, avx2 or avx512"},
    {"set_isa", py_set_isa, METH_VARARGS, "use a (supported) instruction set"},
    {"supported_isas", py_supported_isas, METH_NOARGS, "instruction sets this CPU runs"},
    {"set_threads", py_set_threads, METH_VARARGS, "default threads per call (and the process budget)"},
    {"threads", py_threads, METH_NOARGS, "default threads per call"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_cext",
                                       "wcodec's CPU kernels in C (see wcodec.native)", -1, methods};

PyMODINIT_FUNC PyInit__cext(void) {
#ifdef WC_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) g_isa_max = ISA_AVX2;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) g_isa_max = ISA_AVX512;
    init_perm8();
#endif
    g_isa = g_isa_max;
    g_threads_default = 1;
    g_spare = 0;
    return PyModule_Create(&moduledef);
}
