/* Linking a scanned graph's inputs by op name, and the start-up cache's int columns (see
 * _graph_scan.c for the module and what each function returns). */
#include "_graph_scan.h"

/* ---- link ------------------------------------------------------------------------------------- */
PyObject *graph_link_inputs(PyObject *self, PyObject *args) {
    Py_buffer names, name_off, in_blob, in_item_off, in_off;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*", &names, &name_off, &in_blob, &in_item_off, &in_off)) return NULL;
    const char *nb = names.buf, *ib = in_blob.buf;
    const int64_t *no = name_off.buf, *iio = in_item_off.buf, *io = in_off.buf;
    Py_ssize_t n = name_off.len / 8 - 1;
    PyObject *result = NULL, *warnings = NULL;
    Buf data_op = {0}, data_out = {0}, data_off = {0}, raw = {0}, ctl_op = {0}, ctl_off = {0};
    /* open addressing; a slot is (hash tag << 32 | row + 1), 0 = empty: a probe compares names
     * only when the tags agree (the table is 16 bytes an op, its misses are most of the time) */
    Py_ssize_t size = 16, n_data = 0, n_ctl = 0;
    uint64_t *slots = NULL;
    int bail = 0, nomem = 0;
    while (size < 2 * n + 2) size *= 2;
    slots = PyMem_Calloc(size, sizeof(uint64_t));
    warnings = PyList_New(0);
    if (!slots || !warnings || n >= INT32_MAX) { nomem = !slots || !warnings; bail = !nomem; goto done; }
    uint64_t *hashes = PyMem_Malloc((n + 1) * sizeof(uint64_t));  /* all first: prefetched probes */
    if (!hashes) { nomem = 1; goto done; }
    for (Py_ssize_t i = 0; i < n; i++) hashes[i] = mix(fnv(nb + no[i], no[i + 1] - no[i]));
    for (Py_ssize_t i = 0; i < n && !bail; i++) {
        if (i + 16 < n) __builtin_prefetch(&slots[hashes[i + 16] & (size - 1)], 1);
        const char *k = nb + no[i]; Py_ssize_t m = no[i + 1] - no[i];
        uint64_t h = hashes[i], tag = h >> 32;
        Py_ssize_t s = h & (size - 1);
        while (slots[s]) {
            Py_ssize_t j = (Py_ssize_t)(slots[s] & 0xFFFFFFFFu) - 1;
            if ((slots[s] >> 32) == tag && no[j + 1] - no[j] == m && memcmp(nb + no[j], k, m) == 0) {
                bail = 1;  /* a repeated name: the Python linker's rules */
                break;
            }
            s = (s + 1) & (size - 1);
        }
        slots[s] = tag << 32 | (uint64_t)(i + 1);
    }
    PyMem_Free(hashes);
    if (put_i64(&data_off, 0) < 0 || put_i64(&ctl_off, 0) < 0) { nomem = 1; goto done; }
    for (Py_ssize_t i = 0; i < n && !bail && !nomem; i++) {
        Py_ssize_t first_data = n_data;   /* warnings name the op's own data input number */
        for (int64_t j = io[i]; j < io[i + 1]; j++) {
            const char *r = ib + iio[j]; Py_ssize_t m = iio[j + 1] - iio[j];
            if (m == 0) {  /* an unconnected optional input */
                if (put_i32(&data_op, -1) < 0 || put_i64(&data_out, -1) < 0 || put_i64(&raw, n_data) < 0 || put_i64(&raw, j) < 0) nomem = 1;
                n_data++;
                continue;
            }
            Py_ssize_t colon = m - 1;
            while (colon >= 0 && r[colon] != ':') colon--;
            if (colon < 0) { bail = 1; break; }
            const char *idx = r + colon + 1; Py_ssize_t len = m - colon - 1;
            int control = len == 2 && idx[0] == '-' && idx[1] == '1';
            int64_t out = 0;
            if (!control) {
                if (len < 1 || len > 18) { bail = 1; break; }
                for (Py_ssize_t d = 0; d < len; d++) {
                    if (idx[d] < '0' || idx[d] > '9') { bail = 1; break; }
                    out = out * 10 + (idx[d] - '0');
                }
                if (bail) break;
            }
            Py_ssize_t p = -1;
            for (Py_ssize_t back = 1; back <= 4 && back <= i; back++) {  /* producers are mostly near */
                Py_ssize_t q = i - back;
                if (no[q + 1] - no[q] == colon && memcmp(nb + no[q], r, colon) == 0) { p = q; break; }
            }
            uint64_t h = p < 0 ? mix(fnv(r, colon)) : 0, tag = h >> 32;
            Py_ssize_t s = h & (size - 1);
            while (p < 0 && slots[s]) {
                Py_ssize_t q = (Py_ssize_t)(slots[s] & 0xFFFFFFFFu) - 1;
                if ((slots[s] >> 32) == tag && no[q + 1] - no[q] == colon && memcmp(nb + no[q], r, colon) == 0) {
                    p = q;
                    break;
                }
                s = (s + 1) & (size - 1);
            }
            if (control) {
                if (p >= 0) { if (put_i32(&ctl_op, (int32_t)p) < 0) nomem = 1; n_ctl++; }
                else {
                    PyObject *w = Py_BuildValue("(ninn)", i, 1, (Py_ssize_t)j, n_data - first_data);
                    if (!w || PyList_Append(warnings, w) < 0) nomem = 1;
                    Py_XDECREF(w);
                }
                continue;
            }
            if (p < 0) {
                PyObject *w = Py_BuildValue("(ninn)", i, 0, (Py_ssize_t)j, n_data - first_data);
                if (!w || PyList_Append(warnings, w) < 0) nomem = 1;
                Py_XDECREF(w);
                if (put_i32(&data_op, -1) < 0 || put_i64(&data_out, -1) < 0 || put_i64(&raw, n_data) < 0 || put_i64(&raw, j) < 0) nomem = 1;
            } else {
                if (put_i32(&data_op, (int32_t)p) < 0 || put_i64(&data_out, out) < 0) nomem = 1;
                if (len > 1 && idx[0] == '0' && (put_i64(&raw, n_data) < 0 || put_i64(&raw, j) < 0)) nomem = 1;  /* "x:007": kept as written */
            }
            n_data++;
        }
        if (put_i64(&data_off, n_data) < 0 || put_i64(&ctl_off, n_ctl) < 0) nomem = 1;
    }
done:
    if (nomem) PyErr_NoMemory();
    else if (bail) { result = Py_None; Py_INCREF(result); }
    else result = Py_BuildValue("{sNsNsNsNsNsNsO}", "data_op", buf_bytes(&data_op), "data_out", buf_bytes(&data_out),
                                "data_off", buf_bytes(&data_off), "raw", buf_bytes(&raw), "ctl_op", buf_bytes(&ctl_op),
                                "ctl_off", buf_bytes(&ctl_off), "warnings", warnings);
    Py_XDECREF(warnings);
    PyMem_Free(slots);
    buf_free(&data_op); buf_free(&data_out); buf_free(&data_off); buf_free(&raw); buf_free(&ctl_op); buf_free(&ctl_off);
    PyBuffer_Release(&names); PyBuffer_Release(&name_off); PyBuffer_Release(&in_blob);
    PyBuffer_Release(&in_item_off); PyBuffer_Release(&in_off);
    return result;
}

