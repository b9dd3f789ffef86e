/* int8 intra prediction in C, bit-identical to the numba kernels (wcodec/codecs/_predict_numba.py)
 * and the pure-Python specification (wcodec/codecs/_predict_reference.py, docs/CODEC_LAYOUT.md
 * "codec int8"): per-tile mode costs, the residual plane, and its inverse.
 *
 * A tensor [rows, cols] is cut into tiles of th x tw (edge tiles partial), stored tile-major,
 * each tile row-major. Prediction stays inside a tile (zero padding outside it), so tiles are
 * independent tasks on the extension's threads (wc_run_parallel, GIL released). Modes: NONE 0,
 * LEFT left, TOP top, AVG (left+top)>>1 (floor), PLANAR left+top-topleft; residual = (x - pred)
 * mod 256. LEFT, TOP and PLANAR are linear, so their inverse runs on the bytes modulo 256
 * whatever the signedness; AVG's halving needs the values (signed for I8, unsigned for U8).
 */
#define PY_SSIZE_T_CLEAN
#include "predict.h"

#include <stdlib.h>
#include <string.h>

enum { M_NONE = 0, M_LEFT, M_TOP, M_AVG, M_PLANAR, N_MODES };

typedef struct {
    int64_t rows, cols, th, tw, ntw, n_tiles;
} grid_t;

typedef struct {
    int64_t r0, c0, h, w, off; /* origin, extents, first symbol in the tile-major plane */
} tile_t;

static tile_t tile_at(const grid_t *g, int64_t t) {
    tile_t s;
    int64_t ti = t / g->ntw, tj = t % g->ntw;
    s.r0 = ti * g->th;
    s.c0 = tj * g->tw;
    s.h = g->rows - s.r0 < g->th ? g->rows - s.r0 : g->th;
    s.w = g->cols - s.c0 < g->tw ? g->cols - s.c0 : g->tw;
    s.off = s.r0 * g->cols + s.h * s.c0; /* full tile rows above, full-height tiles to the left */
    return s;
}

/* ---- arguments ---------------------------------------------------------------------------- */

typedef struct {
    Py_buffer b[4];
    int k;
} pbufs_t;

static void pbufs_release(pbufs_t *bs) {
    for (int i = 0; i < bs->k; i++) PyBuffer_Release(&bs->b[i]);
    bs->k = 0;
}

