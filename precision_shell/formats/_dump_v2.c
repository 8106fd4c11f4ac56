/* decode_v2(header, file_size, entry_type): a v2 dump header (DumpData protobuf, formats.md §1.3)
 * straight into formats/dump_types.TensorEntry objects, or None when this decoder is not sure
 * (also used by _file_heads.read_heads for the headers it reads).
 *
 * Why: `vc` plans on the main thread while its workers compare, and planning's Python holds the
 * GIL they need between their C calls; a third of planning was protobuf's DumpData.FromString
 * and the Python that turned each message into TensorEntry objects (~1,000 headers, ~4,000
 * entries). Here one call does both, and a cached `vc` never imports protobuf.
 *
 * Exactness: the result must be what dump_header's protobuf path makes of the same bytes. This
 * decoder knows the fields of dump_data.proto and protobuf's wire rules for them (last value of
 * a scalar wins, repeated fields append, packed or unpacked dims, int32/enum varints truncated
 * to 32 bits, unknown fields skipped). Anything less plain returns None and the caller parses
 * the header with protobuf: a known field with another wire type, a group, a singular message
 * field given twice (protobuf merges them), a varint past 64 bits, a string that is not UTF-8,
 * tensor sizes that overrun the file (so the error lines stay the protobuf path's).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_dump_v2.h"
#include "_proto_wire.h"

enum { INPUT, OUTPUT, BUFFER, SPACE, KINDS };
static const char *const KIND_NAMES[KINDS] = {"input", "output", "buffer", "space"};
/* DumpData field number -> kind (-1: not a tensor) */
static int kind_of_field(uint64_t number)
{
    switch (number) {
    case 3: return OUTPUT;
    case 4: return INPUT;
    case 5: return BUFFER;
    case 8: return SPACE;
    default: return -1;
    }
}

#define DT_UNDEFINED 0   /* formats/dtypes.py: a buffer's or a space's entry */
#define FORMAT_ND 2

typedef struct {
    int kind;
    int32_t dtype, format, sub_format;
    uint64_t size;
    Span shape, original_shape, op_name;
    Py_ssize_t n_dims, n_original_dims;   /* checked when parsed */
    int has_shape, has_original_shape, has_op;
    uint32_t op_index;
} Tensor;

typedef struct {
    Span name, value;
} Attr;

static int original_op(Span s, Tensor *t)
{
    const uint8_t *p = s.p;
    t->op_name.p = t->op_name.end = NULL;
    t->op_index = 0;
    while (p < s.end) {
        uint64_t number, value;
        int wire;
        Span bytes;
        if (next_field(&p, s.end, &number, &wire, &value, &bytes) < 0)
            return 0;
        if (number == 1) {            /* name */
            if (wire != 2 || !utf8(bytes))
                return 0;
            t->op_name = bytes;
        } else if (number <= 4) {     /* output_index, data_type, format */
            if (wire != 0)
                return 0;
            if (number == 2)
                t->op_index = (uint32_t)value;
        }
    }
    return 1;
}

