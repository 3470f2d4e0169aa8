/* The data plane's compiled kernels: the per-document and per-cell loops of the loader.
 *
 * The algorithms are defined in Python (permute.py, mixture.py, packing.py) and these are
 * the same algorithms, one element at a time, with the same integer and IEEE-754 double
 * arithmetic, so a cursor written before or after them continues the same sequence (the tests
 * check every kernel against its Python definition). Why compiled: the loader's work per
 * step is a few hundred documents and S * rows cells, and in numpy every pass over them costs
 * a fixed ~1-20 us call whatever its size; the loop itself is a few nanoseconds per element.
 *
 * Arrays cross as buffers (PEP 3118), so the module needs no numpy headers to build. Every
 * loop runs without the GIL, so the loader's read workers fill batches in parallel.
 *
 *   ShardTable(arrays)      token storage: one buffer per shard, acquired once
 *   permute_v1(...)         the keyed Feistel bijection with cycle walking
 *   quota_v1(...)           earliest-deadline-first over Pfair windows (exact quotas)
 *   fill_concat(...)        concat-v1 rows: tokens, position ids, segment ids, loss mask
 *   fill_pad(...)           pad-v1 rows
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* The per-cell loops are compiled twice on x86-64 with GCC, for AVX2 and for the baseline, and
 * the loader picks the one the CPU supports when the module loads (an ifunc); AVX2 packs four
 * int64 stores per instruction instead of two (~20% less time per batch, measured). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define PER_CPU __attribute__((target_clones("avx2", "default")))
#else
#define PER_CPU
#endif

/* ---- buffers ------------------------------------------------------------------------- */

typedef enum { K_U8, K_I8, K_U16, K_I16, K_U32, K_I32, K_U64, K_I64 } kind_t;

/* The integer kind of a 1-D buffer from its struct format and item size. */
static int integer_kind(const Py_buffer *b, kind_t *kind) {
    const char *f = b->format ? b->format : "B";
    if (*f == '@' || *f == '=' || *f == '<') f++;
    if (f[0] == '\0' || f[1] != '\0') return -1;
    int is_signed;
    switch (f[0]) {
        case 'b': case 'h': case 'i': case 'l': case 'q': is_signed = 1; break;
        case 'B': case 'H': case 'I': case 'L': case 'Q': is_signed = 0; break;
        default: return -1;
    }
    switch (b->itemsize) {
        case 1: *kind = is_signed ? K_I8 : K_U8; return 0;
        case 2: *kind = is_signed ? K_I16 : K_U16; return 0;
        case 4: *kind = is_signed ? K_I32 : K_U32; return 0;
        case 8: *kind = is_signed ? K_I64 : K_U64; return 0;
        default: return -1;
    }
}

