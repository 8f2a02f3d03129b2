/* Single-linkage labels of a few hundred to a few thousand points, in C (optional; see tools/linkage.py).
 *
 * link(points, link, out) -> bool
 *   points: C-contiguous float64 buffer of shape (n, d), 1 <= d <= 3, all finite
 *   link:   float > 0; points i, j are linked when sum_k (p_ik - p_jk)^2 <= link * link
 *           (the test and arithmetic of scipy's cKDTree.query_pairs, term by term in axis order)
 *   out:    writable C-contiguous int64 buffer of length n, filled with the labels: each component
 *           numbered 0, 1, ... in the order of its first (lowest-index) point
 *   Returns False, leaving out unspecified, for input it does not take (d > 3, non-finite numbers,
 *   link <= 0, a spread it cannot grid exactly): the caller then takes the k-d tree path.
 *
 * How: points are hashed on cells of side a little over `link`, so a linked pair always lies in the
 * same or touching cells; each occupied cell is compared with itself and half of its neighbours; a
 * union-find whose root is always the component's lowest index gives the numbering directly.
 * An axis spread too wide to grid exactly (the keyed third axis of tools.clusters, KEY_GAP apart) is
 * taken as "separating" when its distinct values are all more than 2 * link apart: points that differ
 * there never link, so its cell is the value's rank and it has no neighbours.
 * No numpy headers: the buffer protocol only, so building needs nothing but a C compiler.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* No fused multiply-add: the sums must round as scipy's do (setup.py and CMakeLists.txt pass
   -ffp-contract=off to GCC, which ignores this pragma). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define MAX_DIM 3
/* Grid axes span fewer cells than this, so rounding in (x - min) / side stays far below the margin. */
#define MAX_CELLS_SPAN 67108864.0 /* 2^26 */
#define SIDE_MARGIN (1.0 + 1.0 / 1048576.0)

typedef struct {
    int32_t cell[MAX_DIM];  /* grid axes span < 2^26 cells; a separating axis has < n distinct values */
    int32_t head;           /* first point of the cell (-1: empty slot) */
    int32_t uniform;        /* after the cells' own pairs: all its points in one component */
} Slot;

static Py_ssize_t find(Py_ssize_t *parent, Py_ssize_t i) {
    while (parent[i] != i) {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    return i;
}

static void unite(Py_ssize_t *parent, Py_ssize_t a, Py_ssize_t b) {
    a = find(parent, a);
    b = find(parent, b);
    if (a < b) parent[b] = a;
    else if (b < a) parent[a] = b;
}

static uint64_t hash_cell(const int32_t *c) {
    uint64_t h = (uint64_t)(uint32_t)c[0]
        + 0x9E3779B97F4A7C15ULL * ((uint64_t)(uint32_t)c[1] + 0xC2B2AE3D27D4EB4FULL * (uint64_t)(uint32_t)c[2]);
    h ^= h >> 33;  /* murmur3's finaliser: the low bits (the slot) depend on every input bit */
    h *= 0xFF51AFD7ED558CCDULL;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 33);
}

static Py_ssize_t lookup(const Slot *table, uint64_t mask, const int32_t *c) {
    uint64_t at = hash_cell(c) & mask;
    for (;;) {
        const Slot *s = &table[at];
        if (s->head < 0) return -1;
        if (s->cell[0] == c[0] && s->cell[1] == c[1] && s->cell[2] == c[2]) return (Py_ssize_t)at;
        at = (at + 1) & mask;
    }
}

