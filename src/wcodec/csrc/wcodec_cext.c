/* wcodec._cext: the CPU hot loops of wcodec in C, bit-identical to the numba kernels
 * (src/wcodec/native/numba_rans.py, numba_float.py, numba_normalize.py) and to
 * the pure-Python specification (src/wcodec/rans/reference.py, docs/CODEC_LAYOUT.md).
 *
 * - interleaved rANS decode of a plane (32 lanes per chunk, 16-bit words): scalar, AVX2 (four
 *   8-lane vectors, gathered lookup, the step's word reads compacted by movemask + popcount + a
 *   permutation table) and AVX-512 (two 16-lane vectors, vpexpandd does the compaction), both
 *   SIMD paths two chunks at a time, the ISA picked at run time (__builtin_cpu_supports) so one
 *   binary runs everywhere;
 * - rANS encode (AVX-512: frequency tables held in registers, floor(x / f) from a float estimate
 *   made exact, two chunks interleaved), chunk histograms, frequency normalisation, the encoder's choices of
 *   tables per segment and of the float codec's head_bits (the numpy twins are
 *   rans._choose_tables and codecs.float.choose_head_bits), the float split (AVX-512: head symbols
 *   looked up in registers over a 256-value window) and the fused float decode + merge (F32's
 *   coded low planes decoded chunk by chunk inside it);
 * - threads: each call runs its chunks on its own thread plus a few helper pthreads (work taken
 *   from an atomic counter), with the GIL released; the helpers are kept asleep between calls; a
 *   process-wide budget keeps concurrent calls (tensors decoded in pool threads) from
 *   oversubscribing the cores.
 *
 * Build with -DWCODEC_NO_SIMD to get the portable path only (what ARM and other CPUs compile).
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
#include <math.h>
#include <errno.h>
#ifndef _WIN32
#include <unistd.h> /* pread */
#endif

#include "crc32.h" /* wc_crc32 / wc_crc32_join: checksums of chunks a kernel just wrote or read */

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) && !defined(WCODEC_NO_SIMD)
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
static int g_soft_gather[2];       /* table lookups by scalar loads (see lut16): [0] AVX2, [1] AVX-512 */

/* ------------------------------------------------------------------------------------------ */
/* threads                                                                                    */

typedef void (*task_fn)(void *ctx, int64_t task);
typedef struct job {
    task_fn fn;
    void *ctx;
    int64_t n;
    int64_t next;
    int want, active;  /* helpers still wanted / working on it (under g_mu) */
    struct job *qnext; /* the queue of jobs wanting helpers */
} job_t;

static void job_drain(job_t *job) {
    for (;;) {
        int64_t i = __atomic_fetch_add(&job->next, 1, __ATOMIC_RELAXED);
        if (i >= job->n) break;
        job->fn(job->ctx, i);
    }
}

/* extra threads (beyond the callers' own) that may run at once, over all concurrent calls: the
 * default threads per call, less one */
static int g_spare = 0;
static int g_threads_default = 1;

static int reserve_threads(int want) {
    int cur = __atomic_load_n(&g_spare, __ATOMIC_RELAXED);
    for (;;) {
        int take = want < cur ? want : cur;
        if (take <= 0) return 0;
        if (__atomic_compare_exchange_n(&g_spare, &cur, cur - take, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            return take;
    }
}

#ifdef WC_THREADS
/* Helper threads are kept (asleep on a condition variable) between calls: creating and joining
 * a thread per call measured 50 us per call on this 2-vCPU VM (a 256-chunk decode: 18 us on one
 * thread, 70 us on two), which MiniLM's 13 multi-threaded tensors paid at every decode. There
 * are never more of them than the most extra threads reserved at once (the budget above). */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_work = PTHREAD_COND_INITIALIZER, g_done = PTHREAD_COND_INITIALIZER;
static job_t *g_queue = NULL;      /* jobs wanting helpers */
static int g_workers = 0, g_demand = 0; /* helper threads alive / reserved by running calls */

static void *pool_worker(void *unused) {
    (void)unused;
    pthread_mutex_lock(&g_mu);
    for (;;) {
        while (!g_queue) pthread_cond_wait(&g_work, &g_mu);
        job_t *job = g_queue;
        job->active++;
        if (--job->want == 0) g_queue = job->qnext;
        pthread_mutex_unlock(&g_mu);
        job_drain(job);
        pthread_mutex_lock(&g_mu);
        if (--job->active == 0) pthread_cond_broadcast(&g_done);
    }
    return NULL;
}

/* a forked child has none of the parent's threads, and no call in flight: start over (the lock
 * is the child's now, the budget whole again) */
static void pool_after_fork(void) {
    pthread_mutex_init(&g_mu, NULL);
    pthread_cond_init(&g_work, NULL);
    pthread_cond_init(&g_done, NULL);
    g_queue = NULL;
    g_workers = g_demand = 0;
    g_spare = g_threads_default - 1;
}
#endif

/* Run fn(ctx, 0..n-1) on the caller's thread plus up to threads-1 helpers. */
static void run_parallel(task_fn fn, void *ctx, int64_t n, int threads) {
    job_t job = {fn, ctx, n, 0, 0, 0, NULL};
    if (threads > n) threads = (int)n;
#ifdef WC_THREADS
    int extra = threads > 1 ? reserve_threads(threads - 1) : 0;
    if (extra > 0) {
        pthread_mutex_lock(&g_mu);
        g_demand += extra;
        while (g_workers < g_demand) {
            pthread_t tid;
            pthread_attr_t attr;
            pthread_attr_init(&attr);
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            int rc = pthread_create(&tid, &attr, pool_worker, NULL);
            pthread_attr_destroy(&attr);
            if (rc != 0) break; /* fewer helpers: the caller drains what they do not */
            g_workers++;
        }
        job.want = extra;
        job.qnext = g_queue;
        g_queue = &job;
        if (extra == 1) pthread_cond_signal(&g_work);
        else pthread_cond_broadcast(&g_work);
        pthread_mutex_unlock(&g_mu);
        job_drain(&job);
        pthread_mutex_lock(&g_mu);
        if (job.want > 0) { /* helpers that never came: take the job out of the queue */
            job_t **q = &g_queue;
            while (*q != &job) q = &(*q)->qnext;
            *q = job.qnext;
            job.want = 0;
        }
        while (job.active > 0) pthread_cond_wait(&g_done, &g_mu);
        g_demand -= extra;
        pthread_mutex_unlock(&g_mu);
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
    const uint16_t *full;    /* or NULL: [n_tables, 256] frequency tables, the lookups built per task */
    int prob_bits;
} plane_t;

/* one scalar step of lane `lane` for symbol i (see decode_tail) */
#define WC_STEP1(lane, i, PB)                                                                      \
    do {                                                                                       \
        uint32_t x = X[lane];                                                                  \
        uint32_t e = lut[x & ((1u << (PB)) - 1)];                                              \
        out[i] = (uint8_t)e;                                                                   \
        x = (((e >> 8) & 0xFFF) + 1) * (x >> (PB)) + (e >> 20);                                \
        uint32_t need = x < STATE_LOWER;                                                       \
        uint32_t w = words[pos < last ? pos : last];                                           \
        x = (x << (16 * need)) | (w & (0u - need));                                            \
        pos += need;                                                                           \
        X[lane] = x;                                                                           \
    } while (0)

/* Scalar steps for symbols [i0, m) of a chunk from the lane states X; the word index is clamped
 * to [0, last] so corrupt data never reads out of bounds (the count pos is what is checked).
 * Whole steps of 32 lanes unrolled, prob_bits a constant in each copy. */
static inline __attribute__((always_inline)) int64_t decode_tail_pb(
    uint32_t *restrict X, int64_t i0, int64_t m, const uint32_t *restrict lut, const int PB,
    const uint16_t *restrict words, int64_t pos, int64_t last, uint8_t *restrict out) {
    int64_t i = i0;
    if (!(i & (LANES - 1)))
        for (; i + LANES <= m; i += LANES) {
#pragma GCC unroll 32
            for (int l = 0; l < LANES; l++) WC_STEP1(l, i + l, PB);
        }
    for (; i < m; i++) WC_STEP1((int)(i & (LANES - 1)), i, PB);
    return pos;
}
#undef WC_STEP1

static inline int64_t decode_tail(uint32_t *X, int64_t i0, int64_t m, const uint32_t *lut, int pb,
                                  const uint16_t *words, int64_t pos, int64_t last, uint8_t *out) {
    if (pb == 12) return decode_tail_pb(X, i0, m, lut, 12, words, pos, last, out);
    return decode_tail_pb(X, i0, m, lut, 11, words, pos, last, out);
}

/* Chunk c's initial states into X; nonzero when one is below the state range (status 3). */
static inline int load_states(const plane_t *p, int64_t c, uint32_t *X) {
    int bad = 0;
    for (int l = 0; l < LANES; l++) {
        X[l] = p->states[c * LANES + l];
        bad |= X[l] < STATE_LOWER;
    }
    return bad;
}

/* The set-up of the two-chunk decoders (decode_pair_*): chunks c and c + 1's lookup tables, word
 * ranges (c + 1's words follow c's) and states; nonzero when a state is below the state range
 * (the caller then decodes the chunks one at a time, which reports it). */
static inline __attribute__((always_inline)) int pair_setup(const plane_t *p, int64_t c, const uint32_t **luta,
                                                            const uint32_t **lutb, int64_t *posa, int64_t *enda,
                                                            int64_t *posb, int64_t *endb, uint32_t *XA,
                                                            uint32_t *XB) {
    *luta = p->lookup + ((c / p->chunks_per_table) << p->prob_bits);
    *lutb = p->lookup + (((c + 1) / p->chunks_per_table) << p->prob_bits);
    *posa = p->offsets[c];
    *enda = *posb = p->offsets[c + 1];
    *endb = p->offsets[c + 2];
    return load_states(p, c, XA) | load_states(p, c + 1, XB);
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
    if (load_states(p, c, X)) return 3;
    pos = decode_tail(X, 0, m, lut, p->prob_bits, p->words, pos, last, out);
    return finish_chunk(X, pos, end);
}

#ifdef WC_X86
/* Table lookups of 8/16 lanes. On AMD Zen the gather instructions are slow (measured on Zen 5:
 * decode 0.60 ns/symbol with vpgatherdd, 0.31 with scalar loads), so there the lanes are looked up
 * one by one. On the device tool's Intel Xeon the 8-lane (AVX2) gather lost too (MiniLM BF16
 * decode 0.84 GB/s against 1.24 with scalar loads, one thread) while the 16-lane (AVX-512) one
 * tied (1.72 / 1.70), so AVX2 looks up by scalar loads on every CPU and AVX-512 by gathers except
 * on AMD (benchmarks/RESULTS.md, issue 15, 2026-11-23). The scalar loads' indices leave the vector
 * two per 64-bit word and the entries are inserted straight into lanes: through the stack (one
 * wide load of narrow stores, which is not store-forwarded) measured 0.37 ns/symbol. */
__attribute__((target("sse4.1"), always_inline))
static inline __m128i lut4(__m128i idx, const uint32_t *lut) {
    uint64_t a = (uint64_t)_mm_cvtsi128_si64(idx), b = (uint64_t)_mm_extract_epi64(idx, 1);
    __m128i v = _mm_cvtsi32_si128((int)lut[(uint32_t)a]);
    v = _mm_insert_epi32(v, (int)lut[a >> 32], 1);
    v = _mm_insert_epi32(v, (int)lut[(uint32_t)b], 2);
    return _mm_insert_epi32(v, (int)lut[b >> 32], 3);
}

__attribute__((target("avx2"), always_inline))
static inline __m256i lut8(__m256i idx, const uint32_t *lut, int soft) {
    if (soft)
        return _mm256_inserti128_si256(_mm256_castsi128_si256(lut4(_mm256_castsi256_si128(idx), lut)),
                                       lut4(_mm256_extracti128_si256(idx, 1), lut), 1);
    return _mm256_i32gather_epi32((const int *)lut, idx, 4);
}

__attribute__((target("avx512f"), always_inline))
static inline __m512i lut16(__m512i idx, const uint32_t *lut, int soft) {
    if (soft) {
        __m512i o = _mm512_castsi128_si512(lut4(_mm512_castsi512_si128(idx), lut));
        o = _mm512_inserti32x4(o, lut4(_mm512_extracti32x4_epi32(idx, 1), lut), 1);
        o = _mm512_inserti32x4(o, lut4(_mm512_extracti32x4_epi32(idx, 2), lut), 2);
        return _mm512_inserti32x4(o, lut4(_mm512_extracti32x4_epi32(idx, 3), lut), 3);
    }
    return _mm512_i32gather_epi32(idx, (const int *)lut, 4);
}

/* 256-entry word table lookup of 32 indices < 256 in 16-bit lanes (bits above 7 ignored) from eight registers:
 * four vpermt2w (64 entries each) and three blends on the index's bits 6 and 7 */
__attribute__((target("avx512f,avx512bw"), always_inline))
static inline __m512i lut256w(__m512i idx, const __m512i *T) {
    __m512i r0 = _mm512_permutex2var_epi16(T[0], idx, T[1]), r1 = _mm512_permutex2var_epi16(T[2], idx, T[3]);
    __m512i r2 = _mm512_permutex2var_epi16(T[4], idx, T[5]), r3 = _mm512_permutex2var_epi16(T[6], idx, T[7]);
    __mmask32 m6 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(64));
    __mmask32 m7 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(128));
    return _mm512_mask_blend_epi16(m7, _mm512_mask_blend_epi16(m6, r0, r1), _mm512_mask_blend_epi16(m6, r2, r3));
}

/* lane k of mask mk reads word popcount(mk & ((1 << k) - 1)) of the step's run */
static int32_t g_perm8[256][8];

/* the encoder's compaction: lanes set in mk, ascending, at the top positions 8-popcount..7 */
static int32_t g_top8[256][8];

static void init_perm8(void) {
    for (int mk = 0; mk < 256; mk++) {
        int cnt = __builtin_popcount((unsigned)mk), r = 8 - cnt;
        for (int k = 0; k < 8; k++) g_top8[mk][k] = 0;
        for (int k = 0; k < 8; k++)
            if (mk >> k & 1) g_top8[mk][r++] = k;
    }
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

/* one 8-lane step of vector xr: its symbols to sym, its words from pos (the chunk's 32 lanes are
 * four such vectors, stepped in order) */
#define WC_STEP256(xr, sym, pos, lut)                                                              \
    do {                                                                                       \
        __m256i e = lut8(_mm256_and_si256(xr, vmask), lut, soft);                              \
        sym = _mm256_and_si256(e, v255);                                                       \
        __m256i f = _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(e, 8), vfff), one);    \
        __m256i xv = _mm256_add_epi32(_mm256_mullo_epi32(f, _mm256_srl_epi32(xr, shift_pb)),   \
                                      _mm256_srli_epi32(e, 20));                               \
        __m256i need = _mm256_cmpeq_epi32(_mm256_srli_epi32(xv, 16), zero);                    \
        unsigned mk = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(need));                 \
        __m128i w16;                                                                           \
        if (pos + 8 <= wlen) {                                                                 \
            w16 = _mm_loadu_si128((const __m128i *)(words + pos));                             \
        } else {                                                                               \
            uint16_t tmp[8];                                                                   \
            load_words_clamped(tmp, words, pos, wlen, 8);                                      \
            w16 = _mm_loadu_si128((const __m128i *)tmp);                                       \
        }                                                                                      \
        __m256i w = _mm256_permutevar8x32_epi32(_mm256_cvtepu16_epi32(w16),                    \
                                                _mm256_loadu_si256((const __m256i *)g_perm8[mk])); \
        xr = _mm256_blendv_epi8(xv, _mm256_or_si256(_mm256_slli_epi32(xv, 16), w), need);      \
        pos += __builtin_popcount(mk);                                                         \
    } while (0)

/* the 32 symbols of one step, four 8-lane vectors, to dst in lane order */
#define WC_STORE256(sym, dst)                                                                     \
    do {                                                                                       \
        __m256i p01 = _mm256_packus_epi32(sym[0], sym[1]), p23 = _mm256_packus_epi32(sym[2], sym[3]); \
        _mm256_storeu_si256((__m256i *)(dst), _mm256_permutevar8x32_epi32(_mm256_packus_epi16(p01, p23), order)); \
    } while (0)

#define WC_CONSTS256                                                                              \
    const __m256i vmask = _mm256_set1_epi32((1 << pb) - 1), v255 = _mm256_set1_epi32(0xFF);    \
    const __m256i vfff = _mm256_set1_epi32(0xFFF), one = _mm256_set1_epi32(1), zero = _mm256_setzero_si256(); \
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);                           \
    const __m128i shift_pb = _mm_cvtsi32_si128(pb)

__attribute__((target("avx2,popcnt")))
static int decode_chunk_avx2(const plane_t *p, int64_t c, uint8_t *out) {
    const int soft = g_soft_gather[0];
    const int pb = p->prob_bits;
    const uint32_t *lut = p->lookup + ((c / p->chunks_per_table) << pb);
    int64_t start = c * p->chunk_size;
    int64_t m = (p->n < start + p->chunk_size ? p->n : start + p->chunk_size) - start;
    int64_t pos = p->offsets[c], end = p->offsets[c + 1];
    int64_t last = end - 1 > 0 ? end - 1 : 0;
    const uint16_t *words = p->words;
    const int64_t wlen = p->words_len;
    uint32_t X[LANES];
    if (load_states(p, c, X)) return 3;
    __m256i x[4];
    for (int v = 0; v < 4; v++) x[v] = _mm256_loadu_si256((const __m256i *)(X + 8 * v));
    WC_CONSTS256;
    int64_t steps = m / LANES;
    for (int64_t t = 0; t < steps; t++) {
        __m256i sym[4];
        for (int v = 0; v < 4; v++) WC_STEP256(x[v], sym[v], pos, lut);
        WC_STORE256(sym, out + t * LANES);
    }
    for (int v = 0; v < 4; v++) _mm256_storeu_si256((__m256i *)(X + 8 * v), x[v]);
    /* a corrupt stream may have run pos past the chunk: the tail clamps, the check flags it */
    pos = decode_tail(X, steps * LANES, m, lut, pb, words, pos, last, out);
    return finish_chunk(X, pos, end);
}

/* Two whole chunks c, c + 1 at once (eight 8-lane chains, as decode_pair_avx512): MiniLM
 * embedding 0.625 -> 0.443 ns/symbol against one chunk at a time (Zen 5, scalar-load lookups). */
__attribute__((target("avx2,popcnt")))
static void decode_pair_avx2(const plane_t *p, int64_t c, uint8_t *outa, uint8_t *outb, int *st) {
    const int soft = g_soft_gather[0];
    const int pb = p->prob_bits;
    const uint16_t *words = p->words;
    const int64_t wlen = p->words_len;
    const uint32_t *luta, *lutb;
    int64_t posa, enda, posb, endb;
    uint32_t XA[LANES], XB[LANES];
    if (pair_setup(p, c, &luta, &lutb, &posa, &enda, &posb, &endb, XA, XB)) {
        st[0] = decode_chunk_avx2(p, c, outa);
        st[1] = decode_chunk_avx2(p, c + 1, outb);
        return;
    }
    __m256i xa[4], xb[4];
    for (int v = 0; v < 4; v++) {
        xa[v] = _mm256_loadu_si256((const __m256i *)(XA + 8 * v));
        xb[v] = _mm256_loadu_si256((const __m256i *)(XB + 8 * v));
    }
    WC_CONSTS256;
    int64_t steps = p->chunk_size / LANES;
    for (int64_t t = 0; t < steps; t++) {
        __m256i syma[4], symb[4];
        for (int v = 0; v < 4; v++) {
            WC_STEP256(xa[v], syma[v], posa, luta);
            WC_STEP256(xb[v], symb[v], posb, lutb);
        }
        WC_STORE256(syma, outa + t * LANES);
        WC_STORE256(symb, outb + t * LANES);
    }
    for (int v = 0; v < 4; v++) {
        _mm256_storeu_si256((__m256i *)(XA + 8 * v), xa[v]);
        _mm256_storeu_si256((__m256i *)(XB + 8 * v), xb[v]);
    }
    st[0] = finish_chunk(XA, posa, enda);
    st[1] = finish_chunk(XB, posb, endb);
}
#undef WC_STEP256
#undef WC_STORE256
#undef WC_CONSTS256

/* one 16-lane step of a chunk: symbols to dst, words from pos (see decode_chunk_avx2) */
#define WC_STEP512(xr, dst, pos, lut)                                                                   \
    do {                                                                                        \
        __m512i e = lut16(_mm512_and_si512(xr, vmask), lut, soft);   \
        _mm_storeu_si128((__m128i *)(dst), _mm512_cvtepi32_epi8(e)); /* truncates */               \
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

__attribute__((target("avx512f,avx512bw,popcnt")))
static int decode_chunk_avx512(const plane_t *p, int64_t c, uint8_t *out) {
    const int soft = g_soft_gather[1];
    const int pb = p->prob_bits;
    const uint32_t *lut = p->lookup + ((c / p->chunks_per_table) << pb);
    int64_t start = c * p->chunk_size;
    int64_t m = (p->n < start + p->chunk_size ? p->n : start + p->chunk_size) - start;
    int64_t pos = p->offsets[c], end = p->offsets[c + 1];
    int64_t last = end - 1 > 0 ? end - 1 : 0;
    const uint16_t *words = p->words;
    const int64_t wlen = p->words_len;
    uint32_t X[LANES];
    if (load_states(p, c, X)) return 3;
    __m512i x0 = _mm512_loadu_si512(X), x1 = _mm512_loadu_si512(X + 16);
    const __m512i vmask = _mm512_set1_epi32((1 << pb) - 1);
    const __m512i vfff = _mm512_set1_epi32(0xFFF), one = _mm512_set1_epi32(1);
    const __m512i lower = _mm512_set1_epi32((int)STATE_LOWER);
    const __m128i shift_pb = _mm_cvtsi32_si128(pb);
    int64_t steps = m / LANES;
    for (int64_t t = 0; t < steps; t++) {
        WC_STEP512(x0, out + t * LANES, pos, lut);
        WC_STEP512(x1, out + t * LANES + 16, pos, lut);
    }
    _mm512_storeu_si512(X, x0);
    _mm512_storeu_si512(X + 16, x1);
    pos = decode_tail(X, steps * LANES, m, lut, pb, words, pos, last, out);
    return finish_chunk(X, pos, end);
}
/* Two whole chunks c, c + 1 at once: four independent 16-lane chains hide the gather and
 * multiply latencies that bound one chunk's two chains. Statuses to st[0], st[1]. */
__attribute__((target("avx512f,avx512bw,popcnt")))
static void decode_pair_avx512(const plane_t *p, int64_t c, uint8_t *outa, uint8_t *outb, int *st) {
    const int soft = g_soft_gather[1];
    const int pb = p->prob_bits;
    const uint16_t *words = p->words;
    const int64_t wlen = p->words_len;
    const uint32_t *luta, *lutb;
    int64_t posa, enda, posb, endb;
    uint32_t XA[LANES], XB[LANES];
    if (pair_setup(p, c, &luta, &lutb, &posa, &enda, &posb, &endb, XA, XB)) {
        st[0] = decode_chunk_avx512(p, c, outa);
        st[1] = decode_chunk_avx512(p, c + 1, outb);
        return;
    }
    __m512i a0 = _mm512_loadu_si512(XA), a1 = _mm512_loadu_si512(XA + 16);
    __m512i b0 = _mm512_loadu_si512(XB), b1 = _mm512_loadu_si512(XB + 16);
    const __m512i vmask = _mm512_set1_epi32((1 << pb) - 1);
    const __m512i vfff = _mm512_set1_epi32(0xFFF), one = _mm512_set1_epi32(1);
    const __m512i lower = _mm512_set1_epi32((int)STATE_LOWER);
    const __m128i shift_pb = _mm_cvtsi32_si128(pb);
    int64_t steps = p->chunk_size / LANES;
    for (int64_t t = 0; t < steps; t++) {
        WC_STEP512(a0, outa + t * LANES, posa, luta);
        WC_STEP512(b0, outb + t * LANES, posb, lutb);
        WC_STEP512(a1, outa + t * LANES + 16, posa, luta);
        WC_STEP512(b1, outb + t * LANES + 16, posb, lutb);
    }
    _mm512_storeu_si512(XA, a0);
    _mm512_storeu_si512(XA + 16, a1);
    _mm512_storeu_si512(XB, b0);
    _mm512_storeu_si512(XB + 16, b1);
    st[0] = finish_chunk(XA, posa, enda);
    st[1] = finish_chunk(XB, posb, endb);
}
#undef WC_STEP512
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
    Py_buffer b[24];
    int k;
} bufs_t;

