/* codec "fixed": the per-escape checks of codecs/fixed.py check_layout, over all escapes of a
 * record on the extension's threads. An MoE layer's experts record holds millions of escapes
 * (heavy-tailed weights: ~0.7 %), where numpy's gathers over int64 temporaries took ~1.5 s of a
 * 4-layer load; here one pass reads each escape's column, value, nibble and low byte.
 *
 * fixed_check_escapes(lo u8[rows*kpad], nib u8[rows*kpad/2], erow i64[E], col u16|u32[E],
 *                     val u16[E], kpad, cols, base, threads=0) -> int
 * returns a bit mask of the checks that failed anywhere (0: all pass):
 *   1 a column >= cols, 2 columns not strictly increasing within a row, 4 a value inside the
 *   window [base, base+6] (it would have a nibble), 8 an escape's nibble is not sign|7,
 *   16 an escape's low byte is not its value's, 32 a row index outside the planes.
 * The caller checks the CSR row pointer (and derives erow from it) first. */
#include "fixedcheck.h"

#define CHUNK (1 << 16) /* escapes per task */

typedef struct {
    const uint8_t *lo, *nib;
    const int64_t *erow;
    const uint16_t *col16;
    const uint32_t *col32;
    const uint16_t *val;
    int64_t n, rows, kpad, cols, base;
    int mask;
} ctx_t;

static inline int64_t col_at(const ctx_t *c, int64_t k) {
    return c->col16 ? (int64_t)c->col16[k] : (int64_t)c->col32[k];
}

static void check_task(void *p, int64_t task) {
    ctx_t *c = p;
    int64_t a = task * CHUNK, b = a + CHUNK < c->n ? a + CHUNK : c->n;
    int mask = 0;
    for (int64_t k = a; k < b; k++) {
        int64_t r = c->erow[k], col = col_at(c, k);
        uint32_t v = c->val[k];
        if (r < 0 || r >= c->rows) { mask |= 32; continue; }
        if (col >= c->cols) { mask |= 1; continue; }
        if (k > 0 && c->erow[k - 1] == r && col_at(c, k - 1) >= col) mask |= 2;
        int64_t d = (int64_t)((v >> 8) & 0x7F) - c->base;
        if (d >= 0 && d <= 6) mask |= 4;
        int64_t i = col / 8, j = col % 8;
        uint8_t byte = c->nib[r * (c->kpad / 2) + 4 * i + (j % 4)];
        uint32_t nibble = (byte >> (4 * (j / 4))) & 0x0F;
        if (nibble != (((v >> 15) << 3) | 7u)) mask |= 8;
        if (c->lo[r * c->kpad + col] != (v & 0xFF)) mask |= 16;
    }
    if (mask) __atomic_fetch_or(&c->mask, mask, __ATOMIC_RELAXED);
}

static int take(PyObject *obj, Py_buffer *b, int itemsize, const char *what) {
    if (PyObject_GetBuffer(obj, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    if (b->itemsize != itemsize) {
        PyErr_Format(PyExc_ValueError, "fixed_check_escapes: %s: expected items of %d bytes, got %zd", what,
                     itemsize, b->itemsize);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

PyObject *wc_fixed_check_escapes(PyObject *self, PyObject *args) {
    PyObject *o_lo, *o_nib, *o_erow, *o_col, *o_val;
    long long kpad, cols, base;
    int threads = 0;
    if (!PyArg_ParseTuple(args, "OOOOOLLL|i", &o_lo, &o_nib, &o_erow, &o_col, &o_val, &kpad, &cols, &base, &threads))
        return NULL;
    Py_buffer b[5];
    int got = 0;
    PyObject *res = NULL;
    if (take(o_lo, &b[0], 1, "lo") < 0) goto done;
    got++;
    if (take(o_nib, &b[1], 1, "nib") < 0) goto done;
    got++;
    if (take(o_erow, &b[2], 8, "erow") < 0) goto done;
    got++;
    if (PyObject_GetBuffer(o_col, &b[3], PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
    got++;
    if (take(o_val, &b[4], 2, "val") < 0) goto done;
    got++;
    ctx_t c = {.lo = b[0].buf, .nib = b[1].buf, .erow = b[2].buf, .val = b[4].buf, .n = b[2].len / 8,
               .kpad = kpad, .cols = cols, .base = base, .mask = 0};
    if (b[3].itemsize == 2) c.col16 = b[3].buf;
    else if (b[3].itemsize == 4) c.col32 = b[3].buf;
    if ((!c.col16 && !c.col32) || kpad < 16 || kpad % 16 || cols > kpad || b[0].len % kpad ||
        b[1].len * 2 != b[0].len || b[3].len / b[3].itemsize != c.n || b[4].len / 2 != c.n) {
        PyErr_SetString(PyExc_ValueError, "fixed_check_escapes: bad sizes");
        goto done;
    }
    c.rows = b[0].len / kpad;
    int64_t tasks = (c.n + CHUNK - 1) / CHUNK;
    Py_BEGIN_ALLOW_THREADS
    if (tasks) wc_run_parallel(check_task, &c, tasks, threads);
    Py_END_ALLOW_THREADS
    res = PyLong_FromLong(c.mask);
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&b[i]);
    return res;
}
