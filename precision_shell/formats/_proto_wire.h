/* The protobuf wire format as the v2 dump header decoder (_dump_v2.c) reads it: varints, fields,
 * strict UTF-8, packed or unpacked repeated uint64 (Shape.dim). Every reader returns "not sure"
 * (-1 or 0) where protobuf might decide otherwise; the caller then leaves the header to protobuf.
 * Only _dump_v2.c includes this file (static functions). */
#ifndef PSHELL_PROTO_WIRE_H
#define PSHELL_PROTO_WIRE_H

#include <Python.h>
#include <stdint.h>

typedef struct {
    const uint8_t *p, *end;
} Span;


/* 0 and the value, or -1: truncated, or more than 64 bits (protobuf decides those) */
static int varint(const uint8_t **pp, const uint8_t *end, uint64_t *out)
{
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (p >= end)
            return -1;
        uint8_t b = *p++;
        if (i == 9 && b > 1)
            return -1;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *pp = p;
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* Whether ``s`` is strict UTF-8 (no overlong forms, surrogates or values past U+10FFFF).
 * protobuf checks every occurrence of a string field, also one a later occurrence replaces. */
static int utf8(Span s)
{
    const uint8_t *p = s.p;
    while (p < s.end) {
        uint8_t b = *p++;
        if (b < 0x80)
            continue;
        int more;
        uint32_t c;
        if (b >= 0xc2 && b <= 0xdf) {
            more = 1;
            c = b & 0x1f;
        } else if (b >= 0xe0 && b <= 0xef) {
            more = 2;
            c = b & 0x0f;
        } else if (b >= 0xf0 && b <= 0xf4) {
            more = 3;
            c = b & 0x07;
        } else
            return 0;
        if (s.end - p < more)
            return 0;
        for (int i = 0; i < more; i++) {
            if ((p[i] & 0xc0) != 0x80)
                return 0;
            c = c << 6 | (p[i] & 0x3f);
        }
        p += more;
        if ((more == 2 && (c < 0x800 || (c >= 0xd800 && c <= 0xdfff))) || (more == 3 && (c < 0x10000 || c > 0x10ffff)))
            return 0;
    }
    return 1;
}

/* The next field of [*pp, end): its number, wire type and, for wire type 2, its bytes; for
 * wire type 0 its value. -1 on anything this decoder leaves to protobuf. */
static int next_field(const uint8_t **pp, const uint8_t *end, uint64_t *number, int *wire,
                      uint64_t *value, Span *bytes)
{
    uint64_t key;
    if (varint(pp, end, &key) < 0 || key > UINT32_MAX)
        return -1;
    *number = key >> 3;
    *wire = (int)(key & 7);
    if (*number == 0)
        return -1;
    switch (*wire) {
    case 0:
        return varint(pp, end, value);
    case 1:
    case 5: {
        size_t n = *wire == 1 ? 8 : 4;
        if ((size_t)(end - *pp) < n)
            return -1;
        *pp += n;
        return 0;
    }
    case 2: {
        uint64_t len;
        if (varint(pp, end, &len) < 0 || len > (uint64_t)(end - *pp))
            return -1;
        bytes->p = *pp;
        bytes->end = *pp + len;
        *pp += len;
        return 0;
    }
    default:   /* groups (3, 4) and invalid wire types */
        return -1;
    }
}

/* A Shape message: its dims counted (packed or not), -1 when malformed. */
static Py_ssize_t count_dims(Span s)
{
    Py_ssize_t count = 0;
    const uint8_t *p = s.p;
    while (p < s.end) {
        uint64_t number, value;
        int wire;
        Span bytes;
        if (next_field(&p, s.end, &number, &wire, &value, &bytes) < 0)
            return -1;
        if (number != 1)
            continue;
        if (wire == 0)
            count++;
        else if (wire == 2) {
            const uint8_t *q = bytes.p;
            while (q < bytes.end) {
                if (varint(&q, bytes.end, &value) < 0)
                    return -1;
                count++;
            }
        } else
            return -1;
    }
    return count;
}

/* The dims of a Shape already checked by count_dims, as a tuple of ints. */
static PyObject *dims_tuple(Span s, Py_ssize_t count)
{
    PyObject *tuple = PyTuple_New(count);
    if (tuple == NULL)
        return NULL;
    Py_ssize_t i = 0;
    const uint8_t *p = s.p;
    while (p < s.end) {
        uint64_t number, value = 0;
        int wire;
        Span bytes = {NULL, NULL};
        next_field(&p, s.end, &number, &wire, &value, &bytes);
        if (number != 1)
            continue;
        const uint8_t *q = bytes.p;
        do {
            if (wire == 2) {
                if (q >= bytes.end)
                    break;
                varint(&q, bytes.end, &value);
            }
            PyObject *dim = PyLong_FromUnsignedLongLong(value);
            if (dim == NULL) {
                Py_DECREF(tuple);
                return NULL;
            }
            PyTuple_SET_ITEM(tuple, i++, dim);
        } while (wire == 2);
    }
    return tuple;
}

/* Whether a message of only varint fields 1..n_varints (DimRange, enums) is well formed. */
static int plain_varints(Span s, uint64_t n_varints)
{
    const uint8_t *p = s.p;
    while (p < s.end) {
        uint64_t number, value;
        int wire;
        Span bytes;
        if (next_field(&p, s.end, &number, &wire, &value, &bytes) < 0)
            return 0;
        if (number <= n_varints && wire != 0)
            return 0;
    }
    return 1;
}


#endif
