/* The fused metrics kernel: metrics_kernels.first_pass / second_pass / bool_counts in C.
 *
 * Same results as the numpy path, bit for bit on the machine it runs on (that path is the
 * reference; analysis/fused_metrics.py is the Python side):
 *
 * - Element-wise work is float32 with exactly the numpy path's operations and operand order;
 *   build with -ffp-contract=off and without -ffast-math (no fused multiply-add, IEEE NaN/Inf
 *   and subnormals). fp16 / bf16 are decoded to float32 in registers (both exact).
 * - log is numpy's own float32 loop (np.log's inner loop, called through its function
 *   pointer): numpy's SIMD log differs from a correctly rounded logf in ~40% of the values near
 *   1, enough to move KL by 1e-7 relative.
 * - Sums replay numpy's summation order: np.add.reduce(float32, dtype=float64) casts through
 *   BLOCK-element buffers (block sums added in turn to 0.0) and sums each buffer pairwise
 *   (halves rounded to a multiple of 8 down to LEAF elements, a leaf in 8 interleaved
 *   accumulators). The overflow fallbacks sum a float64 array pairwise in one piece.
 * - Every quantity is per chunk, as the numpy path's loop over chunks; Python adds the chunk
 *   rows in order, so splitting the chunks over threads changes nothing.
 *
 * The GIL is released while computing; inputs are any contiguous buffers, read unaligned.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/ndarraytypes.h>
#include <numpy/ufuncobject.h> /* PyUFuncObject's fields only: no numpy C-API call is made */

enum { KIND_F32, KIND_F16, KIND_BF16 };
#define LEAF 128   /* numpy's PW_BLOCKSIZE */
#define BLOCK 8192 /* numpy's default ufunc buffer size (np.getbufsize()) */

/* first-pass row, in this order (fused_metrics.FIRST_FIELDS) */
enum { F_X_MIN, F_X_MAX, F_Y_MIN, F_Y_MAX, F_X_SUM, F_Y_SUM, F_XY_SUM, F_SQ_DIFF_SUM,
       F_ABS_DIFF_SUM, F_MAX_ABS_DIFF, F_REL_SUM, F_MAX_REL, F_WITHIN_1, F_WITHIN_5, F_WIDTH };
/* second-pass row (fused_metrics.SECOND_FIELDS) */
enum { S_X_DEV, S_Y_DEV, S_KL_A, S_KL_B, S_KL_LOG, S_WIDTH };
/* the first pass's summed quantities, in the order of its row */
enum { Q_X, Q_Y, Q_XY, Q_SQ, Q_ABS, Q_REL, NQ1 };

static const float EPS32 = 1.1920928955078125e-07f;      /* float32 eps: KL floor, zero-golden nudge */
static const float EPS64 = 2.220446049250313080847e-16f; /* float64 eps, exact in float32 */

static PyUFuncGenericFunction log_loop; /* numpy's float32 log */
static void *log_data;

typedef struct {
    const char *data;
    int kind;
} Source;

/* VL lanes of 32 bits (GNU C vector extensions): one register of the machine the module is
   built for (setup.py compiles for the host). Wider types than the hardware's are no help:
   GCC compares them element by element. */
#if defined(__AVX__)
#define VL 8
static const int32_t IOTA_VALUES[VL] = {0, 1, 2, 3, 4, 5, 6, 7};
#else
#define VL 4 /* SSE2, NEON */
static const int32_t IOTA_VALUES[VL] = {0, 1, 2, 3};
#endif
typedef float vf __attribute__((vector_size(4 * VL)));
typedef int32_t vi __attribute__((vector_size(4 * VL))); /* comparison results: -1 or 0 */
typedef uint32_t vu __attribute__((vector_size(4 * VL)));
typedef uint16_t vh __attribute__((vector_size(2 * VL)));
typedef double d4 __attribute__((vector_size(32)));
typedef double d2 __attribute__((vector_size(16)));