/* a C-contiguous buffer of `count` items of `itemsize` bytes; NULL with ValueError if not */
static void *pbuf(pbufs_t *bs, PyObject *obj, int writable, Py_ssize_t itemsize, int64_t count, const char *what) {
    Py_buffer *b = &bs->b[bs->k];
    if (PyObject_GetBuffer(obj, b, (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    bs->k++;
    if (b->itemsize != itemsize || b->len != (Py_ssize_t)(count * itemsize)) {
        PyErr_Format(PyExc_ValueError, "%s: expected %lld items of %zd bytes, got %zd bytes of %zd-byte items",
                     what, (long long)count, itemsize, b->len, b->itemsize);
        return NULL;
    }
    return b->buf;
}

/* the tile grid of a [rows, cols] tensor; -1 with ValueError on sizes that do not make one */
static int make_grid(grid_t *g, long long rows, long long cols, long long th, long long tw) {
    if (rows < 0 || cols < 0 || th < 1 || tw < 1 || (cols && rows > INT64_MAX / 4 / cols) || th > (1 << 30) || tw > (1 << 30)) {
        PyErr_SetString(PyExc_ValueError, "int8 prediction: bad view or tile size");
        return -1;
    }
    g->rows = rows;
    g->cols = cols;
    g->th = th;
    g->tw = tw;
    g->ntw = (cols + tw - 1) / tw;
    g->n_tiles = ((rows + th - 1) / th) * g->ntw;
    return 0;
}

static int check_modes(const uint8_t *modes, int64_t n) {
    for (int64_t t = 0; t < n; t++)
        if (modes[t] >= N_MODES) {
            PyErr_Format(PyExc_ValueError, "int8 prediction: tile %lld has unknown mode %d", (long long)t, modes[t]);
            return -1;
        }
    return 0;
}

/* what a tile task reads and writes */
typedef struct {
    grid_t g;
    const int16_t *x;     /* [rows, cols] values (costs, residuals) */
    const uint8_t *res;   /* [rows*cols] tile-major residuals (reconstruct) */
    const uint8_t *modes; /* [n_tiles] (residuals, reconstruct) */
    const double *cost;   /* [256] bits per residual symbol (costs) */
    const void *zeros;    /* [tw] items: the row above a tile's first row */
    int is_signed;        /* I8: AVG halves signed values (reconstruct) */
    double *costs;        /* [n_tiles, 5] (costs) */
    uint8_t *out;         /* [rows*cols]: residuals tile-major, or the tensor's bytes row-major */
} pred_ctx;

/* Runs fn over every tile with the GIL released, then releases the buffers (also on error);
 * zero_item: bytes of one item of the zero row. */
static PyObject *run_tiles(pbufs_t *bs, pred_ctx *ctx, wc_task_fn fn, size_t zero_item, int threads) {
    void *zeros = PyErr_Occurred() ? NULL : calloc((size_t)ctx->g.tw, zero_item);
    if (!zeros) {
        pbufs_release(bs);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    ctx->zeros = zeros;
    Py_BEGIN_ALLOW_THREADS
    wc_run_parallel(fn, ctx, ctx->g.n_tiles, threads);
    Py_END_ALLOW_THREADS
    free(zeros);
    pbufs_release(bs);
    Py_RETURN_NONE;
}

/* ---- mode costs --------------------------------------------------------------------------- */

/* all five modes in one pass; each mode's sum adds in the kernels' order (row-major), so the
 * doubles are the same */
static void costs_task(void *vctx, int64_t t) {
    const pred_ctx *ctx = vctx;
    tile_t s = tile_at(&ctx->g, t);
    const double *cost = ctx->cost;
    double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0, a4 = 0.0;
    for (int64_t r = 0; r < s.h; r++) {
        const int16_t *cur = ctx->x + (s.r0 + r) * ctx->g.cols + s.c0;
        const int16_t *up = r ? cur - ctx->g.cols : (const int16_t *)ctx->zeros;
        for (int64_t c = 0; c < s.w; c++) {
            int v = cur[c], top = up[c];
            int left = c ? cur[c - 1] : 0, tl = c ? up[c - 1] : 0;
            a0 += cost[v & 0xFF];
            a1 += cost[(v - left) & 0xFF];
            a2 += cost[(v - top) & 0xFF];
            a3 += cost[(v - ((left + top) >> 1)) & 0xFF];
            a4 += cost[(v - (left + top - tl)) & 0xFF];
        }
    }
    double *o = ctx->costs + t * N_MODES;
    o[M_NONE] = a0;
    o[M_LEFT] = a1;
    o[M_TOP] = a2;
    o[M_AVG] = a3;
    o[M_PLANAR] = a4;
}

/* predict_costs(x [rows*cols] int16, rows, cols, th, tw, cost [256] float64,
 *               out [n_tiles*5] float64, threads) */
PyObject *wc_predict_costs(PyObject *self, PyObject *args) {
    PyObject *o_x, *o_cost, *o_out;
    long long rows, cols, th, tw;
    int threads;
    pbufs_t bs = {.k = 0};
    pred_ctx ctx = {.x = NULL};
    if (!PyArg_ParseTuple(args, "OLLLLOOi", &o_x, &rows, &cols, &th, &tw, &o_cost, &o_out, &threads) ||
        make_grid(&ctx.g, rows, cols, th, tw) < 0)
        return NULL;
    (void)((ctx.x = pbuf(&bs, o_x, 0, 2, rows * cols, "x")) && (ctx.cost = pbuf(&bs, o_cost, 0, 8, 256, "cost")) &&
           (ctx.costs = pbuf(&bs, o_out, 1, 8, ctx.g.n_tiles * N_MODES, "out")));
    return run_tiles(&bs, &ctx, costs_task, sizeof(int16_t), threads);
}

/* ---- residuals ---------------------------------------------------------------------------- */

static void res_task(void *vctx, int64_t t) {
    const pred_ctx *ctx = vctx;
    tile_t s = tile_at(&ctx->g, t);
    const int64_t w = s.w;
    for (int64_t r = 0; r < s.h; r++) {
        const int16_t *cur = ctx->x + (s.r0 + r) * ctx->g.cols + s.c0;
        const int16_t *up = r ? cur - ctx->g.cols : (const int16_t *)ctx->zeros;
        uint8_t *o = ctx->out + s.off + r * w;
        /* casts to uint8_t take the value modulo 256 */
        switch (ctx->modes[t]) {
        case M_NONE:
            for (int64_t c = 0; c < w; c++) o[c] = (uint8_t)cur[c];
            break;
        case M_LEFT:
            o[0] = (uint8_t)cur[0];
            for (int64_t c = 1; c < w; c++) o[c] = (uint8_t)(cur[c] - cur[c - 1]);
            break;
        case M_TOP:
            for (int64_t c = 0; c < w; c++) o[c] = (uint8_t)(cur[c] - up[c]);
            break;
        case M_AVG:
            o[0] = (uint8_t)(cur[0] - (up[0] >> 1));
            for (int64_t c = 1; c < w; c++) o[c] = (uint8_t)(cur[c] - ((cur[c - 1] + up[c]) >> 1));
            break;
        default: /* M_PLANAR */
            o[0] = (uint8_t)(cur[0] - up[0]);
            for (int64_t c = 1; c < w; c++) o[c] = (uint8_t)(cur[c] - (cur[c - 1] + up[c] - up[c - 1]));
        }
    }
}

/* predict_residuals(x [rows*cols] int16, rows, cols, th, tw, modes [n_tiles] uint8,
 *                   out [rows*cols] uint8, threads) */
PyObject *wc_predict_residuals(PyObject *self, PyObject *args) {
    PyObject *o_x, *o_modes, *o_out;
    long long rows, cols, th, tw;
    int threads;
    pbufs_t bs = {.k = 0};
    pred_ctx ctx = {.x = NULL};
    if (!PyArg_ParseTuple(args, "OLLLLOOi", &o_x, &rows, &cols, &th, &tw, &o_modes, &o_out, &threads) ||
        make_grid(&ctx.g, rows, cols, th, tw) < 0)
        return NULL;
    (void)((ctx.x = pbuf(&bs, o_x, 0, 2, rows * cols, "x")) &&
           (ctx.modes = pbuf(&bs, o_modes, 0, 1, ctx.g.n_tiles, "modes")) &&
           (ctx.out = pbuf(&bs, o_out, 1, 1, rows * cols, "out")) && check_modes(ctx.modes, ctx.g.n_tiles) == 0);
    return run_tiles(&bs, &ctx, res_task, sizeof(int16_t), threads);
}

/* ---- reconstruct (inverse prediction) ----------------------------------------------------- */

static void rec_task(void *vctx, int64_t t) {
    const pred_ctx *ctx = vctx;
    tile_t s = tile_at(&ctx->g, t);
    const int64_t w = s.w;
    for (int64_t r = 0; r < s.h; r++) {
        const uint8_t *res = ctx->res + s.off + r * w;
        uint8_t *cur = ctx->out + (s.r0 + r) * ctx->g.cols + s.c0;
        const uint8_t *up = r ? cur - ctx->g.cols : (const uint8_t *)ctx->zeros;
        switch (ctx->modes[t]) {
        case M_NONE:
            memcpy(cur, res, (size_t)w);
            break;
        case M_LEFT: {
            uint8_t acc = 0;
            for (int64_t c = 0; c < w; c++) cur[c] = acc = (uint8_t)(acc + res[c]);
            break;
        }
        case M_TOP:
            for (int64_t c = 0; c < w; c++) cur[c] = (uint8_t)(res[c] + up[c]);
            break;
        case M_AVG: {
            int left = 0;
            if (ctx->is_signed)
                for (int64_t c = 0; c < w; c++) {
                    cur[c] = (uint8_t)(res[c] + ((left + (int8_t)up[c]) >> 1));
                    left = (int8_t)cur[c];
                }
            else
                for (int64_t c = 0; c < w; c++) {
                    cur[c] = (uint8_t)(res[c] + ((left + up[c]) >> 1));
                    left = cur[c];
                }
            break;
        }
        default: { /* M_PLANAR */
            uint8_t left = cur[0] = (uint8_t)(res[0] + up[0]);
            for (int64_t c = 1; c < w; c++) cur[c] = left = (uint8_t)(res[c] + left + up[c] - up[c - 1]);
        }
        }
    }
}

/* predict_reconstruct(res [rows*cols] uint8, rows, cols, th, tw, modes [n_tiles] uint8, signed,
 *                     out [rows*cols] uint8, threads) */
PyObject *wc_predict_reconstruct(PyObject *self, PyObject *args) {
    PyObject *o_res, *o_modes, *o_out;
    long long rows, cols, th, tw;
    int threads;
    pbufs_t bs = {.k = 0};
    pred_ctx ctx = {.x = NULL};
    if (!PyArg_ParseTuple(args, "OLLLLOpOi", &o_res, &rows, &cols, &th, &tw, &o_modes, &ctx.is_signed, &o_out,
                          &threads) ||
        make_grid(&ctx.g, rows, cols, th, tw) < 0)
        return NULL;
    (void)((ctx.res = pbuf(&bs, o_res, 0, 1, rows * cols, "res")) &&
           (ctx.modes = pbuf(&bs, o_modes, 0, 1, ctx.g.n_tiles, "modes")) &&
           (ctx.out = pbuf(&bs, o_out, 1, 1, rows * cols, "out")) && check_modes(ctx.modes, ctx.g.n_tiles) == 0);
    return run_tiles(&bs, &ctx, rec_task, sizeof(uint8_t), threads);
}