static void bufs_release(bufs_t *bs) {
    for (int i = 0; i < bs->k; i++) PyBuffer_Release(&bs->b[i]);
    bs->k = 0;
}

/* a C-contiguous buffer of items of `itemsize` bytes (0: any); NULL with an exception if not */
static void *get_buf(bufs_t *bs, PyObject *obj, int writable, int itemsize, int64_t *count, const char *what) {
    if (bs->k >= (int)(sizeof bs->b / sizeof bs->b[0])) {
        PyErr_SetString(PyExc_ValueError, "too many buffer arguments");
        return NULL;
    }
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

/* decode chunks 2t and 2t + 1 (if it exists) to out0 / out1; statuses to st */
static void decode_two(const plane_t *p, int64_t t, uint8_t *out0, uint8_t *out1, int *st) {
    int64_t c = 2 * t, n_chunks = (p->n + p->chunk_size - 1) / p->chunk_size;
#ifdef WC_X86
    if (g_isa == ISA_AVX512 && (c + 2) * p->chunk_size <= p->n) {
        decode_pair_avx512(p, c, out0, out1, st);
        return;
    }
    if (g_isa == ISA_AVX2 && (c + 2) * p->chunk_size <= p->n) {
        decode_pair_avx2(p, c, out0, out1, st);
        return;
    }
#endif
    st[0] = decode_chunk(p, c, out0);
    if (c + 1 < n_chunks) st[1] = decode_chunk(p, c + 1, out1);
}

static void dec_task(void *vctx, int64_t t) {
    dec_ctx *ctx = vctx;
    int64_t c = 2 * t, cs = ctx->p.chunk_size, n_chunks = (ctx->p.n + cs - 1) / cs;
    int st[2] = {0, 0};
    decode_two(&ctx->p, t, ctx->out + c * cs, ctx->out + (c + 1) * cs, st);
    ctx->status[c] = st[0];
    if (c + 1 < n_chunks) ctx->status[c + 1] = st[1];
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
    threads = pick_threads(threads, (n_chunks + 1) / 2);
    Py_BEGIN_ALLOW_THREADS
    run_parallel(dec_task, &ctx, (n_chunks + 1) / 2, threads);
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

/* a joint low plane (format version 2), decoded chunk by chunk into the merged output */
struct dec16_s;
static void joint_chunk(const struct dec16_s *ctx, int64_t c);

typedef struct {
    plane_t p;
    const uint64_t *placed;
    uint32_t placed32[256]; /* the placed heads that fit 32 bits (the SIMD merge's table) */
    uint32_t n_valid;       /* symbols below this are in the alphabet */
    uint16_t placed16[256]; /* the 16 bits of the placed head that hold it (BF16; F32 >> 16) */
    /* the longest run of symbols [run_lo, run_lo + run_len) whose head values are consecutive:
     * placed32[s] = run_p0 + ((s - run_lo) << run_shift) there (the AVX2 merge computes those
     * instead of looking them up; weights' exponents are dense around their mode) */
    int32_t run_lo, run_len, run_shift;
    uint32_t run_p0;
    int fast16;             /* the 32-wide AVX-512 merge applies (see merge_range_avx512_w) */
    const uint8_t *tail;
    int64_t n_tail;
    int tail_bits, tail_shift, sign_shift, low_planes, out_bytes;
    const uint8_t *low1, *low0; /* F32: bits 15..8 and 7..0, [n] each (raw planes) */
    plane_t low_plane[2];       /* F32: the rANS-coded low planes, decoded chunk by chunk */
    int low_coded[2];
    int32_t *low_status;        /* [2, n_chunks]: the low planes' chunk statuses */
    void *out;
    int32_t *status;
    uint32_t *crcs;             /* [n_chunks]: CRC-32 of each chunk's decoded bytes, or NULL */
    /* sections read from a file by the tasks themselves (decode_float_file), piece by piece */
    int fd;                     /* >= 0: words, tail and low bytes are read from this file */
    const uint8_t *src;         /* or, not NULL, the file's src_len bytes in memory: pieces in place */
    int64_t src_len;
    int64_t words_at, tail_at;  /* their file offsets */
    int64_t low_at[2];          /* raw low plane q's bytes, or coded low plane q's words */
    uint32_t *piece_crc;        /* [4][n_pairs]: CRC-32 of each pair's words, tail, low1, low0 bytes, or NULL */
    int io_err;                 /* the first read error: an errno, or -1 when the file ended early */
    /* F32 with a joint low plane of the head's chunks, or NULL: chunk c OR-ed into out right
     * after chunk c's merge (still in cache), its status to the joint context's status[c] */
    const struct dec16_s *joint;
} merge_ctx;

/* p + k, where p may be NULL (no low planes) */
#define WC_AT(p, k) ((p) ? (p) + (k) : (p))

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

/* value i of MERGE_RANGE from its tail field fj: the placed head, sign and tail bits (and low bytes) */
#define MERGE_ONE(T, LP, i, fj)                                                                    \
    do {                                                                                           \
        uint64_t f_ = (fj), h = placed[sym[(i) - a]];                                              \
        seen |= h;                                                                                 \
        uint64_t v = h | ((f_ >> (R - 1)) << ssh) | ((f_ & tmask) << tsh);                         \
        if (LP) v |= ((uint64_t)low1[(i) - a] << 8) | low0[(i) - a];                               \
        o[i] = (T)v;                                                                               \
    } while (0)

/* merge values [a, b) of the tensor (a a multiple of 8); sym[i - a] is the head symbol of value
 * i, low1[i - a] / low0[i - a] its low bytes (F32). Returns the OR of the placed heads (BAD_SYMBOL set if a symbol was outside the alphabet).
 * T: the output word, LP: low byte planes. */
#define MERGE_RANGE(NAME, T, LP)                                                                   \
    static inline __attribute__((always_inline)) uint64_t NAME(const merge_ctx *ctx, const uint8_t *sym, \
                                                                const uint8_t *low1, const uint8_t *low0, \
                                                                int64_t a, int64_t b) {            \
        const int R = ctx->tail_bits, ssh = ctx->sign_shift, tsh = ctx->tail_shift;                \
        const uint64_t tmask = (1ull << (R - 1)) - 1, fm = (1ull << R) - 1;                        \
        const uint64_t *restrict placed = ctx->placed;                                             \
        const uint8_t *restrict tail = ctx->tail;                                                  \
        T *restrict o = (T *)ctx->out;                                                             \
        const int64_t n_tail = ctx->n_tail;                                                        \
        uint64_t seen = 0;                                                                         \
        uint64_t f[8];                                                                             \
        for (int64_t i0 = a; i0 < b; i0 += 8) {                                                    \
            int k = (int)(b - i0 < 8 ? b - i0 : 8);                                                \
            int64_t base = (i0 / 8) * R;                                                           \
            if (R <= 8 && k == 8 && base + 8 <= n_tail) { /* no branches per value */             \
                uint64_t word;                                                                     \
                memcpy(&word, tail + base, 8);                                                     \
                for (int j = 0; j < 8; j++) MERGE_ONE(T, LP, i0 + j, (word >> (j * R)) & fm);      \
                continue;                                                                          \
            }                                                                                      \
            tail_fields(tail, n_tail, i0 / 8, R, k, f);                                            \
            for (int j = 0; j < k; j++) MERGE_ONE(T, LP, i0 + j, f[j]);                            \
        }                                                                                          \
        return seen;                                                                               \
    }
MERGE_RANGE(merge16, uint16_t, 0)
MERGE_RANGE(merge32, uint32_t, 0)
MERGE_RANGE(merge32_low, uint32_t, 1)
#undef MERGE_ONE

static inline __attribute__((always_inline)) uint64_t merge_range(const merge_ctx *ctx, const uint8_t *sym,
                                                                  const uint8_t *low1, const uint8_t *low0,
                                                                  int64_t a, int64_t b) {
    if (ctx->out_bytes == 2) return merge16(ctx, sym, low1, low0, a, b);
    return ctx->low_planes == 2 ? merge32_low(ctx, sym, low1, low0, a, b) : merge32(ctx, sym, low1, low0, a, b);
}

static uint64_t merge_range_scalar(const merge_ctx *ctx, const uint8_t *sym, const uint8_t *low1,
                                   const uint8_t *low0, int64_t a, int64_t b) {
    return merge_range(ctx, sym, low1, low0, a, b);
}

#ifdef WC_X86
/* SIMD merge for tails of <= 8 bits: the tail fields of 8 (AVX2) / 16 (AVX-512) values come out
 * of one byte shuffle (each 32-bit lane takes the two bytes holding its field) and a variable
 * shift; the placed heads are gathered from placed32. The bad-symbol check is a running max. */
static void merge_simd_tables(int R, int k, uint8_t *ctl, uint32_t *shv) {
    for (int j = 0; j < k; j++) {
        int o = (j * R) >> 3; /* pshufb indexes within each 128-bit lane, all holding the same bytes */
        ctl[4 * j] = (uint8_t)o;
        ctl[4 * j + 1] = o + 1 < 16 ? (uint8_t)(o + 1) : 0x80;
        ctl[4 * j + 2] = ctl[4 * j + 3] = 0x80;
        shv[j] = (uint32_t)((j * R) & 7);
    }
}

__attribute__((target("avx2,bmi2")))
static uint64_t merge_range_avx2(const merge_ctx *ctx, const uint8_t *sym, const uint8_t *low1,
                                 const uint8_t *low0, int64_t a, int64_t b) {
    const int soft = g_soft_gather[0];
    const int R = ctx->tail_bits;
    if (R > 8) return merge_range(ctx, sym, low1, low0, a, b);
    uint8_t ctl[32];
    uint32_t shv[8];
    merge_simd_tables(R, 8, ctl, shv);
    const __m256i vctl = _mm256_loadu_si256((const __m256i *)ctl), vsh = _mm256_loadu_si256((const __m256i *)shv);
    const __m256i vfm = _mm256_set1_epi32((1 << R) - 1), vtm = _mm256_set1_epi32((1 << (R - 1)) - 1);
    const __m128i sgn_r = _mm_cvtsi32_si128(R - 1), ssh = _mm_cvtsi32_si128(ctx->sign_shift);
    const __m128i tsh = _mm_cvtsi32_si128(ctx->tail_shift), rsh = _mm_cvtsi32_si128(ctx->run_shift);
    /* no run (an empty alphabet): symbols - 256 are all far out of [0, 0], every lane looks up */
    const __m256i vrlo = _mm256_set1_epi32(ctx->run_len > 0 ? ctx->run_lo : 256);
    const __m256i vrlast = _mm256_set1_epi32(ctx->run_len > 0 ? ctx->run_len - 1 : 0);
    const __m256i vrp0 = _mm256_set1_epi32((int)ctx->run_p0);
    __m256i mx = _mm256_setzero_si256();
    int64_t i0 = a;
    for (; i0 + 8 <= b && (i0 / 8) * R + 8 <= ctx->n_tail; i0 += 8) {
        long long tw;
        memcpy(&tw, ctx->tail + (i0 / 8) * R, 8);
        __m256i t = _mm256_shuffle_epi8(_mm256_set1_epi64x(tw), vctl);
        __m256i f = _mm256_and_si256(_mm256_srlv_epi32(t, vsh), vfm);
        long long sw;
        memcpy(&sw, sym + (i0 - a), 8);
        __m256i s32 = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(sw));
        mx = _mm256_max_epu32(mx, s32);
        /* placed heads computed where all 8 symbols are in the run, else looked up */
        __m256i rel = _mm256_sub_epi32(s32, vrlo);
        __m256i in_run = _mm256_cmpeq_epi32(_mm256_min_epu32(rel, vrlast), rel);
        __m256i v = _mm256_movemask_epi8(in_run) == -1 ? _mm256_add_epi32(vrp0, _mm256_sll_epi32(rel, rsh))
                                                        : lut8(s32, ctx->placed32, soft);
        v = _mm256_or_si256(v, _mm256_sll_epi32(_mm256_srl_epi32(f, sgn_r), ssh));
        v = _mm256_or_si256(v, _mm256_sll_epi32(_mm256_and_si256(f, vtm), tsh));
        if (ctx->out_bytes == 2) {
            __m256i pk = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08);
            _mm_storeu_si128((__m128i *)((uint16_t *)ctx->out + i0), _mm256_castsi256_si128(pk));
        } else {
            if (ctx->low_planes == 2) {
                long long l1, l0;
                memcpy(&l1, low1 + (i0 - a), 8);
                memcpy(&l0, low0 + (i0 - a), 8);
                v = _mm256_or_si256(v, _mm256_slli_epi32(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(l1)), 8));
                v = _mm256_or_si256(v, _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(l0)));
            }
            _mm256_storeu_si256((__m256i *)((uint32_t *)ctx->out + i0), v);
        }
    }
    uint32_t m8[8];
    _mm256_storeu_si256((__m256i *)m8, mx);
    uint64_t seen = 0;
    for (int j = 0; j < 8; j++)
        if (m8[j] >= ctx->n_valid) seen = BAD_SYMBOL;
    return seen | merge_range(ctx, sym + (i0 - a), WC_AT(low1, i0 - a), WC_AT(low0, i0 - a), i0, b);
}

__attribute__((target("avx512f,avx512bw")))
static uint64_t merge_range_avx512(const merge_ctx *ctx, const uint8_t *sym, const uint8_t *low1,
                                   const uint8_t *low0, int64_t a, int64_t b) {
    const int soft = g_soft_gather[1];
    const int R = ctx->tail_bits;
    if (R > 8) return merge_range(ctx, sym, low1, low0, a, b);
    uint8_t ctl[64];
    uint32_t shv[16];
    merge_simd_tables(R, 16, ctl, shv);
    const __m512i vctl = _mm512_loadu_si512(ctl), vsh = _mm512_loadu_si512(shv);
    const __m512i vfm = _mm512_set1_epi32((1 << R) - 1), vtm = _mm512_set1_epi32((1 << (R - 1)) - 1);
    const __m128i sgn_r = _mm_cvtsi32_si128(R - 1), ssh = _mm_cvtsi32_si128(ctx->sign_shift);
    const __m128i tsh = _mm_cvtsi32_si128(ctx->tail_shift);
    __m512i mx = _mm512_setzero_si512();
    int64_t i0 = a;
    for (; i0 + 16 <= b && (i0 / 8) * R + 16 <= ctx->n_tail; i0 += 16) {
        __m128i tb = _mm_loadu_si128((const __m128i *)(ctx->tail + (i0 / 8) * R));
        __m512i t = _mm512_shuffle_epi8(_mm512_broadcast_i32x4(tb), vctl);
        __m512i f = _mm512_and_si512(_mm512_srlv_epi32(t, vsh), vfm);
        __m512i s32 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(sym + (i0 - a))));
        mx = _mm512_max_epu32(mx, s32);
        __m512i v = lut16(s32, ctx->placed32, soft);
        v = _mm512_or_si512(v, _mm512_sll_epi32(_mm512_srl_epi32(f, sgn_r), ssh));
        v = _mm512_or_si512(v, _mm512_sll_epi32(_mm512_and_si512(f, vtm), tsh));
        if (ctx->out_bytes == 2) {
            _mm256_storeu_si256((__m256i *)((uint16_t *)ctx->out + i0), _mm512_cvtepi32_epi16(v));
        } else {
            if (ctx->low_planes == 2) {
                v = _mm512_or_si512(v, _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(low1 + (i0 - a)))), 8));
                v = _mm512_or_si512(v, _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(low0 + (i0 - a)))));
            }
            _mm512_storeu_si512((uint32_t *)ctx->out + i0, v);
        }
    }
    uint64_t seen = _mm512_reduce_max_epu32(mx) >= ctx->n_valid ? BAD_SYMBOL : 0;
    return seen | merge_range(ctx, sym + (i0 - a), WC_AT(low1, i0 - a), WC_AT(low0, i0 - a), i0, b);
}

/* 32 values per iteration, for BF16 and F32 with tails of <= 8 bits: everything in 16-bit lanes
 * (the upper half of an F32 is laid out as a BF16: head, sign at bit 15, tail at bit 0). The
 * head lookup is a 256-entry word table in eight registers (four vpermt2w + three blends), the
 * tail fields come from one byte shuffle per block and a per-lane shift. */
__attribute__((target("avx512f,avx512bw")))
static uint64_t merge_range_avx512_w(const merge_ctx *ctx, const uint8_t *sym, const uint8_t *low1,
                                     const uint8_t *low0, int64_t a, int64_t b) {
    const int R = ctx->tail_bits;
    __m512i T[8];
    for (int k = 0; k < 8; k++) T[k] = _mm512_loadu_si512(ctx->placed16 + 32 * k);
    uint8_t ctl[64];
    uint16_t shv[32];
    for (int L = 0; L < 4; L++)
        for (int j = 0; j < 8; j++) {
            int o = (j * R) >> 3;
            ctl[16 * L + 2 * j] = (uint8_t)o;
            ctl[16 * L + 2 * j + 1] = (uint8_t)(o + 1);
            shv[8 * L + j] = (uint16_t)((j * R) & 7);
        }
    const __m512i vctl = _mm512_loadu_si512(ctl), vsh = _mm512_loadu_si512(shv);
    const __m512i vfm = _mm512_set1_epi16((short)((1 << R) - 1)), vtm = _mm512_set1_epi16((short)((1 << (R - 1)) - 1));
    const __m512i b6 = _mm512_set1_epi16(64), b7 = _mm512_set1_epi16(128);
    const __m128i sgn_r = _mm_cvtsi32_si128(R - 1);
    const __m512i lo_idx = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), hi_idx = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
    const uint8_t *tail = ctx->tail;
    __m256i mx = _mm256_setzero_si256();
    int64_t i0 = a;
    for (; i0 + 32 <= b && (i0 / 8 + 3) * R + 16 <= ctx->n_tail; i0 += 32) {
        const uint8_t *tb = tail + (i0 / 8) * R;
        __m512i t = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)tb));
        t = _mm512_inserti32x4(t, _mm_loadu_si128((const __m128i *)(tb + R)), 1);
        t = _mm512_inserti32x4(t, _mm_loadu_si128((const __m128i *)(tb + 2 * R)), 2);
        t = _mm512_inserti32x4(t, _mm_loadu_si128((const __m128i *)(tb + 3 * R)), 3);
        __m512i f = _mm512_and_si512(_mm512_srlv_epi16(_mm512_shuffle_epi8(t, vctl), vsh), vfm);
        __m256i s8 = _mm256_loadu_si256((const __m256i *)(sym + (i0 - a)));
        mx = _mm256_max_epu8(mx, s8);
        __m512i idx = _mm512_cvtepu8_epi16(s8);
        __m512i r0 = _mm512_permutex2var_epi16(T[0], idx, T[1]), r1 = _mm512_permutex2var_epi16(T[2], idx, T[3]);
        __m512i r2 = _mm512_permutex2var_epi16(T[4], idx, T[5]), r3 = _mm512_permutex2var_epi16(T[6], idx, T[7]);
        __mmask32 m6 = _mm512_test_epi16_mask(idx, b6), m7 = _mm512_test_epi16_mask(idx, b7);
        __m512i h = _mm512_mask_blend_epi16(m7, _mm512_mask_blend_epi16(m6, r0, r1), _mm512_mask_blend_epi16(m6, r2, r3));
        __m512i u = _mm512_or_si512(h, _mm512_or_si512(_mm512_slli_epi16(_mm512_srl_epi16(f, sgn_r), 15),
                                                       _mm512_and_si512(f, vtm)));
        if (ctx->out_bytes == 2) {
            _mm512_storeu_si512((uint16_t *)ctx->out + i0, u);
        } else {
            __m512i l1 = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(low1 + (i0 - a))));
            __m512i l0 = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(low0 + (i0 - a))));
            __m512i lo16 = _mm512_or_si512(_mm512_slli_epi16(l1, 8), l0);
            __m512i A = _mm512_unpacklo_epi16(lo16, u), B = _mm512_unpackhi_epi16(lo16, u);
            _mm512_storeu_si512((uint32_t *)ctx->out + i0, _mm512_permutex2var_epi64(A, lo_idx, B));
            _mm512_storeu_si512((uint32_t *)ctx->out + i0 + 16, _mm512_permutex2var_epi64(A, hi_idx, B));
        }
    }
    uint8_t m32[32];
    _mm256_storeu_si256((__m256i *)m32, mx);
    uint64_t seen = 0;
    for (int j = 0; j < 32; j++)
        if (m32[j] >= ctx->n_valid) seen = BAD_SYMBOL;
    return seen | merge_range_avx512(ctx, sym + (i0 - a), WC_AT(low1, i0 - a), WC_AT(low0, i0 - a), i0, b);
}
#endif

/* Plane p's chunks [c0, c0 + k) (k = 1 or 2) as a plane of their own, for one merge task: its
 * states and first lookup table are c0's, its offsets (into offs, k + 1 of them) count from word
 * `base` of p, and its words are `words` (wlen >= 1 of them, word `base` of p first). Nothing is
 * copied but the offsets; the decoders' reads stay inside [words, words + wlen). */
static void pair_view(const plane_t *p, int64_t c0, int k, const uint16_t *words, int64_t wlen, int64_t base,
                      uint32_t *offs, plane_t *q) {
    const int64_t cs = p->chunk_size, ta = c0 / p->chunks_per_table, tb = (c0 + k - 1) / p->chunks_per_table;
    q->states = p->states + c0 * LANES;
    for (int i = 0; i <= k; i++) offs[i] = (uint32_t)(p->offsets[c0 + i] - base);
    q->offsets = offs;
    q->words = words;
    q->words_len = wlen;
    q->n = p->n - c0 * cs < k * cs ? p->n - c0 * cs : k * cs;
    q->chunk_size = cs;
    /* c0 + 1's table is this one or the next (a plane without lookups: pair_lookup's) */
    q->lookup = p->lookup ? p->lookup + (ta << p->prob_bits) : NULL;
    q->full = NULL;
    q->chunks_per_table = tb == ta ? 2 : 1;
    q->prob_bits = p->prob_bits;
}

/* plane p's chunks [c0, c0 + k) viewing p's own words (in memory): from word offsets[c0], or the
 * last word when none is left (the decoders always load one), so reads are clamped to p's words
 * exactly as a whole-plane decode clamps them */
static void pair_view_mem(const plane_t *p, int64_t c0, int k, uint32_t *offs, plane_t *q) {
    int64_t base = p->offsets[c0] < p->words_len ? p->offsets[c0] : p->words_len - 1;
    pair_view(p, c0, k, p->words + base, p->words_len - base, base, offs, q);
}

/* the packed decode lookup of one frequency table ([256], absent symbols 0); -1 unless it sums
 * to 2**pb (the sums are checked before, this is the same bound as decode_lookup's) */