static inline vf load(const float *p)
{
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline vi load_iota(void)
{
    vi v;
    memcpy(&v, IOTA_VALUES, sizeof v);
    return v;
}

static inline void store(float *p, vf v) { memcpy(p, &v, sizeof v); }

static inline vf blend(vi mask, vf a, vf b) { return (vf)((mask & (vi)a) | (~mask & (vi)b)); }

static inline vf vabs(vf v) { return (vf)((vi)v & 0x7fffffff); }

/* VL float16 or bfloat16 bit patterns -> float32 bit patterns, exactly */
static inline vu widen(vh h, int kind)
{
    vu w = __builtin_convertvector(h, vu);
    if (kind == KIND_BF16)
        return w << 16; /* bfloat16 is the top half of a float32 */
    /* float16: exponent/mantissa moved into float32 place and rebiased by a multiplication
       with 2**112, exact for normals and subnormals alike; Inf/NaN keep an all-ones exponent */
    vu rest = w & 0x7fff, shifted = rest << 13;
    vu scaled = (vu)((vf)shifted * 5.192296858534828e33f); /* 2**112 */
    vu special = (vu)(rest >= 0x7c00);
    return ((w & 0x8000) << 16) | (special & (0x7f800000u | shifted)) | (~special & scaled);
}

static inline void decode(const Source *s, Py_ssize_t start, int n, float *out)
{
    if (s->kind == KIND_F32) {
        memcpy(out, s->data + start * 4, (size_t)n * 4);
        return;
    }
    const char *src = s->data + start * 2;
    int i = 0;
    for (; i + VL <= n; i += VL) {
        vh h;
        memcpy(&h, src + i * 2, sizeof h);
        vu bits = widen(h, s->kind);
        memcpy(out + i, &bits, sizeof bits);
    }
    if (i < n) {
        vh h = {0};
        float wide[VL];
        memcpy(&h, src + i * 2, (size_t)(n - i) * 2);
        vu bits = widen(h, s->kind);
        memcpy(wide, &bits, sizeof bits);
        memcpy(out + i, wide, (size_t)(n - i) * 4);
    }
}

/* numpy's 8 leaf accumulators, lanes 0-3 and 4-7 */
typedef struct {
    d4 lo, hi;
} Acc;

/* values i .. i+VL-1 of a leaf (i a multiple of VL) into accumulators i%8 .. */
static inline Acc accumulate(Acc r, vf v, int i)
{
#if VL == 8
    (void)i;
    r.lo += __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3), d4);
    r.hi += __builtin_convertvector(__builtin_shufflevector(v, v, 4, 5, 6, 7), d4);
#else
    if (i & 4)
        r.hi += __builtin_convertvector(v, d4);
    else
        r.lo += __builtin_convertvector(v, d4);
#endif
    return r;
}

/* numpy's combination of its 8 accumulators: ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)) */
static inline double tree(Acc r)
{
    d4 pairs = __builtin_shufflevector(r.lo, r.hi, 0, 2, 4, 6) +
               __builtin_shufflevector(r.lo, r.hi, 1, 3, 5, 7);
    d2 quads = __builtin_shufflevector(pairs, pairs, 0, 2) +
               __builtin_shufflevector(pairs, pairs, 1, 3);
    return quads[0] + quads[1];
}

/* numpy's pairwise leaf: fewer than 8 values summed in turn from 0.0, otherwise 8 interleaved
   accumulators seeded with the first 8 values, combined as a tree, then the rest in turn.
   (Seeding with +0.0 instead can only change the sign of a zero sum, which the block total
   drops: numpy adds the block sums to +0.0.) */
static inline double leaf_sum(const float *q, int n)
{
    double res = 0.0;
    int i = 0;
    if (n >= 8) {
        Acc r = {0};
        for (; i < n - n % 8; i += VL)
            r = accumulate(r, load(q + i), i);
        res = tree(r);
    }
    for (; i < n; i++)
        res += q[i];
    return res;
}

/* one summed quantity's VL values: into the leaf's accumulators when the leaf is full (its
   sum is then tree()), else kept for leaf_sum() */
#define COLLECT(full, acc, keep, i, v) \
    do { \
        if (full) \
            (acc) = accumulate((acc), (v), (i)); \
        else \
            store((keep) + (i), (v)); \
    } while (0)

