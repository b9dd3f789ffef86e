/* int8 intra prediction (predict.c), compiled into wcodec._cext: what wcodec_cext.c and
 * predict.c share. */
#ifndef WCODEC_PREDICT_H
#define WCODEC_PREDICT_H

#include <Python.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define WC_HIDDEN __attribute__((visibility("hidden")))
#else
#define WC_HIDDEN
#endif

/* defined in wcodec_cext.c: fn(ctx, 0..n-1) on the extension's threads (threads <= 0: the
 * default count), the caller's thread included; called with the GIL released */
typedef void (*wc_task_fn)(void *ctx, int64_t task);
WC_HIDDEN void wc_run_parallel(wc_task_fn fn, void *ctx, int64_t n, int threads);

WC_HIDDEN PyObject *wc_predict_costs(PyObject *self, PyObject *args);
WC_HIDDEN PyObject *wc_predict_residuals(PyObject *self, PyObject *args);
WC_HIDDEN PyObject *wc_predict_reconstruct(PyObject *self, PyObject *args);

#define WC_PREDICT_METHODS                                                                         \
    {"predict_costs", wc_predict_costs, METH_VARARGS, "int8 intra prediction: coded cost per tile and mode"}, \
    {"predict_residuals", wc_predict_residuals, METH_VARARGS, "int8 intra prediction: residual plane"},        \
    {"predict_reconstruct", wc_predict_reconstruct, METH_VARARGS, "int8 intra prediction: inverse"},

#endif