static int fill_lookup(const uint16_t *f, int pb, uint32_t *o) {
    uint32_t cum = 0;
    for (int s = 0; s < 256; s++) {
        /* locals: with -fno-strict-aliasing the stores to o could change f[s], so reading it in
         * the loop kept the fill scalar (measured 4 us per table, now vectorised) */
        const uint32_t fs = f[s];
        if (cum + fs > (1u << pb)) return -1;
        if (fs) {
            const uint32_t head = (uint32_t)s | (fs - 1) << 8;
            uint32_t *dst = o + cum;
            for (uint32_t k = 0; k < fs; k++) dst[k] = head | k << 20;
        }
        cum += fs;
    }
    return cum == (1u << pb) ? 0 : -1;
}

/* the lookups one task of a file decode built for a plane: its (first, last) table and them */
typedef struct {
    const plane_t *plane;
    int64_t ta, tb;
    uint32_t lut[2 << 12];
} lut_cache_t;

/* the pair view q of chunks [c0, c0 + k) of a plane whose lookups are not built (p->full): its
 * one or two tables' lookups, from the task's cache when its last pair of this plane used them
 * (tables hold many chunks), so a call holds two tables per plane and task, not every table of
 * every tensor (MiniLM F32: 7.5 MB, fresh pages on every load) */
static void pair_lookup(const plane_t *p, int64_t c0, int k, lut_cache_t *lc, plane_t *q) {
    int64_t ta = c0 / p->chunks_per_table, tb = (c0 + k - 1) / p->chunks_per_table;
    if (lc->plane != p || lc->ta != ta || lc->tb != tb) {
        const int pb = p->prob_bits;
        fill_lookup(p->full + 256 * ta, pb, lc->lut); /* the sums were checked: cannot fail */
        if (tb != ta) fill_lookup(p->full + 256 * tb, pb, lc->lut + (1 << pb));
        lc->plane = p;
        lc->ta = ta;
        lc->tb = tb;
    }
    q->lookup = lc->lut;
}

