/* An msprobe statistics dump.json opened in one pass: entries, header and statistics columns
 * (formats/msprobe/scan.py; the columns are formats/msprobe/columns.py's).
 *
 * Why C: a 100k-entry statistics dump.json is 93 MB; json.loads of it, the leaf checks and the
 * columns cost ~4 s a side in the interpreter and the parsed document ~300 MB. This scanner
 * walks the bytes once. An entry whose leaves are all the common leaf -- a tensor object with a
 * string type, a dtype string the builder calls plain and the reader knows, a shape of ints
 * >= 0, float Max/Min/Mean/Norm that are finite, requires_grad true/false/null, no value,
 * data_name or md5 -- goes into the columns here, in the same order and with the same text
 * codes as the Python builder (_Builder.add_entry's fast path; its dtype and shape codes are
 * asked of the builder on a miss, at the point the builder would ask), and is reported with its
 * byte span and leaf count. It never guesses: any other entry (a null or plain leaf, an int
 * statistic, an escape in a key or a name, a nested list, roots out of msprobe's order, a
 * repeated key, parameters_grad) is reported with leaves -1 and the caller parses its span and
 * reads it as the whole-document reader does, its rows added by the Python builder in its place;
 * the result is the Python result by construction. Bytes that are not the expected layout (no
 * top-level object, a repeated "data", a cut, invalid JSON) make it return None: the caller
 * reads the whole file as before.
 *
 * scan(buffer, builder, on_entry[, plain]) -> None | (entries, [(key, start, end) of the other top-level
 *   members], whether a string held a byte >= 0x80: not ASCII, to be checked as UTF-8)
 *   builder: _Builder (entry_names and names lists, rows array('i'), stats array('d'), code(),
 *   _scan_dtype_codes()); on_entry(name or None when escaped, name_start, name_end, start, end,
 *   leaves): called in order for every entry of "data"; with plain = (names list, spans array('q'),
 *   leaf counts array('i'), release or None, release_every), only for the entries not taken here:
 *   a taken entry's name, (start, end) and leaf count are appended to those, and release(offset) is
 *   called each time the scan has passed release_every more bytes.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <errno.h>
#include <math.h>
#include <ctype.h>
#include <string.h>

#include "float_repr.h"
#include <stdint.h>

#if defined(__x86_64__) || defined(__aarch64__)
/* CPython's correctly rounded strtod (what float() and json use), without PyOS_string_to_double's
 * x87 control-word switch per call (a third of this scan's time): SSE2/NEON doubles need none. */
PyAPI_FUNC(double) _Py_dg_strtod(const char *str, char **ptr);
#define STRTOD(text, stop) _Py_dg_strtod((text), (stop))
#else
#define STRTOD(text, stop) PyOS_string_to_double((text), (stop), NULL)
#endif

typedef struct { char *p; Py_ssize_t n, cap; } Buf;

static int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (b->n + n > b->cap) {
        Py_ssize_t cap = b->cap ? b->cap : 1 << 16;
        while (cap < b->n + n) cap *= 2;
        char *p = PyMem_Realloc(b->p, cap);
        if (!p) { PyErr_NoMemory(); return -1; }
        b->p = p; b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
    return 0;
}

typedef struct {
    const char *s, *end;
    int depth;
    int high;           /* a string held a byte >= 0x80 (the caller then reads the file itself) */
} Cur;

#define WS(c) ((c) == ' ' || (c) == '\n' || (c) == '\r' || (c) == '\t')
static inline void ws(Cur *c) { while (c->s < c->end && WS(*c->s)) c->s++; }

/* A string at c->s ('"'): its bytes [*a, *b) without the quotes; *esc when it holds a backslash
 * or a byte >= 0x80 is fine (UTF-8). 0 on success, -1 when it is not a JSON string. */
static int string(Cur *c, const char **a, const char **b, int *esc) {
    if (c->s >= c->end || *c->s != '"') return -1;
    const char *p = c->s + 1;
    *esc = 0;
    *a = p;
    while (p < c->end) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '"') { *b = p; c->s = p + 1; return 0; }
        if (ch == '\\') {
            *esc = 1;
            if (p + 1 >= c->end || !strchr("\"\\/bfnrtu", p[1]) || !p[1]) return -1;
            if (p[1] == 'u') {
                if (c->end - p < 6) return -1;
                for (int k = 2; k < 6; k++) if (!isxdigit((unsigned char)p[k])) return -1;
                p += 6;
            } else p += 2;
            continue;
        }
        if (ch < 0x20) return -1;
        if (ch >= 0x80) c->high = 1;
        p++;
    }
    return -1;
}