/* One OpInput / OpOutput / OpBuffer / Workspace message into ``t``; 0 when left to protobuf. */
static int tensor(Span s, Tensor *t)
{
    /* field numbers per kind: data_type, format, shape, original_op, size, original_shape,
     * sub_format, and the other known fields (bytes: data; varint: address, offset) */
    const int out = t->kind == OUTPUT, in = t->kind == INPUT;
    const uint8_t *p = s.p;
    while (p < s.end) {
        uint64_t number, value;
        int wire;
        Span bytes;
        if (next_field(&p, s.end, &number, &wire, &value, &bytes) < 0)
            return 0;
        if (in || out) {
            int size_f = out ? 6 : 5, orig_f = out ? 7 : 6, sub_f = out ? 8 : 7, data_f = out ? 5 : 4;
            if (number == 1 || number == 2 || number == (uint64_t)sub_f) {   /* enums, int32 */
                if (wire != 0)
                    return 0;
                int32_t v = (int32_t)(uint32_t)value;
                if (number == 1)
                    t->dtype = v;
                else if (number == 2)
                    t->format = v;
                else
                    t->sub_format = v;
            } else if (number == 3 || number == (uint64_t)orig_f) {
                int shape = number == 3;
                if (wire != 2 || (shape ? t->has_shape : t->has_original_shape))
                    return 0;   /* given twice: protobuf merges */
                Py_ssize_t n = count_dims(bytes);
                if (n < 0)
                    return 0;
                if (shape) {
                    t->shape = bytes;
                    t->n_dims = n;
                    t->has_shape = 1;
                } else {
                    t->original_shape = bytes;
                    t->n_original_dims = n;
                    t->has_original_shape = 1;
                }
            } else if (out && number == 4) {
                if (wire != 2 || t->has_op || !original_op(bytes, t))
                    return 0;
                t->has_op = 1;
            } else if (number == (uint64_t)data_f) {
                if (wire != 2)
                    return 0;
            } else if (number == (uint64_t)size_f) {
                if (wire != 0)
                    return 0;
                t->size = value;
            } else if (out && number == 10) {   /* dim_range: repeated DimRange */
                if (wire != 2 || !plain_varints(bytes, 2))
                    return 0;
            } else if (number <= (uint64_t)(out ? 11 : 9)) {   /* address, offset */
                if (wire != 0)
                    return 0;
            }
        } else {   /* OpBuffer / Workspace: type, data, size */
            if (number == 1 || number == 3) {
                if (wire != 0)
                    return 0;
                if (number == 3)
                    t->size = value;
            } else if (number == 2 && wire != 2)
                return 0;
        }
    }
    return 1;
}

/* A UTF-8 string (a NULL span: ""), or NULL with no exception set when it is not UTF-8. */
static PyObject *text(Span s, int *failed)
{
    PyObject *o = PyUnicode_DecodeUTF8((const char *)s.p, s.p ? s.end - s.p : 0, "strict");
    if (o == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyErr_Clear();
        *failed = 1;
    }
    return o;
}

/* TensorEntry's fields in its order; each set through its slot's descriptor (the class is a
 * frozen dataclass with __slots__, so this is what its __init__ does, without the Python). */
#define N_FIELDS 11
static const char *const FIELD_NAMES[N_FIELDS] = {
    "kind", "index", "dtype", "format", "shape", "original_shape", "sub_format", "original_name",
    "original_output_index", "offset", "size"};
static PyObject *entry_class, *field_descrs[N_FIELDS], *kind_names[KINDS];

static int set_entry_class(PyObject *cls)
{
    if (cls == entry_class)
        return 0;
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "entry_type must be a class");
        return -1;
    }
    PyObject *descrs[N_FIELDS];
    for (int i = 0; i < N_FIELDS; i++) {
        descrs[i] = PyObject_GetAttrString(cls, FIELD_NAMES[i]);
        if (descrs[i] == NULL || Py_TYPE(descrs[i])->tp_descr_set == NULL) {
            if (descrs[i] != NULL)
                PyErr_Format(PyExc_TypeError, "entry_type.%s is not a slot", FIELD_NAMES[i]);
            for (int j = 0; j <= i; j++)
                Py_XDECREF(descrs[j]);
            return -1;
        }
    }
    for (int i = 0; i < KINDS; i++)
        if (kind_names[i] == NULL && (kind_names[i] = PyUnicode_InternFromString(KIND_NAMES[i])) == NULL)
            return -1;
    for (int i = 0; i < N_FIELDS; i++) {
        Py_XSETREF(field_descrs[i], descrs[i]);
    }
    Py_INCREF(cls);
    Py_XSETREF(entry_class, cls);
    return 0;
}

/* A new TensorEntry; steals the references in ``values`` (all non-NULL). */
static PyObject *new_entry(PyObject **values)
{
    PyTypeObject *type = (PyTypeObject *)entry_class;
    PyObject *obj = type->tp_alloc(type, 0);
    for (int i = 0; i < N_FIELDS; i++) {
        if (obj != NULL && Py_TYPE(field_descrs[i])->tp_descr_set(field_descrs[i], obj, values[i]) < 0)
            Py_CLEAR(obj);
        Py_DECREF(values[i]);
    }
    return obj;
}

