/* TFRecord framing, masked CRC32C and the scalar path of TensorBoard's Event proto, in one pass.
 *
 * Why C: a 1M-step event file is 1M records of ~50 bytes; checking two CRCs and decoding one
 * Event per record costs ~10 us in Python (protobuf objects, a table-driven CRC), ~50 ns here.
 * What this kernel does not decode (tensor summaries, anything unusual) it hands back to the
 * Python reader (formats/logs/events.py), which decodes it with protobuf: same results.
 *
 * scan(buffer, base, final) -> (consumed, steps, walls, values, tag_ids, tags, problems, slow,
 *                               lost)
 *   steps int64, walls float64, values float64, tag_ids int32: one entry per scalar point
 *   (raw bytes: numpy.frombuffer), in file order; tags: the tag names (bytes) tag_ids index;
 *   problems: [(offset, text)] records skipped; slow: [(offset, data)] records for protobuf;
 *   lost: 1 when the framing is lost (a bad length CRC): nothing after it can be read.
 *   consumed: bytes of ``buffer`` used (a record cut by the buffer's end waits for more data,
 *   unless ``final``, when it is reported as truncated).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static uint32_t crc_table[8][256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

#if defined(__SSE4_2__) && defined(__x86_64__)
#include <nmmintrin.h>
/* the CPU's CRC32C instruction (SSE4.2; built with -march=native on such a machine) */
static uint32_t crc32c(const uint8_t *p, size_t n) {
    uint64_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = _mm_crc32_u8(c32, *p++);
    return c32 ^ 0xFFFFFFFFu;
}
#else
static uint32_t crc32c(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {   /* slicing by 8 */
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= c;
        c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^ crc_table[5][(lo >> 16) & 0xff]
            ^ crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff]
            ^ crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = crc_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}
#endif

static uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

static uint32_t le32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t le64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* protobuf wire reading: 0 on malformed input */
static int varint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*p >= end) return 0;
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) { *out = v; return 1; }
    }
    return 0;
}

static int skip_field(const uint8_t **p, const uint8_t *end, int wire) {
    uint64_t n;
    switch (wire) {
    case 0: return varint(p, end, &n);
    case 1: if (end - *p < 8) return 0; *p += 8; return 1;
    case 2: if (!varint(p, end, &n) || (uint64_t)(end - *p) < n) return 0; *p += n; return 1;
    case 5: if (end - *p < 4) return 0; *p += 4; return 1;
    default: return 0;   /* groups: not in these protos */
    }
}

typedef struct {
    char *data;
    size_t used, cap, item;
} vec;

static int vec_push(vec *v, const void *x) {
    if (v->used == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4096;
        char *d = realloc(v->data, cap * v->item);
        if (!d) return 0;
        v->data = d;
        v->cap = cap;
    }
    memcpy(v->data + v->used * v->item, x, v->item);
    v->used++;
    return 1;
}

typedef struct {
    vec steps, walls, values, tag_ids;
    PyObject *tags;   /* list of bytes */
    Py_ssize_t last_tag;
} points;

static Py_ssize_t tag_id(points *pts, const uint8_t *tag, Py_ssize_t n) {
    Py_ssize_t count = PyList_GET_SIZE(pts->tags);
    for (Py_ssize_t k = 0; k < count; k++) {   /* few tags per file: start where the last was */
        Py_ssize_t i = (pts->last_tag + k) % count;
        PyObject *t = PyList_GET_ITEM(pts->tags, i);
        if (PyBytes_GET_SIZE(t) == n && memcmp(PyBytes_AS_STRING(t), tag, n) == 0) {
            pts->last_tag = i;
            return i;
        }
    }
    PyObject *t = PyBytes_FromStringAndSize((const char *)tag, n);
    if (!t || PyList_Append(pts->tags, t) < 0) { Py_XDECREF(t); return -1; }
    Py_DECREF(t);
    pts->last_tag = count;
    return count;
}

enum { EV_OK = 0, EV_BAD = 1, EV_SLOW = 2, EV_NOMEM = 3 };

/* One Summary.Value: its tag and simple_value; a tensor value goes to protobuf (EV_SLOW). */
static int read_value(const uint8_t *p, const uint8_t *end, const uint8_t **tag, Py_ssize_t *tag_n,
                      int *has, float *value) {
    *has = 0;
    *tag = NULL;
    *tag_n = 0;
    while (p < end) {
        uint64_t key;
        if (!varint(&p, end, &key)) return EV_BAD;
        int field = (int)(key >> 3), wire = (int)(key & 7);
        if (field == 1 && wire == 2) {
            uint64_t n;
            if (!varint(&p, end, &n) || (uint64_t)(end - p) < n) return EV_BAD;
            *tag = p;
            *tag_n = (Py_ssize_t)n;
            p += n;
        } else if (field == 2 && wire == 5) {
            if (end - p < 4) return EV_BAD;
            memcpy(value, p, 4);
            p += 4;
            *has = 1;
        } else if (field == 8) {
            return EV_SLOW;
        } else if (!skip_field(&p, end, wire)) {
            return EV_BAD;
        }
    }
    return EV_OK;
}