static int compare_values(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double sq_distance(const double *u, const double *v, Py_ssize_t d) {
    double s = 0.0;
    for (Py_ssize_t k = 0; k < d; k++) {
        double diff = u[k] - v[k];
        s += diff * diff;
    }
    return s;
}

/* A separating axis: each point's cell there is the index of its value among the distinct values
   (found by hashing the values' bits), provided those values are all more than 2 * link apart
   (0 on failure). A keyed set has a handful of distinct values, so only they are sorted. */
static int separating_ids(const double *p, Py_ssize_t n, Py_ssize_t d, Py_ssize_t axis, double link,
                          int32_t *cells, uint64_t size) {
    uint64_t *bits = (uint64_t *)malloc((size_t)size * sizeof(uint64_t));
    Py_ssize_t *slot_id = (Py_ssize_t *)malloc((size_t)size * sizeof(Py_ssize_t));
    double *values = (double *)malloc((size_t)n * sizeof(double));
    int ok = bits && slot_id && values;
    Py_ssize_t distinct = 0;
    if (ok) {
        uint64_t mask = size - 1;
        for (uint64_t s = 0; s < size; s++) slot_id[s] = -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            double x = p[i * d + axis] + 0.0;  /* -0.0 and 0.0: one value */
            uint64_t b;
            memcpy(&b, &x, sizeof(b));
            uint64_t at = ((b ^ (b >> 31)) * 0x9E3779B97F4A7C15ULL) >> 17 & mask;
            while (slot_id[at] >= 0 && bits[at] != b) at = (at + 1) & mask;
            if (slot_id[at] < 0) {
                bits[at] = b;
                slot_id[at] = distinct;
                values[distinct++] = x;
            }
            cells[i * MAX_DIM + axis] = (int32_t)slot_id[at];
        }
        qsort(values, (size_t)distinct, sizeof(double), compare_values);
        for (Py_ssize_t i = 1; i < distinct && ok; i++)
            if (!(values[i] - values[i - 1] > 2.0 * link)) ok = 0;
    }
    free(bits);
    free(slot_id);
    free(values);
    return ok;
}

/* 0: not taken (caller falls back), 1: labels written, -1: out of memory. */
static int link_labels(const double *p, Py_ssize_t n, Py_ssize_t d, double link, int64_t *out) {
    if (n == 0) return 1;
    if (!(link > 0.0) || !isfinite(link) || d < 1 || d > MAX_DIM || n > INT32_MAX / 4) return 0;
    double lo[MAX_DIM], hi[MAX_DIM];
    for (Py_ssize_t k = 0; k < d; k++) { lo[k] = p[k]; hi[k] = p[k]; }
    for (Py_ssize_t i = 0; i < n; i++) {
        for (Py_ssize_t k = 0; k < d; k++) {
            double x = p[i * d + k];
            if (!isfinite(x)) return 0;
            if (x < lo[k]) lo[k] = x;
            if (x > hi[k]) hi[k] = x;
        }
    }
    double side = link * SIDE_MARGIN;
    int grid[MAX_DIM] = {0, 0, 0};
    for (Py_ssize_t k = 0; k < d; k++) grid[k] = (hi[k] - lo[k]) / side < MAX_CELLS_SPAN;

    int status = -1;
    int32_t *cells = (int32_t *)calloc((size_t)n * MAX_DIM, sizeof(int32_t));
    Py_ssize_t *parent = (Py_ssize_t *)malloc((size_t)n * sizeof(Py_ssize_t));
    Py_ssize_t *next = (Py_ssize_t *)malloc((size_t)n * sizeof(Py_ssize_t));
    Py_ssize_t *occupied = (Py_ssize_t *)malloc((size_t)n * sizeof(Py_ssize_t));
    uint64_t size = 16;
    while (size < 2 * (uint64_t)n) size <<= 1;
    Slot *table = (Slot *)malloc((size_t)size * sizeof(Slot));
    if (!cells || !parent || !next || !occupied || !table) goto done;

    for (Py_ssize_t k = 0; k < d; k++) {
        if (grid[k]) {
            for (Py_ssize_t i = 0; i < n; i++)
                cells[i * MAX_DIM + k] = (int32_t)floor((p[i * d + k] - lo[k]) / side);
        } else if (!separating_ids(p, n, d, k, link, cells, size)) {
            status = 0;
            goto done;
        }
    }
    uint64_t mask = size - 1;
    for (uint64_t s = 0; s < size; s++) table[s].head = -1;
    Py_ssize_t n_occupied = 0;
    for (Py_ssize_t i = n - 1; i >= 0; i--) {  /* backwards: each cell's list runs in index order */
        parent[i] = i;
        const int32_t *c = &cells[i * MAX_DIM];
        uint64_t at = hash_cell(c) & mask;
        for (;;) {
            Slot *s = &table[at];
            if (s->head < 0) {
                memcpy(s->cell, c, sizeof(s->cell));
                occupied[n_occupied++] = (Py_ssize_t)at;
                next[i] = -1;
                s->head = (int32_t)i;
                break;
            }
            if (s->cell[0] == c[0] && s->cell[1] == c[1] && s->cell[2] == c[2]) {
                next[i] = s->head;
                s->head = (int32_t)i;
                break;
            }
            at = (at + 1) & mask;
        }
    }

    /* Half of the neighbourhood: offsets over the grid axes whose first non-zero step is +1. */
    int32_t offsets[13][MAX_DIM];
    int n_offsets = 0;
    for (int code = 0; code < 27; code++) {
        int32_t o[MAX_DIM] = {code / 9 - 1, (code / 3) % 3 - 1, code % 3 - 1};
        int first = 0, allowed = 1;
        for (int k = 0; k < MAX_DIM; k++) {
            if (o[k] != 0 && (k >= d || !grid[k])) allowed = 0;
            if (first == 0) first = (int)o[k];
        }
        if (allowed && first > 0) {
            memcpy(offsets[n_offsets++], o, sizeof(o));
        }
    }
    double limit = link * link;
    /* Each cell's own pairs first; then a cell is "uniform" when all its points are in one component
       (for ever after: components only merge). Between two uniform cells one linked pair settles it. */
    for (Py_ssize_t c = 0; c < n_occupied; c++) {
        Slot *a = &table[occupied[c]];
        for (Py_ssize_t i = a->head; i >= 0; i = next[i])
            for (Py_ssize_t j = next[i]; j >= 0; j = next[j])
                if (sq_distance(&p[i * d], &p[j * d], d) <= limit) unite(parent, i, j);
        Py_ssize_t root = find(parent, a->head);
        a->uniform = 1;
        for (Py_ssize_t i = next[a->head]; i >= 0 && a->uniform; i = next[i])
            if (find(parent, i) != root) a->uniform = 0;
    }
    for (Py_ssize_t c = 0; c < n_occupied; c++) {
        const Slot *a = &table[occupied[c]];
        for (int o = 0; o < n_offsets; o++) {
            int32_t nb[MAX_DIM];
            for (int k = 0; k < MAX_DIM; k++) nb[k] = a->cell[k] + offsets[o][k];
            Py_ssize_t at = lookup(table, mask, nb);
            if (at < 0) continue;
            const Slot *b = &table[at];
            if (a->uniform && b->uniform) {
                if (find(parent, a->head) == find(parent, b->head)) continue;
                for (Py_ssize_t i = a->head; i >= 0; i = next[i])
                    for (Py_ssize_t j = b->head; j >= 0; j = next[j])
                        if (sq_distance(&p[i * d], &p[j * d], d) <= limit) {
                            unite(parent, i, j);
                            goto next_offset;
                        }
            } else {
                for (Py_ssize_t i = a->head; i >= 0; i = next[i])
                    for (Py_ssize_t j = b->head; j >= 0; j = next[j])
                        if (sq_distance(&p[i * d], &p[j * d], d) <= limit) unite(parent, i, j);
            }
        next_offset:;
        }
    }
    /* Roots are each component's lowest index, so numbering roots in index order numbers components
       by their first point. */
    int64_t components = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t r = find(parent, i);
        if (r == i) out[i] = components++;
        else out[i] = out[r];
    }
    status = 1;