static PyObject *make_entry(const Tensor *t, Py_ssize_t index, uint64_t offset, int *failed)
{
    PyObject *v[N_FIELDS] = {NULL};
    Py_INCREF(kind_names[t->kind]);
    v[0] = kind_names[t->kind];
    v[1] = PyLong_FromSsize_t(index);
    v[9] = PyLong_FromUnsignedLongLong(offset);
    v[10] = PyLong_FromUnsignedLongLong(t->size);
    if (t->kind == BUFFER || t->kind == SPACE) {
        v[2] = PyLong_FromLong(DT_UNDEFINED);
        v[3] = PyLong_FromLong(FORMAT_ND);
        v[4] = PyTuple_Pack(1, v[10]);
        v[6] = PyLong_FromLong(0);
    } else {
        v[2] = PyLong_FromLong(t->dtype);
        v[3] = PyLong_FromLong(t->format);
        Span none = {NULL, NULL};
        v[4] = dims_tuple(t->has_shape ? t->shape : none, t->n_dims);
        Py_ssize_t n = t->has_original_shape ? t->n_original_dims : 0;
        /* an absent or empty original shape both mean "no logical shape recorded" */
        v[5] = n ? dims_tuple(t->original_shape, n) : Py_NewRef(Py_None);
        v[6] = PyLong_FromLong(t->sub_format);
        if (t->has_op) {
            v[7] = t->op_name.p != t->op_name.end ? text(t->op_name, failed) : Py_NewRef(Py_None);
            v[8] = PyLong_FromUnsignedLong(t->op_index);
        }
    }
    if (v[5] == NULL && t->kind >= BUFFER)
        v[5] = Py_NewRef(Py_None);
    if (v[7] == NULL && !t->has_op)
        v[7] = Py_NewRef(Py_None);
    if (v[8] == NULL && !t->has_op)
        v[8] = Py_NewRef(Py_None);
    for (int i = 0; i < N_FIELDS; i++)
        if (v[i] == NULL) {
            for (int j = 0; j < N_FIELDS; j++)
                Py_XDECREF(v[j]);
            return NULL;
        }
    return new_entry(v);
}

typedef struct {
    Tensor *tensors;
    Py_ssize_t n_tensors, cap_tensors;
    Attr *attrs;
    Py_ssize_t n_attrs, cap_attrs;
} Parsed;

static void *grow(void *items, Py_ssize_t *cap, size_t item_size)
{
    Py_ssize_t cap2 = *cap ? 2 * *cap : 16;
    void *more = realloc(items, (size_t)cap2 * item_size);
    if (more != NULL)
        *cap = cap2;
    return more;
}

/* Checks the strings of an OpAttr message; 0 when left to protobuf. */
static int attr(Span s, Attr *a)
{
    const uint8_t *p = s.p;
    a->name.p = a->name.end = a->value.p = a->value.end = NULL;
    while (p < s.end) {
        uint64_t number, value;
        int wire;
        Span bytes;
        if (next_field(&p, s.end, &number, &wire, &value, &bytes) < 0)
            return 0;
        if (number == 1 || number == 2) {
            if (wire != 2 || !utf8(bytes))
                return 0;
            *(number == 1 ? &a->name : &a->value) = bytes;
        }
    }
    return 1;
}

/* Result: 1 parsed, 0 left to protobuf, -1 MemoryError set. */
static int parse(Span s, Parsed *out, Span *version, Span *op_name, uint64_t *dump_time)
{
    const uint8_t *p = s.p;
    while (p < s.end) {
        uint64_t number, value;
        int wire;
        Span bytes;
        if (next_field(&p, s.end, &number, &wire, &value, &bytes) < 0)
            return 0;
        int kind = kind_of_field(number);
        if (kind >= 0) {
            if (wire != 2)
                return 0;
            if (out->n_tensors == out->cap_tensors) {
                Tensor *more = grow(out->tensors, &out->cap_tensors, sizeof(Tensor));
                if (more == NULL)
                    return -1;
                out->tensors = more;
            }
            Tensor *t = &out->tensors[out->n_tensors++];
            memset(t, 0, sizeof *t);
            t->kind = kind;
            if (!tensor(bytes, t))
                return 0;
        } else if (number == 7) {
            if (wire != 2)
                return 0;
            if (out->n_attrs == out->cap_attrs) {
                Attr *more = grow(out->attrs, &out->cap_attrs, sizeof(Attr));
                if (more == NULL)
                    return -1;
                out->attrs = more;
            }
            if (!attr(bytes, &out->attrs[out->n_attrs++]))
                return 0;
        } else if (number == 1 || number == 6) {
            if (wire != 2 || !utf8(bytes))
                return 0;
            *(number == 1 ? version : op_name) = bytes;
        } else if (number == 2) {
            if (wire != 0)
                return 0;
            *dump_time = value;
        }
    }
    return 1;
}

