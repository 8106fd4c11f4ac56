/* What the C metrics kernel's two files share (_fused_passes.c computes, _fused_metrics.c is
 * the Python module around it; see _fused_metrics.c for the design). */
#ifndef PSHELL_FUSED_METRICS_H
#define PSHELL_FUSED_METRICS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/ndarraytypes.h>
#include <numpy/ufuncobject.h> /* PyUFuncObject's fields only: no numpy C-API call is made */

enum { KIND_F32, KIND_F16, KIND_BF16 };

/* first-pass row, in this order (fused_metrics.FIRST_FIELDS) */
enum { F_X_MIN, F_X_MAX, F_Y_MIN, F_Y_MAX, F_X_SUM, F_Y_SUM, F_XY_SUM, F_SQ_DIFF_SUM,
       F_ABS_DIFF_SUM, F_MAX_ABS_DIFF, F_REL_SUM, F_MAX_REL, F_WITHIN_1, F_WITHIN_5, F_WIDTH };
/* second-pass row (fused_metrics.SECOND_FIELDS) */
enum { S_X_DEV, S_Y_DEV, S_KL_A, S_KL_B, S_KL_LOG, S_WIDTH };

typedef struct {
    const char *data;
    int kind;
} Source;

/* the second pass's inputs (metrics_kernels.second_pass computes the same from the first) */
typedef struct {
    Source x, y;
    float x_shift, y_shift, x_low, x_span, y_low, y_span, kl_scale;
    int want_kl, x_finite, y_finite;
} Second;

/* numpy's float32 log inner loop, bound by the module at import */
extern PyUFuncGenericFunction fused_log_loop;
extern void *fused_log_data;

/* batch_metrics's row of a pair: FirstPass's fields, SecondPass's, kl_scale (_fused_batch.c) */
#define B_WIDTH (F_WIDTH + S_WIDTH + 1)
PyObject *fused_batch_metrics(PyObject *self, PyObject *args);
PyObject *fused_same_bytes(PyObject *self, PyObject *args);
PyObject *fused_file_same_bytes(PyObject *self, PyObject *args);

/* One row per chunk of ``chunk`` elements into ``rows``; -1 when out of memory. No GIL needed. */
int fused_first_pass(Source x, Source y, Py_ssize_t n, Py_ssize_t chunk, double *rows);
int fused_second_pass(const Second *c, Py_ssize_t n, Py_ssize_t chunk, double *rows);
/* (x_true, y_true, both_true, equal) of two bool byte arrays */
void fused_bool_counts(const unsigned char *x, const unsigned char *y, Py_ssize_t n,
                       int64_t *out);
/* (nan, +inf, -inf, |x| == 65504 for float16 else 0) of n values of one kind, from bits */
void fused_value_counts(const char *data, int kind, Py_ssize_t n, int64_t *out);

#endif
