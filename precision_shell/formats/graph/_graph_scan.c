/* The start-up scan of a GE graph text (formats/graph/scan.py's contract) in one pass, into columns.
 *
 * Why C: a 1M-op graph text is 447 MB; the Python scan costs ~9 us and ~1.8 kB of objects per op.
 * This scanner walks the text line by line once and fills flat arrays (raw bytes: memoryviews
 * on the Python side); it never guesses: anything that is not GE's own layout, or an op the Python
 * scan would read with the exact parser (escapes in a name, an unusual fusion attr value), makes
 * it return None and the Python scanner takes the whole file (same graph, slower).
 *
 * scan(buffer, release) -> None | dict of columns (see columns.py, ``scan_columns``):
 *   graphs [(name, first op)], names/name_off, type_id/types, input items (in_blob, in_item_off,
 *   in_off), originals (orig_present, orig_off, orig_blob, orig_item_off), pass_id/pass_lists,
 *   kernels (kernel_present, kernel_blob, kernel_off), engine_id/engines, start/end (the op's
 *   body span, as the Python scan gives it), fused (per op: passes or several original names)
 *   and skeleton: every byte outside the op blocks (with
 *   the ``  op {`` ... ``  }`` lines themselves left out), which the caller parses exactly.
 *   ``release(offset)`` is called every 64 MB with the bytes done (the caller drops those pages).
 *
 * link(names, name_off, in_blob, in_item_off, in_off) -> None | dict: inputs resolved by name when
 *   every op name is unique; None for anything else (repeated names, an input of another form):
 *   the Python linker (op_graph.py) decides those. raw: (data input, input item) int64 pairs of
 *   the inputs whose text is not "{producer}:{output}"; warnings: (op, 0 data / 1 control, item,
 *   data input) of each input from a missing op.
 * pack(buffer, itemsize) / unpack(buffer, itemsize, delta, out_itemsize): the start-up cache's
 *   int columns, narrowed (values or differences) and back (with min, max, order).
 * link, pack and unpack live in _graph_link.c.
 */
#include "_graph_scan.h"

/* ---- interning small tables (types, engines, pass lists) ------------------------------------- */
typedef struct { Buf keys; Buf offs; Py_ssize_t count; Py_ssize_t *slots; Py_ssize_t size; } Table;

static int table_init(Table *t) {
    memset(t, 0, sizeof *t);
    t->size = 256;
    t->slots = PyMem_Malloc(t->size * sizeof(Py_ssize_t));
    if (!t->slots) return -1;
    for (Py_ssize_t i = 0; i < t->size; i++) t->slots[i] = -1;
    return put_i64(&t->offs, 0);
}
static void table_free(Table *t) { buf_free(&t->keys); buf_free(&t->offs); PyMem_Free(t->slots); t->slots = NULL; }

static const char *table_key(Table *t, Py_ssize_t i, Py_ssize_t *n) {
    int64_t *o = (int64_t *)t->offs.p;
    *n = o[i + 1] - o[i];
    return t->keys.p + o[i];
}

static int table_grow(Table *t) {
    Py_ssize_t size = t->size * 2;
    Py_ssize_t *slots = PyMem_Malloc(size * sizeof(Py_ssize_t));
    if (!slots) return -1;
    for (Py_ssize_t i = 0; i < size; i++) slots[i] = -1;
    for (Py_ssize_t i = 0; i < t->count; i++) {
        Py_ssize_t n; const char *k = table_key(t, i, &n);
        Py_ssize_t s = fnv(k, n) & (size - 1);
        while (slots[s] >= 0) s = (s + 1) & (size - 1);
        slots[s] = i;
    }
    PyMem_Free(t->slots);
    t->slots = slots; t->size = size;
    return 0;
}

