/* The logical order: permute-v1 (which document) and quota-v1 (which source).
 *
 * Each is the algorithm its Python definition gives (shuffle.py, mixture.py), one element at a
 * time with the same wrapping uint64 and IEEE-754 double arithmetic; the tests compare them. */
#include <math.h>

#include "kernels.h"

/* ---- permute-v1 ---------------------------------------------------------------------- */

typedef struct {
    int half;
    uint64_t mask, rk[4];
} Feistel;

/* One encryption: four rounds over the h-bit halves (L, R) -> (R, L ^ F(R)). */
static inline uint64_t feistel_encrypt(const Feistel *f, uint64_t v) {
    uint64_t left = v >> f->half, right = v & f->mask;
    for (int r = 0; r < 4; r++) {
        uint64_t next = left ^ (splitmix64(right ^ f->rk[r]) & f->mask);
        left = right;
        right = next;
    }
    return (left << f->half) | right;
}

/* Positions into out: 0, or 1 if one lies outside [0, n), or 2 out of memory.
 *
 * Cycle walking re-encrypts a value until it lands in [0, n). Done one position at a time, a
 * walk of unpredictable length is a chain of dependent multiplies behind a mispredicted branch;
 * instead every position is encrypted once in a branch-free pass (independent iterations the
 * CPU overlaps), and each further pass re-encrypts only the list of positions still outside. */
static int permute_loop(const int64_t *pos, int64_t *out, Py_ssize_t count, uint64_t n,
                        uint64_t key) {
    for (Py_ssize_t i = 0; i < count; i++)
        if (pos[i] < 0 || (uint64_t)pos[i] >= n) return 1;
    if (n == 1) {
        for (Py_ssize_t i = 0; i < count; i++) out[i] = 0;
        return 0;
    }
    /* half = ceil(bits(n - 1) / 2), at least 1: the domain 2^(2 half) is below 4n. */
    int bits = 64 - __builtin_clzll(n - 1);
    Feistel f = {.half = (bits + 1) / 2 > 1 ? (bits + 1) / 2 : 1};
    f.mask = (1ULL << f.half) - 1;
    for (int r = 0; r < 4; r++) f.rk[r] = splitmix64(key + (uint64_t)r);
    uint64_t *v = (uint64_t *)out;
    for (Py_ssize_t i = 0; i < count; i++) v[i] = feistel_encrypt(&f, (uint64_t)pos[i]);
    Py_ssize_t todo = 0;
    for (Py_ssize_t i = 0; i < count; i++) todo += v[i] >= n;
    if (!todo) return 0;
    Py_ssize_t *walk = PyMem_RawMalloc(sizeof(Py_ssize_t) * todo);
    if (!walk) return 2;
    todo = 0;
    for (Py_ssize_t i = 0; i < count; i++)
        if (v[i] >= n) walk[todo++] = i;
    while (todo) {
        for (Py_ssize_t t = 0; t < todo; t++) v[walk[t]] = feistel_encrypt(&f, v[walk[t]]);
        Py_ssize_t left = 0;
        for (Py_ssize_t t = 0; t < todo; t++)
            if (v[walk[t]] >= n) walk[left++] = walk[t];
        todo = left;
    }
    PyMem_RawFree(walk);
    return 0;
}

