/* decode_v2 of _dump_v2.c, a function of the _file_heads module (its method table is there). */
#ifndef PSHELL_DUMP_V2_H
#define PSHELL_DUMP_V2_H
#include <Python.h>

PyObject *decode_v2(PyObject *self, PyObject *args);

#endif
