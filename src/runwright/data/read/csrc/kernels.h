/* runwright's compiled data-plane kernels: what the translation units share.
 *
 *   buffers.c   PEP 3118 buffers in and out; ShardTable, the token storage
 *   order.c     permute-v1 and quota-v1 (the logical order)
 *   fill.c      concat-v1 and pad-v1 row filling (the batch arrays)
 *   module.c    the `runwright.data.read._kernels` module
 */
#ifndef RUNWRIGHT_KERNELS_H
#define RUNWRIGHT_KERNELS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* The per-cell loops are compiled twice on x86-64 with GCC, for AVX2 and for the baseline, and
 * the loader picks the one the CPU supports when the module loads (an ifunc); AVX2 packs four
 * int64 stores per instruction instead of two (5-15% less time per fill, measured on an AMD
 * EPYC; the loops are mostly bound by memory bandwidth). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define PER_CPU __attribute__((target_clones("avx2", "default")))
#else
#define PER_CPU
#endif

/* Format letters of 8-byte signed integers (numpy's int64 is `l` on LP64, `q` elsewhere). */
#define I64 "lq"

typedef enum { K_U8, K_I8, K_U16, K_I16, K_U32, K_I32, K_U64, K_I64 } kind_t;

int rw_get_array(PyObject *obj, Py_buffer *b, const char *letters, Py_ssize_t itemsize,
                 int writable, const char *name);

typedef struct {
    PyObject_HEAD
    Py_ssize_t n;
    Py_buffer *bufs;
    kind_t *kinds;
    int64_t *tokens;
} ShardTable;

extern PyTypeObject rw_ShardTableType;

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

/* splitmix64's finaliser (Steele, Lea and Flood, OOPSLA 2014). */
static inline uint64_t splitmix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

PyObject *rw_permute_v1(PyObject *mod, PyObject *args);
PyObject *rw_quota_v1(PyObject *mod, PyObject *args);
PyObject *rw_fill_concat(PyObject *mod, PyObject *args);
PyObject *rw_fill_pad(PyObject *mod, PyObject *args);

#endif