/* index of ``key`` in the table, added when new; -1 on memory error */
static Py_ssize_t table_id(Table *t, const char *key, Py_ssize_t n) {
    Py_ssize_t s = fnv(key, n) & (t->size - 1);
    for (;;) {
        Py_ssize_t i = t->slots[s];
        if (i < 0) break;
        Py_ssize_t m; const char *k = table_key(t, i, &m);
        if (m == n && memcmp(k, key, n) == 0) return i;
        s = (s + 1) & (t->size - 1);
    }
    if (buf_put(&t->keys, key, n) < 0 || put_i64(&t->offs, t->keys.n) < 0) return -1;
    t->slots[s] = t->count++;
    if (t->count * 2 > t->size && table_grow(t) < 0) return -1;
    return t->count - 1;
}

/* the table's keys as a list of bytes; ``split``: each key is items joined by '\n' -> list of lists */
static PyObject *table_list(Table *t, int split) {
    PyObject *out = PyList_New(t->count);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < t->count; i++) {
        Py_ssize_t n; const char *k = table_key(t, i, &n);
        PyObject *item;
        if (!split) {
            item = PyBytes_FromStringAndSize(k, n);
        } else {
            item = PyList_New(0);
            Py_ssize_t a = 0;
            while (item && a < n) {
                const char *nl = memchr(k + a, '\n', n - a);
                Py_ssize_t b = nl ? nl - k : n;
                PyObject *s = PyBytes_FromStringAndSize(k + a, b - a);
                if (!s || PyList_Append(item, s) < 0) { Py_XDECREF(s); Py_CLEAR(item); break; }
                Py_DECREF(s);
                a = b + 1;
            }
        }
        if (!item) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, i, item);
    }
    return out;
}

