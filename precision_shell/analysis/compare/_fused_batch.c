/* batch_metrics: the metrics passes of many small pairs in one call, the GIL released once.
 *
 * Why: with tensors of a few hundred KB, the Python around each pair (fused_metrics.passes:
 * two kernel calls, combining the chunk rows, the second pass's parameters; the layout copy)
 * costs about as much as the C passes themselves, and it holds the GIL, so a second thread
 * waits. Here a task's pairs go in one call: for each, the NPU tensor is gathered from its
 * device layout by an index array (Python derives it once per layout with formats/layout.py's
 * own code, so the element order is that code's by construction), both passes run chunk by
 * chunk (_fused_passes.c), and the chunk rows are combined exactly as fused_metrics.passes and
 * _first combine them: min/max merged in chunk order with its NaN rules, sums added in chunk
 * order from 0.0, the second pass's float32 parameters and metrics_kernels._kl_scale computed
 * with numpy's scalar semantics (a Python float meeting a float32 is cast to float32). The
 * result row of a pair is FirstPass's fields, SecondPass's fields, then kl_scale, so the
 * Python side builds the same FirstPass/SecondPass and the same Metrics, bit for bit.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "_fused_metrics.h"

static const float F32_EPS = 1.1920928955078125e-07f;

/* The logical order of x: element run * j + t is x[idx[j] + t * step] (idx.obj NULL: x is
   already in that order). A layout restore is a permutation whose innermost logical axes walk x
   at a constant step, so a few thousand run starts describe a tensor of 10^5 elements. With
   lens (have_lens), the runs are pieces of x of their own lengths instead, one after the
   other: a FRACTAL_NZ tensor whose last axis is not a multiple of 16 is pieces of 16 and of the
   rest, where even runs would be 2 elements long. */
typedef struct {
    Py_buffer x, y, idx, lens;
    int x_kind, y_kind, have_idx, have_lens;
    Py_ssize_t n, run, step;
} Item;

static Py_ssize_t width_of(int kind) { return kind == KIND_F32 ? 4 : 2; }

static void release_items(Item *items, Py_ssize_t count)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        if (items[i].x.obj) PyBuffer_Release(&items[i].x);
        if (items[i].y.obj) PyBuffer_Release(&items[i].y);
        if (items[i].idx.obj) PyBuffer_Release(&items[i].idx);
        if (items[i].lens.obj) PyBuffer_Release(&items[i].lens);
    }
    free(items);
}

/* the pieces of x (idx starts, lens lengths) fill the n logical elements exactly */
static const char *check_pieces(const Item *it, Py_ssize_t x_count)
{
    Py_ssize_t count = it->idx.len / (Py_ssize_t)sizeof(int32_t), total = 0;
    if (it->idx.len % (Py_ssize_t)sizeof(int32_t) || it->lens.len != it->idx.len)
        return "pieces: one int32 start and one int32 length each";
    const int32_t *start = it->idx.buf, *len = it->lens.buf;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (len[i] < 1 || start[i] < 0 || (Py_ssize_t)start[i] + len[i] > x_count)
            return "piece out of range of x";
        total += len[i];
    }
    return total == it->n ? NULL : "pieces: their lengths must add up to the golden's elements";
}

/* one (x, x_kind, index or None, run, step, y, y_kind[, lens]) tuple; 0 or -1 with an
   exception set */
