/* _dump_v2.c: decode_v2, a function of the _file_heads module (its method table is there), and
 * its core, which _file_heads.read_heads calls too. */
#ifndef PSHELL_DUMP_V2_H
#define PSHELL_DUMP_V2_H
#include <Python.h>

#include <stdint.h>

PyObject *decode_v2(PyObject *self, PyObject *args);
/* (op_name, version, dump_time, inputs, outputs, buffers, spaces, attrs), None (not sure: parse
 * it with protobuf) or NULL (an exception) of the DumpData bytes [header, header + len) of a file
 * of file_size bytes; entry objects of class cls (formats/dump_types.TensorEntry). */
PyObject *decode_v2_header(const uint8_t *header, Py_ssize_t len, uint64_t file_size, PyObject *cls);

#endif
