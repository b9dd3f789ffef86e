/* CRC-32 (zlib's: reflected, polynomial 0xEDB88320) in C, compiled into wcodec._cext: what
 * wcodec_cext.c and crc32.c share. */
#ifndef WCODEC_CRC32_H
#define WCODEC_CRC32_H

#include "predict.h" /* WC_HIDDEN, wc_run_parallel */

/* zlib.crc32(buf[:len], crc): no GIL needed, one thread */
WC_HIDDEN uint32_t wc_crc32(const uint8_t *buf, int64_t len, uint32_t crc);
/* zlib's crc32_combine: the CRC of A + B from crc(A), crc(B) and len(B) */
WC_HIDDEN uint32_t wc_crc32_combine(uint32_t crc_a, uint32_t crc_b, int64_t len_b);
/* the CRC of n consecutive pieces from their CRCs (each from 0): every piece `piece` bytes but
 * the last, `last` bytes (what kernels that checksum their output chunk by chunk return) */
WC_HIDDEN uint32_t wc_crc32_join(const uint32_t *crcs, int64_t n, int64_t piece, int64_t last);

/* once, at module init (tables, CPU features) */
WC_HIDDEN void wc_crc32_init(void);
/* defined in wcodec_cext.c: the ISA level in use (0 scalar, 1 AVX2, 2 AVX-512) */
WC_HIDDEN int wc_isa(void);

WC_HIDDEN PyObject *wc_py_crc32(PyObject *self, PyObject *args);
WC_HIDDEN PyObject *wc_py_crc32_many(PyObject *self, PyObject *args);
#ifndef _WIN32
WC_HIDDEN PyObject *wc_py_pread_crc(PyObject *self, PyObject *args);
#define WC_PREAD_CRC_METHOD                                                                        \
    {"pread_crc", wc_py_pread_crc, METH_VARARGS, "pread a file span, checksumming its sections as each piece lands"},
#else
#define WC_PREAD_CRC_METHOD
#endif

#define WC_CRC32_METHODS                                                                           \
    {"crc32", wc_py_crc32, METH_VARARGS, "zlib.crc32 of a buffer, on the extension's threads"},    \
    {"crc32_many", wc_py_crc32_many, METH_VARARGS, "zlib.crc32 of each buffer of a sequence, one call"}, \
    WC_PREAD_CRC_METHOD

#endif
