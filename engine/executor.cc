// The executor: memory blocks, barrier planning, input checks and the parallel run of the
// nodes. Its adaptive thread use is engine/thread_probe.cc, its per-node profiling
// engine/profile.cc.
#include "engine/executor.h"

#include <omp.h>
#include <unistd.h>
#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>

#include "engine/barrier.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/rng.h"
#include "engine/simd_target.h"
#include "ops/gemm_bf16.h"

namespace attnkit {

namespace {

// Subnormal floats flushed to zero (FTZ: results, DAZ: inputs) in this thread while the
// scope lives, the thread's previous mode restored after (see ExecutorOptions::flush_denormals).
class FlushDenormalsScope {
 public:
  explicit FlushDenormalsScope(bool on) {
#if defined(__SSE__) || defined(__x86_64__)
    if (!on) return;
    saved_ = _mm_getcsr();
    constexpr unsigned kFtzDaz = 0x8040;  // MXCSR bit 15 flush-to-zero, bit 6 denormals-are-zero
    if ((saved_ & kFtzDaz) != kFtzDaz) {
      _mm_setcsr(saved_ | kFtzDaz);
      restore_ = true;
    }
#else
    (void)on;
#endif
  }
  ~FlushDenormalsScope() {
#if defined(__SSE__) || defined(__x86_64__)
    if (restore_) _mm_setcsr((_mm_getcsr() & 0x3fu) | (saved_ & ~0x3fu));  // (the exception flags raised stay)
#endif
  }
  FlushDenormalsScope(const FlushDenormalsScope&) = delete;
  FlushDenormalsScope& operator=(const FlushDenormalsScope&) = delete;

 private:
  unsigned saved_ = 0;
  bool restore_ = false;
};

// Whether every node of a forward-only graph computes each row of its batched outputs from
// the same rows of its batched inputs (and its unbatched outputs from unbatched inputs only),
// so that the batch can run a chunk of rows at a time. Ops not listed (reductions over the
// batch, losses, reshapes and transposes that may move the batch dim, dropout) keep the
// whole batch in one run.
bool runs_row_by_row(const Graph& g) {
  if (g.has_backward()) return false;
  for (const Node& n : g.nodes()) {
    bool touches_batch = false;  // weights-only nodes (e.g. the folded value tables) do not see rows
    for (const auto* list : {&n.in, &n.out, &n.scratch})
      for (TensorId t : *list) touches_batch = touches_batch || (t != kNoTensor && g.tensor(t).batched);
    if (!touches_batch) continue;
    switch (n.op) {
      case OpKind::kEmbedding: case OpKind::kLinear: case OpKind::kAdd: case OpKind::kRelu:
      case OpKind::kLayerNorm: case OpKind::kAttention: case OpKind::kAddBroadcast: case OpKind::kSub:
      case OpKind::kMul: case OpKind::kDiv: case OpKind::kAddScalar: case OpKind::kMulScalar:
      case OpKind::kRsubScalar: case OpKind::kDivScalar: case OpKind::kRdivScalar: case OpKind::kExp:
      case OpKind::kLog: case OpKind::kTanh: case OpKind::kSigmoid: case OpKind::kGelu:
      case OpKind::kSumLast: case OpKind::kMeanLast: case OpKind::kSoftmax: case OpKind::kMaskedFill:
        break;
      default:
        return false;
    }
    bool batched_in = false;
    for (TensorId t : n.in) batched_in = batched_in || (t != kNoTensor && g.tensor(t).batched);
    for (TensorId t : n.out)
      if (t != kNoTensor && g.tensor(t).batched != batched_in) return false;
    for (TensorId t : n.scratch)
      if (t != kNoTensor && g.tensor(t).batched && !batched_in) return false;
  }
  return true;
}

// Whether a training graph's step can run in chunks of batch entries (see
// ExecutorOptions::train_chunk_rows), so that the chunks' parameter gradients sum to the whole
// batch's: every node that sees the batch is one of the ops below (slices and joins not along
// the batch) and computes each row of its batched outputs from the same rows of its batched
// inputs; in the forward, the one
// unbatched result made from batched rows is the cross-entropy's loss (kept, over targets fed
// whole so that it can count the whole batch's positions, and read by no forward node); in
// the backward, unbatched gradients made from the batch (a broadcast position table's:
// sums over rows, linear in them) are recomputed per chunk, and every parameter gradient is
// added to (never set) from batch-made values only — a term made from the parameters alone
// would count once per chunk.
bool trains_row_by_row(const Graph& g) {
  if (!g.has_backward()) return false;
  const size_t nt = g.tensors().size();
  std::vector<bool> loss(nt, false), from_batch(nt, false);
  for (size_t t = 0; t < nt; ++t) from_batch[t] = g.tensors()[t].batched;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    const bool forward = i < g.forward_nodes();
    bool batched_in = false, batch_made_in = false;
    for (TensorId t : n.in) {
      if (t == kNoTensor) continue;
      batched_in = batched_in || g.tensor(t).batched;
      batch_made_in = batch_made_in || from_batch[static_cast<size_t>(t)];
      if (forward && loss[static_cast<size_t>(t)]) return false;  // a forward use of the loss
    }
    bool touches_batch = batch_made_in;
    for (const auto* list : {&n.out, &n.scratch})
      for (TensorId t : *list) touches_batch = touches_batch || (t != kNoTensor && g.tensor(t).batched);
    for (size_t o = 0; o < n.out.size(); ++o) {
      const TensorId t = n.out[o];
      if (t == kNoTensor) continue;
      const TensorDesc& d = g.tensor(t);
      if (d.storage == Storage::kParamGrad) {
        if (!batch_made_in || !n.accumulates(o)) return false;
      } else if (d.batched) {
        if (!batched_in) return false;
      } else if (batch_made_in) {
        if (forward && (n.op != OpKind::kCrossEntropy || o != 0 || !d.keep)) return false;
        if (!forward && d.keep) return false;  // a kept gradient (retain_grad) would hold the last chunk's share
        if (forward) loss[static_cast<size_t>(t)] = true;
        from_batch[static_cast<size_t>(t)] = !forward;
      }
    }
    for (TensorId t : n.scratch)
      if (t != kNoTensor && g.tensor(t).batched && !batched_in) return false;
    // The cross-entropy counts the whole batch's positions from its chunk's: batched logits only.
    if ((n.op == OpKind::kCrossEntropy || n.op == OpKind::kCrossEntropyBackward) && !g.tensor(n.in[0]).batched)
      return false;
    if (!touches_batch) continue;
    switch (n.op) {
      case OpKind::kEmbedding: case OpKind::kLinear: case OpKind::kAdd: case OpKind::kRelu:
      case OpKind::kLayerNorm: case OpKind::kAttention: case OpKind::kEmbeddingBackward:
      case OpKind::kLinearBackward: case OpKind::kReluBackward: case OpKind::kLayerNormBackward:
      case OpKind::kAttentionBackward: case OpKind::kAttentionValuesBackward: case OpKind::kAccumulate:
      case OpKind::kBiasBackward:
        break;
      case OpKind::kCrossEntropy: case OpKind::kCrossEntropyBackward:
        if (g.tensor(n.in[1]).storage != Storage::kInput) return false;
        break;
      case OpKind::kNarrow: case OpKind::kNarrowBackward: case OpKind::kConcat:  // (a model's heads)
        if (n.attrs.axis0 == 0 && (batched_in || g.tensor(n.out[0]).batched)) return false;  // along the batch
        break;
      default:
        return false;
    }
  }
  return true;
}

// Batch entries holding at least `min_rows` rows of the products ([batch, tokens, features]
// tensors have `tokens` rows an entry).
int64_t entries_for_rows(const Graph& graph, int64_t min_rows) {
  int64_t rows_per_sample = 1;
  for (const TensorDesc& d : graph.tensors())
    if (d.batched && d.shape.rank == 3)  // [batch, tokens, features]: the products' rows
      rows_per_sample = std::max(rows_per_sample, d.shape[1]);
  return (min_rows + rows_per_sample - 1) / rows_per_sample;
}

}  // namespace

