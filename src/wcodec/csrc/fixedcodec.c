/* codec "fixed" (layout: codecs/fixed.py's docstring, docs/CODEC_LAYOUT.md): its encoder and
 * decoder over rows on the extension's threads, the GIL released. The numpy functions of
 * codecs/fixed.py are the reference (tests/codecs/test_fixed_native.py: the same bytes); numpy
 * ran 51 MB/s to encode and 160 MB/s to decode a 4096x4096 Student-t weight (2-vCPU VM,
 * 2026-12-02), its fancy-indexed nibble order and a dozen full-size temporaries the cost.
 *
 * fixed_encode_planes(bits u16[rows*cols], rows, cols, kpad, base, lo u8[rows*kpad],
 *                     nib u8[rows*kpad/2], counts u32[rows], threads=0, m2=None) -> None
 *   lo, nib: the record's sections; counts[r]: the escapes of row r (the caller's cumulative
 *   sum is the CSR row pointer). With m2 (u8[rows*kpad/4]) the bits are fp16, codec fixed16:
 *   the window is over the exponent and m2 receives its plane.
 * fixed_encode_escapes(bits, rows, cols, base, ptr u32[rows+1], col u16|u32[E], val u16[E],
 *                      threads=0, fp16=False) -> None
 *   the escapes of row r, by column, at ptr[r] .. ptr[r+1]; ValueError if a row's count is not
 *   the pointer's.
 * fixed_decode(lo, nib, ptr, col, val, rows, cols, kpad, base, out u16[rows*cols], threads=0,
 *              m2=None) -> None: values from lo and nibbles (with m2, codec fixed16's plane
 *   u8[rows*kpad/4]: fp16 bits, codecs/fixed16.py), then each row's escapes written over their
 *   placeholders. For a record check_record accepted; on any other it stays inside its buffers
 *   (ValueError for a pointer or column out of range, out then partly written).
 * fixed_plane_checks(lo, nib, rows, cols, kpad, threads=0, m2=None) -> (escape nibbles, lo_nib_ok, m2_ok)
 *   the whole-plane checks of check_layout in one pass: how many nibbles are escape codes (low 3
 *   bits 7), whether the padding columns cols..kpad-1 hold 0 in lo and nib, and in fixed16's m2
 *   plane when given (else m2_ok is True).
 * Nothing passed in is modified but the outputs. */
#include "fixedcodec.h"

#define ESCAPE_D 7
#define TASK_VALUES (1 << 16) /* values per task (whole rows) */

typedef struct {
    const uint16_t *bits;
    uint8_t *lo, *nib, *m2; /* m2: fixed16's plane (encode), else NULL */
    uint32_t *counts;
    const uint8_t *clo, *cnib, *cm2; /* cm2: codec fixed16's m2 plane (decode and checks), else NULL */
    const uint32_t *ptr;
    uint16_t *col16;
    uint32_t *col32;
    const uint16_t *ccol16;
    const uint32_t *ccol32;
    uint16_t *val;
    const uint16_t *cval;
    uint16_t *out;
    int64_t rows, cols, kpad, base, rows_per_task, n_esc;
    int64_t sevens; /* fixed_plane_checks: escape nibbles, summed over tasks */
    int fp16;       /* encode: the bits are fp16 (codec fixed16: the exponent is the window field) */
    int err;
} fx_t;

static inline int64_t task_rows(const fx_t *c, int64_t task, int64_t *r1) {
    int64_t r0 = task * c->rows_per_task, e = r0 + c->rows_per_task;
    *r1 = e < c->rows ? e : c->rows;
    return r0;
}

/* the window offset of one value: its 7-bit high field (bf16: sign off the high byte; fp16, codec
 * fixed16: the 5-bit exponent) less base, wrapping above 6 when below base */
static inline uint32_t offset_of(uint32_t v, int64_t base, int fp16) {
    return (fp16 ? (v >> 10) & 0x1F : (v >> 8) & 0x7F) - (uint32_t)base;
}

/* the 4-bit code of one value: sign << 3 | d when d = offset in [0, 6], else ESCAPE_D */
static inline uint32_t nibble_of(uint32_t v, int64_t base, int fp16, uint32_t *esc) {
    uint32_t d = offset_of(v, base, fp16);
    uint32_t e = d > 6;
    *esc += e;
    return ((v >> 15) << 3) | (e ? ESCAPE_D : d);
}