static int skip_value(Cur *c);
static int number_end(Cur *c, int *is_float_out);

static int skip_container(Cur *c, char close) {
    if (++c->depth > 512) return -1;
    c->s++;
    ws(c);
    if (c->s < c->end && *c->s == close) { c->s++; c->depth--; return 0; }
    for (;;) {
        if (close == '}') {
            const char *a, *b; int esc;
            if (string(c, &a, &b, &esc)) return -1;
            ws(c);
            if (c->s >= c->end || *c->s != ':') return -1;
            c->s++;
            ws(c);
        }
        if (skip_value(c)) return -1;
        ws(c);
        if (c->s >= c->end) return -1;
        if (*c->s == ',') { c->s++; ws(c); continue; }
        if (*c->s == close) { c->s++; c->depth--; return 0; }
        return -1;
    }
}

static int word(Cur *c, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(c->end - c->s) < n || memcmp(c->s, w, n)) return -1;
    c->s += n;
    return 0;
}

static int skip_value(Cur *c) {
    if (c->s >= c->end) return -1;
    const char *a, *b; int esc;
    switch (*c->s) {
    case '"': return string(c, &a, &b, &esc);
    case '{': return skip_container(c, '}');
    case '[': return skip_container(c, ']');
    case 't': return word(c, "true");
    case 'f': return word(c, "false");
    case 'n': return word(c, "null");
    case 'N': return word(c, "NaN");
    case 'I': return word(c, "Infinity");
    default:
        if (c->end - c->s >= 9 && !memcmp(c->s, "-Infinity", 9)) { c->s += 9; return 0; }
        return number_end(c, NULL);
    }
}

/* A JSON number at c->s (skipped; *is_float: it has a fraction or an exponent), 0 or -1. */
static int number_end(Cur *c, int *is_float_out) {
    const char *p = c->s, *start = p;
    if (p < c->end && *p == '-') p++;
    if (p >= c->end) return -1;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') { while (p < c->end && *p >= '0' && *p <= '9') p++; }
    else return -1;
    int is_float = 0;
    if (p < c->end && *p == '.') {
        p++;
        if (p >= c->end || *p < '0' || *p > '9') return -1;
        while (p < c->end && *p >= '0' && *p <= '9') p++;
        is_float = 1;
    }
    if (p < c->end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < c->end && (*p == '+' || *p == '-')) p++;
        if (p >= c->end || *p < '0' || *p > '9') return -1;
        while (p < c->end && *p >= '0' && *p <= '9') p++;
        is_float = 1;
    }
    if (p == start) return -1;
    if (is_float_out) *is_float_out = is_float;
    c->s = p;
    return 0;
}

/* A quick parse of the usual statistic text, [-]DIGITS[.DIGITS][e[+-]DIGITS] with at most 19
 * significant digits: the digits as one integer, scaled by a power of ten. Exact (Clinger's fast
 * path) when the integer is below 2^53 and the power within 10^+-22; otherwise scaled in long
 * double and rounded again to double, which can be one ulp off. So the caller keeps the result
 * only when printing it back gives the very text: repr() round-trips, so a text equal to repr(x)
 * reads as x, and any other case goes to the correctly rounded strtod. 1 when it parsed. */