// The whole-batch plan, or for a row-by-row inference graph whose arena would exceed
// chunk_bytes, the plan of a chunk of rows that fits it; for a training graph, see
// ExecutorOptions::train_chunk_rows.
constexpr int64_t kMinChunkRows = 1024;
// A bf16 training step's chunks: its products are bound by moving float32 activations, not by
// the tile unit, so each chunk's should fit one core's L2 (reversal-large: 2 sequences, 256
// rows, its MLP's hidden 1 MB). The weights are packed once a step whatever the chunk count
// (GemmEpilogue::b_stamp). Float32 steps keep kMinChunkRows (smaller chunks: 7% slower at 2
// threads, the same at 1).
constexpr int64_t kMinChunkRowsBf16 = 256;

MemoryPlan Executor::make_plan(const Graph& graph, const ExecutorOptions& options) {
  const int64_t max_batch = graph.max_batch();
  if (options.train_shards < 0 || options.train_shards > ExecutorOptions::kMaxTrainShards)
    throw Error("executor: train_shards must be 0 (off) to " + std::to_string(ExecutorOptions::kMaxTrainShards) +
                ", got " + std::to_string(options.train_shards));
  if (graph.has_backward()) {
    if (options.train_chunk_rows < -1)
      throw Error("executor: train_chunk_rows must be -1 (by the arena's size), 0 (whole batches) or a number of "
                  "batch entries, got " + std::to_string(options.train_chunk_rows));
    if (options.train_shards >= 2) {  // each shard's rows, planned once (see run_shards)
      if (options.train_chunk_rows > 0)
        throw Error("executor: train_shards and train_chunk_rows > 0 exclude each other (a shard is already a part of "
                    "the batch)");
      if (!trains_row_by_row(graph))
        throw Error("executor: train_shards needs a graph whose training step can run on parts of its batch (every "
                    "node row by row, the loss a cross-entropy over whole targets, no dropout, no kept gradients)");
      return plan_memory(graph, {(max_batch + options.train_shards - 1) / options.train_shards});
    }
    if (options.train_chunk_rows == 0 || max_batch < 2 || !trains_row_by_row(graph)) return plan_memory(graph);
    int64_t rows = options.train_chunk_rows;
    if (rows < 0) {
      MemoryPlan whole = plan_memory(graph);
      if (whole.arena_bytes <= ExecutorOptions::kTrainChunkArenaBytes) return whole;
      const bool bf16 = options.precision == Precision::kBf16 && bf16_kernel() != Bf16Kernel::kNone;
      rows = entries_for_rows(graph, bf16 ? kMinChunkRowsBf16 : kMinChunkRows);
    }
    if (rows >= max_batch) return plan_memory(graph);
    return plan_memory(graph, {rows});
  }
  if (options.chunk_bytes <= 0 || !runs_row_by_row(graph)) return plan_memory(graph);
  // A batch that fits is planned as one chunk of max_batch rows: the weights-only results then
  // stay in the arena between calls (fixed_parameters) and several threads take a share of
  // the rows each (run_chunks_per_thread).
  if (max_batch < 2) return plan_memory(graph, {max_batch});
  // Bytes per row: the arena of a small chunk (its unbatched tensors counted in, which errs
  // towards smaller chunks) and the rows of the results it writes.
  const int64_t probe_rows = std::min<int64_t>(max_batch - 1, 16);
  const MemoryPlan probe = plan_memory(graph, {probe_rows});
  const int64_t per_row = (probe.arena_bytes + probe.kept_bytes / max_batch * probe_rows) / probe_rows;
  // Each thread runs whole chunks in its own core's cache (run_chunks_per_thread), so the
  // chunk's size does not depend on the thread count.
  int64_t rows = per_row > 0 ? options.chunk_bytes / per_row : max_batch;
  // Products of fewer rows lose more to packing and tile edges than the cache saves: at
  // least kMinChunkRows rows of each batched matrix (reversal-large, 1.5 MB a sequence, would
  // otherwise run a sequence at a time, its GEMMs at 128 rows).
  rows = std::max(rows, entries_for_rows(graph, kMinChunkRows));
  if (rows >= max_batch) return plan_memory(graph, {max_batch});
  if (rows > 16) rows = rows / 8 * 8;  // whole vectors of rows for the products
  return plan_memory(graph, {std::max<int64_t>(1, rows)});
}

