/* msprobe compare's tensor-mode sums in one pass over a target/golden pair, the GIL released
 * (analysis/framework_kernel.py is the Python side; analysis/framework_compare.py the reference).
 *
 * x (target) and y (golden) are float32, float16 or bfloat16 buffers, widened to float32
 * exactly (_fused_vectors.h's decode). Per element, as framework_compare._chunked_sums does:
 * - float64: x*y, x*x, y*y, (x-y)^2 summed; |x-y| maximised (the values widened to float64);
 * - float32: r = |(x-y)/y|, or |((x+eps)-(0+eps))/eps| where y == 0 (eps = float32 eps);
 *   r maximised and counted below 0.001 and 0.005 (float32 comparisons, as numpy's).
 * Sums are in another order than numpy's einsum (4 interleaved accumulators): equal to ~1e-15
 * relative. NaN/Inf anywhere makes x*x or y*y non-finite; the caller then uses the numpy path,
 * which handles them msprobe's way. Build flags as setup.py's: no fused multiply-add.
 */
#include <math.h>

/* decode() only: the other helpers there are the other kernel's */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "_fused_vectors.h"

#define BLOCK 1024
enum { Q_DOT, Q_XX, Q_YY, Q_SQ, NQ };

static const float EPS32 = 1.1920928955078125e-07f;

typedef struct {
    double sums[NQ][4], max_abs[4];
    float max_rel;
    int64_t within1, within5;
} MsSums;

typedef float f4 __attribute__((vector_size(16)));
typedef int64_t l4 __attribute__((vector_size(32)));

static inline d4 load_d4(const double *p)
{
    d4 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static void block(MsSums *a, const float *x, const float *y, int n)
{
    int i = 0;
    /* lane k takes elements i + k: 4 float64 accumulators per quantity, in vector registers */
    d4 dot = load_d4(a->sums[Q_DOT]), xx = load_d4(a->sums[Q_XX]), yy = load_d4(a->sums[Q_YY]),
       sq = load_d4(a->sums[Q_SQ]), mabs = load_d4(a->max_abs);
    for (; i + 4 <= n; i += 4) {
        f4 xf, yf;
        memcpy(&xf, x + i, sizeof xf);
        memcpy(&yf, y + i, sizeof yf);
        d4 p = __builtin_convertvector(xf, d4), q = __builtin_convertvector(yf, d4), d = p - q;
        dot += p * q;
        xx += p * p;
        yy += q * q;
        sq += d * d;
        d4 ad = (d4)((l4)d & 0x7fffffffffffffffLL);
        l4 more = ad > mabs;
        mabs = (d4)((more & (l4)ad) | (~more & (l4)mabs));
    }
    memcpy(a->sums[Q_DOT], &dot, sizeof dot);
    memcpy(a->sums[Q_XX], &xx, sizeof xx);
    memcpy(a->sums[Q_YY], &yy, sizeof yy);
    memcpy(a->sums[Q_SQ], &sq, sizeof sq);
    memcpy(a->max_abs, &mabs, sizeof mabs);
    for (; i < n; i++) {
        double p = x[i], q = y[i], d = p - q;
        a->sums[Q_DOT][0] += p * q;
        a->sums[Q_XX][0] += p * p;
        a->sums[Q_YY][0] += q * q;
        a->sums[Q_SQ][0] += d * d;
        d = fabs(d);
        a->max_abs[0] = d > a->max_abs[0] ? d : a->max_abs[0];
    }
    float max_rel = a->max_rel;
    int w1 = 0, w5 = 0;
    for (i = 0; i < n; i++) {     /* branch-free: vectorised */
        float p = x[i], q = y[i];
        int zero = q == 0.0f;
        p = zero ? p + EPS32 : p; /* 0 + eps is eps exactly */
        q = zero ? EPS32 : q;
        float r = fabsf((p - q) / q);
        max_rel = r > max_rel ? r : max_rel;
        w1 += r < 0.001f;
        w5 += r < 0.005f;
    }
    a->max_rel = max_rel;
    a->within1 += w1;
    a->within5 += w5;
}

static int kind_size(int kind) { return kind == KIND_F32 ? 4 : 2; }

static PyObject *py_sums(PyObject *self, PyObject *args)
{
    Py_buffer bx, by;
    int x_kind, y_kind;
    if (!PyArg_ParseTuple(args, "y*y*ii", &bx, &by, &x_kind, &y_kind))
        return NULL;
    PyObject *result = NULL;
    if (x_kind < KIND_F32 || x_kind > KIND_BF16 || y_kind < KIND_F32 || y_kind > KIND_BF16) {
        PyErr_SetString(PyExc_ValueError, "unknown element kind");
    } else if (bx.len % kind_size(x_kind) || by.len / kind_size(y_kind) != bx.len / kind_size(x_kind)
               || by.len % kind_size(y_kind)) {
        PyErr_SetString(PyExc_ValueError, "x and y must hold the same number of elements");
    } else {
        Py_ssize_t n = bx.len / kind_size(x_kind);
        Source sx = {bx.buf, x_kind}, sy = {by.buf, y_kind};
        MsSums a;
        memset(&a, 0, sizeof a);
        Py_BEGIN_ALLOW_THREADS
        float xb[BLOCK], yb[BLOCK];
        for (Py_ssize_t start = 0; start < n; start += BLOCK) {
            int m = (int)(n - start < BLOCK ? n - start : BLOCK);
            decode(&sx, start, m, xb);
            decode(&sy, start, m, yb);
            block(&a, xb, yb, m);
        }
        Py_END_ALLOW_THREADS
        double s[NQ], max_abs = 0.0;
        for (int q = 0; q < NQ; q++)
            s[q] = (a.sums[q][0] + a.sums[q][1]) + (a.sums[q][2] + a.sums[q][3]);
        for (int k = 0; k < 4; k++)
            max_abs = a.max_abs[k] > max_abs ? a.max_abs[k] : max_abs;
        result = Py_BuildValue("ddddddLL", s[Q_DOT], s[Q_XX], s[Q_YY], s[Q_SQ], max_abs,
                               (double)a.max_rel, (long long)a.within1, (long long)a.within5);
    }
    PyBuffer_Release(&bx);
    PyBuffer_Release(&by);
    return result;
}

static PyMethodDef methods[] = {
    {"sums", py_sums, METH_VARARGS,
     "sums(x, y, x_kind, y_kind) -> (dot, xx, yy, sq_diff, max_abs, max_rel, within_1, within_5)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_framework_metrics", NULL, -1, methods};

/* _fused_metrics.h declares numpy's log loop for the other kernel; this one never calls it */
PyUFuncGenericFunction fused_log_loop;
void *fused_log_data;

PyMODINIT_FUNC PyInit__framework_metrics(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "KIND_F32", KIND_F32) < 0 ||
        PyModule_AddIntConstant(m, "KIND_F16", KIND_F16) < 0 ||
        PyModule_AddIntConstant(m, "KIND_BF16", KIND_BF16) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