/* len bytes at file offset `at` into dst: 0, an errno, or -1 when the file ends first */
static int read_at(int fd, void *dst, int64_t len, int64_t at) {
#ifdef _WIN32
    (void)fd, (void)dst, (void)len, (void)at;
    return ENOSYS; /* no pread: wcodec.native passes no file there */
#else
    uint8_t *d = dst;
    int64_t got = 0;
    while (got < len) {
        ssize_t r = pread(fd, d + got, (size_t)(len - got), (off_t)(at + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return errno ? errno : EIO;
        if (r == 0) return -1;
        got += r;
    }
    return 0;
#endif
}

/* bytes of one scratch area of a file-read merge task: a pair's words, tail bytes or low bytes
 * (each at most 4 bytes per value: 2 chunks of cs values, <= cs words per chunk, tails <= 16 bits) */
#define AREA(cs) (4 * (cs) + 64)
/* bytes of a merge task's symbols: two chunks' head symbols, and the coded low planes' */
static int64_t sym_bytes(const merge_ctx *ctx) {
    return (ctx->low_coded[0] || ctx->low_coded[1] ? 6 : 2) * ctx->p.chunk_size;
}
/* the work buffer of one merge task: its symbols, then, reading from a file, four areas for its
 * pieces (64-byte aligned) and a lookup cache per plane (head, low1, low0) */
static int64_t file_work_bytes(int64_t cs, int coded) {
    return ((coded ? 6 : 2) * cs + 63) / 64 * 64 + 4 * AREA(cs) + 3 * (int64_t)sizeof(lut_cache_t);
}
static int64_t work_bytes(const merge_ctx *ctx) {
    if (ctx->fd >= 0 || ctx->src) return file_work_bytes(ctx->p.chunk_size, ctx->low_coded[0] || ctx->low_coded[1]);
    return (sym_bytes(ctx) + 63) / 64 * 64;
}

/* len bytes at offset `at` of the decode's source into dst: pread from its file, or a copy
 * from its bytes in memory; 0, an errno, or -1 when the source ends first */
static int src_read(const merge_ctx *ctx, void *dst, int64_t len, int64_t at) {
    if (!ctx->src) return read_at(ctx->fd, dst, len, at);
    if (at < 0 || len < 0 || at > ctx->src_len || len > ctx->src_len - at) return -1;
    memcpy(dst, ctx->src + at, (size_t)len);
    return 0;
}

/* one piece of a file-read task: read into `area`, or (a source in memory) where it lies;
 * checksummed (its CRC to *crc when crc is not NULL). The piece, or NULL after recording the
 * read's error (see read_at) in ctx->io_err. */
static const uint8_t *get_piece(merge_ctx *ctx, uint8_t *area, int64_t len, int64_t at, uint32_t *crc) {
    const uint8_t *piece = area;
    int e;
    if (ctx->src) {
        e = at < 0 || len < 0 || at > ctx->src_len || len > ctx->src_len - at ? -1 : 0;
        piece = ctx->src + at;
    } else {
        e = read_at(ctx->fd, area, len, at);
    }
    if (e) {
        int zero = 0;
        __atomic_compare_exchange_n(&ctx->io_err, &zero, e, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
        return NULL;
    }
    if (crc) *crc = wc_crc32(piece, len, 0);
    return piece;
}

/* Pair t of a merge: decode head chunks 2t, 2t + 1 (and the coded low planes' same chunks) and
 * merge them into the output. In memory the planes and sections are read in place; from a file
 * (ctx->fd >= 0) the pair's words, tail and low bytes are read first into `work` (its pieces'
 * CRC-32s to ctx->piece_crc, while in cache), so no section goes through memory whole. */
static void merge_pair(merge_ctx *ctx, int64_t t, uint8_t *work) {
    const int64_t cs = ctx->p.chunk_size, c0 = 2 * t, n_chunks = (ctx->p.n + cs - 1) / cs;
    const int k = c0 + 1 < n_chunks ? 2 : 1;
    const int64_t start = c0 * cs, end = ctx->p.n < start + k * cs ? ctx->p.n : start + k * cs, m = end - start;
    const int R = ctx->tail_bits, ob = ctx->out_bytes, file = ctx->fd >= 0 || ctx->src;
    const int64_t n_pairs = (n_chunks + 1) / 2;
    merge_ctx local; /* this pair's view: output, tail and planes from the pair's first value */
    memcpy(&local, ctx, sizeof local);
    local.out = (uint8_t *)ctx->out + start * ob;
    const int64_t t0 = start * R / 8; /* chunk starts are multiples of 32: whole tail bytes */
    local.n_tail = (end * R + 7) / 8 - t0;
    uint32_t offs[3][3];
    uint8_t *sym = work, *lsym = work + 2 * cs;
    const uint8_t *low[2] = {NULL, NULL};
    int st[2] = {0, 0}, lst[2][2] = {{0, 0}, {0, 0}}, bad = 0;
    if (file) {
        uint8_t *area = work + (sym_bytes(ctx) + 63) / 64 * 64;
        lut_cache_t *lc = (lut_cache_t *)(area + 4 * AREA(cs)); /* head, low1, low0 */
        uint32_t *pc = ctx->piece_crc; /* [4][n_pairs]: words, tail, low1, low0 */
        int64_t base = ctx->p.offsets[c0], nw = (int64_t)ctx->p.offsets[c0 + k] - base;
        static const uint16_t zero_word[1] = {0}; /* a pair without words: the loads' one word */
        const uint8_t *got = get_piece(ctx, area, 2 * nw, ctx->words_at + 2 * base, pc ? pc + t : NULL);
        bad |= !got;
        pair_view(&ctx->p, c0, k, nw && got ? (const uint16_t *)got : zero_word, nw ? nw : 1, base, offs[0], &local.p);
        if (ctx->p.full) pair_lookup(&ctx->p, c0, k, &lc[0], &local.p);
        got = get_piece(ctx, area + AREA(cs), local.n_tail, ctx->tail_at + t0, pc ? pc + n_pairs + t : NULL);
        bad |= !got;
        local.tail = got;
        for (int q = 0; q < 2 && ctx->low_planes; q++) {
            uint8_t *la = area + (2 + q) * AREA(cs);
            uint32_t *lcrc = pc ? pc + (2 + q) * n_pairs + t : NULL;
            if (ctx->low_coded[q]) {
                const plane_t *lp = &ctx->low_plane[q];
                int64_t lb = lp->offsets[c0], ln = (int64_t)lp->offsets[c0 + k] - lb;
                got = get_piece(ctx, la, 2 * ln, ctx->low_at[q] + 2 * lb, lcrc);
                bad |= !got;
                pair_view(lp, c0, k, ln && got ? (const uint16_t *)got : zero_word, ln ? ln : 1, lb, offs[1 + q],
                          &local.low_plane[q]);
                if (lp->full) pair_lookup(lp, c0, k, &lc[1 + q], &local.low_plane[q]);
            } else {
                bad |= !(low[q] = get_piece(ctx, la, m, ctx->low_at[q] + start, lcrc));
            }
        }
    } else {
        local.tail = ctx->tail + t0;
        pair_view_mem(&ctx->p, c0, k, offs[0], &local.p);
        for (int q = 0; q < 2 && ctx->low_planes; q++) {
            if (ctx->low_coded[q]) pair_view_mem(&ctx->low_plane[q], c0, k, offs[1 + q], &local.low_plane[q]);
            else low[q] = (q ? ctx->low0 : ctx->low1) + start;
        }
    }
    if (bad) { /* the read failed (ctx->io_err says why): these chunks hold nothing */
        for (int64_t c = c0; c < c0 + k; c++) ctx->status[c] = 6;
        return;
    }
    decode_two(&local.p, 0, sym, sym + cs, st);
    for (int q = 0; q < 2; q++)
        if (ctx->low_coded[q]) {
            decode_two(&local.low_plane[q], 0, lsym + 2 * q * cs, lsym + (2 * q + 1) * cs, lst[q]);
            for (int j = 0; j < k; j++) ctx->low_status[q * n_chunks + c0 + j] = lst[q][j];
        }
    for (int j = 0; j < k; j++) {
        int64_t a = j * cs, b = m < a + cs ? m : a + cs;
        const uint8_t *lp[2];
        for (int q = 0; q < 2; q++) lp[q] = ctx->low_coded[q] ? lsym + (2 * q + j) * cs : WC_AT(low[q], a);
        if (st[j] == 0 && lst[0][j] == 0 && lst[1][j] == 0) {
            uint64_t seen;
#ifdef WC_X86
            if (g_isa == ISA_AVX512 && ctx->fast16) seen = merge_range_avx512_w(&local, sym + a, lp[0], lp[1], a, b);
            else if (g_isa == ISA_AVX512) seen = merge_range_avx512(&local, sym + a, lp[0], lp[1], a, b);
            else if (g_isa == ISA_AVX2) seen = merge_range_avx2(&local, sym + a, lp[0], lp[1], a, b);
            else
#endif
                seen = merge_range_scalar(&local, sym + a, lp[0], lp[1], a, b);
            if (seen & BAD_SYMBOL) st[j] = 4;
            else if (ctx->joint) joint_chunk(ctx->joint, c0 + j);
            /* the decoded tensor's checksum from the bytes just written, still in cache (a
             * separate pass over the tensor re-read it from memory: issue 30) */
            if (ctx->crcs) ctx->crcs[c0 + j] = wc_crc32((const uint8_t *)local.out + a * ob, (b - a) * ob, 0);
        }
        ctx->status[c0 + j] = st[j];
    }
}

/* one task of decode_merge_float: pair t, its symbols in a stack buffer where they fit */
static void merge_task(void *vctx, int64_t t) {
    merge_ctx *ctx = vctx;
    uint8_t stackbuf[65536];
    int64_t need = work_bytes(ctx);
    uint8_t *buf = need <= (int64_t)sizeof stackbuf ? stackbuf : malloc((size_t)need);
    if (!buf) {
        int64_t cs = ctx->p.chunk_size, n_chunks = (ctx->p.n + cs - 1) / cs;
        for (int64_t c = 2 * t; c < 2 * t + 2 && c < n_chunks; c++) ctx->status[c] = 5;
        return;
    }
    merge_pair(ctx, t, buf);
    if (buf != stackbuf) free(buf);
}

/* a coded low plane (states, offsets, words, lookup, chunks_per_table, prob_bits) of n symbols in
 * chunks of cs into p; 0, or -1 with an exception */
static int get_low_plane(bufs_t *bs, PyObject *o, int64_t n, int64_t cs, plane_t *p) {
    PyObject *o_states, *o_offsets, *o_words, *o_lookup;
    long long cpt;
    int pb;
    if (!PyArg_ParseTuple(o, "OOOOLi", &o_states, &o_offsets, &o_words, &o_lookup, &cpt, &pb)) return -1;
    int64_t ns, no, nl;
    if (!(p->states = get_buf(bs, o_states, 0, 4, &ns, "low states"))) return -1;
    if (!(p->offsets = get_buf(bs, o_offsets, 0, 4, &no, "low offsets"))) return -1;
    if (!(p->words = get_buf(bs, o_words, 0, 2, &p->words_len, "low words"))) return -1;
    if (!(p->lookup = get_buf(bs, o_lookup, 0, 4, &nl, "low lookup"))) return -1;
    p->n = n;
    p->chunk_size = cs;
    p->chunks_per_table = cpt;
    p->prob_bits = pb;
    return check_plane(p, ns, no, nl);
}

/* the merge's tables derived from ctx->placed (placed32, placed16, n_valid, fast16) */
static void merge_derive(merge_ctx *ctx) {
    const int R = ctx->tail_bits;
    ctx->n_valid = 256;
    for (int s = 255; s >= 0; s--) {
        ctx->placed32[s] = (uint32_t)ctx->placed[s];
        if (ctx->placed[s] & BAD_SYMBOL) ctx->n_valid = (uint32_t)s;
    }
    /* BF16 (sign at 15, tail at 0) or F32 with both low planes (sign at 31, tail at 16, heads in
     * the upper half): the upper 16 bits of every value are laid out alike */
    int upper = ctx->out_bytes == 4 ? 16 : 0;
    ctx->fast16 = R <= 8 && ctx->sign_shift == upper + 15 && ctx->tail_shift == upper &&
                  (ctx->out_bytes == 2 ? ctx->low_planes == 0 : ctx->low_planes == 2);
    for (int s = 0; s < 256; s++) {
        ctx->placed16[s] = (uint16_t)(ctx->placed32[s] >> upper);
        if (upper && (ctx->placed32[s] & 0xFFFF) && s < (int)ctx->n_valid) ctx->fast16 = 0;
    }
    ctx->run_lo = 0;
    ctx->run_len = ctx->n_valid > 0 ? 1 : 0;
    ctx->run_shift = 0;
    ctx->run_p0 = ctx->n_valid > 0 ? ctx->placed32[0] : 0;
    for (int a = 0; a + 1 < (int)ctx->n_valid;) { /* runs of one power-of-two step, placed fitting 32 bits */
        uint64_t d = ctx->placed[a + 1] - ctx->placed[a];
        int b = a + 1;
        if (ctx->placed[a + 1] > ctx->placed[a] && !(d & (d - 1)) && ctx->placed[a] >> 32 == 0)
            while (b + 1 < (int)ctx->n_valid && ctx->placed[b + 1] - ctx->placed[b] == d && ctx->placed[b + 1] >> 32 == 0)
                b++;
        else
            b = a;
        if (b - a + 1 > ctx->run_len && ctx->placed[b] >> 32 == 0) {
            ctx->run_lo = a;
            ctx->run_len = b - a + 1;
            ctx->run_shift = __builtin_ctzll(d);
            ctx->run_p0 = ctx->placed32[a];
        }
        a = b > a ? b : a + 1;
    }
}

/* decode_merge_float's arguments (in memory) into ctx, their buffers held in bs: (states,
 * offsets, words, lookup, placed, tail, low1, low0, out, status, lowc1, lowc0, low_status) in o,
 * checked against each other; 0, or -1 with an exception */
static int merge_setup(merge_ctx *ctx, bufs_t *bs, PyObject *const *o, long long n, long long cs, long long cpt,
                       int pb) {
    PyObject *o_lowc1 = o[10], *o_lowc0 = o[11];
    int64_t ns, no, nl, np_, nlow = 0, nlow0 = 0, nout, nst, nlst = 0;
    ctx->fd = -1;
    ctx->src = NULL;
    ctx->crcs = NULL;
    ctx->piece_crc = NULL;
    ctx->io_err = 0;
    ctx->joint = NULL;
    ctx->low_coded[0] = o_lowc1 != Py_None;
    ctx->low_coded[1] = o_lowc0 != Py_None;
    ctx->low_planes = (o[6] != Py_None || ctx->low_coded[0]) ? 2 : 0;
    ctx->low1 = ctx->low0 = NULL;
    ctx->low_status = NULL;
    if (!(ctx->p.states = get_buf(bs, o[0], 0, 4, &ns, "states"))) return -1;
    if (!(ctx->p.offsets = get_buf(bs, o[1], 0, 4, &no, "offsets"))) return -1;
    if (!(ctx->p.words = get_buf(bs, o[2], 0, 2, &ctx->p.words_len, "words"))) return -1;
    if (!(ctx->p.lookup = get_buf(bs, o[3], 0, 4, &nl, "lookup"))) return -1;
    if (!(ctx->placed = get_buf(bs, o[4], 0, 8, &np_, "placed"))) return -1;
    if (!(ctx->tail = get_buf(bs, o[5], 0, 1, &ctx->n_tail, "tail"))) return -1;
    /* each low plane: raw bytes (low1/low0) or coded (lowc1/lowc0, statuses to low_status) */
    if (ctx->low_planes) {
        if (ctx->low_coded[0]) {
            if (get_low_plane(bs, o_lowc1, n, cs, &ctx->low_plane[0]) < 0) return -1;
            nlow = n;
        } else if (!(ctx->low1 = get_buf(bs, o[6], 0, 1, &nlow, "low1"))) {
            return -1;
        }
        if (ctx->low_coded[1]) {
            if (get_low_plane(bs, o_lowc0, n, cs, &ctx->low_plane[1]) < 0) return -1;
            nlow0 = n;
        } else if (!(ctx->low0 = get_buf(bs, o[7], 0, 1, &nlow0, "low0"))) {
            return -1;
        }
        if (ctx->low_coded[0] || ctx->low_coded[1]) {
            if (!(ctx->low_status = get_buf(bs, o[12], 1, 4, &nlst, "low_status"))) return -1;
        }
    } else if (ctx->low_coded[1] || o[7] != Py_None) {
        PyErr_SetString(PyExc_ValueError, "decode_merge_float: low0 without low1");
        return -1;
    }
    if (!(ctx->out = get_buf(bs, o[8], 1, 0, &nout, "out"))) return -1;
    ctx->out_bytes = (int)bs->b[bs->k - 1].itemsize;
    if (!(ctx->status = get_buf(bs, o[9], 1, 4, &nst, "status"))) return -1;
    ctx->p.n = n;
    ctx->p.chunk_size = cs;
    ctx->p.chunks_per_table = cpt;
    ctx->p.prob_bits = pb;
    if (check_plane(&ctx->p, ns, no, nl) < 0) return -1;
    int64_t n_chunks = no - 1;
    int R = ctx->tail_bits;
    if (np_ != 256 || nout != n || nst != n_chunks || (ctx->out_bytes != 2 && ctx->out_bytes != 4) ||
        R < 1 || R > 16 || ctx->n_tail != (n * R + 7) / 8 ||
        (ctx->low_planes && (nlow != n || nlow0 != n || ctx->out_bytes != 4)) ||
        (ctx->low_status && nlst != 2 * (no - 1)) ||
        ctx->sign_shift < 0 || ctx->sign_shift >= 8 * ctx->out_bytes || ctx->tail_shift < 0 || ctx->tail_shift > 16) {
        PyErr_SetString(PyExc_ValueError, "decode_merge_float: inconsistent arguments");
        return -1;
    }
    merge_derive(ctx);
    return 0;
}

/* the checksum of the decoded tensor from its chunks' (ctx->crcs) */
static uint32_t merge_out_crc(const merge_ctx *ctx) {
    int64_t cs = ctx->p.chunk_size, n = ctx->p.n, n_chunks = (n + cs - 1) / cs;
    return wc_crc32_join(ctx->crcs, n_chunks, cs * ctx->out_bytes, (n - (n_chunks - 1) * cs) * ctx->out_bytes);
}

/* ------------------------------------------------------------------------------------------ */
/* decode_float_file(fd, rows, outs, threads, verify) -> [code per tensor]
 *
 * Float records (format version 1) straight from their file: each row (FF_COLS int64, the
 * layout below; wcodec.codecs.float.file_row builds them from the validated header) names a
 * tensor's params and sections. Per tensor, on the extension's threads: its small sections
 * (alphabet, tables, states, offsets) are read and checked as wcodec.codecs.float.parse checks
 * them (the Python reference: every check it makes is made here, some stricter); then all
 * tensors' chunk pairs decode, each pair's words, tail and low bytes read just before it and its
 * tables' lookups built by the task that needs them (merge_pair, pair_lookup). Code 0: the
 * tensor is in its out buffer and every check passed (with verify: every section's and the
 * decoded bytes' CRC-32). Any other code (FF_E_*) leaves the tensor to the reference path, which
 * raises the precise error. */

enum { FF_N, FF_OBYTES, FF_E, FF_M, FF_L, FF_J, FF_R, FF_CRC, FF_HEAD, FF_LOW1 = FF_HEAD + 5,
       FF_LOW0 = FF_LOW1 + 6, FF_SEC = FF_LOW0 + 6 };
/* a plane's params: n_symbols, prob_bits, chunk_steps, chunks_per_table, alphabet_size (a low
 * plane's first: coded 0/1); the sections: (offset, size in bytes, CRC-32), offset -1 absent */
enum { FS_ALPHABET, FS_TAIL, FS_HEAD, FS_LOW1 = FS_HEAD + 5, FS_LOW0 = FS_LOW1 + 6, FS_COUNT = FS_LOW0 + 6 };
/* within a plane's sections: the plane's 5 (a low plane: raw, then the 5) */
enum { FP_FREQS, FP_BIG, FP_STATES, FP_OFFSETS, FP_WORDS };
#define FF_COLS (FF_SEC + 3 * FS_COUNT)

enum { FF_OK, FF_E_SECTION, FF_E_ALPHABET, FF_E_PLANE, FF_E_READ, FF_E_CRC, FF_E_CHUNK, FF_E_OUT_CRC, FF_E_MEMORY };

typedef struct {
    const int64_t *row;
    merge_ctx ctx;
    uint8_t *mem;    /* the small sections and unpacked tables of this tensor */
    uint64_t placed[256];
    int code;
} ftensor_t;

/* section k of a row: its offset (-1: absent), size, CRC */
#define SEC_OFF(row, k) ((row)[FF_SEC + 3 * (k)])
#define SEC_SIZE(row, k) ((row)[FF_SEC + 3 * (k) + 1])
#define SEC_CRC(row, k) ((row)[FF_SEC + 3 * (k) + 2])

/* read `k` sections (row indices idx) into buf, one after another at 8-byte aligned places
 * (pos[i]): one pread when they lie close together (the writer's order, padding between), else
 * one each; with verify, each checked against its CRC-32. Returns 0 or an FF_E_* code. */
static int read_small(merge_ctx *ctx, const int64_t *row, const int *idx, int k, uint8_t *buf, int64_t *pos,
                      int verify) {
    int64_t lo = INT64_MAX, hi = 0, total = 0;
    for (int i = 0; i < k; i++) {
        int64_t sz = SEC_SIZE(row, idx[i]);
        pos[i] = total;
        total += (sz + 7) / 8 * 8;
        if (sz > 0) {
            if (SEC_OFF(row, idx[i]) < lo) lo = SEC_OFF(row, idx[i]);
            if (SEC_OFF(row, idx[i]) + sz > hi) hi = SEC_OFF(row, idx[i]) + sz;
        }
    }
    if (lo < hi && hi - lo <= total + 4096) { /* one read of the span, then each section moved down */
        uint8_t *span = buf + total;          /* the caller gave room for total + 4096 more */
        if (src_read(ctx, span, hi - lo, lo)) return FF_E_READ;
        for (int i = 0; i < k; i++)
            if (SEC_SIZE(row, idx[i]) > 0) memmove(buf + pos[i], span + (SEC_OFF(row, idx[i]) - lo), SEC_SIZE(row, idx[i]));
    } else {
        for (int i = 0; i < k; i++)
            if (SEC_SIZE(row, idx[i]) > 0 && src_read(ctx, buf + pos[i], SEC_SIZE(row, idx[i]), SEC_OFF(row, idx[i])))
                return FF_E_READ;
    }
    if (verify)
        for (int i = 0; i < k; i++)
            if (wc_crc32(buf + pos[i], SEC_SIZE(row, idx[i]), 0) != (uint32_t)SEC_CRC(row, idx[i])) return FF_E_CRC;
    return 0;
}

/* one rANS plane of a row (params at pcol, sections from scol: freqs, freqs_big, states, offsets,
 * words) into q, its small sections read into mem (advanced past what it used), checked as
 * RansPlane.from_sections / validate check them; n: the symbols it must hold. 0 or FF_E_*. */
static int plane_from_row(merge_ctx *ctx, const int64_t *row, int pcol, int scol, int64_t n, plane_t *q,
                          uint8_t **mem, int verify) {
    const int64_t ns = row[pcol], pb = row[pcol + 1], steps = row[pcol + 2], cpt = row[pcol + 3], asz = row[pcol + 4];
    if (ns != n || ns < 0 || ns >= ((int64_t)1 << 40) || (pb != 11 && pb != 12) || steps < 1 || steps > 65536 ||
        cpt < 1 || cpt > ((int64_t)1 << 32) || asz < 1 || asz > 256)
        return FF_E_PLANE;
    for (int k = 0; k < 5; k++)
        if (SEC_OFF(row, scol + k) < 0) return FF_E_SECTION;
    const int64_t cs = 32 * steps, n_chunks = (ns + cs - 1) / cs, n_tables = ((n_chunks > 1 ? n_chunks : 1) + cpt - 1) / cpt;
    const int64_t small = SEC_SIZE(row, scol + FP_FREQS), big = SEC_SIZE(row, scol + FP_BIG) / 2;
    const int64_t st_bytes = SEC_SIZE(row, scol + FP_STATES), of_bytes = SEC_SIZE(row, scol + FP_OFFSETS);
    const int64_t n_words = SEC_SIZE(row, scol + FP_WORDS) / 2;
    /* bounds_error: symbols per stored byte (tables counted unpacked, 2 bytes each), tables per symbol */
    const int64_t stored = 2 * small + st_bytes + of_bytes + 2 * n_words;
    if (ns > 1024 * stored + ((int64_t)1 << 20) || n_tables > 1024 + ns / 1024) return FF_E_PLANE;
    if (small != n_tables * asz || st_bytes != n_chunks * LANES * 4 || of_bytes != (n_chunks + 1) * 4) return FF_E_PLANE;
    int idx[4] = {scol + FP_FREQS, scol + FP_BIG, scol + FP_STATES, scol + FP_OFFSETS};
    int64_t pos[4];
    int e = read_small(ctx, row, idx, 4, *mem, pos, verify);
    if (e) return e;
    const uint8_t *f8 = *mem + pos[0];
    const uint16_t *f16 = (const uint16_t *)(*mem + pos[1]);
    const uint32_t *offs = (const uint32_t *)(*mem + pos[3]);
    q->states = (const uint32_t *)(*mem + pos[2]);
    q->offsets = offs;
    int64_t used = pos[3] + (of_bytes + 7) / 8 * 8;
    /* the tables: escapes (255) taken in order from freqs_big, widened to 256 entries, each
     * summing to 2**prob_bits (their lookups are built by the tasks: pair_lookup) */
    uint16_t *full = (uint16_t *)(*mem + used);
    int64_t esc = 0;
    for (int64_t t = 0; t < n_tables; t++) {
        uint16_t *ft = full + 256 * t;
        int64_t sum = 0;
        for (int64_t s = 0; s < 256; s++) {
            uint16_t v = 0;
            if (s < asz) {
                v = f8[t * asz + s];
                if (v == 255) {
                    if (esc >= big) return FF_E_PLANE;
                    v = f16[esc++];
                }
            }
            ft[s] = v;
            sum += v;
        }
        if (sum != ((int64_t)1 << pb)) return FF_E_PLANE;
    }
    if (esc != big) return FF_E_PLANE;
    /* offsets: from 0 to the words' count, each chunk at most a chunk's symbols of words */
    if (offs[0] != 0 || (int64_t)offs[n_chunks] != n_words) return FF_E_PLANE;
    for (int64_t c = 0; c < n_chunks; c++)
        if (offs[c + 1] < offs[c] || (int64_t)(offs[c + 1] - offs[c]) > cs) return FF_E_PLANE;
    q->lookup = NULL;
    q->full = full;
    q->words = NULL;
    q->words_len = n_words > 0 ? n_words : 1;
    q->n = ns;
    q->chunk_size = cs;
    q->chunks_per_table = cpt;
    q->prob_bits = (int)pb;
    *mem += used + n_tables * 512;
    return 0;
}

/* bytes plane_from_row may use of mem for a plane of this row (small sections, slack for one
 * span read, unpacked tables), or -1 when the plane's params break the decoders' bounds (then
 * nothing is allocated for it: the reference refuses it) */
static int64_t plane_mem(const int64_t *row, int pcol, int scol) {
    const int64_t ns = row[pcol], pb = row[pcol + 1], steps = row[pcol + 2], cpt = row[pcol + 3];
    if (ns < 0 || ns >= ((int64_t)1 << 40) || steps < 1 || steps > 65536 || cpt < 1 || cpt > ((int64_t)1 << 32) ||
        (pb != 11 && pb != 12))
        return -1;
    const int64_t cs = 32 * steps, n_chunks = (ns + cs - 1) / cs, n_tables = ((n_chunks > 1 ? n_chunks : 1) + cpt - 1) / cpt;
    if (n_tables > 1024 + ns / 1024) return -1; /* bounds_error's tables per symbol */
    int64_t total = 4096 + 64;
    for (int k = 0; k < 4; k++) total += 2 * ((SEC_SIZE(row, scol + k) + 7) / 8 * 8) + 8;
    return total + n_tables * 512;
}

/* Buffers a thread keeps from one file decode to the next (slot 0: a worker's, 1: the set-up's):
 * one allocated per call was handed back to the system between loads, and its fresh pages (a
 * fault per 4 KiB) cost more than the reads. Up to TL_KEEP bytes each are kept; a larger one is
 * the caller's to free (*own). Freed when the thread exits. */
#define TL_KEEP ((size_t)8 << 20)
#ifdef WC_THREADS
typedef struct {
    uint8_t *buf[2];
    size_t cap[2];
} tl_cache_t;
static pthread_key_t g_tl_key;
static pthread_once_t g_tl_once = PTHREAD_ONCE_INIT;
static int g_tl_ok;
static void tl_free(void *v) {
    tl_cache_t *c = v;
    free(c->buf[0]);
    free(c->buf[1]);
    free(c);
}
static void tl_init(void) { g_tl_ok = pthread_key_create(&g_tl_key, tl_free) == 0; }
#endif
static uint8_t *tl_take(int k, size_t n, int *own) {
    *own = 1;
#ifdef WC_THREADS
    pthread_once(&g_tl_once, tl_init);
    if (g_tl_ok && n <= TL_KEEP) {
        tl_cache_t *c = pthread_getspecific(g_tl_key);
        if (!c && (c = calloc(1, sizeof *c)) && pthread_setspecific(g_tl_key, c)) {
            free(c);
            c = NULL;
        }
        if (c) {
            if (c->cap[k] < n) {
                free(c->buf[k]);
                c->cap[k] = 0;
                if (!(c->buf[k] = malloc(n))) return NULL;
                c->cap[k] = n;
            }
            *own = 0;
            return c->buf[k];
        }
    }
#endif
    return malloc(n ? n : 1);
}

/* bytes of ff_setup's memory for a row (alphabet, planes: see plane_mem), or -1 when its
 * planes break the decoders' bounds */
static int64_t ff_need(const int64_t *row) {
    int64_t need = plane_mem(row, FF_HEAD, FS_HEAD), more;
    for (int q = 0; q < 2 && row[FF_L]; q++)
        if (row[FF_LOW1 + 6 * q]) need = (more = plane_mem(row, FF_LOW1 + 6 * q + 1, FS_LOW1 + 6 * q + 1)) < 0 ? -1 : need + more;
    int64_t abytes = (SEC_SIZE(row, FS_ALPHABET) + 7) / 8 * 8;
    return need < 0 || abytes < 0 ? -1 : (need + 2 * abytes + 64 + 63) / 64 * 64;
}

/* task t of the set-up: tensor t's sections read and checked, its merge context ready */
static void ff_setup(void *vctx, int64_t t) {
    ftensor_t *ft = (ftensor_t *)vctx + t;
    const int64_t *row = ft->row;
    merge_ctx *ctx = &ft->ctx;
    const int verify = ctx->crcs != NULL;
    const int64_t n = row[FF_N], E = row[FF_E], M = row[FF_M], L = row[FF_L], j = row[FF_J], R = row[FF_R];
    const int ob = (int)row[FF_OBYTES];
    int e = FF_OK;
    if (ft->code) return; /* (its bounds, before any memory was given) */
    /* what parse / check_params check of the layout (the header's schema check did too) */
    if (n < 0 || (ob != 2 && ob != 4) || (L != 0 && L != 2) || (L == 2 && ob != 4) || j < 0 || j > 4 ||
        R != 1 + M - 8 * L - j || R < 1 || R > 16 || E < 1 || E + j > 16 || M - j < 0 || 8 * L + R - 1 >= 8 * ob) {
        ft->code = FF_E_PLANE;
        return;
    }
    const int64_t abytes = (SEC_SIZE(row, FS_ALPHABET) + 7) / 8 * 8; /* (a read uses twice that) */
    uint8_t *mem = ft->mem;
    /* the alphabet: 1..256 head values (if any weight), each below 2**(E + head_bits) */
    int ia = FS_ALPHABET;
    int64_t pa, na = SEC_SIZE(row, FS_ALPHABET) / 2;
    if (SEC_OFF(row, FS_ALPHABET) < 0 || SEC_OFF(row, FS_TAIL) < 0) {
        ft->code = FF_E_SECTION;
        return;
    }
    if ((n && (na < 1 || na > 256)) || na > 256) {
        ft->code = FF_E_ALPHABET;
        return;
    }
    if ((e = read_small(ctx, row, &ia, 1, mem, &pa, verify))) {
        ft->code = e;
        return;
    }
    const uint16_t *alphabet = (const uint16_t *)(mem + pa);
    for (int64_t s = 0; s < na; s++)
        if (alphabet[s] >= ((int64_t)1 << (E + j))) {
            ft->code = FF_E_ALPHABET;
            return;
        }
    for (int s = 0; s < 256; s++) ft->placed[s] = s < na ? (uint64_t)alphabet[s] << (M - j) : BAD_SYMBOL;
    mem += 2 * abytes + 8;
    if ((e = plane_from_row(ctx, row, FF_HEAD, FS_HEAD, n, &ctx->p, &mem, verify))) {
        ft->code = e;
        return;
    }
    ctx->words_at = SEC_OFF(row, FS_HEAD + FP_WORDS);
    /* the tail: R bits per weight; the low planes (F32): raw bytes, or coded with the head's chunks */
    if (SEC_SIZE(row, FS_TAIL) != (n * R + 7) / 8) {
        ft->code = FF_E_SECTION;
        return;
    }
    ctx->tail_at = SEC_OFF(row, FS_TAIL);
    ctx->n_tail = SEC_SIZE(row, FS_TAIL);
    ctx->low_planes = (int)L;
    for (int q = 0; q < 2; q++) {
        ctx->low_coded[q] = 0;
        if (!L) continue;
        const int pcol = FF_LOW1 + 6 * q, scol = FS_LOW1 + 6 * q;
        if (row[pcol]) {
            if (row[pcol + 3] != row[FF_HEAD + 2]) { /* not decoded beside the head: the reference's */
                ft->code = FF_E_PLANE;
                return;
            }
            if ((e = plane_from_row(ctx, row, pcol + 1, scol + 1, n, &ctx->low_plane[q], &mem, verify))) {
                ft->code = e;
                return;
            }
            ctx->low_coded[q] = 1;
            ctx->low_at[q] = SEC_OFF(row, scol + 1 + FP_WORDS);
        } else {
            if (SEC_OFF(row, scol) < 0 || SEC_SIZE(row, scol) != n) {
                ft->code = FF_E_SECTION;
                return;
            }
            ctx->low_at[q] = SEC_OFF(row, scol);
        }
    }
    ctx->placed = ft->placed;
    ctx->tail_shift = (int)(8 * L);
    ctx->sign_shift = 8 * ob - 1;
    ctx->out_bytes = ob;
    merge_derive(ctx);
}

/* worker `slot` of decode_float_file: pairs taken one by one from the shared counter, over every
 * tensor (largest first as the caller orders them), with one work buffer for all of them */
typedef struct {
    ftensor_t *ts;
    int64_t n;
    int64_t *first; /* [n + 1]: each tensor's first pair in the task numbering */
    int64_t next;   /* the next pair to take (atomic) */
    int64_t work;   /* bytes of each worker's work buffer */
    int oom;        /* a worker found no memory for its buffer (atomic) */
} ff_ctx;

static void ff_worker(void *vctx, int64_t slot) {
    ff_ctx *m = vctx;
    (void)slot;
    int own;
    uint8_t *work = tl_take(0, (size_t)m->work, &own);
    if (!work) {
        __atomic_store_n(&m->oom, 1, __ATOMIC_RELAXED);
        return; /* the other workers take its pairs; none left: oom */
    }
    lut_cache_t *lc = (lut_cache_t *)(work + m->work - 3 * (int64_t)sizeof(lut_cache_t));
    for (int q = 0; q < 3; q++) lc[q].plane = NULL; /* (a cache of an earlier call) */
    for (;;) {
        int64_t i = __atomic_fetch_add(&m->next, 1, __ATOMIC_RELAXED);
        if (i >= m->first[m->n]) break;
        int64_t lo = 0, hi = m->n - 1; /* the tensor holding pair i: first[lo] <= i < first[lo + 1] */
        while (lo < hi) {
            int64_t mid = (lo + hi + 1) / 2;
            if (m->first[mid] <= i) lo = mid;
            else hi = mid - 1;
        }
        merge_pair(&m->ts[lo].ctx, i - m->first[lo], work);
    }
    if (own) free(work);
}

/* CRC-32 of a section read in pieces of varying length (a plane's words: each pair's) */
static uint32_t join_words(const uint32_t *crc, const plane_t *p, int64_t n_pairs) {
    uint32_t c = 0;
    int64_t n_chunks = (p->n + p->chunk_size - 1) / p->chunk_size;
    for (int64_t t = 0; t < n_pairs; t++) {
        int64_t c1 = 2 * t + 2 < n_chunks ? 2 * t + 2 : n_chunks;
        c = wc_crc32_combine(c, crc[t], 2 * ((int64_t)p->offsets[c1] - p->offsets[2 * t]));
    }
    return c;
}

/* after the decode: tensor ft's statuses, read error and (verify) checksums into its code */
static void ff_finish(ftensor_t *ft, int64_t n_pairs, int verify) {
    merge_ctx *ctx = &ft->ctx;
    const int64_t *row = ft->row;
    if (ft->code) return;
    if (ctx->io_err) {
        ft->code = FF_E_READ;
        return;
    }
    int64_t cs = ctx->p.chunk_size, n_chunks = (ctx->p.n + cs - 1) / cs;
    for (int64_t c = 0; c < n_chunks; c++)
        if (ctx->status[c] || (ctx->low_status && (ctx->low_status[c] || ctx->low_status[n_chunks + c]))) {
            ft->code = FF_E_CHUNK;
            return;
        }
    if (!verify) return;
    const uint32_t *pc = ctx->piece_crc;
    int64_t last_vals = n_pairs ? ctx->p.n - 2 * (n_pairs - 1) * cs : 0, R = ctx->tail_bits;
    uint32_t got[4] = {join_words(pc, &ctx->p, n_pairs),
                       wc_crc32_join(pc + n_pairs, n_pairs, 2 * cs * R / 8, (last_vals * R + 7) / 8), 0, 0};
    int secs[4] = {FS_HEAD + FP_WORDS, FS_TAIL, -1, -1};
    for (int q = 0; q < 2 && ctx->low_planes; q++) {
        const uint32_t *lc = pc + (2 + q) * n_pairs;
        got[2 + q] = ctx->low_coded[q] ? join_words(lc, &ctx->low_plane[q], n_pairs)
                                       : wc_crc32_join(lc, n_pairs, 2 * cs, last_vals);
        secs[2 + q] = ctx->low_coded[q] ? FS_LOW1 + 6 * q + 1 + FP_WORDS : FS_LOW1 + 6 * q;
    }
    for (int k = 0; k < 4; k++)
        if (secs[k] >= 0 && got[k] != (uint32_t)SEC_CRC(row, secs[k])) {
            ft->code = FF_E_CRC;
            return;
        }
    if ((ctx->crcs ? merge_out_crc(ctx) : 0) != (uint32_t)row[FF_CRC]) ft->code = FF_E_OUT_CRC;
}

static PyObject *py_decode_float_file(PyObject *self, PyObject *args) {
    int fd = -1, threads, verify;
    PyObject *o_src, *o_rows, *o_outs, *fast = NULL, *res = NULL;
    if (!PyArg_ParseTuple(args, "OOOip", &o_src, &o_rows, &o_outs, &threads, &verify)) return NULL;
    bufs_t bs = {.k = 0};
    int64_t n_vals, src_len = 0;
    const uint8_t *src = NULL; /* the file's bytes in memory, or (NULL) fd */
    if (PyLong_Check(o_src)) {
        long v = PyLong_AsLong(o_src);
        if (v == -1 && PyErr_Occurred()) return NULL;
        fd = v >= 0 && v <= INT32_MAX ? (int)v : -1;
    } else if (!(src = get_buf(&bs, o_src, 0, 0, &src_len, "source"))) {
        return NULL;
    }
    if (src) src_len = bs.b[0].len;
    const int64_t *rows = get_buf(&bs, o_rows, 0, 8, &n_vals, "rows");
    if (!rows) goto done0;
    if (!(fast = PySequence_Fast(o_outs, "decode_float_file: outs must be a sequence of buffers"))) goto done0;
    Py_ssize_t nt = PySequence_Fast_GET_SIZE(fast), held = 0;
    if (n_vals != (int64_t)nt * FF_COLS || (!src && fd < 0)) {
        PyErr_SetString(PyExc_ValueError, "decode_float_file: rows must be [len(outs), FF_COLS] int64, src a file or bytes");
        goto done0;
    }
    uint8_t *block = NULL;
    int own_block = 0;
    ftensor_t *ts = calloc((size_t)(nt ? nt : 1), sizeof *ts);
    Py_buffer *views = calloc((size_t)(nt ? nt : 1), sizeof *views);
    int64_t *first = calloc((size_t)nt + 1, sizeof *first);
    int32_t **status = calloc((size_t)(nt ? nt : 1), sizeof *status);
    if (!ts || !views || !first || !status) {
        PyErr_NoMemory();
        goto done;
    }
    for (; held < nt; held++) {
        const int64_t *row = rows + held * FF_COLS;
        Py_buffer *v = &views[held];
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(fast, held), v, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) goto done;
        if (row[FF_N] < 0 || (row[FF_OBYTES] != 2 && row[FF_OBYTES] != 4) || v->len != row[FF_N] * row[FF_OBYTES] ||
            row[FF_HEAD + 2] < 1 || row[FF_HEAD + 2] > 65536) {
            held++;
            PyErr_SetString(PyExc_ValueError, "decode_float_file: an out buffer does not hold its tensor");
            goto done;
        }
    }
    /* every allocation here, on the calling thread (helper threads' arenas hand their pages
     * back between calls: fresh pages each load), one block for all tensors' set-up memory */
    int fail = 0;
    int64_t total = 0;
    for (Py_ssize_t t = 0; t < nt; t++) {
        int64_t need = ff_need(rows + t * FF_COLS);
        if (need < 0) ts[t].code = FF_E_PLANE;
        else total += need;
    }
    if (!(block = tl_take(1, (size_t)total, &own_block))) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t t = 0, at = 0; t < nt; t++)
        if (!ts[t].code) {
            ts[t].mem = block + at;
            at += ff_need(rows + t * FF_COLS);
        }
    for (Py_ssize_t t = 0; t < nt; t++) {
        const int64_t *row = rows + t * FF_COLS;
        ftensor_t *ft = &ts[t];
        merge_ctx *ctx = &ft->ctx;
        int64_t cs = 32 * row[FF_HEAD + 2], n_chunks = (row[FF_N] + cs - 1) / cs;
        ft->row = row;
        ctx->fd = fd;
        ctx->src = src;
        ctx->src_len = src_len;
        ctx->out = views[t].buf;
        ctx->p.n = row[FF_N]; /* until set up: the pair count below */
        ctx->p.chunk_size = cs;
        ctx->tail_bits = (int)row[FF_R];
        status[t] = calloc((size_t)(3 * n_chunks + 1), sizeof **status);
        ctx->status = status[t];
        ctx->low_status = row[FF_L] && (row[FF_LOW1] || row[FF_LOW0]) ? status[t] + n_chunks : NULL;
        if (verify) {
            ctx->crcs = calloc((size_t)(n_chunks + 1), sizeof *ctx->crcs);
            ctx->piece_crc = calloc((size_t)(4 * ((n_chunks + 1) / 2) + 1), sizeof *ctx->piece_crc);
        }
        if (!status[t] || (verify && (!ctx->crcs || !ctx->piece_crc))) fail = 1;
        first[t + 1] = first[t] + (n_chunks + 1) / 2;
    }
    if (fail) {
        PyErr_NoMemory();
        goto done;
    }
    /* the workers' buffers: each for the largest pair of any tensor */
    int64_t work = 0;
    for (Py_ssize_t t = 0; t < nt; t++) {
        const int64_t *row = rows + t * FF_COLS;
        int64_t w = file_work_bytes(32 * row[FF_HEAD + 2], row[FF_L] && (row[FF_LOW1] || row[FF_LOW0]));
        if (w > work) work = w;
    }
    int oom = 0;
    Py_BEGIN_ALLOW_THREADS
    run_parallel(ff_setup, ts, nt, pick_threads(threads, nt));
    /* tensors that failed their set-up decode nothing: their pairs are taken out of the numbering
     * (each tensor's own count from the numbering before, first[t] being renumbered already) */
    for (Py_ssize_t t = 0, was = first[0]; t < nt; t++) {
        int64_t pairs = ts[t].code ? 0 : first[t + 1] - was;
        was = first[t + 1];
        first[t + 1] = first[t] + pairs;
    }
    if (first[nt] > 0) {
        ff_ctx m = {ts, nt, first, 0, work, 0};
        int workers = pick_threads(threads, first[nt]);
        run_parallel(ff_worker, &m, workers, workers);
        if (m.oom && m.next < first[nt]) oom = 1; /* no worker had a buffer: pairs left undone */
    }
    for (Py_ssize_t t = 0; t < nt && !oom; t++) ff_finish(&ts[t], first[t + 1] - first[t], verify);
    Py_END_ALLOW_THREADS
    if (oom) {
        PyErr_NoMemory();
        goto done;
    }
    if (!(res = PyList_New(nt))) goto done;
    for (Py_ssize_t t = 0; t < nt; t++) {
        PyObject *c = PyLong_FromLong(ts[t].code);
        if (!c) {
            Py_CLEAR(res);
            goto done;
        }
        PyList_SET_ITEM(res, t, c);
    }
done:
    if (own_block) free(block);
    for (Py_ssize_t t = 0; t < nt && ts && status; t++) {
        free(ts[t].ctx.crcs);
        free(ts[t].ctx.piece_crc);
        free(status[t]);
    }
    for (Py_ssize_t t = 0; t < held; t++) PyBuffer_Release(&views[t]);
    free(ts);
    free(views);
    free(first);
    free(status);
done0:
    Py_XDECREF(fast);
    bufs_release(&bs);
    return res;
}

/* ------------------------------------------------------------------------------------------ */
/* encode: histograms, normalisation, the float split, rANS encode                           */

/* symbol counts per block of `block` symbols: chunk_histograms (u8 symbols, int64 counts of 256,
 * the byte planes' chunks) and block_histograms16 (u16 symbols, int32 counts of 65536, the joint
 * plane's blocks) share the context and the entry point; each has its own task */
typedef struct {
    const void *sym;
    int64_t n, block;
    void *counts;         /* [n_blocks, alphabet], or [k, alphabet] with which */
    const int64_t *which; /* NULL: task k counts block k; else block which[k] (segment_histograms16) */
} counts_ctx;

/* the tail of an entry point whose tasks need no Python: n_tasks tasks on up to `threads` threads
 * with the GIL released, then the buffers released; None */
static PyObject *run_released(bufs_t *bs, task_fn task, void *ctx, int64_t n_tasks, int threads) {
    if (n_tasks > 0) {
        threads = pick_threads(threads, n_tasks);
        Py_BEGIN_ALLOW_THREADS
        run_parallel(task, ctx, n_tasks, threads);
        Py_END_ALLOW_THREADS
    }
    bufs_release(bs);
    Py_RETURN_NONE;
}

static void hist_task(void *vctx, int64_t c) {
    counts_ctx *ctx = vctx;
    const uint8_t *sym = ctx->sym;
    int64_t a = c * ctx->block, b = ctx->n < a + ctx->block ? ctx->n : a + ctx->block;
    uint32_t h[4][256];
    memset(h, 0, sizeof h);
    int64_t i = a;
    for (; i + 4 <= b; i += 4) { /* four sub-histograms: no store-to-load stalls on repeats */
        h[0][sym[i]]++;
        h[1][sym[i + 1]]++;
        h[2][sym[i + 2]]++;
        h[3][sym[i + 3]]++;
    }
    for (; i < b; i++) h[0][sym[i]]++;
    int64_t *row = (int64_t *)ctx->counts + c * 256;
    for (int s = 0; s < 256; s++) row[s] = (int64_t)h[0][s] + h[1][s] + h[2][s] + h[3][s];
}

/* (symbols, block, counts, threads) of a block-counts entry point: symbols of sym_bytes each,
 * counts [n_blocks * alphabet] of count_bytes each, 1 <= block <= max_block; runs task per block */
static PyObject *block_counts(PyObject *args, int sym_bytes, int count_bytes, int64_t alphabet, long long max_block,
                              task_fn task, const char *name) {
    PyObject *o_sym, *o_counts;
    long long block;
    int threads;
    if (!PyArg_ParseTuple(args, "OLOi", &o_sym, &block, &o_counts, &threads)) return NULL;
    bufs_t bs = {.k = 0};
    counts_ctx ctx = {.which = NULL};
    int64_t nc;
    if (!(ctx.sym = get_buf(&bs, o_sym, 0, sym_bytes, &ctx.n, "symbols"))) goto fail;
    if (!(ctx.counts = get_buf(&bs, o_counts, 1, count_bytes, &nc, "counts"))) goto fail;
    ctx.block = block;
    if (block < 1 || block > max_block || nc != ((ctx.n + block - 1) / block) * alphabet) {
        PyErr_Format(PyExc_ValueError, "%s: bad sizes", name);
        goto fail;
    }
    return run_released(&bs, task, &ctx, nc / alphabet, threads);
fail:
    bufs_release(&bs);
    return NULL;
}

/* chunk_histograms(symbols, chunk_size, counts, threads); counts: [n_chunks * 256] int64 */
static PyObject *py_chunk_histograms(PyObject *self, PyObject *args) {
    return block_counts(args, 1, 8, 256, 1 << 24, hist_task, "chunk_histograms");
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

/* four interleaved 32-bit sub-histograms: runs of equal values (weights' exponents cluster)
 * would otherwise chain every increment through one counter (store-to-load latency) */
#define HH_LOOP(T)                                                                               \
    do {                                                                                         \
        const T *x = ctx->bits;                                                                  \
        int64_t i = a;                                                                           \
        for (; i + 4 <= b; i += 4) {                                                             \
            h0[(x[i] >> sh) & msk]++;                                                            \
            h1[(x[i + 1] >> sh) & msk]++;                                                        \
            h2[(x[i + 2] >> sh) & msk]++;                                                        \
            h3[(x[i + 3] >> sh) & msk]++;                                                        \
        }                                                                                        \
        for (; i < b; i++) h0[(x[i] >> sh) & msk]++;                                             \
    } while (0)

static void hh_task(void *vctx, int64_t p) {
    hh_ctx *ctx = vctx;
    int64_t a = p * ctx->part, b = ctx->n < a + ctx->part ? ctx->n : a + ctx->part;
    int64_t nb = (int64_t)ctx->mask + 1;
    int64_t *h = ctx->parts + p * nb;
    uint32_t *sub = calloc((size_t)(4 * nb), sizeof(uint32_t));
    if (!sub) { /* no memory for the fast path: count directly */
        for (int64_t i = a; i < b; i++)
            h[((ctx->bytes == 2 ? ((const uint16_t *)ctx->bits)[i] : ((const uint32_t *)ctx->bits)[i]) >> ctx->shift) & ctx->mask]++;
        return;
    }
    uint32_t *h0 = sub, *h1 = sub + nb, *h2 = sub + 2 * nb, *h3 = sub + 3 * nb;
    const int sh = ctx->shift;
    const uint32_t msk = ctx->mask;
    if (ctx->bytes == 2) HH_LOOP(uint16_t);
    else HH_LOOP(uint32_t);
    for (int64_t k = 0; k < nb; k++) h[k] += (int64_t)h0[k] + h1[k] + h2[k] + h3[k];
    free(sub);
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
    while (ctx.n / n_parts >= ((int64_t)1 << 31)) n_parts *= 2; /* 32-bit sub-histograms */
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

/* block_head_histograms(bits, shift, mask, block, out, threads): out[b, (x >> shift) & mask] =
 * count over values [b * block, (b + 1) * block) of uint16/uint32 bits; out: [n_blocks, mask + 1]
 * uint32. One pass gives the float encoder both the tensor's head histogram (the sum of the
 * rows) and, once head_bits is chosen, the head symbols' counts per table segment (summed over
 * each symbol's bins), which a second histogram of the symbols gave before. */
typedef struct {
    const void *bits;
    int bytes, shift;
    uint32_t mask;
    int64_t n, block;
    uint32_t *out;
} bh_ctx;

static void bh_task(void *vctx, int64_t blk) {
    bh_ctx *ctx = vctx;
    int64_t a = blk * ctx->block, b = ctx->n < a + ctx->block ? ctx->n : a + ctx->block;
    int64_t nb = (int64_t)ctx->mask + 1;
    uint32_t *row = ctx->out + blk * nb;
    uint32_t *sub = calloc((size_t)(3 * nb), sizeof(uint32_t)); /* row is the fourth */
    const int sh = ctx->shift;
    const uint32_t msk = ctx->mask;
    memset(row, 0, (size_t)nb * sizeof(uint32_t));
    if (!sub) {
        for (int64_t i = a; i < b; i++)
            row[((ctx->bytes == 2 ? ((const uint16_t *)ctx->bits)[i] : ((const uint32_t *)ctx->bits)[i]) >> sh) & msk]++;
        return;
    }
    uint32_t *h0 = row, *h1 = sub, *h2 = sub + nb, *h3 = sub + 2 * nb;
    if (ctx->bytes == 2) HH_LOOP(uint16_t);
    else HH_LOOP(uint32_t);
    for (int64_t k = 0; k < nb; k++) row[k] += h1[k] + h2[k] + h3[k];
    free(sub);
}

static PyObject *py_block_head_histograms(PyObject *self, PyObject *args) {
    PyObject *o_bits, *o_out;
    int shift, threads;
    unsigned int mask;
    long long block;
    if (!PyArg_ParseTuple(args, "OiILOi", &o_bits, &shift, &mask, &block, &o_out, &threads)) return NULL;
    bufs_t bs = {.k = 0};
    bh_ctx ctx;
    int64_t no;
    ctx.bits = get_buf(&bs, o_bits, 0, 0, &ctx.n, "bits");
    if (!ctx.bits) goto fail;
    ctx.bytes = (int)bs.b[0].itemsize;
    ctx.out = get_buf(&bs, o_out, 1, 4, &no, "out");
    if (!ctx.out) goto fail;
    int64_t n_blocks = block > 0 ? (ctx.n + block - 1) / block : 0;
    if ((ctx.bytes != 2 && ctx.bytes != 4) || shift < 0 || shift >= 32 || mask > (1u << 16) || block < 1 ||
        block > ((int64_t)1 << 32) - 1 || no != n_blocks * ((int64_t)mask + 1)) {
        PyErr_SetString(PyExc_ValueError, "block_head_histograms: bad arguments");
        goto fail;
    }
    ctx.shift = shift;
    ctx.mask = mask;
    ctx.block = block;
    threads = pick_threads(threads, n_blocks);
    Py_BEGIN_ALLOW_THREADS
    run_parallel(bh_task, &ctx, n_blocks, threads);
    Py_END_ALLOW_THREADS
    bufs_release(&bs);
    Py_RETURN_NONE;
fail:
    bufs_release(&bs);
    return NULL;
}

/* block_symbol_counts(per_block [n_blocks, bins] uint32, bins_present [P] int64, symbol [P]
 * uint8, out [n_blocks, 256] int64): out[b, symbol[k]] += per_block[b, bins_present[k]] */
static PyObject *py_block_symbol_counts(PyObject *self, PyObject *args) {
    PyObject *o_pb, *o_present, *o_sym, *o_out;
    long long bins;
    if (!PyArg_ParseTuple(args, "OLOOO", &o_pb, &bins, &o_present, &o_sym, &o_out)) return NULL;
    bufs_t bs = {.k = 0};
    int64_t npb, np_, nsym, nout;
    const uint32_t *pb = get_buf(&bs, o_pb, 0, 4, &npb, "per_block");
    if (!pb) goto fail;
    const int64_t *present = get_buf(&bs, o_present, 0, 8, &np_, "bins_present");
    if (!present) goto fail;
    const uint8_t *sym = get_buf(&bs, o_sym, 0, 1, &nsym, "symbol");
    if (!sym) goto fail;
    int64_t *out = get_buf(&bs, o_out, 1, 8, &nout, "out");
    if (!out) goto fail;
    if (bins < 1 || npb % bins || nsym != np_ || nout != npb / bins * 256) {
        PyErr_SetString(PyExc_ValueError, "block_symbol_counts: bad sizes");
        goto fail;
    }
    for (int64_t k = 0; k < np_; k++)
        if (present[k] < 0 || present[k] >= bins) {
            PyErr_SetString(PyExc_ValueError, "block_symbol_counts: bin out of range");
            goto fail;
        }
    memset(out, 0, (size_t)nout * sizeof(int64_t));
    for (int64_t b = 0; b < npb / bins; b++)
        for (int64_t k = 0; k < np_; k++) out[b * 256 + sym[k]] += pb[b * bins + present[k]];
    bufs_release(&bs);
    Py_RETURN_NONE;
fail:
    bufs_release(&bs);
    return NULL;
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

/* one row of counts -> frequencies summing to 2**pb (as native/numba_normalize.py): floor of the scaled
 * count, at least 1 for a present symbol; the rounding room goes to the most frequent symbol; an
 * overshoot is taken back one unit at a time from the largest frequencies (ties: lower symbol) */
static void normalize_row(const int64_t *cr, int pb, int64_t *f, int alphabet) {
    /* cr[s] = 0 for s >= alphabet */
    const int64_t total_prob = (int64_t)1 << pb;
    int64_t total = 0;
    int best = 0;
    for (int s = 0; s < alphabet; s++) {
        total += cr[s];
        if (cr[s] > cr[best]) best = s;
    }
    memset(f, 0, 256 * sizeof(int64_t));
    if (total == 0) {
        f[0] = total_prob;
        return;
    }
    int64_t acc = 0;
    const double rt = 1.0 / (double)total;
    for (int s = 0; s < alphabet; s++)
        if (cr[s] > 0) {
            /* floor(cr * 2**pb / total): a double estimate (cr * 2**pb < 2**53 is exact, the
             * estimate is off by at most one), corrected exactly (an int64 division is slow) */
            int64_t a = cr[s] * total_prob, v = (int64_t)((double)a * rt);
            v -= v * total > a;
            v += (v + 1) * total <= a;
            f[s] = v > 1 ? v : 1;
            acc += f[s];
        }
    int64_t diff = total_prob - acc;
    if (diff > 0) f[best] += diff;
    while (diff < 0) {
        /* the symbols with f > 1 by frequency descending, ties by symbol (a stable argsort of -f
         * cut where f <= 1, where the numba loop stops): keys f << 8 | (255 - s), descending */
        int64_t key[256];
        int k = 0;
        for (int s = 0; s < 256; s++)
            if (f[s] > 1) key[k++] = f[s] << 8 | (255 - s);
        qsort(key, (size_t)k, sizeof key[0], cmp_desc);
        for (int i = 0; i < k && diff < 0; i++) {
            f[255 - (key[i] & 255)]--;
            diff++;
        }
        if (k == 0) break; /* cannot happen for 256 symbols and 2**pb >= 256; never loop */
    }
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
    for (int64_t r = 0; r < nc / 256; r++) {
        int64_t f[256];
        normalize_row(counts + r * 256, pb, f, 256);
        for (int s = 0; s < 256; s++) out[r * 256 + s] = (uint16_t)f[s];
    }
    bufs_release(&bs);
    Py_RETURN_NONE;
fail:
    bufs_release(&bs);
    return NULL;
}

/* choose_tables(counts [n_chunks*256] int64, candidates [k] int64, prob_bits) -> index of the
 * candidate chunks_per_table with the smallest ideal coded size + packed table storage, as
 * rans._choose_tables (which runs where the extension does not): a later (finer) candidate wins
 * only by more than 1e-9 bits per symbol, so float rounding differences between the two never
 * flip a choice. Runs with the GIL released (it was a per-tensor Python cost of the encoder). */
static double g_log2[4097]; /* log2(f) of every frequency (log2(1) for 0: never used) */

static PyObject *py_choose_tables(PyObject *self, PyObject *args) {
    PyObject *o_counts, *o_cand;
    int pb;
    if (!PyArg_ParseTuple(args, "OOi", &o_counts, &o_cand, &pb)) return NULL;
    bufs_t bs = {.k = 0};
    int64_t nc, nk;
    const int64_t *counts = get_buf(&bs, o_counts, 0, 8, &nc, "counts");
    if (!counts) goto fail;
    const int64_t *cand = get_buf(&bs, o_cand, 0, 8, &nk, "candidates");
    if (!cand) goto fail;
    if (nc % 256 || nc == 0 || nk < 1 || (pb != 11 && pb != 12)) {
        PyErr_SetString(PyExc_ValueError, "choose_tables: bad sizes");
        goto fail;
    }
    for (int64_t k = 0; k < nk; k++)
        if (cand[k] < 1) {
            PyErr_SetString(PyExc_ValueError, "choose_tables: candidates must be >= 1");
            goto fail;
        }
    int64_t n_chunks = nc / 256, best_k = 0;
    Py_BEGIN_ALLOW_THREADS
    int64_t n_sym = 0, alphabet = 1;
    for (int64_t i = 0; i < nc; i++) {
        n_sym += counts[i];
        if (counts[i] && (i & 255) + 1 > alphabet) alphabet = (i & 255) + 1;
    }
    double best = 0;
    for (int64_t k = 0; k < nk; k++) {
        double cost = 0;
        for (int64_t g0 = 0; g0 < n_chunks; g0 += cand[k]) {
            int64_t g[256], f[256];
            memset(g, 0, sizeof g);
            for (int64_t c = g0; c < n_chunks && c < g0 + cand[k]; c++) {
                const int64_t *restrict row = counts + c * 256;
                for (int s = 0; s < alphabet; s++) g[s] += row[s];
            }
            normalize_row(g, pb, f, (int)alphabet);
            for (int s = 0; s < alphabet; s++) {
                if (g[s]) cost += (double)g[s] * (pb - g_log2[f[s] > 0 ? f[s] : 1]);
                cost += f[s] >= 255 ? 24.0 : 8.0; /* pack_freqs: a byte, + 2 for an escape */
            }
        }
        if (k == 0 || cost < best - 1e-9 * (double)n_sym) {
            best = cost;
            best_k = k;
        }
    }
    Py_END_ALLOW_THREADS
    bufs_release(&bs);
    return PyLong_FromLongLong(best_k);
fail:
    bufs_release(&bs);
    return NULL;
}

/* float_head_bits(hist_max [2**(exp_bits + max_j)] int64, exp_bits, tail_bits0, max_j) -> head_bits:
 * as codecs.float.choose_head_bits (its numpy twin; a larger j must win by 1e-9 bits per value,
 * so the two agree despite summing in other orders) */
static PyObject *py_float_head_bits(PyObject *self, PyObject *args) {
    PyObject *o_hist;
    int E, tail0, max_j;
    if (!PyArg_ParseTuple(args, "Oiii", &o_hist, &E, &tail0, &max_j)) return NULL;
    bufs_t bs = {.k = 0};
    int64_t nh;
    const int64_t *hist = get_buf(&bs, o_hist, 0, 8, &nh, "hist");
    if (!hist) goto fail;
    if (E < 1 || max_j < 0 || E + max_j > 20 || nh != (int64_t)1 << (E + max_j)) {
        PyErr_SetString(PyExc_ValueError, "float_head_bits: bad sizes");
        goto fail;
    }
    int64_t n = 0;
    for (int64_t i = 0; i < nh; i++) n += hist[i];
    double best = 0;
    int best_j = 0;
    for (int j = 0; j <= max_j && tail0 - j >= 1; j++) {
        int64_t group = (int64_t)1 << (max_j - j), distinct = 0;
        double ent = 0;
        for (int64_t b = 0; b < nh; b += group) {
            int64_t c = 0;
            for (int64_t k = b; k < b + group; k++) c += hist[k];
            if (c) {
                distinct++;
                ent += (double)c * (log2((double)n) - log2((double)c));
            }
        }
        if (distinct > 256) break;
        double cost = ent + (double)n * (tail0 - j) + 32.0 * distinct;
        if (j == 0 || cost < best - 1e-9 * (double)n) {
            best = cost;
            best_j = j;
        }
    }
    bufs_release(&bs);
    return PyLong_FromLong(best_j);
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
    int64_t base;         /* head values base..base+255 are looked up in registers (-1: none) */
    uint16_t window[256]; /* symbol_of[base + k] */
    /* the longest run of head values [run_v0, run_v0 + run_len) with consecutive symbols:
     * symbol_of[v] = run_s0 + (v - run_v0) there (the AVX2 split computes those) */
    int32_t run_v0, run_len, run_s0;
    uint32_t *crcs;       /* [4, n_tasks]: CRC-32 of each task's input, tail, low1 and low0 bytes, or NULL */
    int64_t n_tasks;
} split_ctx;

#define SPLIT_BLOCKS 4096 /* blocks of 8 values per task */

/* blocks [from, b1), any tail width */
static inline __attribute__((always_inline)) void split_body(split_ctx *ctx, int64_t from, int64_t b1) {
    const int R = ctx->R;
    const int64_t n = ctx->n;
    uint8_t *low1 = ctx->low, *low0 = ctx->low + n;
    for (int64_t blk = from; blk < b1; blk++) {
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

static inline __attribute__((always_inline)) void split_body_task(split_ctx *ctx, int64_t task) {
    int64_t b0 = task * SPLIT_BLOCKS, n_blocks = (ctx->n + 7) / 8;
    int64_t b1 = n_blocks < b0 + SPLIT_BLOCKS ? n_blocks : b0 + SPLIT_BLOCKS;
    split_body(ctx, b0, b1);
}

/* the common case (BF16, F32: tails of <= 8 bits): a whole block's fields in one 64-bit word,
 * no branches; B = bytes per value, LP = low byte planes */
#define SPLIT_FAST(NAME, T, LP)                                                                  \
    static inline __attribute__((always_inline)) int64_t NAME(split_ctx *ctx, int64_t b0, int64_t b1) { \
        const int R = ctx->R, sh = ctx->shift, tsh = ctx->tail_shift, ssh = ctx->sign_shift;     \
        const uint32_t msk = ctx->mask, tmsk = ctx->tail_mask;                                   \
        const T *bits = (const T *)ctx->bits;                                                    \
        uint8_t *low1 = ctx->low, *low0 = ctx->low + ctx->n;                                     \
        int64_t blk = b0;                                                                        \
        /* full blocks whose 8-byte tail store stays inside this task's bytes */                 \
        const int64_t lim = b1 * R < ctx->n_tail ? b1 * R : ctx->n_tail;                       \
        for (; (blk + 1) * 8 <= ctx->n && blk * R + 8 <= lim; blk++) {                           \
            int64_t i0 = blk * 8;                                                                \
            uint64_t word = 0;                                                                   \
            for (int j = 0; j < 8; j++) {                                                        \
                uint32_t b = bits[i0 + j];                                                       \
                ctx->head[i0 + j] = ctx->symbol_of[(b >> sh) & msk];                             \
                word |= (uint64_t)((((b >> ssh) << (R - 1)) | ((b >> tsh) & tmsk))) << (j * R);  \
                if (LP) {                                                                        \
                    low1[i0 + j] = (uint8_t)(b >> 8);                                            \
                    low0[i0 + j] = (uint8_t)b;                                                   \
                }                                                                                \
            }                                                                                    \
            memcpy(ctx->tail + blk * R, &word, 8); /* bytes past R: the next block rewrites */  \
        }                                                                                        \
        return blk;                                                                              \
    }
SPLIT_FAST(split_fast16, uint16_t, 0)
SPLIT_FAST(split_fast32, uint32_t, 1)

#ifdef WC_X86
static int64_t split_avx512_w(split_ctx *ctx, int64_t b0, int64_t b1);
static int64_t split_avx2_w(split_ctx *ctx, int64_t b0, int64_t b1);
#endif

static inline __attribute__((always_inline)) void split_one_task(split_ctx *ctx, int64_t task) {
    if (ctx->R <= 8 && ((ctx->bytes == 2 && ctx->low_planes == 0) || (ctx->bytes == 4 && ctx->low_planes == 2))) {
        int64_t b0 = task * SPLIT_BLOCKS, n_blocks = (ctx->n + 7) / 8;
        int64_t b1 = n_blocks < b0 + SPLIT_BLOCKS ? n_blocks : b0 + SPLIT_BLOCKS;
        int64_t done = b0;
#ifdef WC_X86
        if (ctx->sign_shift == 8 * ctx->bytes - 1 && ctx->tail_shift == 8 * ctx->bytes - 16) {
            if (g_isa == ISA_AVX512) done = split_avx512_w(ctx, b0, b1);
            else if (g_isa == ISA_AVX2) done = split_avx2_w(ctx, b0, b1);
        }
#endif
        done = ctx->bytes == 2 ? split_fast16(ctx, done, b1) : split_fast32(ctx, done, b1);
        split_body(ctx, done, b1);
    } else {
        split_body_task(ctx, task);
    }
}

/* a task's split, then (when asked) the checksums of the input values it just read and of the
 * tail and low bytes it just wrote, still in cache: the writer stores the tensor's and each
 * section's CRC-32, which separate passes read from memory again (issue 30). A task writes
 * exactly its blocks' tail bytes [b0 R, b1 R) and low bytes [i0, i1). */
static inline __attribute__((always_inline)) void split_dispatch(split_ctx *ctx, int64_t task) {
    split_one_task(ctx, task);
    if (ctx->crcs) {
        int64_t i0 = task * SPLIT_BLOCKS * 8, i1 = ctx->n < i0 + SPLIT_BLOCKS * 8 ? ctx->n : i0 + SPLIT_BLOCKS * 8;
        int64_t t0 = task * SPLIT_BLOCKS * ctx->R, t1 = ctx->n_tail < t0 + SPLIT_BLOCKS * ctx->R ? ctx->n_tail : t0 + SPLIT_BLOCKS * ctx->R;
        uint32_t *crc = ctx->crcs + task;
        crc[0] = wc_crc32((const uint8_t *)ctx->bits + i0 * ctx->bytes, (i1 - i0) * ctx->bytes, 0);
        crc[ctx->n_tasks] = wc_crc32(ctx->tail + t0, t1 - t0, 0);
        if (ctx->low_planes == 2) {
            crc[2 * ctx->n_tasks] = wc_crc32(ctx->low + i0, i1 - i0, 0);
            crc[3 * ctx->n_tasks] = wc_crc32(ctx->low + ctx->n + i0, i1 - i0, 0);
        }
    }
}

static void split_task_scalar(void *vctx, int64_t task) { split_dispatch(vctx, task); }

#ifdef WC_X86
/* AVX-512 split of 32 values per iteration for BF16 and F32 (tails <= 8 bits): the upper 16 bits
 * of a value are laid out alike in both (head, sign at bit 15, tail at bit 0); the head symbols
 * are looked up one by one (a table of up to 4096 bytes), the 32 tail fields are computed in
 * 16-bit lanes, narrowed to bytes and packed R bits each by pext, 8 fields per 64-bit word.
 * Returns the first block it did not do (the rest: split_fast, then split_body). */
__attribute__((target("avx512f,avx512bw,bmi2")))
static int64_t split_avx512_w(split_ctx *ctx, int64_t b0, int64_t b1) {
    const int R = ctx->R, f32 = ctx->bytes == 4;
    const int sh = ctx->shift - (f32 ? 16 : 0);
    const __m512i msk = _mm512_set1_epi16((short)ctx->mask), tmsk = _mm512_set1_epi16((short)ctx->tail_mask);
    const __m128i shv = _mm_cvtsi32_si128(sh), rv = _mm_cvtsi32_si128(R - 1);
    const uint64_t pmask = 0x0101010101010101ull * ((1u << R) - 1);
    const int64_t lim = b1 * R < ctx->n_tail ? b1 * R : ctx->n_tail;
    uint8_t *low1 = ctx->low, *low0 = ctx->low + ctx->n;
    const int win = ctx->base >= 0;
    const __m512i vbase = _mm512_set1_epi16((short)(win ? ctx->base : 0)), v256 = _mm512_set1_epi16(256);
    __m512i TW[8];
    for (int k = 0; k < 8; k++) TW[k] = _mm512_loadu_si512(ctx->window + 32 * k);
    int64_t blk = b0;
    for (; (blk + 4) * 8 <= ctx->n && (blk + 3) * R + 8 <= lim; blk += 4) {
        int64_t i0 = blk * 8;
        __m512i u;
        if (f32) {
            __m512i v0 = _mm512_loadu_si512((const uint32_t *)ctx->bits + i0);
            __m512i v1 = _mm512_loadu_si512((const uint32_t *)ctx->bits + i0 + 16);
            u = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v0, 16))),
                                   _mm512_cvtepi32_epi16(_mm512_srli_epi32(v1, 16)), 1);
            _mm_storeu_si128((__m128i *)(low0 + i0), _mm512_cvtepi32_epi8(v0));
            _mm_storeu_si128((__m128i *)(low0 + i0 + 16), _mm512_cvtepi32_epi8(v1));
            _mm_storeu_si128((__m128i *)(low1 + i0), _mm512_cvtepi32_epi8(_mm512_srli_epi32(v0, 8)));
            _mm_storeu_si128((__m128i *)(low1 + i0 + 16), _mm512_cvtepi32_epi8(_mm512_srli_epi32(v1, 8)));
        } else {
            u = _mm512_loadu_si512((const uint16_t *)ctx->bits + i0);
        }
        uint16_t idx[32];
        __m512i iv = _mm512_and_si512(_mm512_srl_epi16(u, shv), msk);
        if (win) { /* in-window head values from registers, the rare others one by one */
            __m512i rel = _mm512_sub_epi16(iv, vbase);
            __mmask32 out = _mm512_cmpge_epu16_mask(rel, v256);
            _mm256_storeu_si256((__m256i *)(ctx->head + i0), _mm512_cvtepi16_epi8(lut256w(rel, TW)));
            if (out) {
                _mm512_storeu_si512(idx, iv);
                for (uint32_t o = out; o; o &= o - 1) {
                    int k = __builtin_ctz(o);
                    ctx->head[i0 + k] = ctx->symbol_of[idx[k]];
                }
            }
        } else {
            _mm512_storeu_si512(idx, iv);
            for (int k = 0; k < 32; k++) ctx->head[i0 + k] = ctx->symbol_of[idx[k]];
        }
        __m512i t = _mm512_or_si512(_mm512_sll_epi16(_mm512_srli_epi16(u, 15), rv), _mm512_and_si512(u, tmsk));
        uint64_t tb[4];
        _mm256_storeu_si256((__m256i *)tb, _mm512_cvtepi16_epi8(t));
        for (int q = 0; q < 4; q++) {
            uint64_t word = _pext_u64(tb[q], pmask);
            memcpy(ctx->tail + (blk + q) * R, &word, 8); /* bytes past R: rewritten next */
        }
    }
    return blk;
}
#endif
#ifdef WC_X86
/* AVX2 split of 16 values per iteration, as split_avx512_w: the tail fields in 16-bit lanes,
 * narrowed to bytes and packed by pext; the head symbols computed where all 16 head values are in
 * symbol_of's longest run of consecutive symbols (run_v0...), else by scalar loads from symbol_of
 * (AVX2 has no 256-entry byte lookup that beats them). On a 2-vCPU AMD EPYC (Zen 3, no AVX-512)
 * the scalar split_fast16 was the encoder's largest stage (bf16 MiniLM: 48% of the encode). */
__attribute__((target("avx2,bmi2")))
static int64_t split_avx2_w(split_ctx *ctx, int64_t b0, int64_t b1) {
    const int R = ctx->R, f32 = ctx->bytes == 4;
    const int sh = ctx->shift - (f32 ? 16 : 0);
    const __m256i msk = _mm256_set1_epi16((short)ctx->mask), tmsk = _mm256_set1_epi16((short)ctx->tail_mask);
    const __m128i shv = _mm_cvtsi32_si128(sh), rv = _mm_cvtsi32_si128(R - 1);
    const uint64_t pmask = 0x0101010101010101ull * ((1u << R) - 1);
    const int64_t lim = b1 * R < ctx->n_tail ? b1 * R : ctx->n_tail;
    uint8_t *low1 = ctx->low, *low0 = ctx->low + ctx->n;
    const uint8_t *symbol_of = ctx->symbol_of;
    const __m256i rv0 = _mm256_set1_epi16((short)ctx->run_v0), rlast = _mm256_set1_epi16((short)(ctx->run_len - 1));
    const __m256i rs0 = _mm256_set1_epi16((short)ctx->run_s0);
    /* F32: bytes 0 and 1 of each 32-bit lane, per 128-bit half, to its low 8 bytes */
    const __m256i lo_bytes = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, -1, -1, -1, -1, -1, -1, -1, -1,
                                              0, 4, 8, 12, 1, 5, 9, 13, -1, -1, -1, -1, -1, -1, -1, -1);
    int64_t blk = b0;
    for (; (blk + 2) * 8 <= ctx->n && (blk + 1) * R + 8 <= lim; blk += 2) {
        int64_t i0 = blk * 8;
        __m256i u;
        if (f32) {
            __m256i v0 = _mm256_loadu_si256((const __m256i *)((const uint32_t *)ctx->bits + i0));
            __m256i v1 = _mm256_loadu_si256((const __m256i *)((const uint32_t *)ctx->bits + i0 + 8));
            /* high halves, packed per 128-bit half (0-3, 8-11, 4-7, 12-15), then put in order */
            u = _mm256_permute4x64_epi64(_mm256_packus_epi32(_mm256_srli_epi32(v0, 16), _mm256_srli_epi32(v1, 16)), 0xD8);
            __m256i b0v = _mm256_shuffle_epi8(v0, lo_bytes), b1v = _mm256_shuffle_epi8(v1, lo_bytes);
            /* qword 0 of each half: low0 of 4 values then low1 of the same 4 */
            uint64_t a0 = (uint64_t)_mm256_extract_epi64(b0v, 0), a1 = (uint64_t)_mm256_extract_epi64(b0v, 2);
            uint64_t c0 = (uint64_t)_mm256_extract_epi64(b1v, 0), c1 = (uint64_t)_mm256_extract_epi64(b1v, 2);
            uint64_t l0a = (a0 & 0xFFFFFFFFull) | (a1 << 32), l1a = (a0 >> 32) | (a1 & 0xFFFFFFFF00000000ull);
            uint64_t l0b = (c0 & 0xFFFFFFFFull) | (c1 << 32), l1b = (c0 >> 32) | (c1 & 0xFFFFFFFF00000000ull);
            memcpy(low0 + i0, &l0a, 8);
            memcpy(low0 + i0 + 8, &l0b, 8);
            memcpy(low1 + i0, &l1a, 8);
            memcpy(low1 + i0 + 8, &l1b, 8);
        } else {
            u = _mm256_loadu_si256((const __m256i *)((const uint16_t *)ctx->bits + i0));
        }
        __m256i iv = _mm256_and_si256(_mm256_srl_epi16(u, shv), msk);
        __m256i rel = _mm256_sub_epi16(iv, rv0);
        if (_mm256_movemask_epi8(_mm256_cmpeq_epi16(_mm256_min_epu16(rel, rlast), rel)) == -1) {
            /* all 16 in the run: symbols rel + s0 (< 256), narrowed to bytes */
            __m256i sym = _mm256_add_epi16(rel, rs0);
            __m128i b8 = _mm_packus_epi16(_mm256_castsi256_si128(sym), _mm256_extracti128_si256(sym, 1));
            _mm_storeu_si128((__m128i *)(ctx->head + i0), b8);
        } else {
            uint16_t idx[16];
            _mm256_storeu_si256((__m256i *)idx, iv);
            for (int k = 0; k < 16; k++) ctx->head[i0 + k] = symbol_of[idx[k]];
        }
        __m256i t = _mm256_or_si256(_mm256_sll_epi16(_mm256_srli_epi16(u, 15), rv), _mm256_and_si256(u, tmsk));
        __m256i tb = _mm256_packus_epi16(t, t); /* bytes 0-7: values 0-7; bytes 16-23: values 8-15 */
        uint64_t w0 = _pext_u64((uint64_t)_mm256_extract_epi64(tb, 0), pmask);
        uint64_t w1 = _pext_u64((uint64_t)_mm256_extract_epi64(tb, 2), pmask);
        memcpy(ctx->tail + blk * R, &w0, 8); /* bytes past R: rewritten next */
        memcpy(ctx->tail + (blk + 1) * R, &w1, 8);
    }
    return blk;
}

__attribute__((target("avx2,bmi2")))
static void split_task_avx2(void *vctx, int64_t task) { split_dispatch(vctx, task); }
#endif

static PyObject *py_split_float(PyObject *self, PyObject *args) {
    PyObject *o_bits, *o_symof, *o_head, *o_tail, *o_low;
    int shift, tail_shift, sign_shift, R, low_planes, threads, want_crc = 0;
    unsigned int mask, tail_mask;
    long long base = -1;
    if (!PyArg_ParseTuple(args, "OiIOiIiiiOOOi|Lp", &o_bits, &shift, &mask, &o_symof, &tail_shift, &tail_mask,
                          &sign_shift, &R, &low_planes, &o_head, &o_tail, &o_low, &threads, &base, &want_crc))
        return NULL;
    bufs_t bs = {.k = 0};
    split_ctx ctx;
    ctx.crcs = NULL;
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
    ctx.base = base >= 0 && base <= (long long)mask ? base : -1;
    for (int k = 0; k < 256; k++)
        ctx.window[k] = ctx.base >= 0 && ctx.base + k <= (int64_t)mask ? ctx.symbol_of[ctx.base + k] : 0;
    ctx.run_v0 = 0;
    ctx.run_len = 1;
    ctx.run_s0 = ctx.symbol_of[0];
    for (int64_t a = 0, b; a <= (int64_t)mask; a = b + 1) {
        for (b = a; b < (int64_t)mask && ctx.symbol_of[b + 1] == ctx.symbol_of[b] + 1; b++)
            ;
        if (b - a + 1 > ctx.run_len) {
            ctx.run_v0 = (int32_t)a;
            ctx.run_len = (int32_t)(b - a + 1);
            ctx.run_s0 = ctx.symbol_of[a];
        }
    }
    int64_t n_tasks = ((ctx.n + 7) / 8 + SPLIT_BLOCKS - 1) / SPLIT_BLOCKS;
    ctx.n_tasks = n_tasks;
    if (want_crc && n_tasks > 0 && !(ctx.crcs = calloc((size_t)(4 * n_tasks), sizeof *ctx.crcs))) {
        PyErr_NoMemory();
        goto fail;
    }
    threads = pick_threads(threads, n_tasks);
    uint32_t crc[4] = {0, 0, 0, 0};
    Py_BEGIN_ALLOW_THREADS
#ifdef WC_X86
    if (g_isa >= ISA_AVX2) run_parallel(split_task_avx2, &ctx, n_tasks, threads);
    else
#endif
        run_parallel(split_task_scalar, &ctx, n_tasks, threads);
    if (ctx.crcs) { /* every task's pieces are equal but the last */
        int64_t piece = (int64_t)SPLIT_BLOCKS * 8, tpiece = (int64_t)SPLIT_BLOCKS * R;
        crc[0] = wc_crc32_join(ctx.crcs, n_tasks, piece * ctx.bytes, (ctx.n - (n_tasks - 1) * piece) * ctx.bytes);
        crc[1] = wc_crc32_join(ctx.crcs + n_tasks, n_tasks, tpiece, ctx.n_tail - (n_tasks - 1) * tpiece);
        for (int k = 2; k < 4 && low_planes == 2; k++)
            crc[k] = wc_crc32_join(ctx.crcs + k * n_tasks, n_tasks, piece, ctx.n - (n_tasks - 1) * piece);
    }
    Py_END_ALLOW_THREADS
    free(ctx.crcs);
    bufs_release(&bs);
    if (want_crc) return Py_BuildValue("(kkkk)", (unsigned long)crc[0], (unsigned long)crc[1], (unsigned long)crc[2],
                                       (unsigned long)crc[3]);
    Py_RETURN_NONE;
fail:
    bufs_release(&bs);
    return NULL;
}

/* encode_chunks(symbols, chunk_size, chunks_per_table, freqs [T*256] uint16, prob_bits, states
 * [n_chunks*32] uint32, counts [n_chunks] int64, scratch [max(n,1)] uint16, threads) -> total:
 * each chunk's words are written backwards ending at the chunk's end in scratch (so they are in
 * decoder order), then all are moved to scratch[:total], chunk after chunk; counts[c] = words of
 * chunk c. As rans/cpu.encode_chunks.                                                        */
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
    const uint32_t *packed; /* [T * 256]: freq | cum << 13 (the SIMD encoder's table) */
    const uint16_t *f16, *c16; /* [T * 256]: freq and cum (the AVX-512 encoder's register tables) */
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

#ifdef WC_X86
/* the partial last step of a chunk, scalar (as enc_body); returns the word pointer */
static inline uint16_t *enc_partial(const enc_sym *tab, const uint8_t *sym, int64_t m, int64_t full, int pb,
                                    uint32_t *X, uint16_t *w, uint32_t *absent) {
    for (int64_t i = m - 1; i >= full * LANES; i--) {
        const enc_sym *e = &tab[sym[i]];
        int lane = (int)(i & (LANES - 1));
        uint32_t x = X[lane];
        *absent |= e->freq == 0;
        if (x >= e->bound) {
            *--w = (uint16_t)x;
            x >>= 16;
        }
        uint32_t q = (uint32_t)((double)x * e->rcp + 6.103515625e-05);
        X[lane] = (q << pb) + (x - q * e->freq) + e->cum;
    }
    return w;
}

/* AVX2 encoder: four 8-lane vectors, highest first. The emitted words of a vector go to the
 * top of an 8-word store that ends at the write pointer (g_top8), so it writes only below the
 * words already written; near the chunk's start that store could reach the previous chunk's
 * words, so those steps run scalar. floor(x / f) in single precision, corrected (below). */
__attribute__((target("avx2,popcnt")))
static void enc_task_avx2(void *vctx, int64_t c) {
    enc_ctx *ctx = vctx;
    const int soft = g_soft_gather[0];
    const int64_t tab_i = (c / ctx->chunks_per_table) * 256;
    const enc_sym *tab = ctx->tab + tab_i;
    const uint32_t *packed = ctx->packed + tab_i;
    int64_t start = c * ctx->chunk_size;
    int64_t m = (ctx->n < start + ctx->chunk_size ? ctx->n : start + ctx->chunk_size) - start;
    const uint8_t *sym = ctx->sym + start;
    uint16_t *w = ctx->scratch + start + m, *lowest = ctx->scratch + start;
    const int pb = ctx->pb;
    uint32_t X[LANES], absent = 0;
    for (int l = 0; l < LANES; l++) X[l] = STATE_LOWER;
    int64_t full = m / LANES;
    w = enc_partial(tab, sym, m, full, pb, X, w, &absent);
    __m256i xv[4];
    for (int v = 0; v < 4; v++) xv[v] = _mm256_loadu_si256((const __m256i *)(X + 8 * v));
    const __m256i fmask = _mm256_set1_epi32(0x1FFF), zero = _mm256_setzero_si256();
    const __m256i low16 = _mm256_set1_epi32(0xFFFF), one = _mm256_set1_epi32(1);
    const __m256 two16f = _mm256_set1_ps(65536.0f), onef = _mm256_set1_ps(1.0f);
    const __m128i shift_hi = _mm_cvtsi32_si128(32 - pb), shift_pb = _mm_cvtsi32_si128(pb);
    const __m256i pack_lo = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1,
                                             0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
    __m256i zero_f = zero;
    int64_t t = full - 1;
    for (; t >= 0 && w - 32 >= lowest; t--) {
        for (int v = 3; v >= 0; v--) {
            __m256i x = xv[v];
            long long sw;
            memcpy(&sw, sym + t * LANES + 8 * v, 8);
            __m256i s32 = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(sw));
            __m256i e = lut8(s32, packed, soft);
            __m256i f = _mm256_and_si256(e, fmask);
            zero_f = _mm256_or_si256(zero_f, _mm256_cmpeq_epi32(f, zero));
            /* emit where x >> (32 - pb) >= f, i.e. not (f > x >> (32 - pb)) (both below 2**31) */
            __m256i emitv = _mm256_xor_si256(_mm256_cmpgt_epi32(f, _mm256_srl_epi32(x, shift_hi)),
                                             _mm256_set1_epi32(-1));
            unsigned mk = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(emitv));
            int cnt = __builtin_popcount(mk);
            __m256i top = _mm256_permutevar8x32_epi32(x, _mm256_loadu_si256((const __m256i *)g_top8[mk]));
            __m256i p16 = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(top, pack_lo), 0x08);
            /* the 8 words end at w: the emitted ones at the top, the rest below (rewritten later) */
            _mm_storeu_si128((__m128i *)(w - 8), _mm256_castsi256_si128(p16));
            w -= cnt;
            x = _mm256_blendv_epi8(x, _mm256_srli_epi32(x, 16), emitv);
            /* floor(x / f) in single precision, then corrected by one step either way. After the
             * renormalisation x < f 2**(32 - pb), so the quotient is below 2**21; float(x) (its
             * two 16-bit halves converted exactly, one rounding in the sum), 1/f and the product
             * are each within 2**-24 relative, so the estimate is within 0.375 of x / f and its
             * truncation within one of the quotient. The division 1/f depends on the symbol only,
             * not on the state, so it stays off the state's chain (the double-precision x / f
             * before: two vdivpd on it per 8 lanes). */
            __m256 xf = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(x, 16)), two16f),
                                      _mm256_cvtepi32_ps(_mm256_and_si256(x, low16)));
            __m256 rf = _mm256_div_ps(onef, _mm256_cvtepi32_ps(f));
            __m256i q = _mm256_cvttps_epi32(_mm256_mul_ps(xf, rf));
            __m256i r = _mm256_sub_epi32(x, _mm256_mullo_epi32(q, f)); /* in (-f, 2f) */
            __m256i under = _mm256_cmpgt_epi32(zero, r);                /* r < 0: q one too big */
            q = _mm256_add_epi32(q, under);
            r = _mm256_add_epi32(r, _mm256_and_si256(under, f));
            __m256i over = _mm256_cmpgt_epi32(r, _mm256_sub_epi32(f, one)); /* r >= f: one too small */
            q = _mm256_sub_epi32(q, over);
            r = _mm256_sub_epi32(r, _mm256_and_si256(over, f));
            x = _mm256_add_epi32(_mm256_add_epi32(_mm256_sll_epi32(q, shift_pb), r), _mm256_srli_epi32(e, 13));
            xv[v] = x;
        }
    }
    for (int v = 0; v < 4; v++) _mm256_storeu_si256((__m256i *)(X + 8 * v), xv[v]);
    /* the first steps (fewer than 32 words of room left): scalar */
    w = enc_partial(tab, sym, (t + 1) * LANES, 0, pb, X, w, &absent);
    memcpy(ctx->states + c * LANES, X, sizeof X);
    ctx->counts[c] = (ctx->scratch + start + m) - w;
    if (absent || _mm256_movemask_ps(_mm256_castsi256_ps(zero_f))) __atomic_store_n(&ctx->bad, 1, __ATOMIC_RELAXED);
}

