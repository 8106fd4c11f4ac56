/* The fused metrics kernel: metrics_kernels.first_pass / second_pass / bool_counts in C.
 *
 * Same results as the numpy path, bit for bit on the machine it runs on (that path is the
 * reference; analysis/fused_metrics.py is the Python side):
 *
 * - Element-wise work is float32 with exactly the numpy path's operations and operand order;
 *   build with -ffp-contract=off and without -ffast-math (no fused multiply-add, IEEE NaN/Inf
 *   and subnormals). fp16 / bf16 are decoded to float32 in registers (both exact).
 * - log is numpy's own float32 loop (np.log's inner loop, called through its function
 *   pointer): numpy's SIMD log differs from a correctly rounded logf in ~40% of the values near
 *   1, enough to move KL by 1e-7 relative.
 * - Sums replay numpy's summation order: np.add.reduce(float32, dtype=float64) casts through
 *   BLOCK-element buffers (block sums added in turn to 0.0) and sums each buffer pairwise
 *   (halves rounded to a multiple of 8 down to LEAF elements, a leaf in 8 interleaved
 *   accumulators). The overflow fallbacks sum a float64 array pairwise in one piece.
 * - Every quantity is per chunk, as the numpy path's loop over chunks; Python adds the chunk
 *   rows in order, so splitting the chunks over threads changes nothing.
 *
 * The GIL is released while computing; inputs are any contiguous buffers, read unaligned.
 * This file is the Python module; _fused_passes.c (+ _fused_vectors.h) computes.
 */
#include <string.h>

#include "_fused_metrics.h"

PyUFuncGenericFunction fused_log_loop;
void *fused_log_data;

/* ---- Python interface ---------------------------------------------------------------- */

typedef struct {
    Py_buffer x, y, rows;
    Py_ssize_t n, nchunks;
} Call;

static void release(Call *call)
{
    PyBuffer_Release(&call->x);
    PyBuffer_Release(&call->y);
    PyBuffer_Release(&call->rows);
}

static Py_ssize_t item_size(int kind) { return kind == KIND_F32 ? 4 : 2; }