static void encode_planes_task(void *p, int64_t task) {
    fx_t *c = p;
    int64_t r1, r0 = task_rows(c, task, &r1), cols = c->cols, kpad = c->kpad, full = cols / 8;
    for (int64_t r = r0; r < r1; r++) {
        const uint16_t *src = c->bits + r * cols;
        uint8_t *lo = c->lo + r * kpad, *nb = c->nib + r * (kpad / 2);
        uint32_t esc = 0;
        for (int64_t g = 0; g < full; g++) { /* whole groups of 8 columns */
            const uint16_t *s = src + 8 * g;
            uint32_t q[8];
            for (int j = 0; j < 8; j++) {
                lo[8 * g + j] = (uint8_t)s[j];
                q[j] = nibble_of(s[j], c->base, c->fp16, &esc);
            }
            for (int k = 0; k < 4; k++) nb[4 * g + k] = (uint8_t)(q[k] | q[k + 4] << 4);
        }
        for (int64_t g = full; g < kpad / 8; g++) { /* the last partial group and the padding */
            uint32_t q[8];
            for (int j = 0; j < 8; j++) {
                int64_t col = 8 * g + j;
                if (col < cols) {
                    lo[col] = (uint8_t)src[col];
                    q[j] = nibble_of(src[col], c->base, c->fp16, &esc);
                } else {
                    lo[col] = 0;
                    q[j] = 0;
                }
            }
            for (int k = 0; k < 4; k++) nb[4 * g + k] = (uint8_t)(q[k] | q[k + 4] << 4);
        }
        c->counts[r] = esc;
        if (c->m2) { /* fixed16: bits 8-9 of column 16w + 4k + q in bits 2k of byte 4w + q, padding 0 */
            uint8_t *m2 = c->m2 + r * (kpad / 4);
            for (int64_t i = 0; i < kpad / 4; i++) m2[i] = 0;
            for (int64_t col = 0; col < cols; col++) {
                int64_t w = col / 16, f = col % 16;
                m2[4 * w + (f & 3)] |= (uint8_t)(((src[col] >> 8) & 3) << (2 * (f >> 2)));
            }
        }
    }
}

static void encode_escapes_task(void *p, int64_t task) {
    fx_t *c = p;
    int64_t r1, r0 = task_rows(c, task, &r1), cols = c->cols;
    for (int64_t r = r0; r < r1; r++) {
        const uint16_t *src = c->bits + r * cols;
        int64_t k = c->ptr[r], end = c->ptr[r + 1];
        for (int64_t col = 0; col < cols; col++) {
            uint32_t v = src[col];
            if (offset_of(v, c->base, c->fp16) > 6) {
                if (k >= end) break;
                if (c->col16) c->col16[k] = (uint16_t)col;
                else c->col32[k] = (uint32_t)col;
                c->val[k++] = (uint16_t)v;
            }
        }
        if (k != end) __atomic_store_n(&c->err, 1, __ATOMIC_RELAXED);
    }
}

/* the values of one row of codec fixed: hi byte of code q is sign << 7 | (q & 7) + base (an
 * escape's placeholder: base + 7), the low byte lo */
static void decode_row(const uint8_t *lo, const uint8_t *nb, int64_t cols, uint32_t base, uint16_t *dst) {
    int64_t full = cols / 8;
    for (int64_t g = 0; g < full; g++) {
        for (int j = 0; j < 8; j++) {
            uint32_t q = (nb[4 * g + (j & 3)] >> (j & 4)) & 0x0F;
            dst[8 * g + j] = (uint16_t)((((q & 8) << 4) | ((q & 7) + base)) << 8 | lo[8 * g + j]);
        }
    }
    for (int64_t col = 8 * full; col < cols; col++) {
        int64_t g = col / 8, j = col % 8;
        uint32_t q = (nb[4 * g + (j & 3)] >> (j & 4)) & 0x0F;
        dst[col] = (uint16_t)((((q & 8) << 4) | ((q & 7) + base)) << 8 | lo[col]);
    }
}

/* the values of one row of codec fixed16: sign << 15 | (q & 7) + base << 10 | m2 << 8 | lo, the
 * m2 of column 16w + 4k + f%4 in bits 2k of byte 4w + f%4 */
static void decode_row16(const uint8_t *lo, const uint8_t *nb, const uint8_t *m2, int64_t cols, uint32_t base,
                         uint16_t *dst) {
    for (int64_t col = 0; col < cols; col++) {
        int64_t g = col / 8, j = col % 8, w = col / 16, f = col % 16;
        uint32_t q = (nb[4 * g + (j & 3)] >> (j & 4)) & 0x0F;
        uint32_t m = (m2[4 * w + (f & 3)] >> (2 * (f >> 2))) & 3;
        dst[col] = (uint16_t)((q & 8) << 12 | ((q & 7) + base) << 10 | m << 8 | lo[col]);
    }
}