/* ---- UTF-8 (the scan promises text_format's view of the file: valid UTF-8) -------------------- */
static int valid_utf8(const uint8_t *p, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        if (i + 32 <= n) {  /* ASCII runs: 32 bytes a step */
            uint64_t w[4]; memcpy(w, p + i, 32);
            if (!((w[0] | w[1] | w[2] | w[3]) & 0x8080808080808080ULL)) { i += 32; continue; }
        }
        if (i + 8 <= n) {
            uint64_t w; memcpy(&w, p + i, 8);
            if (!(w & 0x8080808080808080ULL)) { i += 8; continue; }
        }
        uint8_t c = p[i];
        if (c < 0x80) { i++; continue; }
        int len; uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; }
        else return 0;
        if (i + len > n) return 0;
        for (int k = 1; k < len; k++) {
            if ((p[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += len;
    }
    return 1;
}

/* ---- lines ------------------------------------------------------------------------------------ */
typedef struct { const char *p; Py_ssize_t n; } Span;

/* literal prefixes and lines, compared with their size known at compile time: a loop the
 * compiler unrolls (it calls libc's memcmp for these, a call per line) */
static inline int same(const char *a, const char *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}
#define starts(line, lit) ((line).n >= (Py_ssize_t)sizeof(lit) - 1 && same((line).p, lit, sizeof(lit) - 1))
#define equals(line, lit) ((line).n == (Py_ssize_t)sizeof(lit) - 1 && same((line).p, lit, sizeof(lit) - 1))

/* ``line`` is PREFIX "VALUE" with VALUE free of '"', '\\' (and newline): VALUE in *v */
static inline int quoted_n(Span line, const char *prefix, size_t m, Span *v) {
    if ((size_t)line.n < m + 2 || !same(line.p, prefix, m)) return 0;
    if (line.p[m] != '"' || line.p[line.n - 1] != '"') return 0;
    const char *a = line.p + m + 1, *b = line.p + line.n - 1;
    if (memchr(a, '"', b - a) || memchr(a, '\\', b - a)) return 0;
    v->p = a; v->n = b - a;
    return 1;
}
#define quoted(line, lit, v) quoted_n(line, lit, sizeof(lit) - 1, v)

typedef struct {
    const char *data; Py_ssize_t n, pos;
} Lines;

/* the next line (without its '\n'); 0 at the end. ``*start``: its offset; ``*nl``: it ends in '\n' */
static int next_line(Lines *ls, Span *line, Py_ssize_t *start, int *nl) {
    if (ls->pos >= ls->n) return 0;
    const char *a = ls->data + ls->pos;
    const char *e = memchr(a, '\n', ls->n - ls->pos);
    *start = ls->pos;
    line->p = a;
    if (e) { line->n = e - a; ls->pos = e - ls->data + 1; *nl = 1; }
    else { line->n = ls->n - ls->pos; ls->pos = ls->n; *nl = 0; }
    return 1;
}

static Py_ssize_t indent(Span line) {
    Py_ssize_t i = 0;
    while (i < line.n && line.p[i] == ' ') i++;
    return i;
}

/* The first line at or after ``pos`` (a line start) not indented by 5 or more spaces: an op's
 * descriptors and nested attrs are most of its lines and none of the scan's business. SSE2
 * finds the newlines 16 bytes at a time (no call per line); a line cut by the end: ``n``. */
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
static inline int deep(const char *p) { return p[0] == ' ' && p[1] == ' ' && p[2] == ' ' && p[3] == ' ' && p[4] == ' '; }

/* TextFormat does not care about indentation: a line of an op body holding an `input:` statement
 * or a fusion attr's `key:` is the op's wherever it is indented. The Python scan counts such
 * lines over the op bodies and declines when one is not a head input or an op-level fusion attr
 * it read (scan.py _ANY_INPUT_LINE, _ANY_FUSION_KEY_LINE); so does the kernel (marked()). */
static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

static int is_fusion_key(const char *p, Py_ssize_t n);

/* the line starting at p (end: the data's end) holds an input statement or a fusion key */
static int marked(const char *p, const char *end) {
    while (p < end && is_ws(*p)) p++;
    if (end - p >= 5 && memcmp(p, "input", 5) == 0) {
        p += 5;
        while (p < end && is_ws(*p)) p++;
        return p < end && *p == ':';
    }
    if (end - p < 3 || memcmp(p, "key", 3) != 0) return 0;
    p += 3;
    while (p < end && is_ws(*p)) p++;
    if (p >= end || *p != ':') return 0;
    p++;
    while (p < end && is_ws(*p)) p++;
    if (p >= end || *p != '"') return 0;
    const char *q = ++p;
    while (q < end && *q != '"' && *q != '\\' && *q != '\n') q++;
    return q < end && *q == '"' && is_fusion_key(p, q - p);
}

/* marked() of the line at q, looking at lines whose first word could be one (cheap test first) */
static inline int maybe_marked(const char *data, Py_ssize_t n, Py_ssize_t q) {
    Py_ssize_t i = q;
    while (i < n && data[i] == ' ') i++;
    if (i >= n || (data[i] != 'i' && data[i] != 'k' && !is_ws(data[i]))) return 0;
    return marked(data + q, data + n);
}

/* the end of the deeper lines from pos; *bad set when one of them is marked() */
static Py_ssize_t skip_deep(const char *data, Py_ssize_t n, Py_ssize_t pos, int *bad) {
    if (pos + 5 > n || !deep(data + pos)) return pos;
    if (maybe_marked(data, n, pos)) { *bad = 1; return pos; }
    Py_ssize_t i = pos;
#if defined(__SSE2__)
    const __m128i newline = _mm_set1_epi8('\n');
    while (i + 16 <= n) {
        unsigned mask = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(data + i)), newline));
        while (mask) {
            Py_ssize_t q = i + __builtin_ctz(mask) + 1;  /* a line start */
            if (q + 5 > n || !deep(data + q)) return q;
            if (maybe_marked(data, n, q)) { *bad = 1; return q; }
            mask &= mask - 1;
        }
        i += 16;
    }
#endif
    for (; i < n; i++)
        if (data[i] == '\n') {
            if (i + 6 > n || !deep(data + i + 1)) return i + 1;
            if (maybe_marked(data, n, i + 1)) { *bad = 1; return i + 1; }
        }
    return n;
}