/* ---- unpack: a start-up cache column back to plain ints ------------------------------------ */
/* unpack(buffer, itemsize, delta, out_itemsize) -> (bytes, min, max, nondecreasing): the signed
 * little-endian ints of ``itemsize`` bytes (their running sum when ``delta``) as ints of
 * ``out_itemsize`` (4 or 8) bytes; None when a value does not fit (a damaged entry). */
PyObject *graph_unpack_ints(PyObject *self, PyObject *args) {
    Py_buffer view;
    int size, delta, out_size;
    if (!PyArg_ParseTuple(args, "y*iii", &view, &size, &delta, &out_size)) return NULL;
    if (!(size == 1 || size == 2 || size == 4 || size == 8) || !(out_size == 4 || out_size == 8)
        || view.len % size) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    Py_ssize_t n = view.len / size;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * out_size);
    if (!out) { PyBuffer_Release(&view); return NULL; }
    const uint8_t *p = view.buf;
    char *q = PyBytes_AS_STRING(out);
    int64_t lo = 0, hi = 0, prev = 0, sum = 0;
    int sorted = 1, fits = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t v;
        if (size == 1) { int8_t x; memcpy(&x, p + i, 1); v = x; }
        else if (size == 2) { int16_t x; memcpy(&x, p + 2 * i, 2); v = x; }
        else if (size == 4) { int32_t x; memcpy(&x, p + 4 * i, 4); v = x; }
        else { memcpy(&v, p + 8 * i, 8); }
        if (delta) {
            if (__builtin_add_overflow(sum, v, &sum)) { fits = 0; break; }
            v = sum;
        }
        if (i == 0 || v < lo) lo = v;
        if (i == 0 || v > hi) hi = v;
        if (i && v < prev) sorted = 0;
        prev = v;
        if (out_size == 4) {
            if (v < INT32_MIN || v > INT32_MAX) { fits = 0; break; }
            int32_t w = (int32_t)v; memcpy(q + 4 * i, &w, 4);
        } else {
            memcpy(q + 8 * i, &v, 8);
        }
    }
    PyBuffer_Release(&view);
    if (!fits) { Py_DECREF(out); Py_RETURN_NONE; }
    return Py_BuildValue("(NLLi)", out, (long long)lo, (long long)hi, sorted);
}