namespace {

// Buffers larger than the process may have (memory_limit: physical memory, lower rlimits)
// are refused up front: under Linux's overcommit each allocation may succeed and the process
// then thrash or meet the OOM killer while the arena is zeroed.
// extra_arenas: the arenas of threads other than the first (whole chunks or shards each);
// shards: train_shards (each shard past the first has a gradient block of its own).
void check_memory(const MemoryPlan& plan, int64_t param_count, int64_t input_bytes, int extra_arenas, int shards) {
  const double params = (2.0 + std::max(0, shards - 1)) * 4.0 * static_cast<double>(param_count);  // values, gradients
  const double arenas = (1.0 + extra_arenas) * static_cast<double>(plan.arena_bytes);
  const double need = arenas + static_cast<double>(plan.kept_bytes) + params + static_cast<double>(input_bytes);
  const double memory = static_cast<double>(memory_limit());
  if (need <= memory) return;
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "the graph needs %.1f GB (arena %.1f GB, kept tensors %.1f GB, %lld parameters with their gradients "
                "%.1f GB, inputs %.1f GB), more than the %.1f GB of memory this process may have",
                need / 1e9, arenas / 1e9, static_cast<double>(plan.kept_bytes) / 1e9,
                static_cast<long long>(param_count), params / 1e9, static_cast<double>(input_bytes) / 1e9,
                memory / 1e9);
  throw MemoryError(buf);
}

}  // namespace