/* ---- scan ------------------------------------------------------------------------------------- */
enum { K_ORIGINAL, K_PASS, K_LIB, K_KERNEL };
#define MAX_KERNELS 16

typedef struct {
    Buf names, name_off, type_id, in_blob, in_item_off, in_off, orig_present, orig_off, orig_blob,
        orig_item_off, pass_id, kernel_present, kernel_blob, kernel_off, engine_id, start, end, skeleton, fused;
    Table types, passes, engines;
    Py_ssize_t ops, inputs, origs;
} Out;

static void out_free(Out *o) {
    Buf *bufs[] = {&o->names, &o->name_off, &o->type_id, &o->in_blob, &o->in_item_off, &o->in_off,
                   &o->orig_present, &o->orig_off, &o->orig_blob, &o->orig_item_off, &o->pass_id,
                   &o->kernel_present, &o->kernel_blob, &o->kernel_off, &o->engine_id, &o->start, &o->end,
                   &o->skeleton, &o->fused};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) buf_free(bufs[i]);
    table_free(&o->types); table_free(&o->passes); table_free(&o->engines);
}

/* a special attr's value: s form (is_list 0, s) or list form (items: the raw list lines) */
typedef struct { int set; int is_list; Span s; Span list; /* the "s:" lines, raw */ } Value;

#define NOT_CANONICAL 1
#define NO_MEMORY 2

/* read an attr value after its key line; 0 ok, NOT_CANONICAL when not one of GE's two forms */
static int read_value(Lines *ls, Value *v) {
    Span line; Py_ssize_t at; int nl;
    if (!next_line(ls, &line, &at, &nl) || !nl || !equals(line, "      value {")) return NOT_CANONICAL;
    if (!next_line(ls, &line, &at, &nl) || !nl) return NOT_CANONICAL;
    Span s;
    if (quoted(line, "        s: ", &s)) {
        v->is_list = 0; v->s = s;
    } else if (equals(line, "        list {")) {
        Py_ssize_t first = ls->pos;
        Py_ssize_t last = first;
        for (;;) {
            if (!next_line(ls, &line, &at, &nl) || !nl) return NOT_CANONICAL;
            if (!quoted(line, "          s: ", &s)) break;
            last = ls->pos;
        }
        v->is_list = 1; v->list.p = ls->data + first; v->list.n = last - first;
        if (starts(line, "          val_type: VT_LIST_")) {
            for (Py_ssize_t i = 28; i < line.n; i++)
                if (!((line.p[i] >= 'A' && line.p[i] <= 'Z') || line.p[i] == '_')) return NOT_CANONICAL;
            if (line.n == 28 || !next_line(ls, &line, &at, &nl) || !nl) return NOT_CANONICAL;
        }
        if (!equals(line, "        }")) return NOT_CANONICAL;
    } else {
        return NOT_CANONICAL;
    }
    if (!next_line(ls, &line, &at, &nl) || !nl || !equals(line, "      }")) return NOT_CANONICAL;
    if (!next_line(ls, &line, &at, &nl) || !nl || !equals(line, "    }")) return NOT_CANONICAL;
    v->set = 1;
    return 0;
}

/* the non-empty items of a names value, '\n'-joined into ``b``; their count */
static int put_names(Buf *b, Buf *offs, const Value *v, Py_ssize_t *count) {
    if (!v->is_list) {
        if (v->s.n) {
            if (buf_put(b, v->s.p, v->s.n) < 0 || (offs && put_i64(offs, b->n) < 0)) return NO_MEMORY;
            (*count)++;
        }
        return 0;
    }
    Lines ls = {v->list.p, v->list.n, 0};
    Span line, s = {NULL, 0}; Py_ssize_t at; int nl;
    while (next_line(&ls, &line, &at, &nl)) {
        quoted(line, "          s: ", &s);
        if (!s.n) continue;
        if (!offs && *count && put_u8(b, '\n') < 0) return NO_MEMORY;
        if (buf_put(b, s.p, s.n) < 0 || (offs && put_i64(offs, b->n) < 0)) return NO_MEMORY;
        (*count)++;
    }
    return 0;
}

