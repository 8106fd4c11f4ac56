/* read_heads(paths, limit): the size and first bytes of many files in one call, the GIL released
 * once (formats/dump_header.read_dump_headers).
 *
 * Why: `vc` plans while its worker threads compare, and planning reads ~1,000 dump headers; in
 * Python each is six system calls (open, two fstat, two reads, close), and after each one the
 * planning thread waits for the GIL that a worker holds: 0.035 s of header reads alone became
 * ~0.2 s beside the workers, and planning paces the compare. Here a block of files costs one
 * wait. Files are opened as formats/input_files.open_regular opens them (non-blocking, refused
 * unless regular: a planted FIFO is never waited on); any failure is the file's errno, and the
 * caller then reads that file the ordinary way, which words the problem.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "_dump_v2.h"

#define NANO_MAGIC "\x5a\x5a\x5a\x5a"   /* formats/nano_dump.NANO_MAGIC: a nano header, not v2 */

typedef struct {
    char *path;
    char *data;
    Py_ssize_t got;
    long long size;
    int error;
} Head;

static void read_head(Head *h, Py_ssize_t limit)
{
    int fd = open(h->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        h->error = errno ? errno : EIO;
        return;
    }
    struct stat st;
    if (fstat(fd, &st) < 0)
        h->error = errno ? errno : EIO;
    else if (!S_ISREG(st.st_mode))
        h->error = EINVAL;
    else {
        h->size = (long long)st.st_size;
        Py_ssize_t want = st.st_size < limit ? (Py_ssize_t)st.st_size : limit;
        while (h->got < want) {
            ssize_t n = pread(fd, h->data + h->got, (size_t)(want - h->got), (off_t)h->got);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0) {
                h->error = errno ? errno : EIO;
                break;
            }
            if (n == 0)
                break;
            h->got += n;
        }
    }
    close(fd);
}

/* A plain v2 header read whole (what dump_header._parse would give to decode_v2: a header length
 * that fits the file and the bytes read, no nano magic) decoded: (file size, header length,
 * decode_v2's tuple); else NULL, no exception set, and the caller makes (file size, bytes). */
static PyObject *decoded_head(const Head *h, PyObject *entry_type)
{
    if (entry_type == NULL || h->got < 8)
        return NULL;
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--)
        header_len = header_len << 8 | (uint8_t)h->data[i];
    if (header_len == 0 || header_len > (uint64_t)h->size - 8 || header_len > (uint64_t)(h->got - 8))
        return NULL;
    if (header_len >= 4 && memcmp(h->data + 8, NANO_MAGIC, 4) == 0)
        return NULL;
    PyObject *decoded = decode_v2_header((const uint8_t *)h->data + 8, (Py_ssize_t)header_len,
                                         (uint64_t)h->size, entry_type);
    if (decoded == NULL || decoded == Py_None) {
        if (decoded == NULL)
            PyErr_Clear();   /* (MemoryError) the protobuf path meets it again */
        Py_XDECREF(decoded);
        return NULL;
    }
    PyObject *item = Py_BuildValue("(LKN)", h->size, (unsigned long long)header_len, decoded);
    if (item == NULL)
        PyErr_Clear();
    return item;
}

static PyObject *read_heads(PyObject *self, PyObject *args)
{
    PyObject *seq, *entry_type = NULL;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "On|O", &seq, &limit, &entry_type))
        return NULL;
    if (limit < 0 || limit > (1 << 24)) {
        PyErr_SetString(PyExc_ValueError, "limit must be in [0, 16 MiB]");
        return NULL;
    }
    PyObject *fast = PySequence_Fast(seq, "paths must be a sequence");
    if (fast == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(fast);
    Head *heads = calloc((size_t)(count ? count : 1), sizeof(Head));
    PyObject **names = calloc((size_t)(count ? count : 1), sizeof(PyObject *));
    char *block = malloc((size_t)(count ? count : 1) * (size_t)(limit ? limit : 1));
    PyObject *result = NULL;
    if (heads == NULL || names == NULL || block == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!PyUnicode_FSConverter(PySequence_Fast_GET_ITEM(fast, i), &names[i]))
            goto done;
        heads[i].path = PyBytes_AS_STRING(names[i]);
        heads[i].data = block + i * limit;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++)
        read_head(&heads[i], limit);
    Py_END_ALLOW_THREADS
    result = PyList_New(count);
    if (result == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = heads[i].error ? PyLong_FromLong(heads[i].error) : decoded_head(&heads[i], entry_type);
        if (item == NULL && !heads[i].error)
            item = Py_BuildValue("(Ly#)", heads[i].size, heads[i].data, heads[i].got);
        if (item == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, i, item);
    }
done:
    if (names != NULL)
        for (Py_ssize_t i = 0; i < count; i++)
            Py_XDECREF(names[i]);
    free(names);
    free(heads);
    free(block);
    Py_DECREF(fast);
    return result;
}

static PyMethodDef methods[] = {
    {"read_heads", read_heads, METH_VARARGS,
     "read_heads(paths, limit[, entry_type]) -> per path (file size, its first min(size, limit) "
     "bytes) or an errno (not a regular file: EINVAL); with entry_type, a plain v2 header read "
     "whole comes decoded: (file size, header length, decode_v2's tuple)"},
    {"decode_v2", decode_v2, METH_VARARGS,
     "decode_v2(header, file_size, entry_type) -> (op_name, version, dump_time, inputs, outputs, "
     "buffers, spaces, attrs) of a v2 DumpData header, or None: parse it with protobuf"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_file_heads", NULL, -1, methods};

PyMODINIT_FUNC PyInit__file_heads(void) { return PyModule_Create(&module); }