/* pack(buffer, itemsize) -> (delta, size, bytes): the signed ints of ``itemsize`` (4 or 8) bytes
 * as the narrowest little-endian ints holding their values (delta 0) or, when narrower, their
 * differences (delta 1): what ``unpack`` reads back. */
static int width(int64_t lo, int64_t hi) {
    if (lo >= INT8_MIN && hi <= INT8_MAX) return 1;
    if (lo >= INT16_MIN && hi <= INT16_MAX) return 2;
    if (lo >= INT32_MIN && hi <= INT32_MAX) return 4;
    return 8;
}

static inline int64_t item(const char *p, int size, Py_ssize_t i) {
    if (size == 4) { int32_t x; memcpy(&x, p + 4 * i, 4); return x; }
    int64_t x; memcpy(&x, p + 8 * i, 8); return x;
}

PyObject *graph_pack_ints(PyObject *self, PyObject *args) {
    Py_buffer view;
    int size;
    if (!PyArg_ParseTuple(args, "y*i", &view, &size)) return NULL;
    if (!(size == 4 || size == 8) || view.len % size) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "pack: not whole 4- or 8-byte ints");
        return NULL;
    }
    Py_ssize_t n = view.len / size;
    const char *p = view.buf;
    int64_t lo = 0, hi = 0, dlo = 0, dhi = 0, prev = 0;
    int diff_ok = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t v = item(p, size, i), d;
        if (__builtin_sub_overflow(v, prev, &d)) diff_ok = 0;
        if (i == 0 || v < lo) lo = v;
        if (i == 0 || v > hi) hi = v;
        if (i == 0 || d < dlo) dlo = d;
        if (i == 0 || d > dhi) dhi = d;
        prev = v;
    }
    int plain = width(lo, hi), delta = diff_ok ? width(dlo, dhi) : 8;
    int use_delta = delta < plain, out = use_delta ? delta : plain;
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, n * out);
    if (!bytes) { PyBuffer_Release(&view); return NULL; }
    char *q = PyBytes_AS_STRING(bytes);
    prev = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t v = item(p, size, i), w = use_delta ? v - prev : v;
        prev = v;
        if (out == 1) { int8_t x = (int8_t)w; memcpy(q + i, &x, 1); }
        else if (out == 2) { int16_t x = (int16_t)w; memcpy(q + 2 * i, &x, 2); }
        else if (out == 4) { int32_t x = (int32_t)w; memcpy(q + 4 * i, &x, 4); }
        else memcpy(q + 8 * i, &w, 8);
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(iiN)", use_delta, out, bytes);
}