/* one step (32 symbols from sym, lanes 31..16 then 15..0) of the register-table encoder below */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,popcnt"), always_inline))
static inline void enc_step32(__m512i *xv, const uint8_t *sym, const __m512i *TF, const __m512i *TC, int pb,
                              uint16_t **wp, __mmask32 *zero_f) {
    const __m128i shift_hi = _mm_cvtsi32_si128(32 - pb), shift_pb = _mm_cvtsi32_si128(pb);
    uint16_t *w = *wp;
    __m512i idx = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)sym));
    __m512i F = lut256w(idx, TF), C = lut256w(idx, TC);
    *zero_f |= _mm512_cmpeq_epi16_mask(F, _mm512_setzero_si512());
    for (int v = 1; v >= 0; v--) {
        __m512i x = xv[v];
        __m512i f = _mm512_cvtepu16_epi32(v ? _mm512_extracti64x4_epi64(F, 1) : _mm512_castsi512_si256(F));
        __m512i cum = _mm512_cvtepu16_epi32(v ? _mm512_extracti64x4_epi64(C, 1) : _mm512_castsi512_si256(C));
        /* 1/f in float: rcp14 and one Newton step, off the states' chain */
        __m512 ff = _mm512_cvtepu32_ps(f), r = _mm512_rcp14_ps(ff);
        r = _mm512_mul_ps(r, _mm512_fnmadd_ps(ff, r, _mm512_set1_ps(2.0f)));
        __mmask16 emit = _mm512_cmpge_epu32_mask(_mm512_srl_epi32(x, shift_hi), f);
        int cnt = __builtin_popcount((unsigned)emit);
        __m256i wv = _mm512_cvtepi32_epi16(_mm512_maskz_compress_epi32(emit, x));
        w -= cnt;
        _mm256_mask_storeu_epi16(w, (__mmask16)((1u << cnt) - 1), wv);
        x = _mm512_mask_srli_epi32(x, emit, x, 16);
        /* q = x / f estimated in float, then made exact: x < f * 2**(32 - pb) <= f * 2**21, so
         * q < 2**21; x, 1/f (rcp14 + Newton, ~2**-23) and the product each round by <= 2**-23,
         * so the estimate is off by < 2**21 * 2**-22 = 0.5 and its truncation by at most one,
         * which one step each way corrects on the remainder x - q*f (in (-f, 2f): int32) */
        __m512i q = _mm512_cvttps_epu32(_mm512_mul_ps(_mm512_cvtepu32_ps(x), r));
        __m512i rem = _mm512_sub_epi32(x, _mm512_mullo_epi32(q, f));
        __mmask16 neg = _mm512_cmplt_epi32_mask(rem, _mm512_setzero_si512());
        q = _mm512_mask_sub_epi32(q, neg, q, _mm512_set1_epi32(1));
        rem = _mm512_mask_add_epi32(rem, neg, rem, f);
        __mmask16 big = _mm512_cmpge_epi32_mask(rem, f);
        q = _mm512_mask_add_epi32(q, big, q, _mm512_set1_epi32(1));
        rem = _mm512_mask_sub_epi32(rem, big, rem, f);
        xv[v] = _mm512_add_epi32(_mm512_add_epi32(_mm512_sll_epi32(q, shift_pb), rem), cum);
    }
    *wp = w;
}