static int open_item(PyObject *tuple, Item *it)
{
    PyObject *x, *idx, *y, *lens = Py_None;
    if (!PyArg_ParseTuple(tuple, "OiOnnOi|O", &x, &it->x_kind, &idx, &it->run, &it->step, &y,
                          &it->y_kind, &lens))
        return -1;
    if (it->x_kind < KIND_F32 || it->x_kind > KIND_BF16 || it->y_kind < KIND_F32 ||
        it->y_kind > KIND_BF16) {
        PyErr_SetString(PyExc_ValueError, "unknown element kind");
        return -1;
    }
    if (PyObject_GetBuffer(x, &it->x, PyBUF_C_CONTIGUOUS) < 0 ||
        PyObject_GetBuffer(y, &it->y, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    it->have_idx = idx != Py_None;
    it->have_lens = it->have_idx && lens != Py_None;
    if (it->have_idx && PyObject_GetBuffer(idx, &it->idx, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (it->have_lens && PyObject_GetBuffer(lens, &it->lens, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    it->n = it->y.len / width_of(it->y_kind);
    Py_ssize_t x_count = it->x.len / width_of(it->x_kind);
    const char *why = NULL;
    if (it->y.len % width_of(it->y_kind) || it->n == 0)
        why = "golden buffer: not a whole, non-empty number of elements";
    else if (it->have_lens)
        why = check_pieces(it, x_count);
    else if (it->have_idx && (it->run < 1 || it->n % it->run ||
                              it->idx.len != it->n / it->run * (Py_ssize_t)sizeof(int32_t)))
        why = "index: one int32 per run of golden elements needed";
    else if (!it->have_idx && it->x.len != it->n * width_of(it->x_kind))
        why = "x and y must hold the same number of elements";
    if (why == NULL && it->have_idx && !it->have_lens) {
        const int32_t *index = it->idx.buf;
        Py_ssize_t last = (it->run - 1) * it->step;
        for (Py_ssize_t i = 0; i < it->n / it->run && why == NULL; i++)
            if (index[i] < 0 || index[i] >= x_count || index[i] + last < 0 || index[i] + last >= x_count)
                why = "index out of range of x";
    }
    if (why != NULL) {
        PyErr_SetString(PyExc_ValueError, why);
        return -1;
    }
    return 0;
}

/* numpy's NaN-keeping merges of fused_metrics._first (metrics_kernels._nan_min / _nan_max) */
static double nan_min(double a, double b) { return (a != a || a <= b) ? a : b; }
static double nan_max(double a, double b) { return (a != a || a >= b) ? a : b; }

static void combine_first(const double *rows, Py_ssize_t nchunks, double *out)
{
    out[F_X_MIN] = out[F_Y_MIN] = INFINITY;
    out[F_X_MAX] = out[F_Y_MAX] = out[F_MAX_ABS_DIFF] = out[F_MAX_REL] = -INFINITY;
    for (int k = F_X_SUM; k <= F_WITHIN_5; k++)
        if (k != F_MAX_ABS_DIFF && k != F_MAX_REL)
            out[k] = 0.0;
    for (Py_ssize_t c = 0; c < nchunks; c++) {
        const double *r = rows + c * F_WIDTH;
        /* the rows hold float32 values: their float32 casts are exact */
        out[F_X_MIN] = nan_min(out[F_X_MIN], r[F_X_MIN]);
        out[F_Y_MIN] = nan_min(out[F_Y_MIN], r[F_Y_MIN]);
        out[F_X_MAX] = nan_max(out[F_X_MAX], r[F_X_MAX]);
        out[F_Y_MAX] = nan_max(out[F_Y_MAX], r[F_Y_MAX]);
        out[F_MAX_ABS_DIFF] = nan_max(out[F_MAX_ABS_DIFF], r[F_MAX_ABS_DIFF]);
        out[F_MAX_REL] = nan_max(out[F_MAX_REL], r[F_MAX_REL]);
        static const int sums[] = {F_X_SUM, F_Y_SUM, F_XY_SUM, F_SQ_DIFF_SUM, F_ABS_DIFF_SUM,
                                   F_REL_SUM, F_WITHIN_1, F_WITHIN_5};
        for (size_t s = 0; s < sizeof sums / sizeof sums[0]; s++)
            out[sums[s]] += r[sums[s]];   /* counts: exact integers in any order */
    }
}

/* a value of metrics_kernels._kl_scale: a float32 (numpy scalar) or a Python float */
typedef struct {
    double v;
    int is32;
} Num;

/* _kl_scale's scaled_sum: (total - n * low) / float(span) if span != 0 else total, then
   max(that, n * float(F32_EPS)); Python floats meeting float32 scalars become float32 */
static Num scaled_sum(double total, float low, float span, Py_ssize_t n)
{
    Num est = {total, 0};
    if (span != 0.0f) {
        float n_low = (float)n * low;
        est.v = (double)(((float)total - n_low) / span);
        est.is32 = 1;
    }
    double floor = (double)n * (double)F32_EPS;
    int greater = est.is32 ? (float)floor > (float)est.v : floor > est.v;   /* Python's max() */
    return greater ? (Num){floor, 0} : est;
}

static float kl_scale_of(const double *first, Py_ssize_t n, float x_span, float y_span)
{
    Num b = scaled_sum(first[F_Y_SUM], (float)first[F_Y_MIN], y_span, n);
    Num a = scaled_sum(first[F_X_SUM], (float)first[F_X_MIN], x_span, n);
    float scale = (a.is32 || b.is32) ? (float)b.v / (float)a.v : (float)(b.v / a.v);
    return isfinite(scale) && scale > 0.0f ? scale : 1.0f;
}

static int grow(void **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    void *bigger = realloc(*buf, need);
    if (bigger == NULL)
        return -1;
    *buf = bigger, *cap = need;
    return 0;
}

typedef struct {
    void *gathered, *rows;
    size_t gathered_cap, rows_cap;
} Scratch;


/* Runs whose starts follow each other (start, start + 1, ...: the C0 lanes of an NC1HWC0 or
   FRACTAL_Z block) are gathered together, as a block transpose: each step reads their elements
   side by side from one place of x, instead of each run striding through x on its own. */
#define MAX_GROUP 64

#define GATHER(T, it, out)                                                                \
    do {                                                                                  \
        const int32_t *starts = (it)->idx.buf;                                            \
        const T *src = (it)->x.buf;                                                       \
        T *dst = (out);                                                                   \
        Py_ssize_t run = (it)->run, step = (it)->step, rows = (it)->n / run;              \
        for (Py_ssize_t j = 0; j < rows;) {                                               \
            Py_ssize_t g = 1;                                                             \
            while (step > 1 && j + g < rows && g < step && g < MAX_GROUP &&               \
                   starts[j + g] == starts[j] + g)                                        \
                g++;                                                                      \
            const T *from = src + starts[j];                                              \
            if (g == 1) {                                                                 \
                for (Py_ssize_t t = 0; t < run; t++)                                      \
                    dst[t] = from[t * step];                                              \
            } else {                                                                      \
                for (Py_ssize_t t = 0; t < run; t++, from += step)                        \
                    for (Py_ssize_t i = 0; i < g; i++)                                    \
                        dst[i * run + t] = from[i];                                       \
            }                                                                             \
            dst += g * run;                                                               \
            j += g;                                                                       \
        }                                                                                 \
    } while (0)

/* one pair's row of B_WIDTH doubles; -1 when out of memory */
static int item_metrics(const Item *it, Py_ssize_t chunk, Scratch *s, double *out)
{
    Py_ssize_t n = it->n, nchunks = (n + chunk - 1) / chunk;
    Source x = {it->x.buf, it->x_kind}, y = {it->y.buf, it->y_kind};
    if (it->have_idx) {   /* the layout restore: one gather in the NPU tensor's own width */
        if (grow(&s->gathered, &s->gathered_cap, (size_t)(n * width_of(it->x_kind))) < 0)
            return -1;
        Py_ssize_t w = width_of(it->x_kind);
        if (it->have_lens) {
            const int32_t *start = it->idx.buf, *len = it->lens.buf;
            char *dst = s->gathered;
            for (Py_ssize_t j = 0; j < it->idx.len / (Py_ssize_t)sizeof(int32_t); j++) {
                memcpy(dst, (const char *)it->x.buf + (Py_ssize_t)start[j] * w, (size_t)len[j] * (size_t)w);
                dst += (Py_ssize_t)len[j] * w;
            }
        } else if (it->x_kind == KIND_F32)
            GATHER(uint32_t, it, s->gathered);
        else
            GATHER(uint16_t, it, s->gathered);
        x.data = s->gathered;
    }
    if (grow(&s->rows, &s->rows_cap, (size_t)nchunks * F_WIDTH * sizeof(double)) < 0)
        return -1;
    double *rows = s->rows, *first = out, *second = out + F_WIDTH;
    if (fused_first_pass(x, y, n, chunk, rows) < 0)
        return -1;
    combine_first(rows, nchunks, first);
    /* fused_metrics.passes: the second pass's parameters from the first */
    int want_kl = isfinite(first[F_X_MIN]) && isfinite(first[F_X_MAX]) &&
                  isfinite(first[F_Y_MIN]) && isfinite(first[F_Y_MAX]);
    float x_low = (float)first[F_X_MIN], y_low = (float)first[F_Y_MIN];
    float x_span = (float)first[F_X_MAX] - x_low, y_span = (float)first[F_Y_MAX] - y_low;
    Second c = {.x = x, .y = y,
                .x_shift = (float)(first[F_X_SUM] / (double)n),
                .y_shift = (float)(first[F_Y_SUM] / (double)n),
                .x_low = x_low, .x_span = x_span, .y_low = y_low, .y_span = y_span,
                .kl_scale = want_kl ? kl_scale_of(first, n, x_span, y_span) : 1.0f,
                .want_kl = want_kl,
                .x_finite = isfinite(first[F_X_MIN]) && isfinite(first[F_X_MAX]),
                .y_finite = isfinite(first[F_Y_MIN]) && isfinite(first[F_Y_MAX])};
    if (fused_second_pass(&c, n, chunk, rows) < 0)
        return -1;
    for (int k = 0; k < S_WIDTH; k++) {
        double total = 0.0;
        for (Py_ssize_t r = 0; r < nchunks; r++)
            total += rows[r * S_WIDTH + k];   /* chunk by chunk in order, as passes() */
        second[k] = total;
    }
    out[F_WIDTH + S_WIDTH] = (double)c.kl_scale;
    return 0;
}

PyObject *fused_batch_metrics(PyObject *self, PyObject *args)
{
    PyObject *seq, *out_obj;
    Py_ssize_t chunk;
    if (!PyArg_ParseTuple(args, "OnO", &seq, &chunk, &out_obj))
        return NULL;
    if (chunk < 1) {
        PyErr_SetString(PyExc_ValueError, "chunk must be positive");
        return NULL;
    }
    PyObject *fast = PySequence_Fast(seq, "items must be a sequence");
    if (fast == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(fast);
    Item *items = calloc((size_t)(count ? count : 1), sizeof(Item));
    Py_buffer out;
    if (items == NULL) {
        Py_DECREF(fast);
        return PyErr_NoMemory();
    }
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        release_items(items, count);
        Py_DECREF(fast);
        return NULL;
    }
    PyObject *result = NULL;
    int failed = 0;
    for (Py_ssize_t i = 0; i < count; i++)
        if (open_item(PySequence_Fast_GET_ITEM(fast, i), &items[i]) < 0)
            goto done;
    if (out.len < count * B_WIDTH * (Py_ssize_t)sizeof(double)) {
        PyErr_SetString(PyExc_ValueError, "out is too small");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    /* per call, not per thread: a vc's worker threads end with it, and what a thread kept would
       stay allocated (glibc serves the next call's blocks from the freed ones, without faults) */
    Scratch s = {0};
    for (Py_ssize_t i = 0; i < count && !failed; i++)
        failed = item_metrics(&items[i], chunk, &s, (double *)out.buf + i * B_WIDTH) < 0;
    free(s.gathered);
    free(s.rows);
    Py_END_ALLOW_THREADS
    if (failed)
        PyErr_NoMemory();
    else
        result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&out);
    release_items(items, count);
    Py_DECREF(fast);
    return result;
}

/* same_bytes(a, b): whether two buffers hold the same bytes (an input that repeats its
   producer's output, tasks._alias_same), compared with the GIL released */
PyObject *fused_same_bytes(PyObject *self, PyObject *args)
{
    PyObject *a, *b;
    Py_buffer ba, bb;
    if (!PyArg_ParseTuple(args, "OO", &a, &b) || PyObject_GetBuffer(a, &ba, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(b, &bb, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&ba);
        return NULL;
    }
    int same = ba.len == bb.len;
    if (same && ba.len > 0) {
        Py_BEGIN_ALLOW_THREADS
        same = memcmp(ba.buf, bb.buf, (size_t)ba.len) == 0;
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&ba);
    PyBuffer_Release(&bb);
    return PyBool_FromLong(same);
}

/* file_same_bytes(fd, offset, buf): whether the file holds buf's bytes at offset (an input that
   repeats its producer's output, checked while the producer's bytes are still in memory:
   tasks._TaskFiles.check_aliases). The file is read with pread in chunks into a scratch buffer
   that stays in cache, compared as it comes, all with the GIL released; a short read or a read
   error is "not the same" (the caller then reads the input itself and reports the problem). */
#define SAME_CHUNK (64 * 1024)

static int file_holds(int fd, Py_ssize_t offset, const char *want, Py_ssize_t len)
{
    char scratch[SAME_CHUNK];
    Py_ssize_t done = 0;
    while (done < len) {
        size_t ask = (size_t)(len - done < SAME_CHUNK ? len - done : SAME_CHUNK);
        ssize_t got = pread(fd, scratch, ask, (off_t)(offset + done));
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return 0;
        if (memcmp(scratch, want + done, (size_t)got) != 0)
            return 0;
        done += got;
    }
    return 1;
}

PyObject *fused_file_same_bytes(PyObject *self, PyObject *args)
{
    int fd;
    Py_ssize_t offset;
    PyObject *obj;
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "inO", &fd, &offset, &obj))
        return NULL;
    if (offset < 0) {
        PyErr_SetString(PyExc_ValueError, "offset must not be negative");
        return NULL;
    }
    if (PyObject_GetBuffer(obj, &buf, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    int same;
    Py_BEGIN_ALLOW_THREADS
    same = file_holds(fd, offset, buf.buf, buf.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    return PyBool_FromLong(same);
}
