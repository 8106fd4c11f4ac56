/* The statistics CSV's float cells (analysis/compare/msprobe/cells.py): repr() of every value of
 * a float64 array, in one C loop (formats/msprobe/float_repr.h: our shortest digits in repr's layout).
 *
 * Why C: the statistics CSV of a 100k-entry pair prints ~4.8M floats; map(repr) over them was
 * ~1 s of each CSV half's ~1.5 s. The digits are made with the GIL released, then the strings.
 *
 * repr_columns(values, suffix) -> [list of str per column]: values a C-contiguous float64 buffer
 *   of shape (n, k) (or (n,): one column); each text is repr(v) + suffix.
 * repr_equal(value, text) -> bool: whether text is repr(value) (the tests and the scanner's rule).
 * csv_lines(columns, final, fix) -> bytes: the CSV lines of a chunk's columns, quoted, UTF-8.
 * name_hashes / names_equal: exact pairing of row names held as blobs (column_pairing.py).
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

/* csv_lines(columns, final, fix) -> bytes: the CSV lines of a chunk's columns (lists of str of
 * one length), UTF-8, as stats_table._csv_column and ",".join would make them: a column whose
 * index is in ``final`` is written as it is; any other column with a cell that may be a formula
 * (its first character = + @ tab CR, or - not followed by a digit or '.') is replaced by
 * fix(column) (Python's _csv_column: csv_cell on every cell, then the quoting) and written as it
 * is; in the others a cell holding , " CR or LF is quoted here ("" for a quote). */
static int may_be_formula(const char *t, Py_ssize_t n) {
    if (!n) return 0;
    char c = t[0];
    if (c == '=' || c == '+' || c == '@' || c == '\t' || c == '\r') return 1;
    return c == '-' && !(n > 1 && ((t[1] >= '0' && t[1] <= '9') || t[1] == '.'));
}

static int needs_quotes(const char *t, Py_ssize_t n) {
    for (Py_ssize_t k = 0; k < n; k++)
        if (t[k] == ',' || t[k] == '"' || t[k] == '\r' || t[k] == '\n') return 1;
    return 0;
}

typedef struct { const char *text; Py_ssize_t len; int quoted; } Cell;