/* numpy's pairwise sum of a float64 array (the overflow fallbacks) */
static double pairwise_f64(const double *a, Py_ssize_t n)
{
    if (n > LEAF) {
        Py_ssize_t n2 = n / 2;
        n2 -= n2 % 8;
        return pairwise_f64(a, n2) + pairwise_f64(a + n2, n - n2);
    }
    double res = 0.0;
    Py_ssize_t i = 0;
    if (n >= 8) {
        double r[8];
        for (int j = 0; j < 8; j++)
            r[j] = a[j];
        for (i = 8; i < n - n % 8; i += 8)
            for (int j = 0; j < 8; j++)
                r[j] += a[i + j];
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    }
    for (; i < n; i++)
        res += a[i];
    return res;
}

/* ---- first pass ---------------------------------------------------------------------- */

/* NaN-ignoring running extremes in VL lanes, plus NaN seen: together np.minimum.reduce's
   NaN-propagating result (a compiler cannot vectorise one float min without -ffast-math) */
typedef struct {
    vf lo, hi;
    vi nan;
} Extremes;

static void extremes_reset(Extremes *e)
{
    for (int j = 0; j < VL; j++)
        e->lo[j] = INFINITY, e->hi[j] = -INFINITY, e->nan[j] = 0;
}

static inline void extremes_add(Extremes *e, vf v, vi valid)
{
    e->lo = blend(valid & (v < e->lo), v, e->lo);
    e->hi = blend(valid & (v > e->hi), v, e->hi);
    e->nan |= valid & (v != v);
}

/* (min, max) as np.minimum.reduce / np.maximum.reduce give them (NaN if any NaN) */
static void extremes_result(const Extremes *e, double *lo, double *hi)
{
    float l = e->lo[0], h = e->hi[0];
    int nan = e->nan[0];
    for (int j = 1; j < VL; j++) {
        l = e->lo[j] < l ? e->lo[j] : l;
        h = e->hi[j] > h ? e->hi[j] : h;
        nan |= e->nan[j];
    }
    *lo = nan ? (double)NAN : (double)l;
    *hi = nan ? (double)NAN : (double)h;
}

typedef struct {
    Source x, y;
    Extremes x_ext, y_ext, abs_ext, rel_ext;
    int64_t within1, within5;
} First;

static inline __attribute__((always_inline)) void leaf1_body(First *c, Py_ssize_t start, int n,
                                                             double *sums)
{
    const int full = n == LEAF;
    float x[LEAF], y[LEAF], q[NQ1][LEAF];
    decode(&c->x, start, n, x);
    decode(&c->y, start, n, y);
    for (int i = n; i < LEAF; i++)
        x[i] = 0.0f, y[i] = 1.0f; /* padding that no count takes: a relative error of 1 */
    Extremes x_ext = c->x_ext, y_ext = c->y_ext, abs_ext = c->abs_ext, rel_ext = c->rel_ext;
    Acc acc[NQ1] = {0};
    vi w1 = {0}, w5 = {0};
    for (int i = 0; i < LEAF; i += VL) {
        vf xv = load(x + i), yv = load(y + i);
        vi valid = load_iota() + i < n;
        vf d = xv - yv, ad = vabs(d), ay = vabs(yv);
        /* msprobe's |x-y|/|y|; a zero golden gives Inf/NaN here and is counted below */
        vf ratio = ad / ay;
        /* where the golden is exactly 0 both sides got float32 eps added */
        vf nudged = vabs((xv + EPS32) - EPS32) / EPS32;
        vi zero = yv == 0.0f;
        w1 -= (ratio < 0.001f) + (zero & (nudged < 0.001f)); /* a true comparison is -1 */
        w5 -= (ratio < 0.005f) + (zero & (nudged < 0.005f));
        /* the vendor's r_i = |x / y - 1| where |y| > eps, else +0 */
        vf rel = (vf)((ay > EPS64) & (vi)vabs(xv / yv - 1.0f));
        extremes_add(&x_ext, xv, valid);
        extremes_add(&y_ext, yv, valid);
        extremes_add(&abs_ext, ad, valid);
        extremes_add(&rel_ext, rel, valid);
        COLLECT(full, acc[Q_X], q[Q_X], i, xv);
        COLLECT(full, acc[Q_Y], q[Q_Y], i, yv);
        COLLECT(full, acc[Q_XY], q[Q_XY], i, xv * yv);
        COLLECT(full, acc[Q_SQ], q[Q_SQ], i, d * d);
        COLLECT(full, acc[Q_ABS], q[Q_ABS], i, ad);
        COLLECT(full, acc[Q_REL], q[Q_REL], i, rel);
    }
    c->x_ext = x_ext, c->y_ext = y_ext, c->abs_ext = abs_ext, c->rel_ext = rel_ext;
    for (int j = 0; j < VL; j++)
        c->within1 += w1[j], c->within5 += w5[j];
    for (int k = 0; k < NQ1; k++)
        sums[k] = full ? tree(acc[k]) : leaf_sum(q[k], n);
}