/* AVX-512 encoder: the 32 lanes as two 16-lane vectors, steps in reverse, the high vector first
 * (lanes 31..0 in reverse is the spec's order). A vector's emitted words are its lanes' low 16 bits
 * in ascending lane order, placed just below the words already written: a compress + a masked
 * store. The partial last step runs first, scalar. Every table lookup is in registers: freq and
 * cum of a step's 32 symbols from two 256-entry word tables held in sixteen registers
 * (lut256w); floor(x / f) is a float estimate made exact (see enc_step32). This removes the 32
 * scalar loads and stores per 16 lanes, and the division, that bounded the loop on AMD. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,popcnt")))
static void enc_task_avx512(void *vctx, int64_t c) {
    enc_ctx *ctx = vctx;
    const int64_t tab_i = (c / ctx->chunks_per_table) * 256;
    const enc_sym *tab = ctx->tab + tab_i;
    __m512i TF[8], TC[8];
    for (int k = 0; k < 8; k++) {
        TF[k] = _mm512_loadu_si512(ctx->f16 + tab_i + 32 * k);
        TC[k] = _mm512_loadu_si512(ctx->c16 + tab_i + 32 * k);
    }
    int64_t start = c * ctx->chunk_size;
    int64_t m = (ctx->n < start + ctx->chunk_size ? ctx->n : start + ctx->chunk_size) - start;
    const uint8_t *sym = ctx->sym + start;
    uint16_t *w = ctx->scratch + start + m;
    const int pb = ctx->pb;
    uint32_t X[LANES];
    uint32_t absent = 0;
    for (int l = 0; l < LANES; l++) X[l] = STATE_LOWER;
    int64_t full = m / LANES;
    for (int64_t i = m - 1; i >= full * LANES; i--) { /* the partial step: scalar, as enc_body */
        const enc_sym *e = &tab[sym[i]];
        int lane = (int)(i & (LANES - 1));
        uint32_t x = X[lane];
        absent |= e->freq == 0;
        if (x >= e->bound) {
            *--w = (uint16_t)x;
            x >>= 16;
        }
        uint32_t q = (uint32_t)((double)x * e->rcp + 6.103515625e-05);
        X[lane] = (q << pb) + (x - q * e->freq) + e->cum;
    }
    __m512i xv[2] = {_mm512_loadu_si512(X), _mm512_loadu_si512(X + 16)};
    __mmask32 zero_f = 0;
    for (int64_t t = full - 1; t >= 0; t--) enc_step32(xv, sym + t * LANES, TF, TC, pb, &w, &zero_f);
    _mm512_storeu_si512(ctx->states + c * LANES, xv[0]);
    _mm512_storeu_si512(ctx->states + c * LANES + 16, xv[1]);
    ctx->counts[c] = (ctx->scratch + start + m) - w;
    if (absent || zero_f) __atomic_store_n(&ctx->bad, 1, __ATOMIC_RELAXED);
}