static int quick_decimal(const char *s, size_t n, double *out) {
    static const double exact[23] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                     1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    const char *p = s, *end = s + n;
    int negative = 0, significant = 0, digits = 0, exp10 = 0;
    uint64_t m = 0;
    if (p < end && *p == '-') { negative = 1; p++; }
    for (; p < end && *p >= '0' && *p <= '9'; p++, digits++) {
        if (m || *p != '0') { if (++significant > 19) return 0; m = m * 10 + (uint64_t)(*p - '0'); }
    }
    if (p < end && *p == '.') {
        for (p++; p < end && *p >= '0' && *p <= '9'; p++, digits++, exp10--) {
            if (m || *p != '0') { if (++significant > 19) return 0; m = m * 10 + (uint64_t)(*p - '0'); }
        }
    }
    if (!digits) return 0;
    if (p < end && (*p == 'e' || *p == 'E')) {
        int sign = 1, e = 0, e_digits = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) { sign = *p == '-' ? -1 : 1; p++; }
        for (; p < end && *p >= '0' && *p <= '9'; p++, e_digits++) if (e < 10000) e = e * 10 + (*p - '0');
        if (!e_digits) return 0;
        exp10 += sign * e;
    }
    if (p != end) return 0;
    double x;
    if (!m) x = 0.0;
    else if (m < (1ull << 53) && exp10 >= -22 && exp10 <= 22)
        x = exp10 < 0 ? (double)m / exact[-exp10] : (double)m * exact[exp10];
    else if (exp10 < -400 || exp10 > 400) return 0;
    else {
        long double scale = exp10 >= -22 && exp10 <= 22 ? (long double)exact[exp10 < 0 ? -exp10 : exp10]
                                                       : powl(10.0L, (long double)(exp10 < 0 ? -exp10 : exp10));
        x = (double)(exp10 < 0 ? (long double)m / scale : (long double)m * scale);
    }
    *out = negative ? -x : x;
    return 1;
}

/* A JSON number that Python reads as a float (a fraction or an exponent), finite: 0, *v and
 * *canonical (whether the text is exactly repr(*v)). */
static int float_number(Cur *c, double *v, char *canonical) {
    const char *start = c->s;
    int is_float;
    if (number_end(c, &is_float)) return -1;
    const char *p = c->s;
    c->s = start;
    if (!is_float || p - start > 63) return -1;
    /* the common text is exactly repr() of its value: the quick parse, confirmed by printing it
     * back (repr round-trips, so a text equal to repr(x) parses to x); any other text: CPython's */
    double fast;
    char back[FLOAT_REPR_MAX];
    if (quick_decimal(start, (size_t)(p - start), &fast) && isfinite(fast)
            && float_repr(fast, back) == p - start && !memcmp(back, start, (size_t)(p - start))) {
        *v = fast;
        *canonical = 1;
        c->s = p;
        return 0;
    }
    char text[64];
    memcpy(text, start, p - start);
    text[p - start] = 0;
    char *stop;
    errno = 0;
    double x = STRTOD(text, &stop);
    if (x == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return -1; }
    if (*stop || !isfinite(x)) return -1;
    *v = x;
    *canonical = float_repr(x, back) == p - start && !memcmp(back, start, (size_t)(p - start));
    c->s = p;
    return 0;
}

/* ---- a leaf's fields, read in phase 1 (no side effects) ---------------------------------------- */
typedef struct {
    const char *dtype_a, *dtype_b;      /* the dtype string's bytes */
    Py_ssize_t shape_at, shape_len;     /* into the shape text buffer */
    const char *key_a, *key_b;          /* kwargs key (path root.KEY) or NULL (root.INDEX) */
    int root, index, grad;
    double stats[4];
    const char *text_a[4], *text_b[4];  /* the statistics' JSON texts */
    char canonical[4];                  /* each text is exactly repr() of its value */
} Leaf;

enum { F_TYPE = 1, F_DTYPE = 2, F_SHAPE = 4, F_MAX = 8, F_MIN = 16, F_MEAN = 32, F_NORM = 64, F_GRAD = 128 };
#define F_NEEDED (F_TYPE | F_DTYPE | F_SHAPE | F_MAX | F_MIN | F_MEAN | F_NORM)

static int key_is(const char *a, const char *b, const char *w) {
    size_t n = strlen(w);
    return (size_t)(b - a) == n && !memcmp(a, w, n);
}

