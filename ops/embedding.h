// Embedding lookup (gather) and its backward (scatter-add).
#pragma once
#include <cstdint>

#include "parallel.h"

namespace attnkit {

// y[i, :] = table[ids[i], :] for i < n; table is [vocab, d]. Ids must be in [0, vocab)
// (callers validate user input first; out-of-range ids here are a programming error).
// Slices split the n rows. With an addend [addend_rows, d], row i also gets
// addend[i mod addend_rows] added (e.g. a position table under token lookups).
void embedding_forward(const float* table, const int32_t* ids, float* y, int64_t n,
                       int64_t vocab, int64_t d, Slice s = {}, const float* addend = nullptr,
                       int64_t addend_rows = 0);

// dtable[ids[i], :] += dy[i, :]; with accumulate = false dtable is zeroed first (rows of ids
// that never occur end up 0). Slices split the vocabulary rows: each thread scans all ids in
// order and adds only rows it owns, so results are the same whatever the thread count and no
// two threads write the same row.
void embedding_backward(const int32_t* ids, const float* dy, float* dtable, int64_t n,
                        int64_t vocab, int64_t d, Slice s = {}, bool accumulate = true);

// Both gradients of a lookup with an addend (embedding_forward's addend [addend_rows, d]) in
// one pass over dy: the table's as embedding_backward, and daddend[a, :] (+)= Σ dy[i, :] over
// i ≡ a (mod addend_rows), each addend row summed in increasing i from 0 or its old value
// (bias_backward's order and bits). The rows are visited addend row by addend row (i = a,
// a + addend_rows, …), so a table row sums its dy rows in that order (the same whatever the
// thread count; not embedding_backward's bits). Slices split the table rows and the addend
// rows; n must be a multiple of addend_rows.
void embedding_addend_backward(const int32_t* ids, const float* dy, float* dtable, float* daddend, int64_t n,
                               int64_t vocab, int64_t d, int64_t addend_rows, Slice s, bool accumulate_table,
                               bool accumulate_addend);

}  // namespace attnkit