/* a full leaf (nearly all of them) compiled for its constant length */
static void leaf1(First *c, Py_ssize_t start, int n, double *sums)
{
    if (n == LEAF)
        leaf1_body(c, start, LEAF, sums);
    else
        leaf1_body(c, start, n, sums);
}

static void node1(First *c, Py_ssize_t start, Py_ssize_t n, double *sums)
{
    if (n <= LEAF) {
        leaf1(c, start, (int)n, sums);
        return;
    }
    Py_ssize_t n2 = n / 2;
    n2 -= n2 % 8;
    double right[NQ1];
    node1(c, start, n2, sums);
    node1(c, start + n2, n - n2, right);
    for (int k = 0; k < NQ1; k++)
        sums[k] += right[k];
}

/* sum of float64 products over one chunk: the numpy path's redo when float32 products
   overflowed although the inputs are finite */
static int product_sum_f64(const First *c, Py_ssize_t start, Py_ssize_t m, double *out)
{
    double *wide = malloc((size_t)m * sizeof(double));
    if (wide == NULL)
        return -1;
    float x[LEAF], y[LEAF];
    for (Py_ssize_t i = 0; i < m; i += LEAF) {
        int n = (int)(m - i < LEAF ? m - i : LEAF);
        decode(&c->x, start + i, n, x);
        decode(&c->y, start + i, n, y);
        for (int j = 0; j < n; j++)
            wide[i + j] = (double)x[j] * (double)y[j];
    }
    *out = pairwise_f64(wide, m);
    free(wide);
    return 0;
}

static int first_chunk(First *c, Py_ssize_t start, Py_ssize_t m, double *row)
{
    extremes_reset(&c->x_ext);
    extremes_reset(&c->y_ext);
    extremes_reset(&c->abs_ext);
    extremes_reset(&c->rel_ext);
    c->within1 = c->within5 = 0;
    double total[NQ1] = {0}, block[NQ1], unused;
    for (Py_ssize_t b = 0; b < m; b += BLOCK) {
        node1(c, start + b, m - b < BLOCK ? m - b : BLOCK, block);
        for (int k = 0; k < NQ1; k++)
            total[k] += block[k];
    }
    extremes_result(&c->x_ext, &row[F_X_MIN], &row[F_X_MAX]);
    extremes_result(&c->y_ext, &row[F_Y_MIN], &row[F_Y_MAX]);
    extremes_result(&c->abs_ext, &unused, &row[F_MAX_ABS_DIFF]);
    extremes_result(&c->rel_ext, &unused, &row[F_MAX_REL]);
    int finite = isfinite(row[F_X_MIN]) && isfinite(row[F_X_MAX]) && isfinite(row[F_Y_MIN]) &&
                 isfinite(row[F_Y_MAX]);
    if (finite && !isfinite(total[Q_XY]) && product_sum_f64(c, start, m, &total[Q_XY]) < 0)
        return -1;
    row[F_X_SUM] = total[Q_X];
    row[F_Y_SUM] = total[Q_Y];
    row[F_XY_SUM] = total[Q_XY];
    row[F_SQ_DIFF_SUM] = total[Q_SQ];
    row[F_ABS_DIFF_SUM] = total[Q_ABS];
    row[F_REL_SUM] = total[Q_REL];
    row[F_WITHIN_1] = (double)c->within1;
    row[F_WITHIN_5] = (double)c->within5;
    return 0;
}

/* ---- second pass --------------------------------------------------------------------- */

typedef struct {
    Source x, y;
    float x_shift, y_shift, x_low, x_span, y_low, y_span, kl_scale;
    int want_kl;
} Second;