static int is_kernel_key(Span k) {
    return k.n >= 11 && memcmp(k.p + k.n - 11, "_kernelname", 11) == 0;
}

static int is_fusion_key(const char *p, Py_ssize_t n) {
    Span k = {p, n};
    return (n == 27 && (!memcmp(p, "_datadump_original_op_names", 27) || !memcmp(p, "_ge_attr_op_kernel_lib_name", 27)))
        || (n == 9 && !memcmp(p, "pass_name", 9)) || is_kernel_key(k);
}

static int span_cmp(Span a, Span b) {
    Py_ssize_t m = a.n < b.n ? a.n : b.n;
    int c = memcmp(a.p, b.p, m);
    return c ? c : (a.n < b.n ? -1 : a.n > b.n);
}

/* one op; ``ls`` is after its "  op {" line. 0, NOT_CANONICAL or NO_MEMORY */
static int scan_op(Lines *ls, Out *o) {
    Span line, name, type, v; Py_ssize_t at; int nl;
    Py_ssize_t body = ls->pos;
    if (!next_line(ls, &line, &at, &nl) || !nl || !quoted(line, "    name: ", &name)) return NOT_CANONICAL;
    if (!next_line(ls, &line, &at, &nl) || !nl || !quoted(line, "    type: ", &type)) return NOT_CANONICAL;
    Value original = {0}, passes = {0}, lib = {0};
    Span kernel_keys[MAX_KERNELS]; Value kernels[MAX_KERNELS]; int n_kernels = 0;
    Py_ssize_t inputs = 0;
    int head = 1;
    for (;;) {
        if (!head) {
            int bad = 0;
            ls->pos = skip_deep(ls->data, ls->n, ls->pos, &bad);
            if (bad) return NOT_CANONICAL;   /* an input or fusion key the scan would not read */
        }
        if (!next_line(ls, &line, &at, &nl) || !nl) return NOT_CANONICAL;  /* truncated */
        if (equals(line, "  }")) break;
        if (head && starts(line, "    input: ")) {
            if (!quoted(line, "    input: ", &v)) return NOT_CANONICAL;
            if (buf_put(&o->in_blob, v.p, v.n) < 0 || put_i64(&o->in_item_off, o->in_blob.n) < 0) return NO_MEMORY;
            inputs++;
            continue;
        }
        head = 0;
        if (marked(line.p, line.p + line.n)) return NOT_CANONICAL;        /* an input out of place */
        if (line.n < 4 || line.p[0] != ' ' || line.p[1] != ' ') return NOT_CANONICAL;
        if (line.p[2] != ' ' || line.p[3] != ' ') return NOT_CANONICAL;  /* "  x" inside an op */
        if (line.n > 4 && line.p[4] == ' ') continue;                     /* deeper: not ours */
        if (!equals(line, "    attr {")) continue;
        Span key_line; Py_ssize_t save = ls->pos;
        if (!next_line(ls, &key_line, &at, &nl) || !nl) return NOT_CANONICAL;
        if (!starts(key_line, "      key: ")) { ls->pos = save; continue; }
        Span key;
        if (!quoted(key_line, "      key: ", &key)) {
            for (Py_ssize_t i = 0; i < key_line.n; i++)
                if (key_line.p[i] == '\\') return NOT_CANONICAL;  /* an escaped key: the Python scan */
            ls->pos = save; continue;
        }
        Value *slot = NULL, tmp = {0};
        if (key.n == 27 && memcmp(key.p, "_datadump_original_op_names", 27) == 0) slot = &original;
        else if (key.n == 9 && memcmp(key.p, "pass_name", 9) == 0) slot = &passes;
        else if (key.n == 27 && memcmp(key.p, "_ge_attr_op_kernel_lib_name", 27) == 0) slot = &lib;
        else if (is_kernel_key(key)) {
            int k = 0;
            while (k < n_kernels && span_cmp(kernel_keys[k], key) != 0) k++;
            if (k == n_kernels) {
                if (n_kernels == MAX_KERNELS) return NOT_CANONICAL;
                kernel_keys[n_kernels++] = key;
            }
            slot = &kernels[k];
        } else { ls->pos = save; continue; }
        if (read_value(ls, &tmp)) return NOT_CANONICAL;  /* another form: the exact parser */
        *slot = tmp;  /* a later same key wins, as in text_format */
    }
    Py_ssize_t close_at = ls->pos - 4;  /* the "  }" line's start */
    /* name, type, inputs */
    if (buf_put(&o->names, name.p, name.n) < 0 || put_i64(&o->name_off, o->names.n) < 0) return NO_MEMORY;
    Py_ssize_t t = table_id(&o->types, type.p, type.n);
    if (t < 0 || put_i32(&o->type_id, (int32_t)t) < 0) return NO_MEMORY;
    o->inputs += inputs;
    if (put_i64(&o->in_off, o->inputs) < 0) return NO_MEMORY;
    /* originals: None when absent */
    if (put_u8(&o->orig_present, original.set) < 0) return NO_MEMORY;
    Py_ssize_t origs_before = o->origs;
    if (original.set && put_names(&o->orig_blob, &o->orig_item_off, &original, &o->origs)) return NO_MEMORY;
    if (put_i64(&o->orig_off, o->origs) < 0) return NO_MEMORY;
    /* passes: a table of '\n'-joined lists ("" = none) */
    Buf joined = {0};
    Py_ssize_t count = 0;
    if (passes.set && put_names(&joined, NULL, &passes, &count)) { buf_free(&joined); return NO_MEMORY; }
    Py_ssize_t p = table_id(&o->passes, joined.p ? joined.p : "", joined.n);
    buf_free(&joined);
    if (p < 0 || put_i32(&o->pass_id, (int32_t)p) < 0) return NO_MEMORY;
    /* fused (GraphSummary.fused_ops): passes, or more than one original name */
    if (put_u8(&o->fused, count > 0 || o->origs - origs_before > 1) < 0) return NO_MEMORY;
    /* kernel: {name}_kernelname, else the first *_kernelname in key order; only an s value counts */
    const Value *kv = NULL;
    int best = -1;
    for (int k = 0; k < n_kernels; k++) {
        Span kk = kernel_keys[k];
        if (kk.n == name.n + 11 && memcmp(kk.p, name.p, name.n) == 0) { best = k; break; }
    }
    if (best < 0)
        for (int k = 0; k < n_kernels; k++)
            if (best < 0 || span_cmp(kernel_keys[k], kernel_keys[best]) < 0) best = k;
    if (best >= 0) kv = &kernels[best];
    int has_kernel = kv && !kv->is_list && kv->s.n;
    if (put_u8(&o->kernel_present, has_kernel) < 0) return NO_MEMORY;
    if (has_kernel && buf_put(&o->kernel_blob, kv->s.p, kv->s.n) < 0) return NO_MEMORY;
    if (put_i64(&o->kernel_off, o->kernel_blob.n) < 0) return NO_MEMORY;
    /* engine */
    Py_ssize_t e = -1;
    if (lib.set && !lib.is_list && lib.s.n && (e = table_id(&o->engines, lib.s.p, lib.s.n)) < 0) return NO_MEMORY;
    if (put_i32(&o->engine_id, (int32_t)e) < 0) return NO_MEMORY;
    if (put_i64(&o->start, body) < 0 || put_i64(&o->end, close_at) < 0) return NO_MEMORY;
    o->ops++;
    return 0;
}

