// Runs a planned graph: owns the arena and the flat parameter, gradient and input blocks,
// and runs the nodes in one OpenMP parallel region per run, a barrier between nodes, each
// kernel given its (thread, thread count) slice. Defined in engine/executor.cc, the adaptive
// thread use in engine/thread_probe.cc, the per-node profiling in engine/profile.cc.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "arena.h"
#include "graph.h"
#include "op_table.h"
#include "optimizer.h"
#include "planner.h"
#include "thread_probe.h"

namespace attnkit {

// Called by train_step between the backward pass and the optimizer's update, on the calling
// thread outside the parallel region: e.g. to sum the gradients of a data-parallel group.
class GradientHook {
 public:
  virtual ~GradientHook() = default;
  virtual void on_gradients(float* grads, int64_t n) = 0;
};

// Precision of the matrix products (Linear, matmul, the attention products of long
// sequences). kBf16 is mixed precision: parameters, gradients, Adam and every other op stay
// float32; the products take bf16-rounded inputs and sum in float32 (ops/gemm_bf16.h) on the
// CPU's AMX-BF16 or AVX512-BF16 kernel. Without either, kBf16 runs float32 products
// (bf16_kernel() says which kernel runs).
enum class Precision { kF32, kBf16 };
const char* precision_name(Precision p);  // "f32", "bf16"
// "f32"/"float32"/"fp32" or "bf16"/"bfloat16" (case-insensitive); throws Error otherwise.
Precision parse_precision(const std::string& name);

struct ExecutorOptions {
  int threads = 1;     // at most this many OpenMP threads per run
  uint64_t seed = 0;   // parameter initialization
  // Measure training steps (and an inference graph's forward runs) with `threads` and with
  // 1 thread now and then, and use the faster: on a small model or a busy machine more threads can cost more than they save.
  // Results do not depend on the thread count, so this changes only the speed.
  bool adaptive_threads = true;
  // An inference graph (no backward) whose nodes all work row by row (lookups, products,
  // elementwise ops, layer norms, attention) runs a batch whose arena would take more than
  // this many bytes in chunks of rows that fit it, each chunk's intermediates staying in the
  // cache; the kept results and the inputs stay whole (max_batch rows, in blocks of their own)
  // and each chunk reads and writes its rows in place. The arena is then planned for one
  // chunk, so its size stops growing with max_batch. Results are those of one whole-batch run.
  // A batch that fits is planned as one chunk of max_batch rows, so the same holds for it
  // (the weights-only results kept, the threads each taking their rows).
  // 0: never chunk. The default is about a Zen 4 core's L2 (1 MB). With several threads each
  // thread runs whole chunks in its own arena (see chunks_per_thread()), so a chunk is that
  // much per thread and the plan does not depend on the thread count.
  int64_t chunk_bytes = kDefaultChunkBytes;
  static constexpr int64_t kDefaultChunkBytes = 1 << 20;
  // The caller writes the parameters only before the first forward() (or calls
  // parameters_changed() after writing them): an inference graph planned in chunks then
  // computes its weights-only nodes (projected, per-position and probability tables, merged
  // weights) on the first call only instead of on every call. ModelRunner sets it for
  // inference graphs (Predictor, attnkit infer and eval).
  bool fixed_parameters = false;
  // A training graph whose whole-batch arena would exceed kTrainChunkArenaBytes and whose
  // nodes all work row by row (lookups, products, layer norms, attention, ReLU, sums, the
  // cross-entropy over whole-batch inputs, and their backward nodes writing parameter
  // gradients) runs each training step in chunks of batch entries: forward and backward of
  // one chunk, the parameter gradients summed over the chunks, then one update — the
  // gradient of the whole batch, with each chunk's activations still in the cache when its
  // backward reads them (reversal-large in bf16: 2 of 32 sequences a chunk, 1.2× faster a
  // step than 8, 1.4× than whole batches). The loss is the whole batch's mean. -1: when the
  // arena is that large, chunks of at least 1024 rows of the products (float32) or 256 (bf16
  // products), else whole; 0: never; N > 0: N batch entries a chunk whenever the graph allows
  // it. The chunk size never depends on the thread count.
  int64_t train_chunk_rows = -1;
  static constexpr int64_t kTrainChunkArenaBytes = int64_t{64} << 20;
  // Data-parallel training steps inside the process: 2 or more splits each step's batch into
  // this many shards of equal rows; each shard runs forward and backward alone (on whichever
  // thread takes it, in that thread's own arena, no barrier between nodes) into its own
  // gradient block, and the step's gradient is the shards' sum in shard order (its loss the
  // same), then one update. Results depend on the shard count, never on the thread count or
  // the adaptive choice: a run with the same seed and shards is bitwise the same on 1, 2 or 3
  // threads. The graph must be one whose step can run in chunks (see train_chunk_rows); 0 or
  // 1: off. Not with train_chunk_rows > 0.
  int train_shards = 0;
  static constexpr int kMaxTrainShards = 64;
  Precision precision = Precision::kF32;
  // Run the kernels with subnormal floats flushed to zero (x86 MXCSR FTZ and DAZ, set in
  // each thread of a run and restored after it; the caller's mode is untouched). A model
  // that has learned its task drives gradients below 1.2e-38, where every multiply-add on a
  // subnormal takes a microcode assist: neighbor-sum's attention backward ran 2.8× slower
  // (95 → 268 µs per step) once its bf16 run reached loss 0. Values that small change
  // nothing a float32 training sees; false keeps IEEE gradual underflow.
  bool flush_denormals = true;
};

class Executor final : public RunContext {
 public:
  Executor(const Graph& graph, ExecutorOptions options = {});