/* the vendor's KL normalisation, (v - min) / (max - min) unless max == min, floored at eps */
static inline vf scaled(vf v, float low, float span)
{
    vf s = span != 0.0f ? (v - low) / span : v;
    vf floor = {0};
    floor += EPS32;
    return blend(s < EPS32, floor, s); /* NaN stays NaN, as np.maximum */
}

static inline __attribute__((always_inline)) void leaf2_body(const Second *c, Py_ssize_t start,
                                                             int n, double *sums)
{
    const int full = n == LEAF;
    float x[LEAF], y[LEAF], q[S_WIDTH][LEAF], a[LEAF];
    decode(&c->x, start, n, x);
    decode(&c->y, start, n, y);
    for (int i = n; i < LEAF; i++)
        x[i] = y[i] = 0.0f; /* padding, never summed */
    Acc acc[S_WIDTH] = {0};
    for (int i = 0; i < LEAF; i += VL) {
        vf dx = load(x + i) - c->x_shift, dy = load(y + i) - c->y_shift;
        COLLECT(full, acc[S_X_DEV], q[S_X_DEV], i, dx * dx);
        COLLECT(full, acc[S_Y_DEV], q[S_Y_DEV], i, dy * dy);
    }
    if (c->want_kl) {
        for (int i = 0; i < LEAF; i += VL) {
            vf av = scaled(load(x + i), c->x_low, c->x_span);
            vf bv = scaled(load(y + i), c->y_low, c->y_span);
            store(a + i, av);
            store(q[S_KL_LOG] + i, av / bv * c->kl_scale);
            COLLECT(full, acc[S_KL_A], q[S_KL_A], i, av);
            COLLECT(full, acc[S_KL_B], q[S_KL_B], i, bv);
        }
        /* in place, as the numpy path */
        char *args[2] = {(char *)q[S_KL_LOG], (char *)q[S_KL_LOG]};
        npy_intp dims[1] = {n}, steps[2] = {sizeof(float), sizeof(float)};
        log_loop(args, dims, steps, log_data);
        for (int i = 0; i < LEAF; i += VL)
            COLLECT(full, acc[S_KL_LOG], q[S_KL_LOG], i, load(q[S_KL_LOG] + i) * load(a + i));
    }
    for (int k = 0; k < S_WIDTH; k++)
        sums[k] = k >= S_KL_A && !c->want_kl ? 0.0 : full ? tree(acc[k]) : leaf_sum(q[k], n);
}

static void leaf2(const Second *c, Py_ssize_t start, int n, double *sums)
{
    if (n == LEAF)
        leaf2_body(c, start, LEAF, sums);
    else
        leaf2_body(c, start, n, sums);
}

static void node2(const Second *c, Py_ssize_t start, Py_ssize_t n, double *sums)
{
    if (n <= LEAF) {
        leaf2(c, start, (int)n, sums);
        return;
    }
    Py_ssize_t n2 = n / 2;
    n2 -= n2 % 8;
    double right[S_WIDTH];
    node2(c, start, n2, sums);
    node2(c, start + n2, n - n2, right);
    for (int k = 0; k < S_WIDTH; k++)
        sums[k] += right[k];
}

/* sum of (v - shift)**2 in float64 over one chunk: the numpy path's redo on overflow */
static int centred_square_sum_f64(const Source *s, Py_ssize_t start, Py_ssize_t m, float shift,
                                  double *out)
{
    double *wide = malloc((size_t)m * sizeof(double));
    if (wide == NULL)
        return -1;
    float v[LEAF];
    for (Py_ssize_t i = 0; i < m; i += LEAF) {
        int n = (int)(m - i < LEAF ? m - i : LEAF);
        decode(s, start + i, n, v);
        for (int j = 0; j < n; j++) {
            double d = (double)v[j] - (double)shift;
            wide[i + j] = d * d;
        }
    }
    *out = pairwise_f64(wide, m);
    free(wide);
    return 0;
}