/* One leaf object at c->s; -1: not the common leaf (or not JSON). */
static int leaf(Cur *c, Leaf *out, Buf *shapes) {
    if (c->s >= c->end || *c->s != '{') return -1;
    c->s++;
    ws(c);
    int seen = 0;
    out->grad = 0;
    if (c->s < c->end && *c->s == '}') return -1;
    for (;;) {
        const char *a, *b; int esc;
        if (string(c, &a, &b, &esc) || esc) return -1;
        ws(c);
        if (c->s >= c->end || *c->s != ':') return -1;
        c->s++;
        ws(c);
        int field = 0, stat = -1;
        if (key_is(a, b, "type")) field = F_TYPE;
        else if (key_is(a, b, "dtype")) field = F_DTYPE;
        else if (key_is(a, b, "shape")) field = F_SHAPE;
        else if (key_is(a, b, "Max")) { field = F_MAX; stat = 0; }
        else if (key_is(a, b, "Min")) { field = F_MIN; stat = 1; }
        else if (key_is(a, b, "Mean")) { field = F_MEAN; stat = 2; }
        else if (key_is(a, b, "Norm")) { field = F_NORM; stat = 3; }
        else if (key_is(a, b, "requires_grad")) field = F_GRAD;
        else if (key_is(a, b, "value") || key_is(a, b, "data_name") || key_is(a, b, "md5")) return -1;
        if (field & seen) return -1;       /* a repeated key: json.loads keeps the last; Python decides */
        seen |= field;
        if (field == F_TYPE) {
            const char *x, *y; int e;
            if (string(c, &x, &y, &e)) return -1;
        } else if (field == F_DTYPE) {
            int e;
            if (string(c, &out->dtype_a, &out->dtype_b, &e) || e) return -1;
        } else if (field == F_SHAPE) {
            if (*c->s != '[') return -1;
            c->s++;
            ws(c);
            out->shape_at = shapes->n;
            if (buf_put(shapes, "[", 1)) return -2;
            int dims = 0;
            if (c->s < c->end && *c->s == ']') c->s++;
            else for (;;) {
                const char *p = c->s;
                while (p < c->end && *p >= '0' && *p <= '9') p++;
                Py_ssize_t n = p - c->s;
                if (n == 0 || n > 18 || (n > 1 && *c->s == '0')) return -1;
                if (p < c->end && (*p == '.' || *p == 'e' || *p == 'E')) return -1;
                if (++dims > 64) return -1;
                if (dims > 1 && buf_put(shapes, ", ", 2)) return -2;
                if (buf_put(shapes, c->s, n)) return -2;
                c->s = p;
                ws(c);
                if (c->s < c->end && *c->s == ',') { c->s++; ws(c); continue; }
                if (c->s < c->end && *c->s == ']') { c->s++; break; }
                return -1;
            }
            if (buf_put(shapes, "]", 1)) return -2;
            out->shape_len = shapes->n - out->shape_at;
        } else if (stat >= 0) {
            out->text_a[stat] = c->s;
            if (float_number(c, &out->stats[stat], &out->canonical[stat])) return -1;
            out->text_b[stat] = c->s;
        } else if (field == F_GRAD) {
            if (!word(c, "true")) out->grad = 1;
            else if (!word(c, "false")) out->grad = 2;
            else if (!word(c, "null")) out->grad = 0;
            else return -1;
        } else if (skip_value(c)) return -1;
        ws(c);
        if (c->s >= c->end) return -1;
        if (*c->s == ',') { c->s++; ws(c); continue; }
        if (*c->s == '}') { c->s++; break; }
        return -1;
    }
    return (seen & F_NEEDED) == F_NEEDED ? 0 : -1;
}

static const char *ROOT_KEYS[] = {"input_args", "input_kwargs", "input", "output", "parameters"};
static const char *ROOT_NAMES[] = {"input", "input", "input", "output", "parameters"};
static const int ROOT_STATE[] = {0, 0, 0, 2, 1};

typedef struct {
    PyObject *builder, *entry_names, *names, *rows, *stats, *on_entry;
    Py_ssize_t taken;
    Buf row_buf, stat_buf, shapes, leaves, name;
    Buf summary;            /* per row: its four statistics' texts joined by ',' when each is
                               what repr() prints (the CSV copies them), else nothing; then '\n' */
    Py_ssize_t summary_rows;
    /* caches: dtype bytes -> (norm, text) codes or not plain; shape text -> code */
    PyObject *dtype_cache, *shape_cache;
    /* plain entries kept here (scan's ``plain`` argument), or NULL: each reported to on_entry */
    PyObject *plain_names, *plain_spans, *plain_leaves, *release;
    Buf span_buf, count_buf;
    Py_ssize_t release_every, released;
} Scan;