/* the whole text; 0, NOT_CANONICAL or NO_MEMORY; graphs appended to ``graphs`` */
static int scan_text(const char *data, Py_ssize_t n, Out *o, PyObject *graphs, PyObject *release) {
    Lines ls = {data, n, 0};
    Span line; Py_ssize_t at; int nl;
    Py_ssize_t depth = 0, next_release = 64 << 20, validated = 0;
    int in_graph = 0, after_graph_open = 0, after_attr_open = 0;
    while (next_line(&ls, &line, &at, &nl)) {
        while (validated < ls.pos) {  /* UTF-8 in blocks cut at newlines, as the scan goes */
            Py_ssize_t stop = validated + (4 << 20) < n ? validated + (4 << 20) : n;
            const char *nlp = stop < n ? memchr(data + stop, '\n', n - stop) : NULL;
            stop = nlp ? nlp - data + 1 : n;
            if (!valid_utf8((const uint8_t *)data + validated, stop - validated)) return NOT_CANONICAL;
            validated = stop;
        }
        if (release && ls.pos >= next_release) {
            PyObject *r = PyObject_CallFunction(release, "n", at);
            if (!r) return -1;
            Py_DECREF(r);
            next_release = ls.pos + (64 << 20);
        }
        Py_ssize_t ind = indent(line);
        Span rest = {line.p + ind, line.n - ind};
        if (after_graph_open) {  /* the graph's name must come first (as the Python scan checks) */
            Span name;
            if (!nl || !quoted(line, "  name: ", &name)) return NOT_CANONICAL;
            PyObject *item = Py_BuildValue("(y#n)", name.p, name.n, o->ops);
            if (!item || PyList_Append(graphs, item) < 0) { Py_XDECREF(item); return -1; }
            Py_DECREF(item);
            after_graph_open = 0;
        }
        if (in_graph && depth == 1 && nl && equals(line, "  op {")) {
            int r = scan_op(&ls, o);
            if (r) return r;
            after_attr_open = 0;
            continue;
        }
        int attr_open = 0;
        if (rest.n == 0) {  /* a blank line */
        } else if (rest.n == 1 && rest.p[0] == '}') {
            if (depth == 0 || ind != 2 * (depth - 1)) return NOT_CANONICAL;
            if (--depth == 0) in_graph = 0;
        } else if (ind != 2 * depth) {
            return NOT_CANONICAL;  /* not GE's indentation */
        } else if (rest.p[rest.n - 1] == '{') {
            if (depth == 0 && equals(line, "graph {")) { in_graph = 1; after_graph_open = 1; }
            else if (equals(rest, "op {")) return NOT_CANONICAL;  /* an op outside a graph's top level */
            attr_open = equals(line, "    attr {");
            depth++;
        } else if (depth == 2 && starts(rest, "input: ")) {
            return NOT_CANONICAL;  /* an op-level input outside any op: not GE's layout */
        } else if (after_attr_open && starts(line, "      key: ")) {
            /* an op-level fusion attr outside any op: not GE's layout */
            Span key;
            if (!quoted(line, "      key: ", &key)) return NOT_CANONICAL;
            if ((key.n == 27 && (!memcmp(key.p, "_datadump_original_op_names", 27)
                                 || !memcmp(key.p, "_ge_attr_op_kernel_lib_name", 27)))
                || (key.n == 9 && !memcmp(key.p, "pass_name", 9)) || is_kernel_key(key))
                return NOT_CANONICAL;
        }
        after_attr_open = attr_open;
        if (buf_put(&o->skeleton, line.p, line.n) < 0 || (nl && put_u8(&o->skeleton, '\n') < 0)) return NO_MEMORY;
    }
    if (validated < n && !valid_utf8((const uint8_t *)data + validated, n - validated)) return NOT_CANONICAL;
    if (after_graph_open || depth) return NOT_CANONICAL;
    return 0;
}