static int second_chunk(const Second *c, int x_finite, int y_finite, Py_ssize_t start,
                        Py_ssize_t m, double *row)
{
    double block[S_WIDTH];
    for (int k = 0; k < S_WIDTH; k++)
        row[k] = 0.0;
    for (Py_ssize_t b = 0; b < m; b += BLOCK) {
        node2(c, start + b, m - b < BLOCK ? m - b : BLOCK, block);
        for (int k = 0; k < S_WIDTH; k++)
            row[k] += block[k];
    }
    if (x_finite && !isfinite(row[S_X_DEV]) &&
        centred_square_sum_f64(&c->x, start, m, c->x_shift, &row[S_X_DEV]) < 0)
        return -1;
    if (y_finite && !isfinite(row[S_Y_DEV]) &&
        centred_square_sum_f64(&c->y, start, m, c->y_shift, &row[S_Y_DEV]) < 0)
        return -1;
    return 0;
}

/* ---- bool counts --------------------------------------------------------------------- */

static void bool_counts(const unsigned char *x, const unsigned char *y, Py_ssize_t n,
                                   int64_t *out)
{
    int64_t x_true = 0, y_true = 0, both = 0, equal = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int a = x[i] != 0, b = y[i] != 0; /* any non-zero byte is True, as numpy */
        x_true += a;
        y_true += b;
        both += a & b;
        equal += a == b;
    }
    out[0] = x_true, out[1] = y_true, out[2] = both, out[3] = equal;
}

/* ---- Python interface ---------------------------------------------------------------- */

typedef struct {
    Py_buffer x, y, rows;
    Py_ssize_t n, nchunks;
} Call;

static void release(Call *call)
{
    PyBuffer_Release(&call->x);
    PyBuffer_Release(&call->y);
    PyBuffer_Release(&call->rows);
}

static Py_ssize_t item_size(int kind) { return kind == KIND_F32 ? 4 : 2; }