/* chunks 2t and 2t + 1 interleaved (four independent state chains hide the latency of one
 * chunk's two) where both are whole chunks of one table; else one after the other */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,popcnt")))
static void enc_pair_avx512(void *vctx, int64_t t) {
    enc_ctx *ctx = vctx;
    int64_t c = 2 * t, cs = ctx->chunk_size;
    if ((c + 2) * cs > ctx->n || c / ctx->chunks_per_table != (c + 1) / ctx->chunks_per_table) {
        enc_task_avx512(vctx, c);
        if ((c + 1) * cs < ctx->n) enc_task_avx512(vctx, c + 1);
        return;
    }
    const int64_t tab_i = (c / ctx->chunks_per_table) * 256;
    __m512i TF[8], TC[8];
    for (int k = 0; k < 8; k++) {
        TF[k] = _mm512_loadu_si512(ctx->f16 + tab_i + 32 * k);
        TC[k] = _mm512_loadu_si512(ctx->c16 + tab_i + 32 * k);
    }
    const uint8_t *sa = ctx->sym + c * cs, *sb = sa + cs;
    uint16_t *wa = ctx->scratch + (c + 1) * cs, *wb = wa + cs;
    const __m512i lower = _mm512_set1_epi32((int)STATE_LOWER);
    __m512i xa[2] = {lower, lower}, xb[2] = {lower, lower};
    __mmask32 zero_f = 0;
    for (int64_t s = cs / LANES - 1; s >= 0; s--) {
        enc_step32(xa, sa + s * LANES, TF, TC, ctx->pb, &wa, &zero_f);
        enc_step32(xb, sb + s * LANES, TF, TC, ctx->pb, &wb, &zero_f);
    }
    _mm512_storeu_si512(ctx->states + c * LANES, xa[0]);
    _mm512_storeu_si512(ctx->states + c * LANES + 16, xa[1]);
    _mm512_storeu_si512(ctx->states + (c + 1) * LANES, xb[0]);
    _mm512_storeu_si512(ctx->states + (c + 1) * LANES + 16, xb[1]);
    ctx->counts[c] = (ctx->scratch + (c + 1) * cs) - wa;
    ctx->counts[c + 1] = (ctx->scratch + (c + 2) * cs) - wb;
    if (zero_f) __atomic_store_n(&ctx->bad, 1, __ATOMIC_RELAXED);
}
#endif