static int flush(Scan *s) {
    if (s->row_buf.n) {
        PyObject *r = PyObject_CallMethod(s->rows, "frombytes", "y#", s->row_buf.p, s->row_buf.n);
        if (!r) return -1;
        Py_DECREF(r);
        s->row_buf.n = 0;
    }
    if (s->stat_buf.n) {
        PyObject *r = PyObject_CallMethod(s->stats, "frombytes", "y#", s->stat_buf.p, s->stat_buf.n);
        if (!r) return -1;
        Py_DECREF(r);
        s->stat_buf.n = 0;
    }
    return 0;
}

/* Empty summary lines for the rows the Python builder added since the last of ours. */
static int pad_summary(Scan *s) {
    Py_ssize_t rows = PyList_GET_SIZE(s->names);
    for (; s->summary_rows < rows; s->summary_rows++)
        if (buf_put(&s->summary, "\n", 1)) return -1;
    return 0;
}

/* A row's summary line: its texts when each is repr() of its value (float_repr.h: Python's
 * float repr, PyOS_double_to_string 'r' with ADD_DOT_0, from our shortest digits), else empty. */
static int summary_row(Scan *s, const Leaf *l) {
    Py_ssize_t at = s->summary.n;
    for (int k = 0; k < 4; k++) {
        size_t n = (size_t)(l->text_b[k] - l->text_a[k]);
        if (!l->canonical[k]) { s->summary.n = at; break; }
        if ((k && buf_put(&s->summary, ",", 1)) || buf_put(&s->summary, l->text_a[k], (Py_ssize_t)n)) return -1;
    }
    s->summary_rows++;
    return buf_put(&s->summary, "\n", 1);
}

/* on_entry(name or None, name_start, name_end, start, end, leaves): the entry's bytes, and its
 * leaf count when its rows are in the columns already, -1 when the caller reads it. */
/* The plain entries' spans and leaf counts buffered so far, into the caller's arrays. */
static int flush_plain(Scan *s) {
    if (s->span_buf.n) {
        PyObject *r = PyObject_CallMethod(s->plain_spans, "frombytes", "y#", s->span_buf.p, s->span_buf.n);
        if (!r) return -1;
        Py_DECREF(r);
        s->span_buf.n = 0;
    }
    if (s->count_buf.n) {
        PyObject *r = PyObject_CallMethod(s->plain_leaves, "frombytes", "y#", s->count_buf.p, s->count_buf.n);
        if (!r) return -1;
        Py_DECREF(r);
        s->count_buf.n = 0;
    }
    return 0;
}

static int report(Scan *s, PyObject *name, const char *base, const char *na, const char *nb,
                  const char *start, const char *end, Py_ssize_t leaves) {
    if (s->plain_names) {
        if (s->release && (na - base) - s->released > s->release_every) {     /* pages behind: done */
            if (flush_plain(s)) return -1;
            PyObject *r = PyObject_CallFunction(s->release, "n", (Py_ssize_t)(na - base));
            if (!r) return -1;
            Py_DECREF(r);
            s->released = na - base;
        }
        if (leaves >= 0 && name) {      /* kept here: name, span and leaf count, no call */
            int64_t span[2] = {(int64_t)(start - base), (int64_t)(end - base)};
            int count = (int)leaves;
            if (PyList_Append(s->plain_names, name) || buf_put(&s->span_buf, span, sizeof span)
                    || buf_put(&s->count_buf, &count, sizeof count)) return -1;
            return 0;
        }
        if (flush_plain(s)) return -1;       /* the caller's arrays in step before it adds one */
    }
    if (leaves < 0 && flush(s)) return -1;
    PyObject *r = PyObject_CallFunction(s->on_entry, "Onnnnn", name ? name : Py_None, (Py_ssize_t)(na - base),
                                        (Py_ssize_t)(nb - base), (Py_ssize_t)(start - base),
                                        (Py_ssize_t)(end - base), leaves);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
}

/* (norm, text) codes of a dtype: 1 found, 0 not plain, -1 error. Calls builder._dtype_codes on
 * a miss, at the point the Python builder would (its codes come in the same order). */