Executor::Executor(const Graph& graph, ExecutorOptions options)
    : graph_(graph),
      plan_(make_plan(graph, options)),
      threads_(1),
      batch_(graph.max_batch()),
      rows_now_(graph.max_batch()),
      adaptive_(options.adaptive_threads),
      fixed_parameters_(options.fixed_parameters) {
  apply_simd_target_env();
  bf16_ = options.precision == Precision::kBf16 && bf16_kernel() != Bf16Kernel::kNone;
  flush_denormals_ = options.flush_denormals;
  set_threads(options.threads);
  // Inputs: each its own 64-byte aligned slot in one block.
  input_offsets_.assign(graph.tensors().size(), -1);
  int64_t bytes = 0;
  for (size_t t = 0; t < graph.tensors().size(); ++t) {
    const TensorDesc& d = graph.tensors()[t];
    if (d.storage != Storage::kInput) continue;
    input_offsets_[t] = bytes;
    bytes += (d.bytes() + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  }
  chunks_per_thread_ = can_run_chunks_per_thread(graph, plan_);
  shards_ = graph.has_backward() && options.train_shards >= 2 ? options.train_shards : 0;
  const int extra_arenas = chunks_per_thread_ || shards_ > 0 ? std::max(1, options.threads) - 1 : 0;
  check_memory(plan_, graph.param_count(), bytes, extra_arenas, shards_);
  arena_.resize(plan_.arena_bytes);
  kept_.resize(plan_.kept_bytes);
  params_.resize(graph.param_count() * 4);
  grads_.resize(graph.param_count() * 4);
  inputs_.resize(bytes);
  consts_.resize(static_cast<int64_t>(graph.const_data().size()) * 4);
  if (!graph.const_data().empty())
    std::memcpy(consts_.data(), graph.const_data().data(), graph.const_data().size() * 4);
  place_tensors();
  for (ShardResult& r : shard_results_of_)
    for (const Node& n : graph.nodes())
      r.summed = r.summed || (n.op == OpKind::kCrossEntropy && !n.out.empty() && n.out[0] == r.id &&
                              graph.tensor(r.id).dtype == DType::kF32);
  for (int k = 1; k < shards_; ++k) shard_grads_.emplace_back(graph.param_count() * 4);
  shard_results_.resize(shards_ * shard_result_bytes_);
  init_parameters(options.seed);
  plan_barriers();
  id_checks_ = find_id_checks(graph);
  task_counters_.reset(new TaskCounter[(graph.nodes().size() + 1) * kNodeTaskCounters]);
}

const char* precision_name(Precision p) { return p == Precision::kBf16 ? "bf16" : "f32"; }

Precision parse_precision(const std::string& name) {
  std::string n;
  for (char ch : name) n += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (n == "f32" || n == "fp32" || n == "float32") return Precision::kF32;
  if (n == "bf16" || n == "bfloat16") return Precision::kBf16;
  throw Error("unknown precision '" + name + "' (choices: f32, bf16)");
}

namespace {

// A byte range of one of the executor's blocks.
struct Range {
  int block;  // 0 arena, 1 parameters, 2 gradients, 3 inputs, 4 constants, 5 optimizer state, 6 results
  int64_t lo, hi;
};

bool overlaps(const std::vector<Range>& a, const std::vector<Range>& b) {
  for (const Range& x : a)
    for (const Range& y : b)
      if (x.block == y.block && x.lo < y.hi && y.lo < x.hi) return true;
  return false;
}

}  // namespace

void Executor::plan_barriers() {
  const auto& nodes = graph_.nodes();
  auto range_of = [&](TensorId id) {
    const TensorDesc& d = graph_.tensor(id);
    switch (d.storage) {
      case Storage::kArena: {
        const int64_t kept = plan_.kept_offsets[static_cast<size_t>(id)];
        if (kept >= 0) return Range{6, kept, kept + d.bytes()};  // a chunked plan's result: all its rows
        const int64_t offset = plan_.offsets[static_cast<size_t>(id)];
        return Range{0, offset, offset + plan_.bytes(graph_, id)};
      }
      case Storage::kParam: return Range{1, d.offset * 4, d.offset * 4 + d.bytes()};
      case Storage::kParamGrad: return Range{2, d.offset * 4, d.offset * 4 + d.bytes()};
      case Storage::kInput: return Range{3, input_offsets_[static_cast<size_t>(id)], input_offsets_[static_cast<size_t>(id)] + d.bytes()};
      case Storage::kConst: return Range{4, d.offset, d.offset + d.bytes()};
    }
    return Range{-1, 0, 0};
  };
  const Range all_grads{2, 0, graph_.param_count() * 4};
  // The phase (nodes since the last barrier) starts with the gradient zeroing.
  std::vector<Range> phase_reads, phase_writes;
  phase_writes.push_back(all_grads);
  barrier_before_.assign(nodes.size() + 1, false);
  for (size_t i = 0; i <= nodes.size(); ++i) {
    std::vector<Range> reads, writes;
    if (i < nodes.size()) {
      const Node& n = nodes[i];
      for (TensorId t : n.in)
        if (t != kNoTensor) reads.push_back(range_of(t));
      for (size_t o = 0; o < n.out.size(); ++o) {
        if (n.out[o] == kNoTensor) continue;
        writes.push_back(range_of(n.out[o]));
        if (n.accumulates(o)) reads.push_back(range_of(n.out[o]));
      }
      for (TensorId t : n.scratch) writes.push_back(range_of(t));
    } else {  // the optimizer: reads gradients, updates parameters and its moments
      reads.push_back(all_grads);
      writes.push_back(Range{1, 0, graph_.param_count() * 4});
      writes.push_back(Range{5, 0, 1});
    }
    if (overlaps(writes, phase_reads) || overlaps(writes, phase_writes) || overlaps(reads, phase_writes)) {
      barrier_before_[i] = true;
      phase_reads.clear();
      phase_writes.clear();
    }
    phase_reads.insert(phase_reads.end(), reads.begin(), reads.end());
    phase_writes.insert(phase_writes.end(), writes.begin(), writes.end());
  }
}

int64_t Executor::barriers_per_step() const {
  int64_t n = 0;
  for (bool b : barrier_before_) n += b;
  return n;
}

void Executor::set_batch(int64_t batch) {
  if (batch < 1 || batch > graph_.max_batch())
    throw Error("executor: batch " + std::to_string(batch) + " is outside [1, " +
                std::to_string(graph_.max_batch()) + "] the graph was planned for");
  batch_ = rows_now_ = batch;
}

void Executor::set_threads(int threads) {
  if (threads < 1) throw Error("executor: threads must be at least 1, got " + std::to_string(threads));
  threads_ = threads;
}

void Executor::init_parameters(uint64_t seed) {
  parameters_changed();
  Rng rng(seed);
  if (params_.size() > 0)  // a graph without parameters has no block (memset of null is UB)
    std::memset(params_.data(), 0, static_cast<size_t>(params_.size()));
  for (const ParamInfo& p : graph_.params()) {
    float* w = params_.f32() + p.offset;
    for (int64_t i = 0; i < p.numel; ++i) {
      switch (p.init) {
        case Init::kZeros: w[i] = 0.0f; break;
        case Init::kOnes: w[i] = 1.0f; break;
        case Init::kNormal: w[i] = static_cast<float>(rng.normal() * p.init_std); break;
      }
    }
  }
}

void Executor::place_tensors() {
  const size_t n = graph_.tensors().size();
  places_.assign(n, Place{});
  for (size_t t = 0; t < n; ++t) {
    const TensorDesc& d = graph_.tensors()[t];
    Place& at = places_[t];
    // In a chunked run the results and batched inputs are whole: the chunk's rows start row0_ in.
    const int64_t row_bytes = d.batched && d.shape[0] > 0 ? d.bytes() / d.shape[0] : 0;
    switch (d.storage) {
      case Storage::kArena: {
        const int64_t kept = plan_.kept_offsets[t];
        if (kept >= 0) {
          at.base = kept_.data() + kept, at.row_bytes = row_bytes;
        } else if (plan_.offsets[t] >= 0) {
          at.base = arena_.data() + plan_.offsets[t];
          if ((chunks_per_thread_ && in_thread_arena(graph_, plan_, t)) || shards_ > 0) at.chunk_offset = plan_.offsets[t];
        } else {
          at.computed = false;  // no node of the (optimized) graph touches it
        }
        if (shards_ > 0 && at.computed && d.keep && !d.batched) {  // the loss: each shard's own, summed after
          at.shard_result_offset = shard_result_bytes_;
          shard_result_bytes_ += (d.bytes() + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
          shard_results_of_.push_back({static_cast<TensorId>(t), false});
        }
        break;
      }
      case Storage::kParam: at.base = params_.data() + d.offset * 4; break;
      case Storage::kParamGrad:
        at.base = grads_.data() + d.offset * 4;
        if (shards_ > 0) at.grad_offset = d.offset * 4;
        break;
      case Storage::kInput: at.base = inputs_.data() + input_offsets_[t], at.row_bytes = row_bytes; break;
      case Storage::kConst: at.base = consts_.data() + d.offset; break;
    }
  }
}

void* Executor::ptr(TensorId id) const {
  const Place& at = places_[static_cast<size_t>(id)];
  if (!at.computed)
    throw Error("executor: tensor " + graph_.describe(id) + " is not computed by this graph (nothing uses it)");
  return at.base + row0_ * at.row_bytes;
}

float* Executor::f32(TensorId id) const { return static_cast<float*>(ptr(id)); }
int32_t* Executor::i32(TensorId id) const { return static_cast<int32_t*>(ptr(id)); }
uint8_t* Executor::u8(TensorId id) const { return static_cast<uint8_t*>(ptr(id)); }

Shape Executor::shape_at(TensorId id, int64_t rows) const {
  const TensorDesc& d = graph_.tensor(id);
  Shape s = d.shape;
  if (d.batched) s.dims[0] = rows;
  return s;
}

Shape Executor::shape(TensorId id) const { return shape_at(id, rows_now_); }

std::vector<Executor::IdCheck> Executor::find_id_checks(const Graph& graph) {
  std::vector<IdCheck> checks;
  for (size_t i = 0; i < graph.forward_nodes(); ++i) {
    const Node& n = graph.nodes()[i];
    const OpDef& def = op_def(n.op);
    size_t input = 0;
    int64_t lo = 0, hi = 0;
    if (!def.id_range || !def.id_range(graph, n, &input, &lo, &hi) || input >= n.in.size()) continue;
    const TensorId ids = n.in[input];
    if (ids == kNoTensor || graph.tensor(ids).storage != Storage::kInput) continue;
    bool seen = false;  // (one lookup's ids and an indexed attention's: the same range)
    for (const IdCheck& c : checks) seen = seen || (c.ids == ids && c.lo == lo && c.hi == hi);
    if (!seen) checks.push_back({ids, lo, hi});
  }
  return checks;
}

// Token ids and targets come from users and files: check them before any kernel reads them
// (the checks found once, id_checks_).
void Executor::validate_inputs() const {
  for (const IdCheck& check : id_checks_) {
    const TensorId ids = check.ids;
    const int64_t lo = check.lo, hi = check.hi;
    const int32_t* p = i32(ids);
    const int64_t count = shape(ids).numel();
    const uint32_t span = static_cast<uint32_t>(hi - lo);
    int64_t bad = -1;
    for (int64_t j = 0; j < count && bad < 0; j += 256) {  // branch-free blocks, then the first bad one
      const int64_t e = std::min(count, j + 256);
      bool any = false;
      for (int64_t k = j; k < e; ++k) any |= static_cast<uint32_t>(p[k] - lo) >= span;
      if (any)
        for (int64_t k = j; k < e && bad < 0; ++k)
          if (p[k] < lo || p[k] >= hi) bad = k;
    }
    if (bad < 0) continue;
    const TensorDesc& d = graph_.tensor(ids);
    const int64_t per_sample = d.batched && count > 0 ? count / shape(ids)[0] : 0;
    const std::string where = per_sample > 0 ? "sequence " + std::to_string(bad / per_sample) + ", position " +
                                                   std::to_string(bad % per_sample)
                                             : "flat index " + std::to_string(bad);
    throw Error("input '" + d.name + "', " + where + ": value " + std::to_string(p[bad]) + " is outside [" +
                std::to_string(lo) + ", " + std::to_string(hi) + ")");
  }
}

namespace {
// Stamps of chunked runs (constant_stamp): one counter for every run of every executor of the
// process. (A static inside run_chunks would be one counter per instantiation — per call
// site's lambda — and a forward() after a train_step could get the step's stamp and multiply
// by the weights packed before the update.)
std::atomic<uint64_t> g_last_run_stamp{0};
uint64_t next_run_stamp() { return ++g_last_run_stamp; }
}  // namespace

template <typename Run>
void Executor::run_chunks(Run run) {
  if (plan_.rows <= 0 || batch_ <= plan_.rows) {
    run();
    return;
  }
  struct Whole {  // back to the whole batch after the run, also when it throws
    Executor& ex;
    ~Whole() { ex.row0_ = 0, ex.rows_now_ = ex.batch_, ex.chunked_run_stamp_ = 0; }
  } whole{*this};
  chunked_run_stamp_ = next_run_stamp();
  for (int64_t r = 0; r < batch_; r += plan_.rows) {
    row0_ = r;
    rows_now_ = std::min(plan_.rows, batch_ - r);
    run();
  }
}

bool Executor::in_thread_arena(const Graph& graph, const MemoryPlan& plan, size_t t) {
  return graph.tensors()[t].storage == Storage::kArena && plan.kept_offsets[t] < 0 && plan.offsets[t] >= 0 &&
         plan.first_use[t] >= static_cast<int64_t>(graph.unbatched_prefix());
}

bool Executor::can_run_chunks_per_thread(const Graph& graph, const MemoryPlan& plan) {
  if (graph.has_backward() || plan.rows <= 0) return false;
  // After the prefix every write must be private to a chunk: batched rows (the chunk's own,
  // in the arena or in place in a kept result) or unbatched arena scratch (each thread's own
  // arena). An unbatched kept result or any other block would be written by every thread.
  for (size_t i = graph.unbatched_prefix(); i < graph.forward_nodes(); ++i) {
    const Node& n = graph.nodes()[i];
    for (const auto* list : {&n.out, &n.scratch})
      for (TensorId t : *list) {
        if (t == kNoTensor) continue;
        const TensorDesc& d = graph.tensor(t);
        if (!d.batched && !in_thread_arena(graph, plan, static_cast<size_t>(t))) return false;
        if (d.batched && d.storage != Storage::kArena) return false;
      }
  }
  return true;
}

// One thread's RunContext in run_chunks_per_thread: the executor's blocks, its chunk's rows
// of the batched inputs and results, and its own arena for what the chunk computes.
class Executor::ChunkView final : public RunContext {
 public:
  ChunkView(const Executor& ex, uint8_t* arena) : ex_(ex), arena_(arena) {}
  void set_chunk(int64_t row0, int64_t rows) { row0_ = row0, rows_ = rows; }
  // A training shard's: its gradient block and its block of kept unbatched results (the loss).
  void set_shard(uint8_t* grads, uint8_t* results) {
    grads_ = grads;
    results_ = results;
    training_ = true;
  }
  float* f32(TensorId id) const override { return static_cast<float*>(ptr(id)); }
  int32_t* i32(TensorId id) const override { return static_cast<int32_t*>(ptr(id)); }
  uint8_t* u8(TensorId id) const override { return static_cast<uint8_t*>(ptr(id)); }
  Shape shape(TensorId id) const override { return ex_.shape_at(id, rows_); }
  int64_t batch() const override { return rows_; }
  int64_t chunk_first_row() const override { return row0_; }
  int64_t whole_batch() const override { return ex_.batch_; }
  uint64_t constant_stamp(TensorId id) const override { return ex_.constant_stamp(id); }
  bool training() const override { return training_; }
  int64_t training_steps() const override { return ex_.training_steps(); }

 private:
  void* ptr(TensorId id) const {
    const Place& at = ex_.places_[static_cast<size_t>(id)];
    if (results_ && at.shard_result_offset >= 0) return results_ + at.shard_result_offset;
    if (at.chunk_offset >= 0) return arena_ + at.chunk_offset;
    if (grads_ && at.grad_offset >= 0) return grads_ + at.grad_offset;
    return at.computed ? at.base + row0_ * at.row_bytes : ex_.ptr(id);  // (ex_.ptr throws)
  }
  const Executor& ex_;
  uint8_t* arena_;
  uint8_t* grads_ = nullptr;
  uint8_t* results_ = nullptr;
  int64_t row0_ = 0, rows_ = 0;
  bool training_ = false;
};

namespace {
// Profiling's node times: lap(line) adds the time since the last lap (or since made) to
// seconds[line]. Made with null seconds it reads no clock.
class NodeClock {
 public:
  explicit NodeClock(double* seconds)
      : seconds_(seconds), t0_(seconds ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{}) {}
  void lap(size_t line) {
    if (!seconds_) return;
    const auto t1 = std::chrono::steady_clock::now();
    seconds_[line] += std::chrono::duration<double>(t1 - t0_).count();
    t0_ = t1;
  }

 private:
  double* seconds_;
  std::chrono::steady_clock::time_point t0_;
};

// The first exception of a parallel region's threads, rethrown after the region (none may
// leave it).
struct FirstError {
  std::exception_ptr error;
  void capture() {  // (in a catch block)
#pragma omp critical(attnkit_first_error)
    if (!error) error = std::current_exception();
  }
  void rethrow() const {
    if (error) std::rethrow_exception(error);
  }
};
}  // namespace

// A run's constant_stamp for its duration only, also when it throws.
struct Executor::RunStamp {
  uint64_t& stamp;
  explicit RunStamp(uint64_t& s) : stamp(s) { stamp = next_run_stamp(); }
  ~RunStamp() { stamp = 0; }
};

void Executor::ensure_thread_arenas(int threads) {
  while (static_cast<int>(thread_arenas_.size()) < threads - 1) thread_arenas_.emplace_back(plan_.arena_bytes);
}

uint8_t* Executor::arena_of(int t) {
  return t == 0 ? arena_.data() : thread_arenas_[static_cast<size_t>(t - 1)].data();
}

void Executor::run_alone(const ChunkView& view, size_t begin, size_t end, double* node_seconds) const {
  const auto& nodes = graph_.nodes();
  NodeClock clock(node_seconds);
  for (size_t i = begin; i < end; ++i) {
    op_def(nodes[i].op).run(view, nodes[i], Slice{0, 1, nullptr, bf16_});
    clock.lap(i);
  }
}

void Executor::run_shards(Adam* optimizer, int threads) {
  const int shards = shards_;
  threads = std::min(threads, shards);  // (more would have no shard)
  ensure_thread_arenas(threads);
  const RunStamp stamp(chunked_run_stamp_);  // (bf16: each weight packed once a step, as in chunks)
  const int64_t rows = (batch_ + shards - 1) / shards;
  const int64_t params = graph_.param_count();
  std::atomic<int> next{0};
  std::atomic<bool> failed{false};
  FirstError error;
  SpinBarrier barrier(threads);  // (an OpenMP barrier under OMP_WAIT_POLICY=passive sleeps at once)
  // Profiling: shard 0's nodes (one shard's share of the batch, on whichever thread runs it),
  // and the sum and update on thread 0 charged to the update's line.
  const bool profile = profiling_;
  if (profile) ++profiled_runs_;
  double* node_seconds = profile ? node_seconds_.data() : nullptr;
  const size_t update_line = graph_.nodes().size();
#pragma omp parallel num_threads(threads)
  {
    // (The runtime may give fewer threads: thread 0 then runs every shard, the same bits.)
    const bool team = omp_get_num_threads() == threads;
    const int t = team ? omp_get_thread_num() : 0, nt = team ? threads : 1;
    if (team || omp_get_thread_num() == 0) {
      const FlushDenormalsScope flush(flush_denormals_);
      ChunkView view(*this, arena_of(t));
      try {
        for (int s = next.fetch_add(1, std::memory_order_relaxed); s < shards;
             s = next.fetch_add(1, std::memory_order_relaxed)) {
          uint8_t* grads = s == 0 ? grads_.data() : shard_grads_[static_cast<size_t>(s - 1)].data();
          uint8_t* results = shard_results_.data() + s * shard_result_bytes_;
          std::memset(grads, 0, static_cast<size_t>(params) * 4);  // (gradients accumulate)
          if (shard_result_bytes_ > 0) std::memset(results, 0, static_cast<size_t>(shard_result_bytes_));
          const int64_t row0 = s * rows;
          if (row0 >= batch_ || failed.load(std::memory_order_relaxed)) continue;  // (an empty shard adds zeros)
          view.set_chunk(row0, std::min(rows, batch_ - row0));
          view.set_shard(grads, results);
          run_alone(view, 0, update_line, s == 0 ? node_seconds : nullptr);
        }
      } catch (...) {
        error.capture();
        failed.store(true);
      }
      if (nt > 1) barrier.wait();
      const auto reduce_start = profile && t == 0 ? std::chrono::steady_clock::now()
                                                  : std::chrono::steady_clock::time_point{};
      if (!failed.load()) {
        // The step's gradient: the shards' summed in shard order, element by element (so any
        // split of the elements over the threads gives the same bits), then the update of the
        // same elements (Adam splits them as slice_range does: no barrier between).
        const Slice slice{t, nt};
        const auto [p0, p1] = slice_range(params, slice);
        float* g = grads_.f32();
        for (int s = 1; s < shards; ++s) {
          const float* gs = shard_grads_[static_cast<size_t>(s - 1)].f32();
          for (int64_t i = p0; i < p1; ++i) g[i] += gs[i];
        }
        if (t == 0) {  // the loss: the shards' (each its share of the whole batch's mean) in order
          for (const ShardResult& result : shard_results_of_) {
            const Place& at = places_[static_cast<size_t>(result.id)];
            const TensorDesc& d = graph_.tensor(result.id);
            const int64_t offset = at.shard_result_offset;
            std::memcpy(at.base, shard_results_.data() + offset, static_cast<size_t>(d.bytes()));
            if (!result.summed) continue;
            float* out = reinterpret_cast<float*>(at.base);
            for (int s = 1; s < shards; ++s) {
              const float* r = reinterpret_cast<const float*>(shard_results_.data() + s * shard_result_bytes_ + offset);
              for (int64_t i = 0; i < d.bytes() / 4; ++i) out[i] += r[i];
            }
          }
        }
        if (optimizer) optimizer->update(params_.f32(), grads_.f32(), slice);
        if (profile && t == 0)
          node_seconds[update_line] += std::chrono::duration<double>(std::chrono::steady_clock::now() - reduce_start).count();
      }
    }
  }
  error.rethrow();
}

void Executor::run_chunks_per_thread(size_t begin, size_t end, int threads) {
  // As many chunks as the plan's rows need, in float32 rounded up to a multiple of the threads,
  // of equal rows (the arena holds plan_.rows; fewer fit): 500 rows at 152 a chunk on two
  // threads run as 4 × 125, not 3 × 152 + 44 (304 rows on one thread, 196 on the other). In
  // bf16 a product's kernel depends on its rows (bf16_product_worth), so the chunks stay the
  // plan's, as one thread runs them: the same bits on any thread count.
  int64_t chunks = (batch_ + plan_.rows - 1) / plan_.rows;
  if (!bf16_) chunks = (chunks + threads - 1) / threads * threads;
  const int64_t rows = bf16_ ? plan_.rows : (batch_ + chunks - 1) / chunks;
  threads = static_cast<int>(std::min<int64_t>(threads, (batch_ + rows - 1) / rows));  // (none without a chunk)
  ensure_thread_arenas(threads);
  const RunStamp stamp(chunked_run_stamp_);
  std::atomic<int64_t> next{0};
  FirstError error;
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    ChunkView view(*this, arena_of(t));
    const FlushDenormalsScope flush(flush_denormals_);
    try {
      for (int64_t c = next.fetch_add(1, std::memory_order_relaxed); c < chunks;
           c = next.fetch_add(1, std::memory_order_relaxed)) {
        if (c * rows >= batch_) break;  // (rounding up can leave the last chunks empty)
        view.set_chunk(c * rows, std::min(rows, batch_ - c * rows));
        run_alone(view, begin, end, nullptr);
      }
    } catch (...) {
      error.capture();
      next.store(chunks, std::memory_order_relaxed);  // the others stop after their chunk
    }
  }
  error.rethrow();
}

uint64_t Executor::constant_stamp(TensorId id) const {
  if (chunked_run_stamp_ == 0) return 0;
  const Storage where = graph_.tensor(id).storage;
  return where == Storage::kParam || where == Storage::kConst ? chunked_run_stamp_ : 0;
}

void Executor::forward() {
  validate_inputs();
  // A training graph's evaluations follow its training steps' verdict on threads; an
  // inference graph's runs are probed themselves (one thread wins on a single short sequence).
  if (graph_.has_backward()) {
    run_chunks([&] { run_nodes(0, graph_.forward_nodes(), nullptr, threads_in_use(), row0_ == 0); });
    return;
  }
  const int threads = threads_for_run();
  const auto start = std::chrono::steady_clock::now();
  if (plan_.rows > 0) {  // a chunked plan (see ExecutorOptions::chunk_bytes)
    // The weights-only nodes first (an inference graph has them in front), once while the
    // parameters stay fixed, then the rest for each chunk of rows; on several threads each
    // takes whole chunks, also when the batch is one chunk or less (it is then cut in as many).
    const size_t prefix = graph_.unbatched_prefix();
    const bool run_prefix = prefix > 0 && !(fixed_parameters_ && prefix_current_);
    if (run_prefix) run_nodes(0, prefix, nullptr, threads);
    prefix_current_ = true;
    // (Profiling times the nodes of shared chunks; bf16 keeps a batch of one chunk whole, see
    // run_chunks_per_thread.)
    if (threads > 1 && chunks_per_thread_ && !profiling_ && batch_ > 1 && (!bf16_ || batch_ > plan_.rows)) {
      run_chunks_per_thread(prefix, graph_.forward_nodes(), threads);
    } else {
      run_chunks([&] {
        run_nodes(prefix, graph_.forward_nodes(), nullptr, threads, /*count_profiled_run=*/!run_prefix && row0_ == 0);
      });
    }
  } else {
    run_nodes(0, graph_.forward_nodes(), nullptr, threads);
  }
  record_run(threads, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

int Executor::threads_for_run() {
  if (!probes_threads()) return threads_;
  return probe_.next_parallel() ? threads_ : 1;
}

void Executor::record_run(int threads, double seconds) {
  if (probes_threads()) probe_.record(threads > 1, seconds);
}

void Executor::train_step(Adam* optimizer, GradientHook* hook) {
  if (!graph_.has_backward()) throw Error("executor: train_step needs a graph with backward()");
  if (optimizer && optimizer->size() != graph_.param_count())
    throw Error("executor: the optimizer was made for " + std::to_string(optimizer->size()) +
                " parameters, the graph has " + std::to_string(graph_.param_count()));
  validate_inputs();
  if (optimizer) optimizer->begin_step();
  const int threads = threads_for_run();
  ++training_steps_;
  parallel_training_steps_ += threads > 1;
  const auto start = std::chrono::steady_clock::now();
  struct Training {  // training() is true for this run only, also when it throws
    bool& on;
    explicit Training(bool& b) : on(b) { on = true; }
    ~Training() { on = false; }
  } training(training_);
  if (shards_ > 0) {  // shard by shard (each on whichever thread takes it), then the update
    run_shards(hook ? nullptr : optimizer, threads);
    if (hook) hook->on_gradients(grads_.f32(), graph_.param_count());
    if (hook && optimizer)
      run_nodes(graph_.nodes().size(), graph_.nodes().size(), optimizer, threads, /*count_profiled_run=*/false);
  } else if (hook || (plan_.rows > 0 && batch_ > plan_.rows)) {
    // Forward and backward (chunk by chunk in a chunked plan: the parameter gradients zeroed
    // before the first chunk and summed over all), the hook, then the update.
    run_chunks([&] { run_nodes(0, graph_.nodes().size(), nullptr, threads, row0_ == 0, row0_ == 0); });
    if (hook) hook->on_gradients(grads_.f32(), graph_.param_count());
    if (optimizer)  // the update of the same step: not a profiled run of its own
      run_nodes(graph_.nodes().size(), graph_.nodes().size(), optimizer, threads, /*count_profiled_run=*/false);
  } else {
    run_nodes(0, graph_.nodes().size(), optimizer, threads);
  }
  record_run(threads, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

void Executor::apply_update(Adam* optimizer) {
  if (optimizer->size() != graph_.param_count())
    throw Error("executor: the optimizer was made for " + std::to_string(optimizer->size()) +
                " parameters, the graph has " + std::to_string(graph_.param_count()));
  optimizer->begin_step();
  run_nodes(graph_.nodes().size(), graph_.nodes().size(), optimizer, threads_in_use(), /*count_profiled_run=*/false);
}

void Executor::run_nodes(size_t begin, size_t end, Adam* optimizer, int threads, bool count_profiled_run,
                         bool zero_grads_first) {
  const auto& nodes = graph_.nodes();
  const size_t backward_from = graph_.forward_nodes();
  const bool zero_grads = zero_grads_first && begin <= backward_from && end > backward_from;
  SpinBarrier* barrier_ptr = nullptr;
  TaskCounter* counters = task_counters_.get();
  const bool profile = profiling_;
  if (profile && count_profiled_run) ++profiled_runs_;
  double* node_seconds = node_seconds_.data();
  auto body = [&](Slice s) {
    const FlushDenormalsScope flush(flush_denormals_);
    NodeClock clock(profile && s.index == 0 ? node_seconds : nullptr);
    if (zero_grads) {  // parameter gradients accumulate: start each backward from zero
      auto [g0, g1] = slice_range(graph_.param_count(), s);
      if (g1 > g0) std::memset(grads_.f32() + g0, 0, static_cast<size_t>(g1 - g0) * 4);
    }
    for (size_t i = begin; i < end; ++i) {
      if (s.count > 1 && i > begin && barrier_before_[i]) barrier_ptr->wait();
      op_def(nodes[i].op).run(*this, nodes[i],
                              Slice{s.index, s.count, s.count > 1 ? counters + i * kNodeTaskCounters : nullptr, bf16_});
      clock.lap(i);
    }
    if (optimizer) {
      if (s.count > 1 && barrier_before_[nodes.size()]) barrier_ptr->wait();
      optimizer->update(params_.f32(), grads_.f32(), s);
      clock.lap(nodes.size());
    }
  };
  if (threads == 1) {
    body(Slice{0, 1});
    return;
  }
  for (size_t i = begin * kNodeTaskCounters; i < end * kNodeTaskCounters; ++i)
    counters[i].next.store(0, std::memory_order_relaxed);
  SpinBarrier barrier(threads);
  barrier_ptr = &barrier;
#pragma omp parallel num_threads(threads)
  {
    if (omp_get_num_threads() == threads) {
      body(Slice{omp_get_thread_num(), threads});
    } else if (omp_get_thread_num() == 0) {  // the runtime gave fewer threads: same result
      body(Slice{0, 1});
    }
  }
}

}  // namespace attnkit