static PyObject *csv_lines(PyObject *self, PyObject *args) {
    PyObject *arg, *final, *fix;
    if (!PyArg_ParseTuple(args, "OOO", &arg, &final, &fix)) return NULL;
    PyObject *given = PySequence_Fast(arg, "columns: a sequence of lists");
    if (!given) return NULL;
    Py_ssize_t ncols = PySequence_Fast_GET_SIZE(given), rows = -1, total = 0;
    PyObject *result = NULL, *cols = PyList_New(ncols);
    char *quote = NULL;       /* per column: 1 when its cells are checked for quoting here */
    Cell *cells = NULL;
    if (!cols) goto done;
    quote = PyMem_Calloc(ncols ? ncols : 1, 1);
    if (!quote) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t k = 0; k < ncols; k++) {
        PyObject *col = PySequence_Fast_GET_ITEM(given, k);
        if (!PyList_Check(col)) { PyErr_SetString(PyExc_TypeError, "columns: lists of str"); goto done; }
        Py_ssize_t n = PyList_GET_SIZE(col);
        if (rows >= 0 && n != rows) { PyErr_SetString(PyExc_ValueError, "columns of different lengths"); goto done; }
        rows = n;
        PyObject *key = PyLong_FromSsize_t(k);
        if (!key) goto done;
        int is_final = PySequence_Contains(final, key);
        Py_DECREF(key);
        if (is_final < 0) goto done;
        int formula = 0;
        for (Py_ssize_t i = 0; i < n && !is_final && !formula; i++) {
            PyObject *cell = PyList_GET_ITEM(col, i);
            Py_ssize_t len;
            const char *text;
            if (!PyUnicode_Check(cell)) { PyErr_SetString(PyExc_TypeError, "cells: str"); goto done; }
            if (!(text = PyUnicode_AsUTF8AndSize(cell, &len))) goto done;
            formula = may_be_formula(text, len);
        }
        if (formula) {
            col = PyObject_CallOneArg(fix, col);
            if (!col) goto done;
            if (!PyList_Check(col) || PyList_GET_SIZE(col) != n) {
                Py_DECREF(col);
                PyErr_SetString(PyExc_TypeError, "fix(column): a list of the same length");
                goto done;
            }
        } else {
            Py_INCREF(col);
            quote[k] = !is_final;
        }
        PyList_SET_ITEM(cols, k, col);
    }
    if (rows < 0 || ncols == 0) { result = PyBytes_FromStringAndSize("", 0); goto done; }
    /* each cell's UTF-8 text and length, row by row, once; sizes first: one allocation */
    cells = PyMem_Malloc((size_t)(rows * ncols) * sizeof(Cell));
    if (!cells) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t k = 0; k < ncols; k++) {
        PyObject *col = PyList_GET_ITEM(cols, k);
        for (Py_ssize_t i = 0; i < rows; i++) {
            PyObject *cell = PyList_GET_ITEM(col, i);
            Cell *c = &cells[i * ncols + k];
            if (!PyUnicode_Check(cell)) { PyErr_SetString(PyExc_TypeError, "cells: str"); goto done; }
            if (!(c->text = PyUnicode_AsUTF8AndSize(cell, &c->len))) goto done;
            c->quoted = quote[k] && needs_quotes(c->text, c->len);
            total += c->len;
            if (c->quoted) {
                total += 2;
                for (Py_ssize_t j = 0; j < c->len; j++) total += c->text[j] == '"';
            }
        }
    }
    total += rows * (ncols - 1) + rows * 2;
    result = PyBytes_FromStringAndSize(NULL, total);
    if (!result) goto done;
    char *out = PyBytes_AS_STRING(result);
    const Cell *c = cells;
    for (Py_ssize_t i = 0; i < rows; i++) {
        for (Py_ssize_t k = 0; k < ncols; k++, c++) {
            if (k) *out++ = ',';
            if (c->quoted) {
                *out++ = '"';
                for (Py_ssize_t j = 0; j < c->len; j++) {
                    if (c->text[j] == '"') *out++ = '"';
                    *out++ = c->text[j];
                }
                *out++ = '"';
            } else {
                memcpy(out, c->text, (size_t)c->len);
                out += c->len;
            }
        }
        *out++ = '\r';
        *out++ = '\n';
    }
done:
    PyMem_Free(cells);
    PyMem_Free(quote);
    Py_XDECREF(cols);
    Py_DECREF(given);
    return result;
}

/* Names held as a UTF-8 blob and int64 offsets (formats/msprobe/name_column.py). */
typedef struct { Py_buffer blob, off; } Names;

static int names_get(PyObject *blob, PyObject *off, Names *names) {
    if (PyObject_GetBuffer(blob, &names->blob, PyBUF_SIMPLE) < 0) return -1;
    if (PyObject_GetBuffer(off, &names->off, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_ND) < 0) {
        PyBuffer_Release(&names->blob);
        return -1;
    }
    const int64_t *o = names->off.buf;
    Py_ssize_t n = names->off.len / 8;
    int bad = names->off.itemsize != 8 || names->off.ndim != 1 || n < 1 || o[0] < 0;
    for (Py_ssize_t i = 1; i < n && !bad; i++) bad = o[i] < o[i - 1];
    if (!bad && o[n - 1] > names->blob.len) bad = 1;
    if (bad) {
        PyBuffer_Release(&names->blob);
        PyBuffer_Release(&names->off);
        PyErr_SetString(PyExc_ValueError, "names: a blob and its int64 offsets");
        return -1;
    }
    return 0;
}

static void names_release(Names *names) {
    PyBuffer_Release(&names->blob);
    PyBuffer_Release(&names->off);
}