static int dtype_codes(Scan *s, const char *a, const char *b, int *norm, int *text) {
    PyObject *key = PyBytes_FromStringAndSize(a, b - a);
    if (!key) return -1;
    PyObject *found = PyDict_GetItemWithError(s->dtype_cache, key);
    if (!found) {
        if (PyErr_Occurred()) { Py_DECREF(key); return -1; }
        PyObject *raw = PyUnicode_DecodeUTF8(a, b - a, "strict");
        if (!raw) { PyErr_Clear(); Py_DECREF(key); return 0; }
        found = PyObject_CallMethod(s->builder, "_scan_dtype_codes", "O", raw);
        Py_DECREF(raw);
        if (!found || PyDict_SetItem(s->dtype_cache, key, found)) { Py_XDECREF(found); Py_DECREF(key); return -1; }
        Py_DECREF(found);     /* the cache holds it */
    }
    Py_DECREF(key);
    if (found == Py_None) return 0;
    *norm = (int)PyLong_AsLong(PyTuple_GET_ITEM(found, 0));
    *text = (int)PyLong_AsLong(PyTuple_GET_ITEM(found, 1));
    return 1;
}

static int shape_code(Scan *s, const char *a, Py_ssize_t n, int *code) {
    PyObject *key = PyUnicode_DecodeASCII(a, n, "strict");
    if (!key) return -1;
    PyObject *found = PyDict_GetItemWithError(s->shape_cache, key);
    if (!found) {
        if (PyErr_Occurred()) { Py_DECREF(key); return -1; }
        found = PyObject_CallMethod(s->builder, "code", "O", key);
        if (!found || PyDict_SetItem(s->shape_cache, key, found)) { Py_XDECREF(found); Py_DECREF(key); return -1; }
        Py_DECREF(found);
    }
    Py_DECREF(key);
    *code = (int)PyLong_AsLong(found);
    return 0;
}

/* An entry body at c->s: 1 taken (rows added), 0 not the common entry (nothing added;
 * c->s anywhere), -1 error. */