/* The text is memory-mapped: a file cut short while it is scanned makes reading its lost pages
 * raise SIGBUS, which would kill the process. Caught during the scan: the scan then declines
 * (None) and the caller reads the file again by the Python route. */
#if defined(SIGBUS) || defined(__unix__)
#include <setjmp.h>
#include <signal.h>
#define CATCH_SIGBUS 1
static sigjmp_buf bus_jump;
static void on_sigbus(int sig) { (void)sig; siglongjmp(bus_jump, 1); }
#endif

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *release = Py_None;
    if (!PyArg_ParseTuple(args, "y*|O", &view, &release)) return NULL;
    if (release == Py_None) release = NULL;
    const char *data = view.buf;
    Py_ssize_t n = view.len;
    PyObject *result = NULL, *graphs = PyList_New(0);
    Out o;
    memset(&o, 0, sizeof o);
    volatile int r = graphs ? 0 : -1;
    if (!r && (table_init(&o.types) < 0 || table_init(&o.passes) < 0 || table_init(&o.engines) < 0)) r = NO_MEMORY;
    if (!r && (put_i64(&o.name_off, 0) < 0 || put_i64(&o.in_item_off, 0) < 0 || put_i64(&o.in_off, 0) < 0
               || put_i64(&o.orig_off, 0) < 0 || put_i64(&o.orig_item_off, 0) < 0 || put_i64(&o.kernel_off, 0) < 0))
        r = NO_MEMORY;