/* Check the buffers of (x, y, x_kind, y_kind, chunk, rows); 0 or -1 with an exception set. */
static int open_call(Call *call, PyObject *x, PyObject *y, int x_kind, int y_kind,
                     Py_ssize_t chunk, PyObject *rows, Py_ssize_t width)
{
    memset(call, 0, sizeof(*call));
    if (x_kind < KIND_F32 || x_kind > KIND_BF16 || y_kind < KIND_F32 || y_kind > KIND_BF16) {
        PyErr_SetString(PyExc_ValueError, "unknown element kind");
        return -1;
    }
    if (chunk < 1) {
        PyErr_SetString(PyExc_ValueError, "chunk must be positive");
        return -1;
    }
    if (PyObject_GetBuffer(x, &call->x, PyBUF_C_CONTIGUOUS) < 0 ||
        PyObject_GetBuffer(y, &call->y, PyBUF_C_CONTIGUOUS) < 0 ||
        PyObject_GetBuffer(rows, &call->rows, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        release(call);
        return -1;
    }
    call->n = call->x.len / item_size(x_kind);
    call->nchunks = (call->n + chunk - 1) / chunk;
    if (call->x.len % item_size(x_kind) || call->y.len != call->n * item_size(y_kind)) {
        PyErr_SetString(PyExc_ValueError, "x and y must hold the same number of elements");
    } else if (call->rows.len < call->nchunks * width * (Py_ssize_t)sizeof(double)) {
        PyErr_SetString(PyExc_ValueError, "rows is too small");
    } else {
        return 0;
    }
    release(call);
    return -1;
}

static PyObject *py_first_pass(PyObject *self, PyObject *args)
{
    PyObject *x, *y, *rows;
    int x_kind, y_kind;
    Py_ssize_t chunk;
    Call call;
    if (!PyArg_ParseTuple(args, "OOiinO", &x, &y, &x_kind, &y_kind, &chunk, &rows) ||
        open_call(&call, x, y, x_kind, y_kind, chunk, rows, F_WIDTH) < 0)
        return NULL;
    First c = {.x = {call.x.buf, x_kind}, .y = {call.y.buf, y_kind}};
    double *out = call.rows.buf;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < call.nchunks && !failed; i++) {
        Py_ssize_t start = i * chunk, m = call.n - start < chunk ? call.n - start : chunk;
        failed = first_chunk(&c, start, m, out + i * F_WIDTH) < 0;
    }
    Py_END_ALLOW_THREADS
    release(&call);
    if (failed)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *py_second_pass(PyObject *self, PyObject *args)
{
    PyObject *x, *y, *rows;
    int x_kind, y_kind, x_finite, y_finite;
    Py_ssize_t chunk;
    Second c = {0};
    Call call;
    if (!PyArg_ParseTuple(args, "OOiinOffpppfffff", &x, &y, &x_kind, &y_kind, &chunk, &rows,
                          &c.x_shift, &c.y_shift, &x_finite, &y_finite, &c.want_kl, &c.x_low,
                          &c.x_span, &c.y_low, &c.y_span, &c.kl_scale) ||
        open_call(&call, x, y, x_kind, y_kind, chunk, rows, S_WIDTH) < 0)
        return NULL;
    c.x = (Source){call.x.buf, x_kind};
    c.y = (Source){call.y.buf, y_kind};
    double *out = call.rows.buf;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < call.nchunks && !failed; i++) {
        Py_ssize_t start = i * chunk, m = call.n - start < chunk ? call.n - start : chunk;
        failed = second_chunk(&c, x_finite, y_finite, start, m, out + i * S_WIDTH) < 0;
    }
    Py_END_ALLOW_THREADS
    release(&call);
    if (failed)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *py_bool_counts(PyObject *self, PyObject *args)
{
    PyObject *x, *y;
    Py_buffer bx, by;
    if (!PyArg_ParseTuple(args, "OO", &x, &y) ||
        PyObject_GetBuffer(x, &bx, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(y, &by, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&bx);
        return NULL;
    }
    int64_t counts[4];
    int same = bx.len == by.len;
    if (same) {
        Py_BEGIN_ALLOW_THREADS
        bool_counts(bx.buf, by.buf, bx.len, counts);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&bx);
    PyBuffer_Release(&by);
    if (!same) {
        PyErr_SetString(PyExc_ValueError, "x and y must hold the same number of elements");
        return NULL;
    }
    return Py_BuildValue("LLLL", (long long)counts[0], (long long)counts[1],
                         (long long)counts[2], (long long)counts[3]);
}

/* numpy's float32 -> float32 log inner loop (the one np.log dispatches to on this CPU) */
static int bind_log(void)
{
    PyObject *numpy = PyImport_ImportModule("numpy");
    if (numpy == NULL)
        return -1;
    PyObject *log = PyObject_GetAttrString(numpy, "log");
    Py_DECREF(numpy);
    if (log == NULL)
        return -1;
    if (strcmp(Py_TYPE(log)->tp_name, "numpy.ufunc") == 0) {
        PyUFuncObject *ufunc = (PyUFuncObject *)log;
        for (int i = 0; i < ufunc->ntypes; i++) {
            const char *types = (const char *)ufunc->types + i * ufunc->nargs;
            if (ufunc->nargs == 2 && types[0] == NPY_FLOAT && types[1] == NPY_FLOAT &&
                ufunc->functions[i] != NULL) {
                log_loop = ufunc->functions[i];
                log_data = ufunc->data ? ufunc->data[i] : NULL;
                return 0; /* the reference is kept: the loop must outlive any unloading of numpy */
            }
        }
    }
    Py_DECREF(log);
    PyErr_SetString(PyExc_ImportError, "numpy.log has no float32 loop to call");
    return -1;
}

static PyMethodDef methods[] = {
    {"first_pass", py_first_pass, METH_VARARGS,
     "first_pass(x, y, x_kind, y_kind, chunk, rows): one float64 row per chunk"},
    {"second_pass", py_second_pass, METH_VARARGS,
     "second_pass(x, y, x_kind, y_kind, chunk, rows, x_shift, y_shift, x_finite, y_finite, "
     "want_kl, x_low, x_span, y_low, y_span, kl_scale): one float64 row per chunk"},
    {"bool_counts", py_bool_counts, METH_VARARGS,
     "bool_counts(x, y) -> (x_true, y_true, both_true, equal)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fused_metrics", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fused_metrics(void)
{
    if (bind_log() < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "KIND_F32", KIND_F32) < 0 ||
        PyModule_AddIntConstant(m, "KIND_F16", KIND_F16) < 0 ||
        PyModule_AddIntConstant(m, "KIND_BF16", KIND_BF16) < 0 ||
        PyModule_AddIntConstant(m, "FIRST_WIDTH", F_WIDTH) < 0 ||
        PyModule_AddIntConstant(m, "SECOND_WIDTH", S_WIDTH) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