static int entry(Scan *s, Cur *c, PyObject *entry_name, const char *name_a, const char *name_b, int at) {
    if (c->s >= c->end || *c->s != '{') return 0;
    c->s++;
    ws(c);
    s->leaves.n = 0;
    s->shapes.n = 0;
    int roots_seen = 0, state = 0;
    if (c->s < c->end && *c->s == '}') c->s++;
    else for (;;) {
        const char *a, *b; int esc;
        if (string(c, &a, &b, &esc) || esc) return 0;
        ws(c);
        if (c->s >= c->end || *c->s != ':') return 0;
        c->s++;
        ws(c);
        int root = -1;
        for (int r = 0; r < 5; r++) if (key_is(a, b, ROOT_KEYS[r])) root = r;
        if (root < 0) {
            if (skip_value(c)) return 0;
        } else {
            if (roots_seen & (1 << root)) return 0;
            roots_seen |= 1 << root;
            if (c->s >= c->end) return 0;
            int list = *c->s == '[';
            if (!list && *c->s != '{') return 0;
            c->s++;
            ws(c);
            char close = list ? ']' : '}';
            if (c->s < c->end && *c->s == close) c->s++;
            else {
                if (ROOT_STATE[root] < state) return 0;    /* the Python builder reorders: it decides */
                state = ROOT_STATE[root];
                for (int index = 0;; index++) {
                    Leaf l;
                    l.key_a = l.key_b = NULL;
                    if (!list) {
                        int e;
                        if (string(c, &l.key_a, &l.key_b, &e) || e || key_is(l.key_a, l.key_b, "type")) return 0;
                        ws(c);
                        if (c->s >= c->end || *c->s != ':') return 0;
                        c->s++;
                        ws(c);
                    }
                    int got = leaf(c, &l, &s->shapes);
                    if (got == -2) return -1;
                    if (got) return 0;
                    l.root = root;
                    l.index = index;
                    if (buf_put(&s->leaves, &l, sizeof l)) return -1;
                    ws(c);
                    if (c->s >= c->end) return 0;
                    if (*c->s == ',') { c->s++; ws(c); continue; }
                    if (*c->s == close) { c->s++; break; }
                    return 0;
                }
            }
        }
        ws(c);
        if (c->s >= c->end) return 0;
        if (*c->s == ',') { c->s++; ws(c); continue; }
        if (*c->s == '}') { c->s++; break; }
        return 0;
    }
    /* phase 2: codes in the Python builder's order (dtype, then shape, leaf by leaf); a dtype it
     * does not call plain hands the entry over (the codes given so far are a prefix of its own) */
    Leaf *leaves = (Leaf *)s->leaves.p;
    Py_ssize_t count = s->leaves.n / (Py_ssize_t)sizeof(Leaf);
    int *codes = count ? PyMem_Malloc(count * 3 * sizeof(int)) : NULL;
    if (count && !codes) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < count; i++) {
        int got = dtype_codes(s, leaves[i].dtype_a, leaves[i].dtype_b, &codes[3 * i], &codes[3 * i + 1]);
        if (got <= 0) { PyMem_Free(codes); return got; }
        if (shape_code(s, s->shapes.p + leaves[i].shape_at, leaves[i].shape_len, &codes[3 * i + 2])) {
            PyMem_Free(codes);
            return -1;
        }
    }
    int failed = pad_summary(s);
    if (!failed) failed = PyList_Append(s->entry_names, entry_name);
    s->taken = count;
    for (Py_ssize_t i = 0; i < count && !failed; i++) {
        Leaf *l = &leaves[i];
        char number[24];
        s->name.n = 0;
        const char *root = ROOT_NAMES[l->root];
        failed = buf_put(&s->name, name_a, name_b - name_a) || buf_put(&s->name, ".", 1)
                 || buf_put(&s->name, root, strlen(root)) || buf_put(&s->name, ".", 1);
        if (!failed && l->key_a) failed = buf_put(&s->name, l->key_a, l->key_b - l->key_a);
        else if (!failed) {
            int at_digit = sizeof number, value = l->index;
            do { number[--at_digit] = (char)('0' + value % 10); value /= 10; } while (value);
            failed = buf_put(&s->name, number + at_digit, sizeof number - at_digit);
        }
        if (failed) break;
        PyObject *row_name = PyUnicode_DecodeUTF8(s->name.p, s->name.n, "strict");
        if (!row_name) { failed = 1; break; }
        failed = PyList_Append(s->names, row_name);
        Py_DECREF(row_name);
        int row[5] = {at, codes[3 * i], codes[3 * i + 1], codes[3 * i + 2], l->grad};
        if (!failed) failed = buf_put(&s->row_buf, row, sizeof row) || buf_put(&s->stat_buf, l->stats, sizeof l->stats);
        if (!failed) failed = summary_row(s, l);
    }
    PyMem_Free(codes);
    return failed ? -1 : 1;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    PyObject *source, *builder, *on_entry, *plain = Py_None;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "OOO|O", &source, &builder, &on_entry, &plain)) return NULL;
    Scan s;
    memset(&s, 0, sizeof s);
    if (plain != Py_None) {
        if (!PyArg_ParseTuple(plain, "O!OOOn", &PyList_Type, &s.plain_names, &s.plain_spans, &s.plain_leaves,
                              &s.release, &s.release_every)) return NULL;
        if (s.release == Py_None) s.release = NULL;
    }
    if (PyObject_GetBuffer(source, &view, PyBUF_SIMPLE)) return NULL;
    s.builder = builder;
    s.on_entry = on_entry;
    PyObject *result = NULL, *members = PyList_New(0);
    s.entry_names = PyObject_GetAttrString(builder, "entry_names");
    s.names = PyObject_GetAttrString(builder, "names");
    s.rows = PyObject_GetAttrString(builder, "rows");
    s.stats = PyObject_GetAttrString(builder, "stats");
    s.dtype_cache = PyDict_New();
    s.shape_cache = PyDict_New();
    if (!members || !s.entry_names || !s.names || !s.rows || !s.stats || !s.dtype_cache || !s.shape_cache) goto done;
    if (!PyList_Check(s.entry_names) || !PyList_Check(s.names)) {
        PyErr_SetString(PyExc_TypeError, "builder lists expected");
        goto done;
    }
    const char *base = view.buf;
    Cur c = {base, base + view.len, 0, 0};
    Py_ssize_t entries = 0;
    int data_seen = 0;
    ws(&c);
    if (c.s >= c.end || *c.s != '{') goto not_ours;
    c.s++;
    ws(&c);
    if (c.s < c.end && *c.s == '}') goto not_ours;
    for (;;) {
        const char *a, *b; int esc;
        if (string(&c, &a, &b, &esc) || esc) goto not_ours;
        ws(&c);
        if (c.s >= c.end || *c.s != ':') goto not_ours;
        c.s++;
        ws(&c);
        if (!key_is(a, b, "data")) {       /* a header member: (key, start, end) for the caller */
            const char *start = c.s;
            if (skip_value(&c)) goto not_ours;
            PyObject *member = Py_BuildValue("(s#nn)", a, (Py_ssize_t)(b - a), (Py_ssize_t)(start - base),
                                             (Py_ssize_t)(c.s - base));
            if (!member) { PyErr_Clear(); goto not_ours; }     /* not UTF-8 */
            int failed = PyList_Append(members, member);
            Py_DECREF(member);
            if (failed) goto done;
        } else {
            if (data_seen++ || c.s >= c.end || *c.s != '{') goto not_ours;
            c.s++;
            ws(&c);
            if (c.s < c.end && *c.s == '}') c.s++;
            else for (;;) {
                const char *na, *nb; int name_esc;
                if (string(&c, &na, &nb, &name_esc)) goto not_ours;
                ws(&c);
                if (c.s >= c.end || *c.s != ':') goto not_ours;
                c.s++;
                ws(&c);
                const char *start = c.s;
                PyObject *name = NULL;
                if (!name_esc) {
                    name = PyUnicode_DecodeUTF8(na, nb - na, "strict");
                    if (!name) PyErr_Clear();
                }
                int took = 0;
                /* parameters_grad bodies are walked another way: the caller's */
                if (name && !memmem(na, nb - na, "parameters_grad", 15)) {
                    took = entry(&s, &c, name, na, nb, (int)entries);
                    if (took < 0) { Py_DECREF(name); goto done; }
                }
                if (!took) {
                    c.s = start;
                    c.depth = 0;
                    if (skip_value(&c)) { Py_XDECREF(name); goto not_ours; }
                }
                int failed = report(&s, name, base, na, nb, start, c.s, took ? s.taken : -1);
                Py_XDECREF(name);
                if (failed) goto done;
                entries++;
                ws(&c);
                if (c.s >= c.end) goto not_ours;
                if (*c.s == ',') { c.s++; ws(&c); continue; }
                if (*c.s == '}') { c.s++; break; }
                goto not_ours;
            }
        }
        ws(&c);
        if (c.s >= c.end) goto not_ours;
        if (*c.s == ',') { c.s++; ws(&c); continue; }
        if (*c.s == '}') { c.s++; break; }
        goto not_ours;
    }
    ws(&c);
    if (c.s != c.end || !data_seen) goto not_ours;
    if (flush(&s) || pad_summary(&s) || (s.plain_names && flush_plain(&s))) goto done;
    {
        PyObject *summary = PyBytes_FromStringAndSize(s.summary.p ? s.summary.p : "", s.summary.n);
        if (!summary) goto done;
        int failed = PyObject_SetAttrString(builder, "summary", summary);
        Py_DECREF(summary);
        if (failed) goto done;
    }
    result = Py_BuildValue("(nOO)", entries, members, c.high ? Py_True : Py_False);
    goto done;
not_ours:
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    Py_XDECREF(members);
    Py_XDECREF(s.entry_names); Py_XDECREF(s.names); Py_XDECREF(s.rows); Py_XDECREF(s.stats);
    Py_XDECREF(s.dtype_cache); Py_XDECREF(s.shape_cache);
    PyMem_Free(s.row_buf.p); PyMem_Free(s.stat_buf.p); PyMem_Free(s.shapes.p); PyMem_Free(s.leaves.p);
    PyMem_Free(s.name.p); PyMem_Free(s.summary.p); PyMem_Free(s.span_buf.p); PyMem_Free(s.count_buf.p);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "The statistics columns of a dump.json's bytes (see the file's comment)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_stats_scan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__stats_scan(void) { return PyModule_Create(&module); }
