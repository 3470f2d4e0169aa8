/* The data plane's compiled kernels: the per-document and per-cell loops of the loader.
 *
 * The algorithms are defined in Python (shuffle.py, mixture.py, packing.py) and these are
 * the same algorithms, one element at a time, with the same integer and IEEE-754 double
 * arithmetic, so a cursor written before or after them continues the same sequence (the tests
 * check every kernel against its Python definition). Why compiled: the loader's work per
 * step is a few hundred documents and S * rows cells, and in numpy every pass over them costs
 * a fixed ~1-20 us call whatever its size; the loop itself is a few nanoseconds per element.
 *
 * Every loop runs without the GIL, so the loader's read workers fill batches in parallel.
 *
 *   ShardTable(arrays)      token storage: one buffer per shard, acquired once
 *   permute_v1(...)         the keyed Feistel bijection with cycle walking
 *   quota_v1(...)           earliest-deadline-first over Pfair windows (exact quotas)
 *   fill_concat(...)        concat-v1 rows: tokens, position ids, segment ids, loss mask
 *   fill_pad(...)           pad-v1 rows
 */
#include "kernels.h"

static PyMethodDef methods[] = {
    {"permute_v1", rw_permute_v1, METH_VARARGS,
     "permute_v1(positions, out, n, key): permute-v1 of int64 positions into out."},
    {"quota_v1", rw_quota_v1, METH_VARARGS,
     "quota_v1(shares, units, out, ahead): quota-v1 picks into out; units updated in place; "
     "ahead is None (one unit per draw) or one int64 array of next-document units per share."},
    {"fill_concat", rw_fill_concat, METH_VARARGS,
     "fill_concat(table, span_start, span_end, lengths, doc_shard, doc_offset, first_row_start,"
     " rows, S, eod, ids, position_ids, segment_ids, loss_mask) -> (loss, padded, stored)."},
    {"fill_pad", rw_fill_pad, METH_VARARGS,
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
    if (PyType_Ready(&rw_ShardTableType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&rw_ShardTableType);
    if (PyModule_AddObject(m, "ShardTable", (PyObject *)&rw_ShardTableType) < 0) {
        Py_DECREF(&rw_ShardTableType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
