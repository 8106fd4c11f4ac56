/* The statistics CSV's float cells (analysis/compare/msprobe/cells.py): repr() of every value of
 * a float64 array, in one C loop (formats/msprobe/float_repr.h: Ryu's digits in repr's layout).
 *
 * Why C: the statistics CSV of a 100k-entry pair prints ~4.8M floats; map(repr) over them was
 * ~1 s of each CSV half's ~1.5 s. The digits are made with the GIL released, then the strings.
 *
 * repr_columns(values, suffix) -> [list of str per column]: values a C-contiguous float64 buffer
 *   of shape (n, k) (or (n,): one column); each text is repr(v) + suffix.
 * repr_equal(value, text) -> bool: whether text is repr(value) (the tests and the scanner's rule).
 * csv_lines(columns) -> bytes: the CSV lines of a chunk's columns (lists of str), UTF-8.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../../../formats/msprobe/float_repr.h"

static PyObject *repr_columns(PyObject *self, PyObject *args) {
    PyObject *source;
    const char *suffix;
    Py_ssize_t suffix_len;
    if (!PyArg_ParseTuple(args, "Os#", &source, &suffix, &suffix_len)) return NULL;
    for (Py_ssize_t i = 0; i < suffix_len; i++)
        if ((unsigned char)suffix[i] >= 0x80) { PyErr_SetString(PyExc_ValueError, "suffix: ASCII only"); return NULL; }
    if (suffix_len > 8) { PyErr_SetString(PyExc_ValueError, "suffix longer than 8 bytes"); return NULL; }
    Py_buffer view;
    if (PyObject_GetBuffer(source, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_ND) < 0) return NULL;
    PyObject *result = NULL;
    char *text = NULL;
    unsigned char *lengths = NULL;
    if (view.itemsize != 8 || !view.format || (strcmp(view.format, "d") && strcmp(view.format, "<d"))
            || view.ndim < 1 || view.ndim > 2) {
        PyErr_SetString(PyExc_ValueError, "values: a C-contiguous float64 array of 1 or 2 dimensions");
        goto done;
    }
    const Py_ssize_t rows = view.shape[0], cols = view.ndim == 2 ? view.shape[1] : 1;
    const Py_ssize_t count = rows * cols;
    const double *values = (const double *)view.buf;
    const int width = FLOAT_REPR_MAX + 8;
    text = PyMem_RawMalloc(count ? (size_t)count * width : 1);
    lengths = PyMem_RawMalloc(count ? (size_t)count : 1);
    if (!text || !lengths) { PyErr_NoMemory(); goto done; }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) {
        char *at = text + i * width;
        int n = float_repr(values[i], at);
        memcpy(at + n, suffix, (size_t)suffix_len);
        lengths[i] = (unsigned char)(n + suffix_len);
    }
    Py_END_ALLOW_THREADS
    result = PyList_New(cols);
    if (!result) goto done;
    for (Py_ssize_t k = 0; k < cols; k++) {
        PyObject *column = PyList_New(rows);
        if (!column) { Py_CLEAR(result); goto done; }
        PyList_SET_ITEM(result, k, column);
        for (Py_ssize_t i = 0; i < rows; i++) {
            Py_ssize_t at = i * cols + k;
            PyObject *s = PyUnicode_FromKindAndData(PyUnicode_1BYTE_KIND, text + at * width, lengths[at]);
            if (!s) { Py_CLEAR(result); goto done; }
            PyList_SET_ITEM(column, i, s);
        }
    }
done:
    PyMem_RawFree(text);
    PyMem_RawFree(lengths);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *repr_equal(PyObject *self, PyObject *args) {
    double value;
    const char *text;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "ds#", &value, &text, &len)) return NULL;
    char out[FLOAT_REPR_MAX];
    int n = float_repr(value, out);
    return PyBool_FromLong(n == len && memcmp(out, text, (size_t)n) == 0);
}

/* csv_lines(columns) -> bytes: ",".join(row) + "\r\n" of each row of the columns (lists of str
 * of one length, cells already quoted), UTF-8 -- "".join of the lines, encoded, in one pass. */
static PyObject *csv_lines(PyObject *self, PyObject *arg) {
    PyObject *columns = PySequence_Fast(arg, "columns: a sequence of lists");
    if (!columns) return NULL;
    Py_ssize_t ncols = PySequence_Fast_GET_SIZE(columns), rows = -1, total = 0;
    PyObject **cols = PySequence_Fast_ITEMS(columns);
    PyObject *result = NULL;
    for (Py_ssize_t k = 0; k < ncols; k++) {
        if (!PyList_Check(cols[k])) { PyErr_SetString(PyExc_TypeError, "columns: lists of str"); goto done; }
        Py_ssize_t n = PyList_GET_SIZE(cols[k]);
        if (rows >= 0 && n != rows) { PyErr_SetString(PyExc_ValueError, "columns of different lengths"); goto done; }
        rows = n;
    }
    if (rows < 0 || ncols == 0) { result = PyBytes_FromStringAndSize("", 0); goto done; }
    for (Py_ssize_t k = 0; k < ncols; k++)      /* sizes first: one allocation */
        for (Py_ssize_t i = 0; i < rows; i++) {
            PyObject *cell = PyList_GET_ITEM(cols[k], i);
            Py_ssize_t n;
            if (!PyUnicode_Check(cell)) { PyErr_SetString(PyExc_TypeError, "cells: str"); goto done; }
            if (!PyUnicode_AsUTF8AndSize(cell, &n)) goto done;
            total += n;
        }
    total += rows * (ncols - 1) + rows * 2;
    result = PyBytes_FromStringAndSize(NULL, total);
    if (!result) goto done;
    char *out = PyBytes_AS_STRING(result);
    for (Py_ssize_t i = 0; i < rows; i++) {
        for (Py_ssize_t k = 0; k < ncols; k++) {
            Py_ssize_t n;
            const char *text = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(cols[k], i), &n);    /* cached */
            if (k) *out++ = ',';
            memcpy(out, text, (size_t)n);
            out += n;
        }
        *out++ = '\r';
        *out++ = '\n';
    }
done:
    Py_DECREF(columns);
    return result;
}

static PyMethodDef methods[] = {
    {"csv_lines", csv_lines, METH_O, "the CSV lines of columns of str cells, UTF-8"},
    {"repr_columns", repr_columns, METH_VARARGS, "repr() + suffix of every value, one list per column"},
    {"repr_equal", repr_equal, METH_VARARGS, "whether text is repr(value)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_stats_cells", NULL, -1, methods};

PyMODINIT_FUNC PyInit__stats_cells(void) { return PyModule_Create(&module); }