done:
    free(cells);
    free(parent);
    free(next);
    free(occupied);
    free(table);
    return status;
}

static PyObject *py_link(PyObject *self, PyObject *args) {
    PyObject *points_obj, *out_obj;
    double link;
    (void)self;
    if (!PyArg_ParseTuple(args, "OdO", &points_obj, &link, &out_obj)) return NULL;
    Py_buffer points, out;
    if (PyObject_GetBuffer(points_obj, &points, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&points);
        return NULL;
    }
    PyObject *result = NULL;
    if (points.ndim != 2 || points.itemsize != 8 || points.format == NULL || strcmp(points.format, "d") != 0
        || out.ndim != 1 || out.itemsize != 8 || out.format == NULL
        || (strcmp(out.format, "l") != 0 && strcmp(out.format, "q") != 0)) {
        PyErr_SetString(PyExc_TypeError, "link: points must be C-contiguous float64 (n, d), out int64 (n,)");
        goto release;
    }
    if (out.shape[0] != points.shape[0]) {
        PyErr_SetString(PyExc_ValueError, "link: out must hold one label per point");
        goto release;
    }
    /* The GIL is kept: a call takes microseconds, and giving the GIL away could wait a switch interval. */
    int status = link_labels((const double *)points.buf, points.shape[0], points.shape[1], link,
                             (int64_t *)out.buf);
    if (status < 0) {
        PyErr_NoMemory();
        goto release;
    }
    result = PyBool_FromLong(status);
release:
    PyBuffer_Release(&points);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"link", py_link, METH_VARARGS,
     "link(points, link, out) -> bool: single-linkage labels of points (n, d<=3) into out; False: not taken."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_linkage", "Single-linkage labels in C.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__linkage(void) { return PyModule_Create(&module); }
