/* Buffers in and out of the kernels, and ShardTable (token storage, one buffer per shard).
 *
 * Arrays cross as buffers (PEP 3118), so the extension needs no numpy headers to build. */
#include <string.h>

#include "kernels.h"

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
int rw_get_array(PyObject *obj, Py_buffer *b, const char *letters, Py_ssize_t itemsize,
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

PyTypeObject rw_ShardTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "runwright.data.read._kernels.ShardTable",
    .tp_doc = "Token storage for the fill kernels: one buffer per shard, held while it lives.",
    .tp_basicsize = sizeof(ShardTable),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)ShardTable_init,
    .tp_dealloc = (destructor)ShardTable_dealloc,
    .tp_as_sequence = &ShardTable_as_sequence,
};
