/* The C metrics kernel's vector helpers and numpy's summation order (included by
 * _fused_passes.c only; GNU C vector extensions: GCC and clang). */
#ifndef PSHELL_FUSED_VECTORS_H
#define PSHELL_FUSED_VECTORS_H

#include <string.h>

#include "_fused_metrics.h"

#define LEAF 128 /* numpy's PW_BLOCKSIZE: pairwise summation's leaf */

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

/* v < m ? v : m (and v > m ? v : m): m where v is NaN. x86's min/max instructions are
   exactly that; elsewhere (NEON's propagate NaN) a compare and blend */
#if VL == 8
#include <immintrin.h>
static inline vf min_ignoring_nan(vf v, vf m) { return (vf)_mm256_min_ps((__m256)v, (__m256)m); }
static inline vf max_ignoring_nan(vf v, vf m) { return (vf)_mm256_max_ps((__m256)v, (__m256)m); }
#elif defined(__SSE__)
#include <xmmintrin.h>
static inline vf min_ignoring_nan(vf v, vf m) { return (vf)_mm_min_ps((__m128)v, (__m128)m); }
static inline vf max_ignoring_nan(vf v, vf m) { return (vf)_mm_max_ps((__m128)v, (__m128)m); }
#else
static inline vf min_ignoring_nan(vf v, vf m) { return blend(v < m, v, m); }
static inline vf max_ignoring_nan(vf v, vf m) { return blend(v > m, v, m); }
#endif

/* whether any lane of a comparison result is true */
static inline int any_set(vi m)
{
#if VL == 8
    return !_mm256_testz_si256((__m256i)m, (__m256i)m);
#else
    int64_t lanes[VL / 2];
    memcpy(lanes, &m, sizeof m);
    return (lanes[0] | lanes[1]) != 0;
#endif
}

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
#if VL == 8 && defined(__F16C__)
    /* the hardware conversion: exact for every float16, as widen(); a signalling NaN comes out
       quiet, which no result can tell (a NaN anywhere makes the metric NaN, printed "nan") */
    if (s->kind == KIND_F16) {
        for (; i + VL <= n; i += VL)
            _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i * 2))));
    }
#endif
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

#if VL == 8 && defined(__AVX512F__)
/* numpy's 8 leaf accumulators in one 512-bit register: 8 float32 lanes become 8 float64 lanes
   with one conversion and one addition (half the instructions of two 256-bit halves; the same
   additions of the same values) */
typedef double d8 __attribute__((vector_size(64)));
typedef struct {
    d8 all;
} Acc;

static inline Acc accumulate(Acc r, vf v, int i)
{
    (void)i;
    r.all += (d8)_mm512_cvtps_pd((__m256)v);
    return r;
}

static inline d4 low_half(Acc r) { return __builtin_shufflevector(r.all, r.all, 0, 1, 2, 3); }
static inline d4 high_half(Acc r) { return __builtin_shufflevector(r.all, r.all, 4, 5, 6, 7); }
#else
/* numpy's 8 leaf accumulators, lanes 0-3 and 4-7 */
typedef struct {
    d4 lo, hi;
} Acc;

/* values i .. i+VL-1 of a leaf (i a multiple of VL) into accumulators i%8 .. */
static inline Acc accumulate(Acc r, vf v, int i)
{
#if VL == 8
    (void)i;
    /* one vcvtps2pd of 4 lanes per half: GCC lowers the generic conversion of a half vector
       to 2-lane conversions and inserts (twice the instructions; same values, same order) */
    r.lo += (d4)_mm256_cvtps_pd(_mm256_castps256_ps128((__m256)v));
    r.hi += (d4)_mm256_cvtps_pd(_mm256_extractf128_ps((__m256)v, 1));
#else
    if (i & 4)
        r.hi += __builtin_convertvector(v, d4);
    else
        r.lo += __builtin_convertvector(v, d4);
#endif
    return r;
}

static inline d4 low_half(Acc r) { return r.lo; }
static inline d4 high_half(Acc r) { return r.hi; }
#endif

/* numpy's combination of its 8 accumulators: ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)) */
static inline double tree(Acc r)
{
    d4 lo = low_half(r), hi = high_half(r);
    d4 pairs = __builtin_shufflevector(lo, hi, 0, 2, 4, 6) + __builtin_shufflevector(lo, hi, 1, 3, 5, 7);
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

#endif
