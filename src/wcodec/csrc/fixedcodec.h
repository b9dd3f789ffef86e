/* Encode and decode of codec "fixed" (codecs/fixed.py) in C, compiled into wcodec._cext: what
 * wcodec_cext.c and fixedcodec.c share. */
#ifndef WCODEC_FIXEDCODEC_H
#define WCODEC_FIXEDCODEC_H

#include "predict.h" /* WC_HIDDEN, wc_run_parallel */

WC_HIDDEN PyObject *wc_fixed_encode_planes(PyObject *self, PyObject *args);
WC_HIDDEN PyObject *wc_fixed_encode_escapes(PyObject *self, PyObject *args);
WC_HIDDEN PyObject *wc_fixed_decode(PyObject *self, PyObject *args);
WC_HIDDEN PyObject *wc_fixed_plane_checks(PyObject *self, PyObject *args);

#define WC_FIXEDCODEC_METHODS                                                                      \
    {"fixed_encode_planes", wc_fixed_encode_planes, METH_VARARGS,                                  \
     "codec fixed: low bytes, nibble bytes and escapes per row of bf16 bits, threaded"},          \
    {"fixed_encode_escapes", wc_fixed_encode_escapes, METH_VARARGS,                                \
     "codec fixed: the escape list (columns, values) at a row pointer, threaded"},                \
    {"fixed_decode", wc_fixed_decode, METH_VARARGS,                                                \
     "codec fixed: bf16 bits of a checked record, escapes patched, threaded"},                    \
    {"fixed_plane_checks", wc_fixed_plane_checks, METH_VARARGS,                                    \
     "codec fixed: escape nibbles and zero padding of a record's planes, threaded"},

#endif
