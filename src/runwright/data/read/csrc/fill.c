/* Row filling for the packers (packing.py): concat-v1 and pad-v1 write a batch's token ids,
 * position ids, segment ids and loss mask straight from the planner's document window, one
 * pass per row. The definition, cut into pieces and copied piece by piece, is
 * tests/data/read/test_rows.py. */
#include <string.h>

#include "kernels.h"

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
    if (!PyArg_ParseTuple(args, "O!OOOOOLLLLOOOO", &rw_ShardTableType, &a->table, &o[0], &o[1],
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
        if (rw_get_array(o[i], all[i], letters[i], sizes[i], i >= 5, names[i]) < 0) {
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

/* The inner loops, with restrict pointers so they vectorise (the outputs alias nothing). */
static inline void number_cells(int64_t *restrict pos, int32_t *restrict seg, int64_t cells,
                                int32_t segment) {
    for (int64_t t = 0; t < cells; t++) {
        pos[t] = t;
        seg[t] = segment;
    }
}

static inline void mask_from(float *restrict mask, int64_t counted, int64_t cells) {
    for (int64_t c = 0; c < cells; c++) mask[c] = c < counted ? 1.0f : 0.0f;
}

PER_CPU static int concat_rows(const FillArgs *a, int64_t *zeros_out, int64_t *stored_out) {
    const int64_t *start = a->span_start.buf, *end = a->span_end.buf, *len = a->lengths.buf;
    const int64_t *shard = a->doc_shard.buf, *offset = a->doc_offset.buf;
    const int64_t S = a->seq, W = a->seq + 1;
    int64_t zeros = 0, stored = 0;
    int status = FILL_OK;
    Py_ssize_t j = document_at(end, a->docs, a->first_row_start);
    for (int64_t r = 0; r < a->rows && status == FILL_OK; r++) {
        const int64_t row_start = a->first_row_start + r * S, row_end = row_start + W;
        int64_t *rid = (int64_t *)a->ids.buf + r * W, *rpos = (int64_t *)a->pos.buf + r * S;
        int32_t *rseg = (int32_t *)a->seg.buf + r * S;
        float *rmask = (float *)a->mask.buf + r * S;
        mask_from(rmask, S, S);
        int64_t col = 0;
        int32_t piece = 0;
        Py_ssize_t k = j;
        for (;;) {
            if (k >= a->docs || start[k] > row_start + col || end[k] <= row_start + col) {
                status = FILL_UNCOVERED;
                break;
            }
            const int64_t lo = row_start + col, hi = end[k] < row_end ? end[k] : row_end;
            const int64_t first = lo - start[k], stop = hi - start[k], n = hi - lo;
            const int64_t real = (stop < len[k] ? stop : len[k]) - first;
            if (copy_tokens(a->table, shard[k], offset[k] + first, real, rid + col) < 0) {
                status = FILL_STORAGE;
                break;
            }
            stored += real;
            if (stop > len[k]) rid[col + real] = a->eod;
            number_cells(rpos + col, rseg + col, col + n < S ? n : S - col, ++piece);
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
PyObject *rw_fill_concat(PyObject *mod, PyObject *args) {
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
    const int64_t *start = a->span_start.buf, *end = a->span_end.buf, *len = a->lengths.buf;
    const int64_t *shard = a->doc_shard.buf, *offset = a->doc_offset.buf;
    const int64_t S = a->seq, W = a->seq + 1;
    int64_t zeros = 0, padded = 0, stored = 0;
    int status = FILL_OK;
    Py_ssize_t j = document_at(end, a->docs, a->first_row_start);
    for (int64_t r = 0; r < a->rows; r++) {
        const Py_ssize_t k = j + r;
        if (k >= a->docs || start[k] != a->first_row_start + r) {
            status = FILL_UNCOVERED;
            break;
        }
        int64_t *rid = (int64_t *)a->ids.buf + r * W, *rpos = (int64_t *)a->pos.buf + r * S;
        int32_t *rseg = (int32_t *)a->seg.buf + r * S;
        const int64_t n = len[k] + 1 < W ? len[k] + 1 : W;
        const int64_t real = n < len[k] ? n : len[k];
        if (copy_tokens(a->table, shard[k], offset[k], real, rid) < 0) {
            status = FILL_STORAGE;
            break;
        }
        stored += real;
        for (int64_t c = real; c < W; c++) rid[c] = a->eod;
        const int64_t inputs = n < S ? n : S;
        number_cells(rpos, rseg, inputs, 1);
        memset(rpos + inputs, 0, sizeof(int64_t) * (size_t)(S - inputs));
        memset(rseg + inputs, 0, sizeof(int32_t) * (size_t)(S - inputs));
        /* Labels from column n - 1 on are padding (the EOD -> pad prediction included). */
        const int64_t counted = n - 1 > 0 ? n - 1 : 0;
        mask_from((float *)a->mask.buf + r * S, counted, S);
        zeros += S - counted;
        padded += S - inputs;
    }
    *zeros_out = zeros;
    *padded_out = padded;
    *stored_out = stored;
    return status;
}

/* pad-v1: row r is window document j + r (one stream unit each), truncated and padded. */
PyObject *rw_fill_pad(PyObject *mod, PyObject *args) {
    FillArgs a;
    if (fill_parse(args, &a) < 0) return NULL;
    int64_t zeros = 0, padded = 0, stored = 0;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = pad_rows(&a, &zeros, &padded, &stored);
    Py_END_ALLOW_THREADS
    return fill_result(&a, status, zeros, padded, stored);
}