  // Batch of the next runs, 1 ≤ batch ≤ the graph's max_batch; no re-planning.
  void set_batch(int64_t batch);
  // The batch set; while a chunked run's kernels run, the rows of the current chunk.
  int64_t batch() const override { return rows_now_; }
  int64_t chunk_first_row() const override { return row0_; }
  int64_t whole_batch() const override { return batch_; }
  uint64_t constant_stamp(TensorId id) const override;
  // Rows of a chunk when batches run in chunks (see ExecutorOptions::chunk_bytes; max_batch
  // for a row-by-row inference graph whose whole batch fits: one chunk), else 0.
  int64_t chunk_rows() const { return plan_.rows; }
  // Whether a forward() of more than one sequence on several threads gives each thread whole
  // chunks (its own arena, no barriers: see run_chunks_per_thread; a batch of one chunk or
  // less is cut in as many chunks as threads, except in bf16, whose products' kernels depend
  // on their rows: there the plan's chunks, uncut) instead of a share of every node of every
  // chunk: an inference graph planned in chunks whose nodes after the weights-only prefix
  // write batched rows or arena scratch only. Results are the same bits.
  bool chunks_per_thread() const { return chunks_per_thread_; }
  // ExecutorOptions::train_shards in use (0: off).
  int train_shards() const { return shards_; }
  // True while train_step runs (dropout drops only then).
  bool training() const override { return training_; }
  void set_threads(int threads);
  int threads() const { return threads_; }
  // Whether the products run in bf16 (ExecutorOptions::precision kBf16 on a CPU with a bf16
  // kernel).
  bool bf16_products() const { return bf16_; }
  // Threads the next run uses (1 when adaptive measurement found more threads slower).
  int threads_in_use() const { return probe_.parallel() ? threads_ : 1; }
  // Turns adaptive thread use (ExecutorOptions::adaptive_threads) on or off; off, every run
  // takes threads() threads.
  void set_adaptive_threads(bool on) {
    adaptive_ = on;
    if (!on) probe_.reset();
  }

  // Runs the forward nodes only (evaluation, inference).
  void forward();
  // Runs forward and backward (parameter gradients are zeroed first), then, when given, the
  // optimizer's update — all in one parallel region. Returns nothing: read the loss tensor.
  // With a hook, the update runs after hook->on_gradients (in a second parallel region).
  void train_step(Adam* optimizer = nullptr, GradientHook* hook = nullptr);
  // The optimizer's update alone, from the gradient block as it stands (a process of a
  // data-parallel group with no rows in a step fills the block itself, then calls this).
  void apply_update(Adam* optimizer);

  // Data of a tensor. Inputs are written by the caller before a run; kept tensors and
  // parameters are read after. Batched tensors hold `batch()` rows.
  float* f32(TensorId id) const override;
  int32_t* i32(TensorId id) const override;
  uint8_t* u8(TensorId id) const override;
  Shape shape(TensorId id) const override;
  float* data(const Tensor& t) const { return f32(t.id()); }