static int read_event(const uint8_t *p, const uint8_t *end, points *pts) {
    double wall = 0.0;
    int64_t step = 0;
    const uint8_t *summary = NULL, *summary_end = NULL;
    while (p < end) {
        uint64_t key;
        if (!varint(&p, end, &key)) return EV_BAD;
        int field = (int)(key >> 3), wire = (int)(key & 7);
        if (field == 1 && wire == 1) {
            if (end - p < 8) return EV_BAD;
            memcpy(&wall, p, 8);
            p += 8;
        } else if (field == 2 && wire == 0) {
            uint64_t v;
            if (!varint(&p, end, &v)) return EV_BAD;
            step = (int64_t)v;
        } else if (field == 5 && wire == 2) {
            uint64_t n;
            if (!varint(&p, end, &n) || (uint64_t)(end - p) < n) return EV_BAD;
            summary = p;
            summary_end = p + n;
            p += n;
        } else if (field == 0 || !skip_field(&p, end, wire)) {
            return EV_BAD;
        }
    }
    if (!summary) return EV_OK;
    /* first pass: well-formed and nothing for protobuf; then emit */
    for (int emit = 0; emit < 2; emit++) {
        const uint8_t *q = summary;
        while (q < summary_end) {
            uint64_t key, n;
            if (!varint(&q, summary_end, &key)) return EV_BAD;
            if ((key >> 3) != 1 || (key & 7) != 2) {
                if ((key >> 3) == 0 || !skip_field(&q, summary_end, (int)(key & 7))) return EV_BAD;
                continue;
            }
            if (!varint(&q, summary_end, &n) || (uint64_t)(summary_end - q) < n) return EV_BAD;
            const uint8_t *tag;
            Py_ssize_t tag_n;
            int has;
            float value;
            int rc = read_value(q, q + n, &tag, &tag_n, &has, &value);
            q += n;
            if (rc != EV_OK) return rc;
            if (!emit || !has) continue;
            Py_ssize_t id = tag_id(pts, tag ? tag : (const uint8_t *)"", tag_n);
            int32_t id32 = (int32_t)id;
            double v = (double)value;
            if (id < 0 || !vec_push(&pts->steps, &step) || !vec_push(&pts->walls, &wall)
                || !vec_push(&pts->values, &v) || !vec_push(&pts->tag_ids, &id32))
                return EV_NOMEM;
        }
    }
    return EV_OK;
}

static int add_problem(PyObject *list, long long offset, const char *text) {
    PyObject *item = Py_BuildValue("(Ls)", offset, text);
    if (!item) return 0;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc == 0;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long base;
    int final;
    if (!PyArg_ParseTuple(args, "y*Lp", &view, &base, &final)) return NULL;
    const uint8_t *buf = view.buf;
    size_t size = (size_t)view.len, pos = 0;
    int lost = 0;
    points pts = {{NULL, 0, 0, 8}, {NULL, 0, 0, 8}, {NULL, 0, 0, 8}, {NULL, 0, 0, 4}, NULL, 0};
    PyObject *problems = PyList_New(0), *slow = PyList_New(0), *result = NULL;
    pts.tags = PyList_New(0);
    if (!problems || !slow || !pts.tags) goto done;
    while (pos < size) {
        if (size - pos < 12) {
            if (final && !add_problem(problems, base + (long long)pos, "truncated record header")) goto done;
            if (final) pos = size;
            break;
        }
        const uint8_t *h = buf + pos;
        uint64_t len = le64(h);
        if (masked(crc32c(h, 8)) != le32(h + 8)) {
            if (!add_problem(problems, base + (long long)pos,
                             "length CRC mismatch: the rest of the file cannot be framed")) goto done;
            lost = 1;
            pos = size;
            break;
        }
        if (len > (uint64_t)(size - pos - 12) || size - pos - 12 - len < 4) {
            if (!final) break;
            if (!add_problem(problems, base + (long long)pos, "truncated record")) goto done;
            pos = size;
            break;
        }
        const uint8_t *data = h + 12;
        if (masked(crc32c(data, len)) != le32(data + len)) {
            if (!add_problem(problems, base + (long long)pos, "data CRC mismatch: record skipped")) goto done;
        } else {
            int rc = read_event(data, data + len, &pts);
            if (rc == EV_NOMEM) { PyErr_NoMemory(); goto done; }
            if (rc == EV_BAD && !add_problem(problems, base + (long long)pos,
                                             "not an Event proto: record skipped")) goto done;
            if (rc == EV_SLOW) {
                PyObject *item = Py_BuildValue("(Ly#)", base + (long long)pos, (const char *)data, (Py_ssize_t)len);
                if (!item || PyList_Append(slow, item) < 0) { Py_XDECREF(item); goto done; }
                Py_DECREF(item);
            }
        }
        pos += 12 + len + 4;
    }
    result = Py_BuildValue("(ny#y#y#y#OOOi)", (Py_ssize_t)pos,
                           pts.steps.data ? pts.steps.data : "", (Py_ssize_t)(pts.steps.used * 8),
                           pts.walls.data ? pts.walls.data : "", (Py_ssize_t)(pts.walls.used * 8),
                           pts.values.data ? pts.values.data : "", (Py_ssize_t)(pts.values.used * 8),
                           pts.tag_ids.data ? pts.tag_ids.data : "", (Py_ssize_t)(pts.tag_ids.used * 4),
                           pts.tags, problems, slow, lost);
done:
    free(pts.steps.data);
    free(pts.walls.data);
    free(pts.values.data);
    free(pts.tag_ids.data);
    Py_XDECREF(pts.tags);
    Py_XDECREF(problems);
    Py_XDECREF(slow);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *py_masked_crc32c(PyObject *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view)) return NULL;
    uint32_t c = masked(crc32c(view.buf, (size_t)view.len));
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "scan(buffer, base, final): TFRecord framing + scalar events"},
    {"masked_crc32c", py_masked_crc32c, METH_VARARGS, "TFRecord's masked CRC32C of a buffer"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tfrecord", NULL, -1, methods};

PyMODINIT_FUNC PyInit__tfrecord(void) {
    crc_init();
    return PyModule_Create(&module);
}