PyObject *rw_permute_v1(PyObject *mod, PyObject *args) {
    PyObject *pos_obj, *out_obj;
    long long n;
    unsigned long long key;
    if (!PyArg_ParseTuple(args, "OOLK", &pos_obj, &out_obj, &n, &key)) return NULL;
    if (n <= 0) {
        PyErr_SetString(PyExc_ValueError, "cannot permute an empty range");
        return NULL;
    }
    Py_buffer pb, ob;
    if (rw_get_array(pos_obj, &pb, I64, 8, 0, "positions") < 0) return NULL;
    if (rw_get_array(out_obj, &ob, I64, 8, 1, "out") < 0) {
        PyBuffer_Release(&pb);
        return NULL;
    }
    Py_ssize_t count = pb.len / 8;
    if (ob.len / 8 != count) {
        PyBuffer_Release(&pb);
        PyBuffer_Release(&ob);
        PyErr_SetString(PyExc_ValueError, "out must have as many items as positions");
        return NULL;
    }
    const int64_t *pos = pb.buf;
    int64_t *out = ob.buf;
    int bad;
    Py_BEGIN_ALLOW_THREADS
    bad = permute_loop(pos, out, count, (uint64_t)n, key);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&pb);
    PyBuffer_Release(&ob);
    if (bad == 2) return PyErr_NoMemory();
    if (bad) {
        PyErr_Format(PyExc_ValueError, "positions must lie in [0, %lld)", n);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* ---- quota-v1 ------------------------------------------------------------------------ */

PyObject *rw_quota_v1(PyObject *mod, PyObject *args) {
    PyObject *shares_obj, *units_obj, *out_obj, *ahead_obj;
    if (!PyArg_ParseTuple(args, "OOOO", &shares_obj, &units_obj, &out_obj, &ahead_obj))
        return NULL;
    Py_buffer sb, ub, ob;
    if (rw_get_array(shares_obj, &sb, "d", 8, 0, "shares") < 0) return NULL;
    if (rw_get_array(units_obj, &ub, I64, 8, 1, "units") < 0) {
        PyBuffer_Release(&sb);
        return NULL;
    }
    if (rw_get_array(out_obj, &ob, I64, 8, 1, "out") < 0) {
        PyBuffer_Release(&sb);
        PyBuffer_Release(&ub);
        return NULL;
    }
    Py_ssize_t m = sb.len / 8, count = ob.len / 8;
    PyObject *result = NULL;
    Py_buffer *ab = NULL;
    Py_ssize_t acquired = 0;
    double *release = PyMem_Malloc(sizeof(double) * (m ? m : 1));
    double *deadline = PyMem_Malloc(sizeof(double) * (m ? m : 1));
    Py_ssize_t *taken = PyMem_Calloc(m ? m : 1, sizeof(Py_ssize_t));
    if (!release || !deadline || !taken) {
        PyErr_NoMemory();
        goto done;
    }
    if (ub.len / 8 != m || m == 0) {
        PyErr_SetString(PyExc_ValueError, "units must have one entry per share");
        goto done;
    }
    if (ahead_obj != Py_None) {
        /* Token units: ahead[i][k] is the units of source i's k-th next document. */
        if (!PySequence_Check(ahead_obj) || PySequence_Size(ahead_obj) != m) {
            PyErr_SetString(PyExc_ValueError, "ahead must have one array per share");
            goto done;
        }
        ab = PyMem_Calloc(m, sizeof(Py_buffer));
        if (!ab) {
            PyErr_NoMemory();
            goto done;
        }
        for (; acquired < m; acquired++) {
            PyObject *a = PySequence_GetItem(ahead_obj, acquired);
            if (!a) goto done;
            int rc = rw_get_array(a, &ab[acquired], I64, 8, 0, "ahead");
            Py_DECREF(a);
            if (rc < 0) goto done;
        }
    }
    const double *w = sb.buf;
    int64_t *units = ub.buf, *out = ob.buf;
    int overrun = 0;
    Py_BEGIN_ALLOW_THREADS
    int64_t slot = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        slot += units[i];
        release[i] = floor((double)units[i] / w[i]);
        deadline[i] = ceil((double)(units[i] + 1) / w[i]);
    }
    for (Py_ssize_t k = 0; k < count; k++) {
        Py_ssize_t best = -1;
        double best_deadline = INFINITY;
        for (Py_ssize_t i = 0; i < m; i++) {
            if (release[i] <= (double)slot && deadline[i] < best_deadline) {
                best = i;
                best_deadline = deadline[i];
            }
        }
        if (best < 0) {
            /* Nothing released (units grow by more than one per draw): largest deficit. */
            double top = -INFINITY;
            for (Py_ssize_t i = 0; i < m; i++) {
                double deficit = w[i] * (double)(slot + 1) - (double)units[i];
                if (deficit > top) {
                    top = deficit;
                    best = i;
                }
            }
        }
        int64_t step = 1;
        if (ab) {
            if (taken[best] >= ab[best].len / 8) {
                overrun = 1;
                break;
            }
            step = ((const int64_t *)ab[best].buf)[taken[best]++];
        }
        units[best] += step;
        slot += step;
        release[best] = floor((double)units[best] / w[best]);
        deadline[best] = ceil((double)(units[best] + 1) / w[best]);
        out[k] = best;
    }
    Py_END_ALLOW_THREADS
    if (overrun) {
        PyErr_SetString(PyExc_ValueError, "ahead: a source ran out of look-ahead documents");
        goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    for (Py_ssize_t i = 0; i < acquired; i++) PyBuffer_Release(&ab[i]);
    PyMem_Free(ab);
    PyMem_Free(release);
    PyMem_Free(deadline);
    PyMem_Free(taken);
    PyBuffer_Release(&sb);
    PyBuffer_Release(&ub);
    PyBuffer_Release(&ob);
    return result;
}