static PyObject *py_encode_chunks(PyObject *self, PyObject *args) {
    PyObject *o_sym, *o_freqs, *o_states, *o_counts, *o_scratch;
    long long cs, cpt;
    int pb, threads, want_crc = 0;
    if (!PyArg_ParseTuple(args, "OLLOiOOOi|p", &o_sym, &cs, &cpt, &o_freqs, &pb, &o_states, &o_counts, &o_scratch,
                          &threads, &want_crc))
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
    uint32_t *packed = malloc((size_t)(n_tables * 256 + 1) * sizeof(uint32_t));
    if (!packed) {
        free(tab);
        PyErr_NoMemory();
        goto fail;
    }
    uint16_t *f16 = malloc((size_t)(n_tables * 256 + 1) * 2 * sizeof(uint16_t));
    if (!f16) {
        free(tab);
        free(packed);
        PyErr_NoMemory();
        goto fail;
    }
    uint16_t *c16 = f16 + n_tables * 256;
    for (int64_t k = 0; k < n_tables * 256; k++) {
        packed[k] = tab[k].freq | tab[k].cum << 13;
        f16[k] = (uint16_t)tab[k].freq;
        c16[k] = (uint16_t)tab[k].cum;
    }
    ctx.tab = tab;
    ctx.packed = packed;
    ctx.f16 = f16;
    ctx.c16 = c16;
    ctx.bad = 0;
    threads = pick_threads(threads, n_chunks);
    int64_t total = 0;
    uint32_t crc = 0;
    Py_BEGIN_ALLOW_THREADS
#ifdef WC_X86
    if (g_isa == ISA_AVX512) run_parallel(enc_pair_avx512, &ctx, (n_chunks + 1) / 2, pick_threads(threads, (n_chunks + 1) / 2));
    else if (g_isa == ISA_AVX2) run_parallel(enc_task_avx2, &ctx, n_chunks, threads);
    else
#endif
        run_parallel(enc_task_scalar, &ctx, n_chunks, threads);
    /* compact: chunk c's words end where its symbols end; move them to the front, in order
     * (each destination lies at or below its source), checksummed as they land when asked
     * (the writer's section CRC, without another pass over the words) */
    if (!ctx.bad)
        for (int64_t c = 0; c < n_chunks; c++) {
            int64_t end = ctx.n < (c + 1) * cs ? ctx.n : (c + 1) * cs;
            memmove(ctx.scratch + total, ctx.scratch + end - ctx.counts[c], (size_t)ctx.counts[c] * 2);
            if (want_crc) crc = wc_crc32((const uint8_t *)(ctx.scratch + total), ctx.counts[c] * 2, crc);
            total += ctx.counts[c];
        }
    Py_END_ALLOW_THREADS
    free(tab);
    free(packed);
    free(f16);
    if (ctx.bad) {
        PyErr_SetString(PyExc_ValueError, "encode_chunks: a symbol has zero frequency in its table");
        goto fail;
    }
    bufs_release(&bs);
    if (want_crc) return Py_BuildValue("(Lk)", (long long)total, (unsigned long)crc);
    return PyLong_FromLongLong(total);
fail:
    bufs_release(&bs);
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* joint low plane: rANS over 16-bit symbols (format version 2; wcodec.rans.reference16 is the
 * spec, wcodec.native.numba_rans16 the numba twin). Scalar C on every ISA: the step has two
 * binary searches and a 64-bit division that do not map onto the byte coder's SIMD lookups.
 * Tables: default [T], exc_offsets [T+1], exc_symbols u16, exc_freqs / exc_cum / exc_rank u32.
 * Raw chunks (params flat_raw: a flat table's chunks) store their symbols as their words and
 * have no states: encoded as a copy, decoded as an OR. */

#define STATE_LOWER16 (1ull << 31)

typedef struct {
    const uint32_t *def, *eo, *efreq, *ecum, *erank;
    const uint16_t *esym;
    int64_t n_tables, n_exc;
} tab16_t;

/* index in [a, b) of the last entry <= v of non-decreasing arr, or a - 1 */
static inline int64_t last_le_u16(const uint16_t *arr, int64_t a, int64_t b, uint64_t v) {
    int64_t lo = a, hi = b;
    while (lo < hi) {
        int64_t mid = (lo + hi) >> 1;
        if (arr[mid] <= v) lo = mid + 1; else hi = mid;
    }
    return lo - 1;
}

/* the same as last_le_u16 over uint32, without branches on the data (the decoder's searches
 * are unpredictable): halving steps that move by a conditional move */
static inline int64_t last_le_u32(const uint32_t *arr, int64_t a, int64_t b, uint64_t v) {
    if (b <= a) return a - 1;
    int64_t lo = a, len = b - a;
    while (len > 1) {
        int64_t half = len >> 1;
        lo = arr[lo + half] <= v ? lo + half : lo;
        len -= half;
    }
    return arr[lo] <= v ? lo : lo - 1;
}

/* checks the tables' array sizes against each other (contents are validated in Python) */
static int check_tab16(const tab16_t *t, int64_t n_def, int64_t n_eo, int64_t n_sym, int64_t n_freq,
                       int64_t n_cum, int64_t n_rank, int64_t n_chunks, int64_t cpt) {
    if (n_def < 1 || n_eo != n_def + 1 || n_freq != n_sym || n_cum != n_sym || n_rank != n_sym || cpt < 1 ||
        (n_chunks && (n_chunks - 1) / cpt >= n_def) || t->eo[0] != 0 || (int64_t)t->eo[n_def] != n_sym) {
        PyErr_SetString(PyExc_ValueError, "joint rANS tables have inconsistent sizes");
        return -1;
    }
    for (int64_t k = 0; k < n_def; k++)
        if (t->eo[k] > t->eo[k + 1]) {
            PyErr_SetString(PyExc_ValueError, "joint rANS exception offsets not monotone");
            return -1;
        }
    return 0;
}

typedef struct {
    tab16_t tab;
    const uint16_t *sym;
    int64_t n, chunk_size, chunks_per_table;
    int pb;
    uint64_t *states;
    int64_t *counts;
    uint16_t *scratch;
    const uint8_t *raw; /* [n_chunks]: 1 = the chunk is stored raw */
    int bad;
} enc16_ctx;

static void enc16_task(void *vctx, int64_t c) {
    enc16_ctx *ctx = vctx;
    const tab16_t *tb = &ctx->tab;
    int64_t t = c / ctx->chunks_per_table, a = tb->eo[t], b = tb->eo[t + 1];
    uint64_t d = tb->def[t];
    const int pb = ctx->pb;
    uint64_t X0 = (1ull << pb) - d * (uint64_t)(65536 - (b - a));
    int64_t start = c * ctx->chunk_size;
    int64_t m = (ctx->n < start + ctx->chunk_size ? ctx->n : start + ctx->chunk_size) - start;
    const uint16_t *sym = ctx->sym + start;
    uint16_t *w = ctx->scratch + 2 * (start + m);
    if (ctx->raw[c]) { /* its words are its symbols: copied once, by the compaction */
        memset(ctx->states + c * LANES, 0, LANES * sizeof(uint64_t));
        ctx->counts[c] = m;
        return;
    }
    uint64_t X[LANES];
    for (int l = 0; l < LANES; l++) X[l] = STATE_LOWER16;
    int absent = 0;
    for (int64_t i = m - 1; i >= 0; i--) {
        uint64_t s = sym[i], f, cu;
        int64_t j = last_le_u16(tb->esym, a, b, s);
        if (j >= a && tb->esym[j] == s) {
            f = tb->efreq[j];
            cu = tb->ecum[j];
        } else {
            f = d;
            cu = X0 + d * (s - (uint64_t)(j + 1 - a));
        }
        if (f == 0) {
            absent = 1;
            break;
        }
        int lane = (int)(i & (LANES - 1));
        uint64_t x = X[lane];
        if (x >= f << (63 - pb)) {
            w -= 2;
            w[0] = (uint16_t)x;
            w[1] = (uint16_t)(x >> 16);
            x >>= 32;
        }
        X[lane] = ((x / f) << pb) + (x % f) + cu;
    }
    memcpy(ctx->states + c * LANES, X, sizeof X);
    ctx->counts[c] = (ctx->scratch + 2 * (start + m)) - w;
    if (absent) __atomic_store_n(&ctx->bad, 1, __ATOMIC_RELAXED);
}

/* encode_chunks16(symbols, chunk_size, chunks_per_table, default, exc_offsets, exc_symbols,
 *                 exc_freqs, exc_cum, prob_bits, states, counts, scratch [2n], raw u8[n_chunks],
 *                 threads) -> words (a raw chunk's states are zero) */
static PyObject *py_encode_chunks16(PyObject *self, PyObject *args) {
    PyObject *o_sym, *o_def, *o_eo, *o_esym, *o_efreq, *o_ecum, *o_states, *o_counts, *o_scratch, *o_raw;
    long long cs, cpt;
    int pb, threads;
    if (!PyArg_ParseTuple(args, "OLLOOOOOiOOOOi", &o_sym, &cs, &cpt, &o_def, &o_eo, &o_esym, &o_efreq, &o_ecum,
                          &pb, &o_states, &o_counts, &o_scratch, &o_raw, &threads))
        return NULL;
    bufs_t bs = {.k = 0};
    enc16_ctx ctx;
    int64_t nd, neo, nsy, nfr, ncu, nst, nc, nsc, nraw;
    ctx.sym = get_buf(&bs, o_sym, 0, 2, &ctx.n, "symbols");
    if (!ctx.sym) goto fail;
    if (!(ctx.tab.def = get_buf(&bs, o_def, 0, 4, &nd, "default"))) goto fail;
    if (!(ctx.tab.eo = get_buf(&bs, o_eo, 0, 4, &neo, "exc_offsets"))) goto fail;
    if (!(ctx.tab.esym = get_buf(&bs, o_esym, 0, 2, &nsy, "exc_symbols"))) goto fail;
    if (!(ctx.tab.efreq = get_buf(&bs, o_efreq, 0, 4, &nfr, "exc_freqs"))) goto fail;
    if (!(ctx.tab.ecum = get_buf(&bs, o_ecum, 0, 4, &ncu, "exc_cum"))) goto fail;
    if (!(ctx.states = get_buf(&bs, o_states, 1, 8, &nst, "states"))) goto fail;
    if (!(ctx.counts = get_buf(&bs, o_counts, 1, 8, &nc, "counts"))) goto fail;
    if (!(ctx.scratch = get_buf(&bs, o_scratch, 1, 2, &nsc, "scratch"))) goto fail;
    if (!(ctx.raw = get_buf(&bs, o_raw, 0, 1, &nraw, "raw"))) goto fail;
    ctx.chunk_size = cs;
    ctx.chunks_per_table = cpt;
    ctx.pb = pb;
    int64_t n_chunks = cs > 0 ? (ctx.n + cs - 1) / cs : 0;
    if (cs < LANES || cs % LANES || pb < 16 || pb > 28 || nst != n_chunks * LANES || nc != n_chunks ||
        nsc < 2 * ctx.n || nraw != n_chunks)
        goto bad_args;
    if (check_tab16(&ctx.tab, nd, neo, nsy, nfr, ncu, ncu, n_chunks, cpt) < 0) goto fail;
    ctx.bad = 0;
    threads = pick_threads(threads, n_chunks);
    Py_BEGIN_ALLOW_THREADS
    run_parallel(enc16_task, &ctx, n_chunks, threads);
    Py_END_ALLOW_THREADS
    if (ctx.bad) {
        PyErr_SetString(PyExc_ValueError, "encode_chunks16: a symbol has zero frequency in its table");
        goto fail;
    }
    /* compaction: chunk c's words (coded: the tail of its 2 m slots of scratch; raw: its symbols)
     * move to the running total, which stays <= 2 * (c's start), below every later chunk's words */
    int64_t total = 0;
    for (int64_t c = 0; c < n_chunks; c++) {
        int64_t end = ctx.n < (c + 1) * cs ? ctx.n : (c + 1) * cs;
        if (ctx.raw[c]) memcpy(ctx.scratch + total, ctx.sym + c * cs, (size_t)ctx.counts[c] * 2);
        else memmove(ctx.scratch + total, ctx.scratch + 2 * end - ctx.counts[c], (size_t)ctx.counts[c] * 2);
        total += ctx.counts[c];
    }
    bufs_release(&bs);
    return PyLong_FromLongLong(total);
bad_args:
    PyErr_SetString(PyExc_ValueError, "encode_chunks16: inconsistent arguments");
fail:
    bufs_release(&bs);
    return NULL;
}

typedef struct dec16_s {
    tab16_t tab;
    const uint64_t *states;
    const uint32_t *offsets;
    const uint16_t *words;
    const int64_t *sidx; /* [n_chunks]: the chunk's first state, -1 for a raw chunk */
    int64_t words_len, n, chunk_size, chunks_per_table;
    int pb, out_bytes;
    void *out;
    int32_t *status;
} dec16_ctx;

/* chunk c of a joint plane OR-ed into out; its status (0 ok, 1/2 word count, 3 bad state) */
static int dec16_chunk(const dec16_ctx *ctx, int64_t c) {
    const tab16_t *tb = &ctx->tab;
    int64_t t = c / ctx->chunks_per_table, a = tb->eo[t], b = tb->eo[t + 1];
    uint64_t d = tb->def[t];
    const int pb = ctx->pb;
    const uint64_t mask = (1ull << pb) - 1;
    uint64_t X0 = (1ull << pb) - d * (uint64_t)(65536 - (b - a));
    int64_t start = c * ctx->chunk_size;
    int64_t m = (ctx->n < start + ctx->chunk_size ? ctx->n : start + ctx->chunk_size) - start;
    int64_t pos = ctx->offsets[c], end = ctx->offsets[c + 1], last = ctx->words_len - 2;
    uint16_t *o16 = (uint16_t *)ctx->out + start;
    uint32_t *o32 = (uint32_t *)ctx->out + start;
    if (ctx->sidx[c] < 0) { /* a raw chunk: its words are its symbols */
        if (end - pos != m) return end - pos > m ? 2 : 1;
        const uint16_t *src = ctx->words + pos;
        if (ctx->out_bytes == 2)
            for (int64_t i = 0; i < m; i++) o16[i] |= src[i];
        else
            for (int64_t i = 0; i < m; i++) o32[i] |= src[i];
        return 0;
    }
    uint64_t X[LANES];
    for (int l = 0; l < LANES; l++) {
        X[l] = ctx->states[ctx->sidx[c] + l];
        if (X[l] < STATE_LOWER16 || X[l] >> 63) return 3;
    }
    /* k = r / d for the unlisted symbols: a shift where d is a power of two (every flat table:
     * d = 2**(prob_bits - 16)), else a double reciprocal corrected by one step (r, d < 2**28) */
    int dshift = d && !(d & (d - 1)) ? __builtin_ctzll(d) : -1;
    double dinv = d ? 1.0 / (double)d : 0.0;
    if (a == b && dshift >= 0) {
        /* a flat table (no exceptions, d = 2**(prob_bits - 16)): the same steps in shifts and
         * masks only, out's width fixed per loop (most chunks of a near-uniform plane) */
        const uint64_t dm = d - 1;
#define WC_FLAT16(OUT)                                                                             \
        for (int64_t i = 0; i < m; i++) {                                                          \
            int lane = (int)(i & (LANES - 1));                                                     \
            uint64_t x = X[lane], slot = x & mask;                                                 \
            OUT[i] |= (slot >> dshift);                                                            \
            x = ((x >> pb) << dshift) | (slot & dm);                                               \
            uint64_t need = x < STATE_LOWER16;                                                     \
            int64_t p = pos < last ? pos : last;                                                   \
            uint64_t w = ctx->words[p] | (uint64_t)ctx->words[p + 1] << 16;                        \
            X[lane] = need ? (x << 32) | w : x;                                                    \
            pos += 2 * (int64_t)need;                                                              \
        }
        if (ctx->out_bytes == 2) {
            WC_FLAT16(o16)
        } else {
            WC_FLAT16(o32)
        }
#undef WC_FLAT16
        int st = pos > end ? 1 : pos < end ? 2 : 0;
        for (int l = 0; l < LANES && !st; l++)
            if (X[l] != STATE_LOWER16) st = 2;
        return st;
    }
    for (int64_t i = 0; i < m; i++) {
        int lane = (int)(i & (LANES - 1));
        uint64_t x = X[lane], slot = x & mask, s, f, cu;
        if (slot < X0) {
            int64_t j = last_le_u32(tb->ecum, a, b, slot);
            if (j < a) j = a; /* unreachable for validated tables (ecum[a] = 0) */
            s = tb->esym[j];
            f = tb->efreq[j];
            cu = tb->ecum[j];
        } else {
            uint64_t r = slot - X0, k;
            if (dshift >= 0) {
                k = r >> dshift;
            } else {
                k = (uint64_t)((double)r * dinv);
                k -= k * d > r;
                k += (k + 1) * d <= r;
            }
            s = k + (uint64_t)(last_le_u32(tb->erank, a, b, k) + 1 - a);
            f = d;
            cu = X0 + d * k;
        }
        if (ctx->out_bytes == 2) o16[i] |= (uint16_t)s;
        else o32[i] |= (uint32_t)(s & 0xFFFF);
        x = f * (x >> pb) + slot - cu;
        /* branchless renormalisation (half the steps read, at random); the word index is
         * clamped, a wrong count is flagged below */
        uint64_t need = x < STATE_LOWER16;
        int64_t p = pos < last ? pos : last;
        uint64_t w = ctx->words[p] | (uint64_t)ctx->words[p + 1] << 16;
        x = need ? (x << 32) | w : x;
        pos += 2 * (int64_t)need;
        X[lane] = x;
    }
    int st = pos > end ? 1 : pos < end ? 2 : 0;
    for (int l = 0; l < LANES && !st; l++)
        if (X[l] != STATE_LOWER16) st = 2;
    return st;
}

static void joint_chunk(const dec16_ctx *ctx, int64_t c) { ctx->status[c] = dec16_chunk(ctx, c); }

static void dec16_task(void *vctx, int64_t c) { joint_chunk(vctx, c); }

/* block_histograms16(symbols u16[n], block, counts int32[n_blocks * 65536], threads): the
 * joint encoder's symbol counts per block of `block` symbols (block <= 2**31 - 1) */
static void hist16_task(void *vctx, int64_t k) {
    counts_ctx *ctx = vctx;
    const uint16_t *sym = ctx->sym;
    int32_t *h = (int32_t *)ctx->counts + k * 65536;
    int64_t blk = ctx->which ? ctx->which[k] : k;
    int64_t a = blk * ctx->block, b = a + ctx->block < ctx->n ? a + ctx->block : ctx->n;
    memset(h, 0, 65536 * sizeof(int32_t));
    for (int64_t i = a; i < b; i++) h[sym[i]]++;
}

static PyObject *py_block_histograms16(PyObject *self, PyObject *args) {
    return block_counts(args, 2, 4, 65536, INT32_MAX, hist16_task, "block_histograms16");
}

/* The joint encoder's screen (rans.joint): which segments of `seg` symbols could pay for a table
 * with exceptions needs only each segment's largest count, and the one-table candidate the
 * plane's counts; only the few segments that pass need their 65536 counts (segment_histograms16,
 * below hist16_task).
 * On all-MiniLM-L6-v2's F32 embedding that is 26 of 358 segments, where block_histograms16 wrote
 * 94 MB of counts that numpy then read twice. */
typedef struct {
    const uint16_t *sym;
    int64_t n, seg, n_seg, parts;
    int32_t *tops;    /* [n_seg] */
    int64_t *partial; /* [parts, 65536] zeros: plane counts per part (the caller sums them) */
    uint32_t *hist;   /* [parts, 65536] one segment's counts, reused */
} seg16_ctx;

/* part p: segments [p * n_seg / parts, (p + 1) * n_seg / parts) */
static void tops16_task(void *vctx, int64_t p) {
    seg16_ctx *ctx = vctx;
    int64_t s0 = p * ctx->n_seg / ctx->parts, s1 = (p + 1) * ctx->n_seg / ctx->parts;
    uint32_t *h = ctx->hist + p * 65536;
    int64_t *tot = ctx->partial + p * 65536;
    for (int64_t s = s0; s < s1; s++) {
        int64_t a = s * ctx->seg, b = a + ctx->seg < ctx->n ? a + ctx->seg : ctx->n;
        memset(h, 0, 65536 * sizeof(uint32_t));
        for (int64_t i = a; i < b; i++) h[ctx->sym[i]]++;
        uint32_t top = 0;
        for (int v = 0; v < 65536; v++) {
            top = h[v] > top ? h[v] : top;
            tot[v] += h[v];
        }
        ctx->tops[s] = (int32_t)top;
    }
}

/* segment_tops16(symbols u16[n], seg, tops int32[n_seg], partial int64[P * 65536] zeros, scratch
 * uint32[P * 65536], threads): each segment's largest symbol count (seg <= 2**31 - 1), and the
 * symbol counts of P parts of the plane (their sum: the plane's counts) */
static PyObject *py_segment_tops16(PyObject *self, PyObject *args) {
    PyObject *o_sym, *o_tops, *o_partial, *o_hist;
    long long seg;
    int threads;
    if (!PyArg_ParseTuple(args, "OLOOOi", &o_sym, &seg, &o_tops, &o_partial, &o_hist, &threads)) return NULL;
    bufs_t bs = {.k = 0};
    seg16_ctx ctx;
    int64_t n_tops, n_partial, n_hist;
    if (!(ctx.sym = get_buf(&bs, o_sym, 0, 2, &ctx.n, "symbols"))) goto fail;
    if (!(ctx.tops = get_buf(&bs, o_tops, 1, 4, &n_tops, "tops"))) goto fail;
    if (!(ctx.partial = get_buf(&bs, o_partial, 1, 8, &n_partial, "partial"))) goto fail;
    if (!(ctx.hist = get_buf(&bs, o_hist, 1, 4, &n_hist, "scratch"))) goto fail;
    ctx.seg = seg;
    ctx.n_seg = seg >= 1 ? (ctx.n + seg - 1) / seg : 0;
    ctx.parts = n_partial / 65536;
    if (seg < 1 || seg > INT32_MAX || n_tops != ctx.n_seg || ctx.parts < 1 || n_partial != ctx.parts * 65536 ||
        n_hist != n_partial) {
        PyErr_SetString(PyExc_ValueError, "segment_tops16: bad sizes");
        goto fail;
    }
    return run_released(&bs, tops16_task, &ctx, ctx.parts, threads);
fail:
    bufs_release(&bs);
    return NULL;
}

/* segment_histograms16(symbols u16[n], seg, which int64[k], counts int32[k * 65536], threads): the
 * symbol counts of segments which[0..k) (each in [0, n_seg)) of `seg` symbols (hist16_task) */
static PyObject *py_segment_histograms16(PyObject *self, PyObject *args) {
    PyObject *o_sym, *o_which, *o_counts;
    long long seg;
    int threads;
    if (!PyArg_ParseTuple(args, "OLOOi", &o_sym, &seg, &o_which, &o_counts, &threads)) return NULL;
    bufs_t bs = {.k = 0};
    counts_ctx ctx;
    int64_t k, nc;
    if (!(ctx.sym = get_buf(&bs, o_sym, 0, 2, &ctx.n, "symbols"))) goto fail;
    if (!(ctx.which = get_buf(&bs, o_which, 0, 8, &k, "which"))) goto fail;
    if (!(ctx.counts = get_buf(&bs, o_counts, 1, 4, &nc, "counts"))) goto fail;
    ctx.block = seg;
    int64_t n_seg = seg >= 1 ? (ctx.n + seg - 1) / seg : 0;
    if (seg < 1 || seg > INT32_MAX || nc != k * 65536) {
        PyErr_SetString(PyExc_ValueError, "segment_histograms16: bad sizes");
        goto fail;
    }
    for (int64_t j = 0; j < k; j++)
        if (ctx.which[j] < 0 || ctx.which[j] >= n_seg) {
            PyErr_SetString(PyExc_ValueError, "segment_histograms16: segment index out of range");
            goto fail;
        }
    return run_released(&bs, hist16_task, &ctx, k, threads);
fail:
    bufs_release(&bs);
    return NULL;
}

/* a joint plane's buffers into ctx (held in bs), from o: states u64, offsets u32, words u16, default,
 * exc_offsets u32, exc_symbols u16, exc_freqs, exc_cum, exc_rank u32, status i32, state_index i64
 * (11 objects); their item counts to sz. 0, or -1 with an exception */
static int joint_bufs(bufs_t *bs, PyObject *const *o, dec16_ctx *ctx, int64_t *sz) {
    if (!(ctx->states = get_buf(bs, o[0], 0, 8, &sz[0], "states"))) return -1;
    if (!(ctx->offsets = get_buf(bs, o[1], 0, 4, &sz[1], "offsets"))) return -1;
    if (!(ctx->words = get_buf(bs, o[2], 0, 2, &ctx->words_len, "words"))) return -1;
    if (!(ctx->tab.def = get_buf(bs, o[3], 0, 4, &sz[3], "default"))) return -1;
    if (!(ctx->tab.eo = get_buf(bs, o[4], 0, 4, &sz[4], "exc_offsets"))) return -1;
    if (!(ctx->tab.esym = get_buf(bs, o[5], 0, 2, &sz[5], "exc_symbols"))) return -1;
    if (!(ctx->tab.efreq = get_buf(bs, o[6], 0, 4, &sz[6], "exc_freqs"))) return -1;
    if (!(ctx->tab.ecum = get_buf(bs, o[7], 0, 4, &sz[7], "exc_cum"))) return -1;
    if (!(ctx->tab.erank = get_buf(bs, o[8], 0, 4, &sz[8], "exc_rank"))) return -1;
    if (!(ctx->status = get_buf(bs, o[9], 1, 4, &sz[9], "status"))) return -1;
    if (!(ctx->sidx = get_buf(bs, o[10], 0, 8, &sz[10], "state_index"))) return -1;
    return 0;
}

/* a joint plane's arguments (ctx: n, chunk_size, chunks_per_table, pb, out, out_bytes set; sz from
 * joint_bufs) checked against each other, so that no chunk reads or writes out of bounds and no
 * step divides by zero (the tables' contents are validated in Python). 0, or -1 with ValueError */
static int joint_check(const dec16_ctx *ctx, const int64_t *sz, int64_t nout) {
    const int64_t cs = ctx->chunk_size, n = ctx->n, n_chunks = cs > 0 ? (n + cs - 1) / cs : 0;
    if (cs < LANES || cs % LANES || n < 0 || ctx->pb < 16 || ctx->pb > 28 || ctx->words_len < 2 ||
        sz[1] != n_chunks + 1 || nout != n || sz[9] != n_chunks || sz[10] != n_chunks ||
        (ctx->out_bytes != 2 && ctx->out_bytes != 4)) {
        PyErr_SetString(PyExc_ValueError, "joint plane: inconsistent arguments");
        return -1;
    }
    for (int64_t c = 0; c < n_chunks; c++)
        if (ctx->sidx[c] < -1 || (ctx->sidx[c] >= 0 && ctx->sidx[c] > sz[0] - LANES)) {
            PyErr_SetString(PyExc_ValueError, "joint plane: state index out of range");
            return -1;
        }
    if (check_tab16(&ctx->tab, sz[3], sz[4], sz[5], sz[6], sz[7], sz[8], n_chunks, ctx->chunks_per_table) < 0)
        return -1;
    for (int64_t c = 0; c < n_chunks; c++)
        if (ctx->offsets[c] > ctx->offsets[c + 1] || (int64_t)ctx->offsets[c + 1] > ctx->words_len) {
            PyErr_SetString(PyExc_ValueError, "rANS word offsets out of range");
            return -1;
        }
    for (int64_t t = 0; t < sz[3]; t++) /* a zero default with unlisted slots would divide by zero */
        if (ctx->tab.def[t] == 0 && (ctx->tab.eo[t + 1] - ctx->tab.eo[t]) < 65536) {
            uint64_t sum = 0;
            for (uint32_t k = ctx->tab.eo[t]; k < ctx->tab.eo[t + 1]; k++) sum += ctx->tab.efreq[k];
            if (sum != (1ull << ctx->pb)) {
                PyErr_SetString(PyExc_ValueError, "joint rANS table does not sum to 2**prob_bits");
                return -1;
            }
        }
    return 0;
}

/* decode_chunks16(states, offsets, words, n, chunk_size, chunks_per_table, default, exc_offsets,
 *                 exc_symbols, exc_freqs, exc_cum, exc_rank, prob_bits, out, status, state_index,
 *                 threads): symbol i OR-ed into out[i] ([n] uint16 or uint32); state_index int64
 * [n_chunks] each chunk's first state or -1 (raw); tables validated by the caller */
static PyObject *py_decode_chunks16(PyObject *self, PyObject *args) {
    PyObject *o[11], *o_out;
    long long n, cs, cpt;
    int pb, threads;
    if (!PyArg_ParseTuple(args, "OOOLLLOOOOOOiOOOi", &o[0], &o[1], &o[2], &n, &cs, &cpt, &o[3], &o[4], &o[5],
                          &o[6], &o[7], &o[8], &pb, &o_out, &o[9], &o[10], &threads))
        return NULL;
    bufs_t bs = {.k = 0};
    dec16_ctx ctx;
    int64_t sz[11], nout;
    if (joint_bufs(&bs, o, &ctx, sz) < 0) goto fail;
    if (!(ctx.out = get_buf(&bs, o_out, 1, 0, &nout, "out"))) goto fail;
    ctx.out_bytes = (int)bs.b[bs.k - 1].itemsize;
    ctx.n = n;
    ctx.chunk_size = cs;
    ctx.chunks_per_table = cpt;
    ctx.pb = pb;
    if (joint_check(&ctx, sz, nout) < 0) goto fail;
    return run_released(&bs, dec16_task, &ctx, sz[9], threads);
fail:
    bufs_release(&bs);
    return NULL;
}

/* decode_lookup(freqs [T*256] uint16, prob_bits, out [T << prob_bits] uint32): the packed
 * lookup tables of rans.tables.decode_lookup (sym | (freq-1) << 8 | (slot-cum) << 20); tables
 * must be validated (each sums to 2**prob_bits) */
static PyObject *py_decode_lookup(PyObject *self, PyObject *args) {
    PyObject *o_freqs, *o_out;
    int pb;
    if (!PyArg_ParseTuple(args, "OiO", &o_freqs, &pb, &o_out)) return NULL;
    bufs_t bs = {.k = 0};
    int64_t nf, no;
    const uint16_t *freqs = get_buf(&bs, o_freqs, 0, 2, &nf, "freqs");
    if (!freqs) goto fail;
    uint32_t *out = get_buf(&bs, o_out, 1, 4, &no, "out");
    if (!out) goto fail;
    if ((pb != 11 && pb != 12) || nf % 256 || no != (nf / 256) << pb) {
        PyErr_SetString(PyExc_ValueError, "decode_lookup: bad sizes");
        goto fail;
    }
    for (int64_t t = 0; t < nf / 256; t++)
        if (fill_lookup(freqs + t * 256, pb, out + (t << pb)) < 0) {
            PyErr_SetString(PyExc_ValueError, "decode_lookup: a table does not sum to 2**prob_bits");
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

/* set_soft_gather(on): scalar-load lookups (True) or gathers (False) for AVX2 and AVX-512 alike,
 * or per ISA from an (avx2, avx512) pair; returns the previous (avx2, avx512) pair */
static PyObject *py_set_soft_gather(PyObject *self, PyObject *args) {
    PyObject *o;
    int on[2];
    if (!PyArg_ParseTuple(args, "O", &o)) return NULL;
    if (PyTuple_Check(o)) {
        if (!PyArg_ParseTuple(o, "pp", &on[0], &on[1])) return NULL;
    } else {
        int t = PyObject_IsTrue(o);
        if (t < 0) return NULL;
        on[0] = on[1] = t;
    }
    PyObject *old = Py_BuildValue("(OO)", g_soft_gather[0] ? Py_True : Py_False, g_soft_gather[1] ? Py_True : Py_False);
    g_soft_gather[0] = on[0];
    g_soft_gather[1] = on[1];
    return old;
}

/* int8 intra prediction (predict.c) runs its tiles on these threads */
#include "predict.h"
void wc_run_parallel(wc_task_fn fn, void *ctx, int64_t n, int threads) { run_parallel(fn, ctx, n, pick_threads(threads, n)); }
#include "crc32.h"
#include "fixedcheck.h"
#include "fixedcodec.h"
int wc_isa(void) { return g_isa; }

/* ------------------------------------------------------------------------------------------ */
/* the fused float decode's entry point (after the joint plane's helpers it calls) */

/* decode_merge_float(states, offsets, words, n, chunk_size, chunks_per_table, lookup, prob_bits,
 *                    placed, tail, tail_bits, tail_shift, sign_shift, low1, low0, out, status,
 *                    threads[, lowc1, lowc0, low_status, checksum, joint]) -> CRC-32 of out or None
 * joint: F32 without low planes, tail_shift 16: the joint low plane of the head's chunks,
 * (states, offsets, words, chunks_per_table, default, exc_offsets, exc_symbols, exc_freqs,
 * exc_cum, exc_rank, prob_bits, status, state_index) as decode_chunks16 takes them, each chunk
 * OR-ed in right after its merge (the checksum then covers it)                                */

static PyObject *py_decode_merge_float(PyObject *self, PyObject *args) {
    PyObject *o[13], *o_joint = Py_None;
    long long n, cs, cpt;
    int pb, threads, want_crc = 0;
    merge_ctx ctx;
    dec16_ctx jctx;
    o[10] = o[11] = o[12] = Py_None;
    if (!PyArg_ParseTuple(args, "OOOLLLOiOOiiiOOOOi|OOOpO", &o[0], &o[1], &o[2], &n, &cs, &cpt, &o[3], &pb, &o[4],
                          &o[5], &ctx.tail_bits, &ctx.tail_shift, &ctx.sign_shift, &o[6], &o[7], &o[8], &o[9],
                          &threads, &o[10], &o[11], &o[12], &want_crc, &o_joint))
        return NULL;
    bufs_t bs = {.k = 0};
    if (merge_setup(&ctx, &bs, o, n, cs, cpt, pb) < 0) goto fail;
    int64_t n_chunks = (ctx.p.n + cs - 1) / cs;
    if (o_joint != Py_None) {
        PyObject *j[11];
        long long jcpt;
        int64_t sz[11];
        if (!PyArg_ParseTuple(o_joint, "OOOLOOOOOOiOO", &j[0], &j[1], &j[2], &jcpt, &j[3], &j[4], &j[5], &j[6],
                              &j[7], &j[8], &jctx.pb, &j[9], &j[10]))
            goto fail;
        if (ctx.low_planes || ctx.out_bytes != 4 || ctx.tail_shift != 16) {
            PyErr_SetString(PyExc_ValueError, "decode_merge_float: a joint plane needs F32 without low planes");
            goto fail;
        }
        if (joint_bufs(&bs, j, &jctx, sz) < 0) goto fail;
        jctx.n = ctx.p.n;
        jctx.chunk_size = cs;
        jctx.chunks_per_table = jcpt;
        jctx.out = ctx.out;
        jctx.out_bytes = 4;
        if (joint_check(&jctx, sz, ctx.p.n) < 0) goto fail;
        ctx.joint = &jctx;
    }
    if (want_crc && n_chunks > 0) {
        /* calloc: a chunk that fails leaves 0 (its status says so; the CRC is then unused) */
        ctx.crcs = calloc((size_t)n_chunks, sizeof *ctx.crcs);
        if (!ctx.crcs) {
            PyErr_NoMemory();
            goto fail;
        }
    }
    threads = pick_threads(threads, (n_chunks + 1) / 2);
    uint32_t crc = 0;
    Py_BEGIN_ALLOW_THREADS
    run_parallel(merge_task, &ctx, (n_chunks + 1) / 2, threads);
    if (ctx.crcs) crc = merge_out_crc(&ctx);
    Py_END_ALLOW_THREADS
    free(ctx.crcs);
    bufs_release(&bs);
    if (want_crc) return PyLong_FromUnsignedLong(crc);
    Py_RETURN_NONE;
fail:
    bufs_release(&bs);
    return NULL;
}

static PyMethodDef methods[] = {
    {"decode_chunks", py_decode_chunks, METH_VARARGS, "rANS decode of a plane's chunks (see module docstring)"},
    {"decode_merge_float", py_decode_merge_float, METH_VARARGS, "fused rANS decode + float merge"},
    {"decode_float_file", py_decode_float_file, METH_VARARGS, "float records straight from their file: checked, read piece by piece, decoded in one call"},
    {"chunk_histograms", py_chunk_histograms, METH_VARARGS, "per-chunk symbol histograms"},
    {"head_histogram", py_head_histogram, METH_VARARGS, "histogram of (bits >> shift) & mask"},
    {"block_head_histograms", py_block_head_histograms, METH_VARARGS, "head histograms per block of values"},
    {"block_symbol_counts", py_block_symbol_counts, METH_VARARGS, "symbol counts per block from bin counts"},
    {"normalize_rows", py_normalize_rows, METH_VARARGS, "frequency normalisation of count rows"},
    {"choose_tables", py_choose_tables, METH_VARARGS, "index of the cheapest chunks_per_table candidate"},
    {"float_head_bits", py_float_head_bits, METH_VARARGS, "head_bits of the float codec by measured cost"},
    {"split_float", py_split_float, METH_VARARGS, "float split into head symbols, tail bits, low bytes"},
    {"encode_chunks", py_encode_chunks, METH_VARARGS, "rANS encode of a plane's chunks"},
    {"encode_chunks16", py_encode_chunks16, METH_VARARGS, "rANS encode of a joint (16-bit symbol) plane's chunks"},
    {"decode_chunks16", py_decode_chunks16, METH_VARARGS, "rANS decode of a joint (16-bit symbol) plane's chunks"},
    {"block_histograms16", py_block_histograms16, METH_VARARGS, "16-bit symbol counts per block"},
    {"segment_tops16", py_segment_tops16, METH_VARARGS, "largest 16-bit symbol count per segment, and the plane's counts"},
    {"segment_histograms16", py_segment_histograms16, METH_VARARGS, "16-bit symbol counts of chosen segments"},
    {"decode_lookup", py_decode_lookup, METH_VARARGS, "packed rANS decode lookup tables"},
    {"isa", py_isa, METH_NOARGS, "the instruction set in use: scalar, avx2 or avx512"},
    {"set_isa", py_set_isa, METH_VARARGS, "use a (supported) instruction set"},
    {"supported_isas", py_supported_isas, METH_NOARGS, "instruction sets this CPU runs"},
    {"set_threads", py_set_threads, METH_VARARGS, "default threads per call (and the process budget)"},
    {"threads", py_threads, METH_NOARGS, "default threads per call"},
    {"set_soft_gather", py_set_soft_gather, METH_VARARGS, "table lookups by scalar loads (True) or gathers (False), or an (avx2, avx512) pair; returns the old pair"},
    WC_PREDICT_METHODS
    WC_CRC32_METHODS
    WC_FIXEDCHECK_METHODS
    WC_FIXEDCODEC_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_cext",
                                       "wcodec's CPU kernels in C (see wcodec.native)", -1, methods};

PyMODINIT_FUNC PyInit__cext(void) {
#ifdef WC_X86
    __builtin_cpu_init();
    /* the SIMD paths pack and unpack tail fields with BMI2's pext / pdep */
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2")) g_isa_max = ISA_AVX2;
    if (g_isa_max == ISA_AVX2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
        g_isa_max = ISA_AVX512;
    g_soft_gather[0] = 1;
    g_soft_gather[1] = __builtin_cpu_is("amd");
    init_perm8();
#endif
    g_isa = g_isa_max;
    g_log2[0] = 0.0;
    for (int f = 1; f <= 4096; f++) g_log2[f] = log2((double)f);
    g_threads_default = 1;
    g_spare = 0;
    wc_crc32_init();
#ifdef WC_THREADS
    pthread_atfork(NULL, NULL, pool_after_fork);
#endif
    PyObject *m = PyModule_Create(&moduledef);
    if (m && PyModule_AddIntConstant(m, "FLOAT_FILE_COLS", FF_COLS) < 0) Py_CLEAR(m);
    return m;
}