static void decode_task(void *p, int64_t task) {
    fx_t *c = p;
    int64_t r1, r0 = task_rows(c, task, &r1), cols = c->cols, kpad = c->kpad;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *lo = c->clo + r * kpad, *nb = c->cnib + r * (kpad / 2);
        uint16_t *dst = c->out + r * cols;
        if (c->cm2) decode_row16(lo, nb, c->cm2 + r * (kpad / 4), cols, (uint32_t)c->base, dst);
        else decode_row(lo, nb, cols, (uint32_t)c->base, dst);
        int64_t a = c->ptr[r], b = c->ptr[r + 1];
        if (a > b || b > c->n_esc) {
            __atomic_store_n(&c->err, 1, __ATOMIC_RELAXED);
            continue;
        }
        for (int64_t k = a; k < b; k++) { /* the escapes over their placeholders */
            int64_t col = c->ccol16 ? (int64_t)c->ccol16[k] : (int64_t)c->ccol32[k];
            if (col >= cols) {
                __atomic_store_n(&c->err, 1, __ATOMIC_RELAXED);
                break;
            }
            dst[col] = c->cval[k];
        }
    }
}

/* a C-contiguous buffer of `itemsize`-byte items (`n` of them unless n < 0), writable if asked */
static int take(PyObject *obj, Py_buffer *b, int itemsize, int64_t n, int writable, const char *fn,
                const char *what) {
    if (PyObject_GetBuffer(obj, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if (b->itemsize != itemsize || (n >= 0 && b->len != n * itemsize)) {
        PyErr_Format(PyExc_ValueError, "%s: %s: expected %lld items of %d bytes, got %zd bytes of %zd", fn, what,
                     (long long)n, itemsize, b->len, b->itemsize);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

/* the escape columns: a C-contiguous buffer of 2- or 4-byte items; *n their count */
static int take_cols(PyObject *obj, Py_buffer *b, int writable, const char *fn, int64_t *n) {
    if (PyObject_GetBuffer(obj, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if (b->itemsize != 2 && b->itemsize != 4) {
        PyErr_Format(PyExc_ValueError, "%s: col: items of 2 or 4 bytes, got %zd", fn, b->itemsize);
        PyBuffer_Release(b);
        return -1;
    }
    *n = b->len / b->itemsize;
    return 0;
}

static int shape_ok(const char *fn, long long rows, long long cols, long long kpad, long long base) {
    if (rows < 0 || cols < 0 || kpad % 16 || kpad < cols || kpad - cols >= 16 || base < 0 || base > 119) {
        PyErr_Format(PyExc_ValueError, "%s: bad shape or base (rows %lld, cols %lld, kpad %lld, base %lld)", fn, rows,
                     cols, kpad, base);
        return 0;
    }
    return 1;
}

static int base_ok16(const char *fn, long long base) {
    if (base > 23) { /* codec fixed16: the placeholder exponent base + 7 stays below 31 */
        PyErr_Format(PyExc_ValueError, "%s: fixed16 base %lld > 23", fn, base);
        return 0;
    }
    return 1;
}

static int64_t per_task(int64_t kpad) {
    int64_t n = kpad ? TASK_VALUES / kpad : 1;
    return n > 0 ? n : 1;
}

static void run(wc_task_fn fn, fx_t *c, int threads) {
    int64_t tasks = c->rows ? (c->rows + c->rows_per_task - 1) / c->rows_per_task : 0;
    Py_BEGIN_ALLOW_THREADS
    if (tasks) wc_run_parallel(fn, c, tasks, c->rows * c->kpad < TASK_VALUES * 4 ? 1 : threads);
    Py_END_ALLOW_THREADS
}

/* run fn over c's rows; None, or ValueError "fn: msg" where a task set c->err */
static PyObject *run_checked(wc_task_fn f, fx_t *c, int threads, const char *fn, const char *msg) {
    run(f, c, threads);
    if (c->err) {
        PyErr_Format(PyExc_ValueError, "%s: %s", fn, msg);
        return NULL;
    }
    Py_RETURN_NONE;
}

PyObject *wc_fixed_encode_planes(PyObject *self, PyObject *args) {
    static const char *fn = "fixed_encode_planes";
    PyObject *o_bits, *o_lo, *o_nib, *o_cnt, *o_m2 = Py_None;
    long long rows, cols, kpad, base;
    int threads = 0;
    if (!PyArg_ParseTuple(args, "OLLLLOOO|iO", &o_bits, &rows, &cols, &kpad, &base, &o_lo, &o_nib, &o_cnt, &threads,
                          &o_m2))
        return NULL;
    if (!shape_ok(fn, rows, cols, kpad, base) || (o_m2 != Py_None && !base_ok16(fn, base))) return NULL;
    Py_buffer b[5];
    int got = 0;
    PyObject *res = NULL;
    if (take(o_bits, &b[0], 2, rows * cols, 0, fn, "bits") < 0) goto done;
    got++;
    if (take(o_lo, &b[1], 1, rows * kpad, 1, fn, "lo") < 0) goto done;
    got++;
    if (take(o_nib, &b[2], 1, rows * kpad / 2, 1, fn, "nib") < 0) goto done;
    got++;
    if (take(o_cnt, &b[3], 4, rows, 1, fn, "counts") < 0) goto done;
    got++;
    if (o_m2 != Py_None) {
        if (take(o_m2, &b[4], 1, rows * kpad / 4, 1, fn, "m2") < 0) goto done;
        got++;
    }
    fx_t c = {.bits = b[0].buf, .lo = b[1].buf, .nib = b[2].buf, .counts = b[3].buf, .rows = rows, .cols = cols,
              .kpad = kpad, .base = base, .rows_per_task = per_task(kpad), .fp16 = o_m2 != Py_None,
              .m2 = o_m2 != Py_None ? b[4].buf : NULL};
    res = run_checked(encode_planes_task, &c, threads, fn, "");
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&b[i]);
    return res;
}

PyObject *wc_fixed_encode_escapes(PyObject *self, PyObject *args) {
    static const char *fn = "fixed_encode_escapes";
    PyObject *o_bits, *o_ptr, *o_col, *o_val;
    long long rows, cols, base;
    int threads = 0, fp16 = 0;
    if (!PyArg_ParseTuple(args, "OLLLOOO|ip", &o_bits, &rows, &cols, &base, &o_ptr, &o_col, &o_val, &threads, &fp16))
        return NULL;
    const long long kpad = (cols + 15) / 16 * 16; /* codecs/fixed.py padded_cols */
    if (!shape_ok(fn, rows, cols, kpad, base) || (fp16 && !base_ok16(fn, base))) return NULL;
    Py_buffer b[4];
    int got = 0;
    PyObject *res = NULL;
    if (take(o_bits, &b[0], 2, rows * cols, 0, fn, "bits") < 0) goto done;
    got++;
    if (take(o_ptr, &b[1], 4, rows + 1, 0, fn, "ptr") < 0) goto done;
    got++;
    int64_t n;
    if (take_cols(o_col, &b[2], 1, fn, &n) < 0) goto done;
    got++;
    if (take(o_val, &b[3], 2, n, 1, fn, "val") < 0) goto done;
    got++;
    const uint32_t *ptr = b[1].buf;
    int ok = ptr[0] == 0 && ptr[rows] == n;
    for (int64_t r = 0; ok && r < rows; r++) ok = ptr[r] <= ptr[r + 1];
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "%s: the row pointer does not fit the %lld escapes of %zd-byte columns", fn,
                     (long long)n, b[2].itemsize);
        goto done;
    }
    fx_t c = {.bits = b[0].buf, .ptr = ptr, .val = b[3].buf, .rows = rows, .cols = cols, .base = base,
              .kpad = kpad, .rows_per_task = per_task(kpad), .n_esc = n,
              .fp16 = fp16};
    if (b[2].itemsize == 2) c.col16 = b[2].buf;
    else c.col32 = b[2].buf;
    res = run_checked(encode_escapes_task, &c, threads, fn, "a row's escapes differ from the row pointer's count");
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&b[i]);
    return res;
}

PyObject *wc_fixed_decode(PyObject *self, PyObject *args) {
    static const char *fn = "fixed_decode";
    PyObject *o_lo, *o_nib, *o_ptr, *o_col, *o_val, *o_out, *o_m2 = Py_None;
    long long rows, cols, kpad, base;
    int threads = 0;
    if (!PyArg_ParseTuple(args, "OOOOOLLLLO|iO", &o_lo, &o_nib, &o_ptr, &o_col, &o_val, &rows, &cols, &kpad, &base,
                          &o_out, &threads, &o_m2))
        return NULL;
    if (!shape_ok(fn, rows, cols, kpad, base)) return NULL;
    Py_buffer b[7];
    int got = 0;
    PyObject *res = NULL;
    if (take(o_lo, &b[0], 1, rows * kpad, 0, fn, "lo") < 0) goto done;
    got++;
    if (take(o_nib, &b[1], 1, rows * kpad / 2, 0, fn, "nib") < 0) goto done;
    got++;
    if (take(o_ptr, &b[2], 4, rows + 1, 0, fn, "ptr") < 0) goto done;
    got++;
    int64_t n;
    if (take_cols(o_col, &b[3], 0, fn, &n) < 0) goto done;
    got++;
    if (take(o_val, &b[4], 2, n, 0, fn, "val") < 0) goto done;
    got++;
    if (take(o_out, &b[5], 2, rows * cols, 1, fn, "out") < 0) goto done;
    got++;
    if (o_m2 != Py_None) {
        if (!base_ok16(fn, base)) goto done;
        if (take(o_m2, &b[6], 1, rows * kpad / 4, 0, fn, "m2") < 0) goto done;
        got++;
    }
    fx_t c = {.clo = b[0].buf, .cnib = b[1].buf, .ptr = b[2].buf, .cval = b[4].buf, .out = b[5].buf, .rows = rows,
              .cols = cols, .kpad = kpad, .base = base, .rows_per_task = per_task(kpad), .n_esc = n,
              .cm2 = o_m2 != Py_None ? b[6].buf : NULL};
    if (b[3].itemsize == 2) c.ccol16 = b[3].buf;
    else c.ccol32 = b[3].buf;
    res = run_checked(decode_task, &c, threads, fn, "an escape's row pointer or column is out of range");
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&b[i]);
    return res;
}

static void plane_checks_task(void *p, int64_t task) {
    fx_t *c = p;
    int64_t r1, r0 = task_rows(c, task, &r1), cols = c->cols, kpad = c->kpad, half = kpad / 2;
    int64_t sevens = 0;
    int bad = 0;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *nb = c->cnib + r * half, *lo = c->clo + r * kpad;
        for (int64_t i = 0; i < half; i++) {
            uint32_t b = nb[i];
            sevens += ((b & 0x07) == 0x07) + ((b & 0x70) == 0x70);
        }
        for (int64_t col = cols; col < kpad; col++) {
            int64_t g = col / 8, j = col % 8, w = col / 16, f = col % 16;
            bad |= lo[col] != 0 || ((nb[4 * g + (j & 3)] >> (j & 4)) & 0x0F) != 0;
            if (c->cm2) bad |= (((c->cm2[r * (kpad / 4) + 4 * w + (f & 3)] >> (2 * (f >> 2))) & 3) != 0) << 1;
        }
    }
    __atomic_fetch_add(&c->sevens, sevens, __ATOMIC_RELAXED);
    if (bad) __atomic_fetch_or(&c->err, bad, __ATOMIC_RELAXED);
}