/* A contiguous 1-D buffer of `itemsize`-byte items whose format letter is one of `letters`. */
static int get_array(PyObject *obj, Py_buffer *b, const char *letters, Py_ssize_t itemsize,
                     int writable, const char *name) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, b, flags) < 0) {
        PyErr_Format(PyExc_TypeError, "%s: expected a contiguous%s array", name,
                     writable ? " writable" : "");
        return -1;
    }
    const char *f = b->format ? b->format : "B";
    if (*f == '@' || *f == '=' || *f == '<') f++;
    if (b->itemsize != itemsize || f[0] == '\0' || f[1] != '\0' || !strchr(letters, f[0])) {
        PyErr_Format(PyExc_TypeError, "%s: wrong dtype (format %s, item size %zd)", name,
                     b->format ? b->format : "B", b->itemsize);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

#define I64 "lq"

/* ---- ShardTable ---------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    Py_ssize_t n;
    Py_buffer *bufs;
    kind_t *kinds;
    int64_t *tokens;
} ShardTable;

static void ShardTable_dealloc(ShardTable *self) {
    for (Py_ssize_t i = 0; i < self->n; i++) PyBuffer_Release(&self->bufs[i]);
    PyMem_Free(self->bufs);
    PyMem_Free(self->kinds);
    PyMem_Free(self->tokens);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int ShardTable_init(ShardTable *self, PyObject *args, PyObject *kwds) {
    PyObject *arrays;
    static char *kwlist[] = {"arrays", NULL};
    if (self->bufs) {
        PyErr_SetString(PyExc_RuntimeError, "ShardTable is already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O", kwlist, &arrays)) return -1;
    PyObject *seq = PySequence_Fast(arrays, "ShardTable: expected a sequence of arrays");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    self->bufs = PyMem_Calloc(n ? n : 1, sizeof(Py_buffer));
    self->kinds = PyMem_Calloc(n ? n : 1, sizeof(kind_t));
    self->tokens = PyMem_Calloc(n ? n : 1, sizeof(int64_t));
    if (!self->bufs || !self->kinds || !self->tokens) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PySequence_Fast_GET_ITEM(seq, i);
        if (PyObject_GetBuffer(a, &self->bufs[i], PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
            Py_DECREF(seq);
            return -1;
        }
        self->n = i + 1;
        if (integer_kind(&self->bufs[i], &self->kinds[i]) < 0) {
            PyErr_Format(PyExc_TypeError, "shard %zd: token ids must be integers (format %s)",
                         i, self->bufs[i].format ? self->bufs[i].format : "B");
            Py_DECREF(seq);
            return -1;
        }
        self->tokens[i] = self->bufs[i].len / self->bufs[i].itemsize;
    }
    Py_DECREF(seq);
    return 0;
}

static Py_ssize_t ShardTable_len(ShardTable *self) { return self->n; }

static PySequenceMethods ShardTable_as_sequence = {.sq_length = (lenfunc)ShardTable_len};

static PyTypeObject ShardTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "runwright.data._kernels.ShardTable",
    .tp_doc = "Token storage for the fill kernels: one buffer per shard, held while it lives.",
    .tp_basicsize = sizeof(ShardTable),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)ShardTable_init,
    .tp_dealloc = (destructor)ShardTable_dealloc,
    .tp_as_sequence = &ShardTable_as_sequence,
};

/* Copy `count` tokens of shard `shard` from `start` into dst as int64; -1 if out of range. */
static inline int copy_tokens(const ShardTable *t, int64_t shard, int64_t start, int64_t count,
                              int64_t *restrict dst) {
    if (count <= 0) return 0;
    if (shard < 0 || shard >= t->n || start < 0 || start + count > t->tokens[shard]) return -1;
    const char *base = (const char *)t->bufs[shard].buf;
#define COPY(T)                                                  \
    do {                                                         \
        const T *restrict src = (const T *)base + start;         \
        for (int64_t i = 0; i < count; i++) dst[i] = (int64_t)src[i]; \
    } while (0)
    switch (t->kinds[shard]) {
        case K_U8: COPY(uint8_t); break;
        case K_I8: COPY(int8_t); break;
        case K_U16: COPY(uint16_t); break;
        case K_I16: COPY(int16_t); break;
        case K_U32: COPY(uint32_t); break;
        case K_I32: COPY(int32_t); break;
        case K_U64: COPY(uint64_t); break;
        case K_I64: COPY(int64_t); break;
    }
#undef COPY
    return 0;
}

/* ---- permute-v1 ---------------------------------------------------------------------- */

/* splitmix64's finaliser (Steele, Lea and Flood, OOPSLA 2014). */
static inline uint64_t splitmix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

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

static PyObject *permute_v1(PyObject *mod, PyObject *args) {
    PyObject *pos_obj, *out_obj;
    long long n;
    unsigned long long key;
    if (!PyArg_ParseTuple(args, "OOLK", &pos_obj, &out_obj, &n, &key)) return NULL;
    if (n <= 0) {
        PyErr_SetString(PyExc_ValueError, "cannot permute an empty range");
        return NULL;
    }
    Py_buffer pb, ob;
    if (get_array(pos_obj, &pb, I64, 8, 0, "positions") < 0) return NULL;
    if (get_array(out_obj, &ob, I64, 8, 1, "out") < 0) {
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

static PyObject *quota_v1(PyObject *mod, PyObject *args) {
    PyObject *shares_obj, *units_obj, *out_obj, *ahead_obj;
    if (!PyArg_ParseTuple(args, "OOOO", &shares_obj, &units_obj, &out_obj, &ahead_obj))
        return NULL;
    Py_buffer sb, ub, ob;
    if (get_array(shares_obj, &sb, "d", 8, 0, "shares") < 0) return NULL;
    if (get_array(units_obj, &ub, I64, 8, 1, "units") < 0) {
        PyBuffer_Release(&sb);
        return NULL;
    }
    if (get_array(out_obj, &ob, I64, 8, 1, "out") < 0) {
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
            int rc = get_array(a, &ab[acquired], I64, 8, 0, "ahead");
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

/* ---- packing ------------------------------------------------------------------------- */

/* The arguments both packers' fill kernels take. */
typedef struct {
    ShardTable *table;
    Py_buffer span_start, span_end, lengths, doc_shard, doc_offset;
    Py_buffer ids, pos, seg, mask;
    Py_ssize_t docs;
    int64_t first_row_start, rows, seq, eod;
    int acquired;
} FillArgs;

static void fill_release(FillArgs *a) {
    Py_buffer *all[] = {&a->span_start, &a->span_end, &a->lengths, &a->doc_shard,
                        &a->doc_offset, &a->ids, &a->pos, &a->seg, &a->mask};
    for (int i = 0; i < a->acquired; i++) PyBuffer_Release(all[i]);
}

static int fill_parse(PyObject *args, FillArgs *a) {
    PyObject *o[9];
    long long first, rows, seq, eod;
    memset(a, 0, sizeof(*a));
    if (!PyArg_ParseTuple(args, "O!OOOOOLLLLOOOO", &ShardTableType, &a->table, &o[0], &o[1],
                          &o[2], &o[3], &o[4], &first, &rows, &seq, &eod, &o[5], &o[6], &o[7],
                          &o[8]))
        return -1;
    Py_buffer *all[] = {&a->span_start, &a->span_end, &a->lengths, &a->doc_shard,
                        &a->doc_offset, &a->ids, &a->pos, &a->seg, &a->mask};
    static const char *names[] = {"span_start", "span_end", "lengths", "doc_shard",
                                  "doc_offset", "ids", "position_ids", "segment_ids",
                                  "loss_mask"};
    static const char *letters[] = {I64, I64, I64, I64, I64, I64, I64, "i", "f"};
    static const Py_ssize_t sizes[] = {8, 8, 8, 8, 8, 8, 8, 4, 4};
    for (int i = 0; i < 9; i++) {
        if (get_array(o[i], all[i], letters[i], sizes[i], i >= 5, names[i]) < 0) {
            fill_release(a);
            return -1;
        }
        a->acquired = i + 1;
    }
    a->docs = a->span_end.len / 8;
    a->first_row_start = first;
    a->rows = rows;
    a->seq = seq;
    a->eod = eod;
    int window_ok = a->span_start.len / 8 == a->docs && a->lengths.len / 8 == a->docs &&
                    a->doc_shard.len / 8 == a->docs && a->doc_offset.len / 8 == a->docs;
    int out_ok = rows >= 0 && seq >= 1 && a->ids.len / 8 == rows * (seq + 1) &&
                 a->pos.len / 8 == rows * seq && a->seg.len / 4 == rows * seq &&
                 a->mask.len / 4 == rows * seq;
    if (!window_ok || !out_ok) {
        PyErr_SetString(PyExc_ValueError,
                        window_ok ? "outputs must be (rows, S + 1) ids and (rows, S) fields"
                                  : "window arrays must have one entry per document");
        fill_release(a);
        return -1;
    }
    return 0;
}

/* First window document whose span ends after stream position p (bisect right). */
static Py_ssize_t document_at(const int64_t *span_end, Py_ssize_t docs, int64_t p) {
    Py_ssize_t lo = 0, hi = docs;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (span_end[mid] <= p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

enum { FILL_OK = 0, FILL_UNCOVERED = 1, FILL_STORAGE = 2 };

static PyObject *fill_result(FillArgs *a, int status, int64_t zeros, int64_t padded,
                             int64_t stored) {
    fill_release(a);
    if (status == FILL_UNCOVERED) {
        PyErr_SetString(PyExc_ValueError, "the window does not cover the requested rows");
        return NULL;
    }
    if (status == FILL_STORAGE) {
        PyErr_SetString(PyExc_IndexError,
                        "a document lies outside its shard's tokens (shard index or offset)");
        return NULL;
    }
    return Py_BuildValue("LLL", (long long)(a->rows * a->seq - zeros), (long long)padded,
                         (long long)stored);
}

PER_CPU static int concat_rows(const FillArgs *a, int64_t *zeros_out, int64_t *stored_out) {
    /* Everything in locals and restrict pointers: the stores into the outputs could otherwise
     * alias *a, which would force reloads and keep the inner loops scalar. */
    const int64_t *restrict start = a->span_start.buf, *restrict end = a->span_end.buf;
    const int64_t *restrict len = a->lengths.buf, *restrict shard = a->doc_shard.buf;
    const int64_t *restrict offset = a->doc_offset.buf;
    int64_t *restrict ids = a->ids.buf, *restrict pos = a->pos.buf;
    int32_t *restrict seg = a->seg.buf;
    float *restrict mask = a->mask.buf;
    const ShardTable *table = a->table;
    const Py_ssize_t docs = a->docs;
    const int64_t S = a->seq, W = a->seq + 1, eod = a->eod, rows = a->rows;
    const int64_t first_row_start = a->first_row_start;
    int64_t zeros = 0, stored = 0;
    int status = FILL_OK;
    Py_ssize_t j = document_at(end, docs, first_row_start);
    for (int64_t r = 0; r < rows && status == FILL_OK; r++) {
        const int64_t row_start = first_row_start + r * S, row_end = row_start + W;
        int64_t *rid = ids + r * W, *rpos = pos + r * S;
        int32_t *rseg = seg + r * S;
        float *rmask = mask + r * S;
        for (int64_t c = 0; c < S; c++) rmask[c] = 1.0f;
        int64_t col = 0;
        int32_t piece = 0;
        Py_ssize_t k = j;
        for (;;) {
            if (k >= docs || start[k] > row_start + col || end[k] <= row_start + col) {
                status = FILL_UNCOVERED;
                break;
            }
            const int64_t lo = row_start + col, hi = end[k] < row_end ? end[k] : row_end;
            const int64_t first = lo - start[k], stop = hi - start[k], n = hi - lo;
            const int64_t real = (stop < len[k] ? stop : len[k]) - first;
            if (copy_tokens(table, shard[k], offset[k] + first, real, rid + col) < 0) {
                status = FILL_STORAGE;
                break;
            }
            stored += real;
            if (stop > len[k]) rid[col + real] = eod;
            piece++;
            const int64_t cells = col + n < S ? n : S - col;
            int64_t *p = rpos + col;
            int32_t *g = rseg + col;
            for (int64_t t = 0; t < cells; t++) {
                p[t] = t;
                g[t] = piece;
            }
            col += n;
            if (col >= W) break;
            /* The piece ends before its row: the next label starts another document. */
            rmask[col - 1] = 0.0f;
            zeros++;
            k++;
        }
        /* The next row starts at row_start + S, inside the last piece's document. */
        j = k;
    }
    *zeros_out = zeros;
    *stored_out = stored;
    return status;
}

/* concat-v1: row r is the window [a, a + S + 1) of the extended stream, a = first + r * S. */
static PyObject *fill_concat(PyObject *mod, PyObject *args) {
    FillArgs a;
    if (fill_parse(args, &a) < 0) return NULL;
    int64_t zeros = 0, stored = 0;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = concat_rows(&a, &zeros, &stored);
    Py_END_ALLOW_THREADS
    return fill_result(&a, status, zeros, 0, stored);
}

PER_CPU static int pad_rows(const FillArgs *a, int64_t *zeros_out, int64_t *padded_out,
                            int64_t *stored_out) {
    /* Everything in locals and restrict pointers: the stores into the outputs could otherwise
     * alias *a, which would force reloads and keep the inner loops scalar. */
    const int64_t *restrict start = a->span_start.buf, *restrict end = a->span_end.buf;
    const int64_t *restrict len = a->lengths.buf, *restrict shard = a->doc_shard.buf;
    const int64_t *restrict offset = a->doc_offset.buf;
    int64_t *restrict ids = a->ids.buf, *restrict pos = a->pos.buf;
    int32_t *restrict seg = a->seg.buf;
    float *restrict mask = a->mask.buf;
    const ShardTable *table = a->table;
    const Py_ssize_t docs = a->docs;
    const int64_t S = a->seq, W = a->seq + 1, eod = a->eod, rows = a->rows;
    const int64_t first_row_start = a->first_row_start;
    int64_t zeros = 0, padded = 0, stored = 0;
    int status = FILL_OK;
    Py_ssize_t j = document_at(end, docs, first_row_start);
    for (int64_t r = 0; r < rows; r++) {
        const Py_ssize_t k = j + r;
        if (k >= docs || start[k] != first_row_start + r) {
            status = FILL_UNCOVERED;
            break;
        }
        int64_t *rid = ids + r * W, *rpos = pos + r * S;
        int32_t *rseg = seg + r * S;
        float *rmask = mask + r * S;
        const int64_t n = len[k] + 1 < W ? len[k] + 1 : W;
        const int64_t real = n < len[k] ? n : len[k];
        if (copy_tokens(table, shard[k], offset[k], real, rid) < 0) {
            status = FILL_STORAGE;
            break;
        }
        stored += real;
        for (int64_t c = real; c < W; c++) rid[c] = eod;
        const int64_t inputs = n < S ? n : S;
        for (int64_t c = 0; c < inputs; c++) {
            rpos[c] = c;
            rseg[c] = 1;
        }
        for (int64_t c = inputs; c < S; c++) {
            rpos[c] = 0;
            rseg[c] = 0;
        }
        /* Labels from column n - 1 on are padding (the EOD -> pad prediction included). */
        const int64_t counted = n - 1 > 0 ? n - 1 : 0;
        for (int64_t c = 0; c < S; c++) rmask[c] = c < counted ? 1.0f : 0.0f;
        zeros += S - counted;
        padded += S - inputs;
    }
    *zeros_out = zeros;
    *padded_out = padded;
    *stored_out = stored;
    return status;
}

/* pad-v1: row r is window document j + r (one stream unit each), truncated and padded. */
static PyObject *fill_pad(PyObject *mod, PyObject *args) {
    FillArgs a;
    if (fill_parse(args, &a) < 0) return NULL;
    int64_t zeros = 0, padded = 0, stored = 0;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = pad_rows(&a, &zeros, &padded, &stored);
    Py_END_ALLOW_THREADS
    return fill_result(&a, status, zeros, padded, stored);
}

/* ---- module -------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"permute_v1", permute_v1, METH_VARARGS,
     "permute_v1(positions, out, n, key): permute-v1 of int64 positions into out."},
    {"quota_v1", quota_v1, METH_VARARGS,
     "quota_v1(shares, units, out, ahead): quota-v1 picks into out; units updated in place; "
     "ahead is None (one unit per draw) or one int64 array of next-document units per share."},
    {"fill_concat", fill_concat, METH_VARARGS,
     "fill_concat(table, span_start, span_end, lengths, doc_shard, doc_offset, first_row_start,"
     " rows, S, eod, ids, position_ids, segment_ids, loss_mask) -> (loss, padded, stored)."},
    {"fill_pad", fill_pad, METH_VARARGS,
     "fill_pad(...): pad-v1 rows, the same arguments as fill_concat."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_kernels",
    .m_doc = "runwright's compiled data-plane kernels.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__kernels(void) {
    if (PyType_Ready(&ShardTableType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&ShardTableType);
    if (PyModule_AddObject(m, "ShardTable", (PyObject *)&ShardTableType) < 0) {
        Py_DECREF(&ShardTableType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