/* name_hashes(blob, off) -> bytes: a 64-bit FNV-1a hash of each name, native uint64. */
static PyObject *name_hashes(PyObject *self, PyObject *args) {
    PyObject *blob, *off;
    if (!PyArg_ParseTuple(args, "OO", &blob, &off)) return NULL;
    Names names;
    if (names_get(blob, off, &names)) return NULL;
    Py_ssize_t n = names.off.len / 8 - 1;
    PyObject *result = PyBytes_FromStringAndSize(NULL, n * 8);
    if (result) {
        uint64_t *out = (uint64_t *)PyBytes_AS_STRING(result);
        const unsigned char *b = names.blob.buf;
        const int64_t *o = names.off.buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            uint64_t h = 1469598103934665603ull;
            for (int64_t k = o[i]; k < o[i + 1]; k++) { h ^= b[k]; h *= 1099511628211ull; }
            out[i] = h;
        }
        Py_END_ALLOW_THREADS
    }
    names_release(&names);
    return result;
}

/* names_equal(blob_a, off_a, rows_a, blob_b, off_b, rows_b) -> bytes: 1 where name rows_a[i] of
 * a and name rows_b[i] of b are the same bytes (rows: int64 arrays of one length). */
static PyObject *names_equal(PyObject *self, PyObject *args) {
    PyObject *blob_a, *off_a, *rows_a, *blob_b, *off_b, *rows_b;
    if (!PyArg_ParseTuple(args, "OOOOOO", &blob_a, &off_a, &rows_a, &blob_b, &off_b, &rows_b)) return NULL;
    Names a, b;
    Py_buffer ra, rb;
    PyObject *result = NULL;
    if (names_get(blob_a, off_a, &a)) return NULL;
    if (names_get(blob_b, off_b, &b)) { names_release(&a); return NULL; }
    if (PyObject_GetBuffer(rows_a, &ra, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_ND) < 0) goto out_names;
    if (PyObject_GetBuffer(rows_b, &rb, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_ND) < 0) goto out_ra;
    Py_ssize_t n = ra.len / 8, na = a.off.len / 8 - 1, nb = b.off.len / 8 - 1;
    if (ra.itemsize != 8 || rb.itemsize != 8 || rb.len != ra.len) {
        PyErr_SetString(PyExc_ValueError, "rows: int64 arrays of one length");
        goto out_rb;
    }
    const int64_t *ia = ra.buf, *ib = rb.buf, *oa = a.off.buf, *ob = b.off.buf;
    for (Py_ssize_t i = 0; i < n; i++)
        if (ia[i] < 0 || ia[i] >= na || ib[i] < 0 || ib[i] >= nb) {
            PyErr_SetString(PyExc_IndexError, "row out of range");
            goto out_rb;
        }
    result = PyBytes_FromStringAndSize(NULL, n);
    if (result) {
        char *out = PyBytes_AS_STRING(result);
        const char *ba = a.blob.buf, *bb = b.blob.buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t la = oa[ia[i] + 1] - oa[ia[i]], lb = ob[ib[i] + 1] - ob[ib[i]];
            out[i] = la == lb && !memcmp(ba + oa[ia[i]], bb + ob[ib[i]], (size_t)la);
        }
        Py_END_ALLOW_THREADS
    }
out_rb:
    PyBuffer_Release(&rb);
out_ra:
    PyBuffer_Release(&ra);
out_names:
    names_release(&a);
    names_release(&b);
    return result;
}

static PyMethodDef methods[] = {
    {"name_hashes", name_hashes, METH_VARARGS, "a 64-bit hash of each name of a blob and offsets"},
    {"names_equal", names_equal, METH_VARARGS, "which row pairs of two name blobs hold the same bytes"},
    {"csv_lines", csv_lines, METH_VARARGS, "the CSV lines of columns of str cells, quoted, UTF-8"},
    {"repr_columns", repr_columns, METH_VARARGS, "repr() + suffix of every value, one list per column"},
    {"repr_equal", repr_equal, METH_VARARGS, "whether text is repr(value)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_stats_cells", NULL, -1, methods};

PyMODINIT_FUNC PyInit__stats_cells(void) { return PyModule_Create(&module); }