/* Check the buffers of (x, y, x_kind, y_kind, chunk, rows); 0 or -1 with an exception set. */
static int open_call(Call *call, PyObject *x, PyObject *y, int x_kind, int y_kind,
                     Py_ssize_t chunk, PyObject *rows, Py_ssize_t width)
{
    memset(call, 0, sizeof(*call));
    if (x_kind < KIND_F32 || x_kind > KIND_BF16 || y_kind < KIND_F32 || y_kind > KIND_BF16) {
        PyErr_SetString(PyExc_ValueError, "unknown element kind");
        return -1;
    }
    if (chunk < 1) {
        PyErr_SetString(PyExc_ValueError, "chunk must be positive");
        return -1;
    }
    if (PyObject_GetBuffer(x, &call->x, PyBUF_C_CONTIGUOUS) < 0 ||
        PyObject_GetBuffer(y, &call->y, PyBUF_C_CONTIGUOUS) < 0 ||
        PyObject_GetBuffer(rows, &call->rows, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        release(call);
        return -1;
    }
    call->n = call->x.len / item_size(x_kind);
    call->nchunks = (call->n + chunk - 1) / chunk;
    if (call->x.len % item_size(x_kind) || call->y.len != call->n * item_size(y_kind)) {
        PyErr_SetString(PyExc_ValueError, "x and y must hold the same number of elements");
    } else if (call->rows.len < call->nchunks * width * (Py_ssize_t)sizeof(double)) {
        PyErr_SetString(PyExc_ValueError, "rows is too small");
    } else {
        return 0;
    }
    release(call);
    return -1;
}

static PyObject *py_first_pass(PyObject *self, PyObject *args)
{
    PyObject *x, *y, *rows;
    int x_kind, y_kind;
    Py_ssize_t chunk;
    Call call;
    if (!PyArg_ParseTuple(args, "OOiinO", &x, &y, &x_kind, &y_kind, &chunk, &rows) ||
        open_call(&call, x, y, x_kind, y_kind, chunk, rows, F_WIDTH) < 0)
        return NULL;
    Source sx = {call.x.buf, x_kind}, sy = {call.y.buf, y_kind};
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = fused_first_pass(sx, sy, call.n, chunk, call.rows.buf) < 0;
    Py_END_ALLOW_THREADS
    release(&call);
    if (failed)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *py_second_pass(PyObject *self, PyObject *args)
{
    PyObject *x, *y, *rows;
    int x_kind, y_kind;
    Py_ssize_t chunk;
    Second c = {0};
    Call call;
    if (!PyArg_ParseTuple(args, "OOiinOffpppfffff", &x, &y, &x_kind, &y_kind, &chunk, &rows,
                          &c.x_shift, &c.y_shift, &c.x_finite, &c.y_finite, &c.want_kl,
                          &c.x_low, &c.x_span, &c.y_low, &c.y_span, &c.kl_scale) ||
        open_call(&call, x, y, x_kind, y_kind, chunk, rows, S_WIDTH) < 0)
        return NULL;
    c.x = (Source){call.x.buf, x_kind};
    c.y = (Source){call.y.buf, y_kind};
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = fused_second_pass(&c, call.n, chunk, call.rows.buf) < 0;
    Py_END_ALLOW_THREADS
    release(&call);
    if (failed)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *py_bool_counts(PyObject *self, PyObject *args)
{
    PyObject *x, *y;
    Py_buffer bx, by;
    if (!PyArg_ParseTuple(args, "OO", &x, &y) ||
        PyObject_GetBuffer(x, &bx, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(y, &by, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&bx);
        return NULL;
    }
    int64_t counts[4];
    int same = bx.len == by.len;
    if (same) {
        Py_BEGIN_ALLOW_THREADS
        fused_bool_counts(bx.buf, by.buf, bx.len, counts);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&bx);
    PyBuffer_Release(&by);
    if (!same) {
        PyErr_SetString(PyExc_ValueError, "x and y must hold the same number of elements");
        return NULL;
    }
    return Py_BuildValue("LLLL", (long long)counts[0], (long long)counts[1],
                         (long long)counts[2], (long long)counts[3]);
}

static PyObject *py_value_counts(PyObject *self, PyObject *args)
{
    PyObject *x;
    int kind;
    Py_buffer bx;
    if (!PyArg_ParseTuple(args, "Oi", &x, &kind))
        return NULL;
    if (kind < KIND_F32 || kind > KIND_BF16) {
        PyErr_SetString(PyExc_ValueError, "unknown element kind");
        return NULL;
    }
    if (PyObject_GetBuffer(x, &bx, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    int64_t counts[4];
    Py_ssize_t n = bx.len / item_size(kind);
    Py_BEGIN_ALLOW_THREADS
    fused_value_counts(bx.buf, kind, n, counts);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&bx);
    return Py_BuildValue("LLLL", (long long)counts[0], (long long)counts[1],
                         (long long)counts[2], (long long)counts[3]);
}

/* numpy's float32 -> float32 log inner loop (the one np.log dispatches to on this CPU) */
static int bind_log(void)
{
    PyObject *numpy = PyImport_ImportModule("numpy");
    if (numpy == NULL)
        return -1;
    PyObject *log = PyObject_GetAttrString(numpy, "log");
    Py_DECREF(numpy);
    if (log == NULL)
        return -1;
    if (strcmp(Py_TYPE(log)->tp_name, "numpy.ufunc") == 0) {
        PyUFuncObject *ufunc = (PyUFuncObject *)log;
        for (int i = 0; i < ufunc->ntypes; i++) {
            const char *types = (const char *)ufunc->types + i * ufunc->nargs;
            if (ufunc->nargs == 2 && types[0] == NPY_FLOAT && types[1] == NPY_FLOAT &&
                ufunc->functions[i] != NULL) {
                fused_log_loop = ufunc->functions[i];
                fused_log_data = ufunc->data ? ufunc->data[i] : NULL;
                return 0; /* the reference is kept: the loop must outlive any unloading of numpy */
            }
        }
    }
    Py_DECREF(log);
    PyErr_SetString(PyExc_ImportError, "numpy.log has no float32 loop to call");
    return -1;
}

static PyMethodDef methods[] = {
    {"first_pass", py_first_pass, METH_VARARGS,
     "first_pass(x, y, x_kind, y_kind, chunk, rows): one float64 row per chunk"},
    {"second_pass", py_second_pass, METH_VARARGS,
     "second_pass(x, y, x_kind, y_kind, chunk, rows, x_shift, y_shift, x_finite, y_finite, "
     "want_kl, x_low, x_span, y_low, y_span, kl_scale): one float64 row per chunk"},
    {"batch_metrics", fused_batch_metrics, METH_VARARGS,
     "batch_metrics(items, chunk, out): items of (x, x_kind, int32 run starts or None, run, step, "
     "y, y_kind[, int32 piece lengths]); "
     "out[i] = FirstPass fields, SecondPass fields, kl_scale of pair i (B_WIDTH doubles)"},
    {"same_bytes", fused_same_bytes, METH_VARARGS,
     "same_bytes(a, b) -> whether the two buffers hold the same bytes (GIL released)"},
    {"file_same_bytes", fused_file_same_bytes, METH_VARARGS,
     "file_same_bytes(fd, offset, buf) -> whether the file holds buf's bytes at offset (pread in "
     "chunks, GIL released; a short read is False)"},
    {"bool_counts", py_bool_counts, METH_VARARGS,
     "bool_counts(x, y) -> (x_true, y_true, both_true, equal)"},
    {"value_counts", py_value_counts, METH_VARARGS,
     "value_counts(x, kind) -> (nan, pos_inf, neg_inf, saturated): saturated = |x| == 65504, "
     "float16 only"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fused_metrics", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fused_metrics(void)
{
    if (bind_log() < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "KIND_F32", KIND_F32) < 0 ||
        PyModule_AddIntConstant(m, "KIND_F16", KIND_F16) < 0 ||
        PyModule_AddIntConstant(m, "KIND_BF16", KIND_BF16) < 0 ||
        PyModule_AddIntConstant(m, "FIRST_WIDTH", F_WIDTH) < 0 ||
        PyModule_AddIntConstant(m, "SECOND_WIDTH", S_WIDTH) < 0 ||
        PyModule_AddIntConstant(m, "BATCH_WIDTH", B_WIDTH) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