#ifdef CATCH_SIGBUS
    struct sigaction catch_bus, before;
    memset(&catch_bus, 0, sizeof catch_bus);
    catch_bus.sa_handler = on_sigbus;
    sigemptyset(&catch_bus.sa_mask);
    int caught = !r && sigaction(SIGBUS, &catch_bus, &before) == 0;
    if (caught && sigsetjmp(bus_jump, 1) != 0) {
        r = NOT_CANONICAL;  /* the file shrank under the scan */
    } else if (!r) {
        r = scan_text(data, n, &o, graphs, release);
    }
    if (caught) sigaction(SIGBUS, &before, NULL);
#else
    if (!r) r = scan_text(data, n, &o, graphs, release);
#endif
    if (r == NO_MEMORY) PyErr_NoMemory();
    if (r == NOT_CANONICAL) { result = Py_None; Py_INCREF(result); }
    if (r == 0) {
        result = Py_BuildValue(
            "{sOsNsNsNsNsNsNsNsNsNsNsNsNsNsNsNsNsNsNsNsNsNsN}",
            "graphs", graphs, "names", buf_bytes(&o.names), "name_off", buf_bytes(&o.name_off),
            "type_id", buf_bytes(&o.type_id), "types", table_list(&o.types, 0),
            "in_blob", buf_bytes(&o.in_blob), "in_item_off", buf_bytes(&o.in_item_off),
            "in_off", buf_bytes(&o.in_off), "orig_present", buf_bytes(&o.orig_present),
            "orig_off", buf_bytes(&o.orig_off), "orig_blob", buf_bytes(&o.orig_blob),
            "orig_item_off", buf_bytes(&o.orig_item_off), "pass_id", buf_bytes(&o.pass_id),
            "pass_lists", table_list(&o.passes, 1), "kernel_present", buf_bytes(&o.kernel_present),
            "kernel_blob", buf_bytes(&o.kernel_blob), "kernel_off", buf_bytes(&o.kernel_off),
            "engine_id", buf_bytes(&o.engine_id), "engines", table_list(&o.engines, 0),
            "start", buf_bytes(&o.start), "end", buf_bytes(&o.end), "skeleton", buf_bytes(&o.skeleton),
            "fused", buf_bytes(&o.fused));
    }
    out_free(&o);
    Py_XDECREF(graphs);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"pack", graph_pack_ints, METH_VARARGS, "pack(buffer, itemsize): (delta, size, bytes) of an int column"},
    {"unpack", graph_unpack_ints, METH_VARARGS, "unpack(buffer, itemsize, delta, out_itemsize): ints of a cache column"},
    {"scan", scan, METH_VARARGS, "scan(buffer, release=None): a GE graph text's op columns, or None"},
    {"link", graph_link_inputs, METH_VARARGS, "link(names, name_off, in_blob, in_item_off, in_off): inputs by name, or None"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_graph_scan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__graph_scan(void) { return PyModule_Create(&module); }