/* The entries of every tensor, by kind (in order inputs, outputs, buffers, spaces: the data's
 * order in the file) into ``lists``; 0 when the data would overrun the file. */
static int entries(const Parsed *parsed, uint64_t start, uint64_t file_size, PyObject **lists, int *failed)
{
    uint64_t offset = start;
    for (int kind = 0; kind < KINDS; kind++) {
        Py_ssize_t index = 0;
        for (Py_ssize_t i = 0; i < parsed->n_tensors; i++) {
            const Tensor *t = &parsed->tensors[i];
            if (t->kind != kind)
                continue;
            if (t->size > file_size || offset + t->size > file_size)
                return 0;
            PyObject *e = make_entry(t, index++, offset, failed);
            if (e == NULL || PyList_Append(lists[kind], e) < 0) {
                Py_XDECREF(e);
                return -1;
            }
            Py_DECREF(e);
            offset += t->size;
        }
    }
    return 1;
}

PyObject *decode_v2_header(const uint8_t *header, Py_ssize_t len, uint64_t file_size, PyObject *cls)
{
    PyObject *result = NULL, *lists[KINDS] = {NULL}, *attrs = NULL;
    PyObject *version = NULL, *op_name = NULL;
    Parsed parsed = {0};
    Span whole = {header, header + len};
    Span version_s = {NULL, NULL}, op_name_s = {NULL, NULL};
    uint64_t dump_time = 0;
    int failed = 0;
    if (set_entry_class(cls) < 0)
        goto done;
    int ok = parse(whole, &parsed, &version_s, &op_name_s, &dump_time);
    if (ok < 0) {
        PyErr_NoMemory();
        goto done;
    }
    if (ok == 0 || file_size < 8 || (uint64_t)len > file_size - 8)
        goto fallback;
    /* strings first: one that is not UTF-8 sends the header to protobuf before any entry is made */
    if ((version = text(version_s, &failed)) == NULL || (op_name = text(op_name_s, &failed)) == NULL)
        goto fallback_or_error;
    if ((attrs = PyList_New(parsed.n_attrs)) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < parsed.n_attrs; i++) {
        PyObject *name = text(parsed.attrs[i].name, &failed);
        PyObject *value = name ? text(parsed.attrs[i].value, &failed) : NULL;
        PyObject *pair = value ? PyTuple_Pack(2, name, value) : NULL;
        Py_XDECREF(name);
        Py_XDECREF(value);
        if (pair == NULL)
            goto fallback_or_error;
        PyList_SET_ITEM(attrs, i, pair);
    }
    for (int k = 0; k < KINDS; k++)
        if ((lists[k] = PyList_New(0)) == NULL)
            goto done;
    ok = entries(&parsed, 8 + (uint64_t)len, file_size, lists, &failed);
    if (ok < 0)
        goto fallback_or_error;
    if (ok == 0)
        goto fallback;
    result = Py_BuildValue("(OOKOOOOO)", op_name, version, (unsigned long long)dump_time, lists[INPUT],
                           lists[OUTPUT], lists[BUFFER], lists[SPACE], attrs);
    goto done;
fallback_or_error:
    if (!failed)
        goto done;
fallback:
    result = Py_NewRef(Py_None);
done:
    for (int k = 0; k < KINDS; k++)
        Py_XDECREF(lists[k]);
    Py_XDECREF(attrs);
    Py_XDECREF(version);
    Py_XDECREF(op_name);
    free(parsed.tensors);
    free(parsed.attrs);
    return result;
}

PyObject *decode_v2(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    unsigned long long file_size;
    PyObject *cls;
    if (!PyArg_ParseTuple(args, "y*KO", &buf, &file_size, &cls))
        return NULL;
    PyObject *result = decode_v2_header(buf.buf, buf.len, file_size, cls);
    PyBuffer_Release(&buf);
    return result;
}