  // Flat blocks.
  float* params() const { return params_.f32(); }
  float* grads() const { return grads_.f32(); }
  int64_t param_count() const { return graph_.param_count(); }
  // Draws every parameter afresh from its Init with this seed.
  void init_parameters(uint64_t seed);
  // The parameters were written: with ExecutorOptions::fixed_parameters the next forward()
  // computes the weights-only nodes again (load_checkpoint and init_parameters call it).
  void parameters_changed() { prefix_current_ = false; }

  const Graph& graph() const { return graph_; }
  const MemoryPlan& plan() const { return plan_; }

 private:
  void validate_inputs() const;
  // The id inputs validate_inputs checks, and the range each must lie in: found once from the
  // graph's nodes (op_def's id_range), a tensor checked once per range.
  struct IdCheck {
    TensorId ids;
    int64_t lo, hi;
  };
  static std::vector<IdCheck> find_id_checks(const Graph& graph);
  // Nodes [begin, end) (and the optimizer's update); zero_grads_first: zero the parameter
  // gradients when the range starts the backward (false for a chunked step's later chunks).
  void run_nodes(size_t begin, size_t end, Adam* optimizer, int threads, bool count_profiled_run = true,
                 bool zero_grads_first = true);
  // run() once, or for a batch over a chunked plan's rows once per chunk (row0_, rows_now_
  // set to the chunk's).
  template <typename Run>
  void run_chunks(Run run);
  // Nodes [begin, end) for every chunk of the batch, `threads` threads each taking the next
  // chunk and running it alone (Slice{0, 1}) in its own arena (chunks_per_thread()).
  void run_chunks_per_thread(size_t begin, size_t end, int threads);
  class ChunkView;  // a thread's RunContext in run_chunks_per_thread and run_shards
  struct RunStamp;  // sets constant_stamp for one run
  // Arenas for threads 1 .. threads - 1 (made on first use, kept).
  void ensure_thread_arenas(int threads);
  // Thread t's arena in run_chunks_per_thread and run_shards (thread 0: the executor's own).
  uint8_t* arena_of(int t);
  // Whether tensor t lives in each running thread's own arena in those runs: arena scratch
  // first used after the weights-only prefix and kept by no one (place_tensors' chunk_offset).
  static bool in_thread_arena(const Graph& graph, const MemoryPlan& plan, size_t t);
  // A tensor's shape when `rows` rows of the batch run.
  Shape shape_at(TensorId id, int64_t rows) const;
  // Nodes [begin, end) on this thread alone (Slice{0, 1}) through view; node_seconds: each
  // node's time added to it (profiling), or null.
  void run_alone(const ChunkView& view, size_t begin, size_t end, double* node_seconds) const;
  // A training step's forward and backward nodes once per shard (train_shards), `threads`
  // threads each taking the next shard, then the shards' gradients and losses summed in shard
  // order into the executor's own, then (optimizer given) the update.
  void run_shards(Adam* optimizer, int threads);
  static bool can_run_chunks_per_thread(const Graph& graph, const MemoryPlan& plan);
  static MemoryPlan make_plan(const Graph& graph, const ExecutorOptions& options);
  // Whether runs choose their thread count by probing (adaptive use of more than one thread).
  bool probes_threads() const { return threads_ > 1 && adaptive_; }
  int threads_for_run();
  void record_run(int threads, double seconds);
  void* ptr(TensorId id) const;
  void plan_barriers();
  // Fills places_ (after the blocks are allocated; they never move).
  void place_tensors();