PyObject *wc_fixed_plane_checks(PyObject *self, PyObject *args) {
    static const char *fn = "fixed_plane_checks";
    PyObject *o_lo, *o_nib, *o_m2 = Py_None;
    long long rows, cols, kpad;
    int threads = 0;
    if (!PyArg_ParseTuple(args, "OOLLL|iO", &o_lo, &o_nib, &rows, &cols, &kpad, &threads, &o_m2)) return NULL;
    if (!shape_ok(fn, rows, cols, kpad, 0)) return NULL;
    Py_buffer b[3];
    int got = 0;
    PyObject *res = NULL;
    if (take(o_lo, &b[0], 1, rows * kpad, 0, fn, "lo") < 0) goto done;
    got++;
    if (take(o_nib, &b[1], 1, rows * kpad / 2, 0, fn, "nib") < 0) goto done;
    got++;
    if (o_m2 != Py_None) {
        if (take(o_m2, &b[2], 1, rows * kpad / 4, 0, fn, "m2") < 0) goto done;
        got++;
    }
    fx_t c = {.clo = b[0].buf, .cnib = b[1].buf, .rows = rows, .cols = cols, .kpad = kpad,
              .rows_per_task = per_task(kpad), .cm2 = o_m2 != Py_None ? b[2].buf : NULL};
    run(plane_checks_task, &c, threads);
    res = Py_BuildValue("LOO", (long long)c.sevens, c.err & 1 ? Py_False : Py_True, c.err & 2 ? Py_False : Py_True);
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&b[i]);
    return res;
}
