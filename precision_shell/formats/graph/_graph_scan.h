/* Shared by the graph-scan kernel's two sources (_graph_scan.c: the scan; _graph_link.c: linking
 * inputs by name and the start-up cache's int columns): the growable buffer and the hash. */
#ifndef PSHELL_GRAPH_SCAN_H
#define PSHELL_GRAPH_SCAN_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ---- growable byte buffer: a bytes object grown in place, handed to Python without a copy ---- */
typedef struct { PyObject *obj; char *p; Py_ssize_t n, cap; } Buf;

static inline int buf_grow(Buf *b, Py_ssize_t need) {
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < need) cap *= 2;
    if (!b->obj) {
        b->obj = PyBytes_FromStringAndSize(NULL, cap);
        if (!b->obj) return -1;
    } else if (_PyBytes_Resize(&b->obj, cap) < 0) {
        b->obj = NULL;
        return -1;
    }
    b->p = PyBytes_AS_STRING(b->obj);
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (b->n + n > b->cap && buf_grow(b, b->n + n) < 0) return -1;
    memcpy(b->p + b->n, src, n);
    b->n += n;
    return 0;
}
static inline int put_i64(Buf *b, int64_t v) { return buf_put(b, &v, 8); }
static inline int put_i32(Buf *b, int32_t v) { return buf_put(b, &v, 4); }
static inline int put_u8(Buf *b, uint8_t v) { return buf_put(b, &v, 1); }
static inline void buf_free(Buf *b) { Py_CLEAR(b->obj); b->p = NULL; b->n = b->cap = 0; }
/* the bytes written (the buffer gives up its object); NULL on error */
static inline PyObject *buf_bytes(Buf *b) {
    if (!b->obj) return PyBytes_FromStringAndSize("", 0);
    PyObject *out = b->obj;
    b->obj = NULL; b->p = NULL; b->cap = 0;
    if (_PyBytes_Resize(&out, b->n) < 0) return NULL;
    b->n = 0;
    return out;
}

/* ---- hashing names ----------------------------------------------------------------------------- */
static inline uint64_t fnv(const char *p, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (Py_ssize_t i = 0; i < n; i++) { h ^= (uint8_t)p[i]; h *= 1099511628211ULL; }
    return h;
}

/* spreads FNV's bits (the table takes the low ones, the tag the high ones) */
static inline uint64_t mix(uint64_t h) {
    h ^= h >> 33; h *= 0xff51afd7ed558ccdULL; h ^= h >> 33;
    return h;
}

PyObject *graph_link_inputs(PyObject *self, PyObject *args);
PyObject *graph_unpack_ints(PyObject *self, PyObject *args);
PyObject *graph_pack_ints(PyObject *self, PyObject *args);

#endif
