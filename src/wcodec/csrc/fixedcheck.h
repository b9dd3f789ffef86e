/* The escape checks of codec "fixed" (codecs/fixed.py check_layout) in C, compiled into
 * wcodec._cext: what wcodec_cext.c and fixedcheck.c share. */
#ifndef WCODEC_FIXEDCHECK_H
#define WCODEC_FIXEDCHECK_H

#include "predict.h" /* WC_HIDDEN, wc_run_parallel */

WC_HIDDEN PyObject *wc_fixed_check_escapes(PyObject *self, PyObject *args);

#define WC_FIXEDCHECK_METHODS                                                                      \
    {"fixed_check_escapes", wc_fixed_check_escapes, METH_VARARGS,                                  \
     "codec fixed: per-escape checks of a record (bit mask of the failed checks), threaded"},

#endif