  const Graph& graph_;
  MemoryPlan plan_;
  int threads_;
  int64_t batch_;
  // A chunked run's current chunk: its first row and its rows (row0_ 0 and rows_now_ batch_
  // outside chunked runs).
  int64_t row0_ = 0, rows_now_;
  uint64_t chunked_run_stamp_ = 0;  // while a run goes chunk by chunk: its constant_stamp
  AlignedBuffer arena_, params_, grads_, inputs_, consts_, kept_;
  std::vector<int64_t> input_offsets_;
  // Where each tensor's data starts in its block, found once (ptr() is called for every operand
  // of every node of every run): base, plus row0_·row_bytes in a chunked run (results and
  // batched inputs are whole); computed false for a tensor no node of the graph touches.
  struct Place {
    uint8_t* base = nullptr;
    int64_t row_bytes = 0;
    // A chunked inference plan's arena tensors written after the weights-only prefix: the
    // offset in the arena (each thread's own in run_chunks_per_thread), else -1.
    int64_t chunk_offset = -1;
    // With train_shards: a parameter gradient's offset in a shard's gradient block, and a
    // kept unbatched result's (the loss) in a shard's block of them; else -1.
    int64_t grad_offset = -1, shard_result_offset = -1;
    bool computed = true;
  };
  std::vector<Place> places_;
  std::vector<IdCheck> id_checks_;
  // barrier_before_[i]: threads must all finish the nodes before node i first (it reads or
  // writes memory they write, or writes memory they read). Index nodes().size() is the
  // optimizer update. Independent neighbours run without a barrier between them.
  std::vector<bool> barrier_before_;
  // kNodeTaskCounters per node, zeroed before each multi-threaded run: the kernels that hand
  // out their work dynamically (Slice::tasks) share them.
  std::unique_ptr<TaskCounter[]> task_counters_;
  // Adaptive thread use: probe runs take blocks of threads_ and of 1 thread; the faster wins until
  // the next probe, which comes twice as late each time the verdict stands (engine/thread_probe.h).
  ThreadProbe probe_;
  bool adaptive_;
  // fixed_parameters, and whether the weights-only prefix's results in the arena are those of
  // the current parameters (a chunked plan keeps them alive to the end of a run).
  bool fixed_parameters_;
  bool bf16_ = false;  // products in bf16 (ExecutorOptions::precision and a bf16 kernel here)
  bool flush_denormals_ = true;  // ExecutorOptions::flush_denormals
  bool prefix_current_ = false;
  bool chunks_per_thread_ = false;  // chunks_per_thread()
  // run_chunks_per_thread's arenas of threads 1, 2, ... (thread 0 uses arena_), made on first use.
  std::vector<AlignedBuffer> thread_arenas_;
  int shards_ = 0;  // train_shards()
  // run_shards: the gradient blocks of shards 1, 2, ... (shard 0 uses grads_), each shard's
  // kept unbatched results (shard_result_bytes_ each), and those results' tensors with whether
  // the shards' values are summed (a cross-entropy's loss: each shard's share of the mean) or
  // shard 0's taken (a result of the parameters alone, the same in every shard).
  std::vector<AlignedBuffer> shard_grads_;
  AlignedBuffer shard_results_;
  int64_t shard_result_bytes_ = 0;
  struct ShardResult {
    TensorId id;
    bool summed;
  };
  std::vector<ShardResult> shard_results_of_;

 public:
  // Barriers a training step runs with more than one thread (for benchmarks and tests).
  int64_t barriers_per_step() const;
  // Training steps run so far, and how many of them ran on more than one thread (the
  // adaptive probes' and the parallel verdicts' steps).
  int64_t training_steps() const override { return training_steps_; }
  int64_t parallel_training_steps() const { return parallel_training_steps_; }

 private:
  int64_t training_steps_ = 0, parallel_training_steps_ = 0;
  bool training_ = false;

 public:
  // Per-node time (for performance work): while profiling is on, thread 0 of each run
  // timestamps every node; a node's time includes any barrier wait before it (thread 0
  // waiting for the others to finish earlier nodes), so with several threads load imbalance
  // shows up on the node after it. Off by default (then nothing is
  // measured). Turning it on starts a new record, or with keep_record continues the last one
  // (e.g. to time only the training steps between evaluations); turning it off stops
  // recording and keeps the record readable. With train_shards, a step's node times are
  // shard 0's (its share of the batch, on whichever thread ran it) and the update's line
  // holds the shards' sum and the update.
  void set_profiling(bool on, bool keep_record = false);
  bool profiling() const { return profiling_; }
  struct NodeTime {
    size_t node;           // index into graph().nodes(); nodes().size() = the optimizer update
    std::string what;      // "linear_backward 'dy' [64, 10, 32]" style description
    double seconds = 0;    // summed over the profiled runs
  };
  // Summed times of every node over the runs of the current record, then the optimizer
  // update (index nodes().size()); the gradient zeroing a backward run starts with is
  // charged to the run's first node.
  std::vector<NodeTime> node_times() const;
  int64_t profiled_runs() const { return profiled_runs_; }
  // A table of node_times() by op and shapes, slowest first, with each line's share of the
  // total and the time per run.
  std::string profile_report(size_t max_lines = 40) const;

 private:
  bool profiling_ = false;
  int64_t profiled_runs_ = 0;
  std::vector<double> node_seconds_;  // nodes().size() + 1 entries
};

}  // namespace attnkit
