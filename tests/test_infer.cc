// attnkit infer --data and eval --data: every input format, the files numpy reads back, the
// stdin mode, errors that name the file and leave nothing behind, memory that does not grow
// with N, and predictions equal to those of the training graph's forward (attnkit::Predictor).
#include "allocation_counter.h"  // first: it replaces operator new for this program

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "engine/executor.h"
#include "engine/npy.h"
#include "engine/npz.h"
#include "engine/rng.h"
#include "hwy_targets.h"
#include "models/predictor.h"
#include "models/tasks.h"
#include "models/trainer.h"

namespace {

using namespace attnkit::testing;
using attnkit::NpyArray;

fs::path scratch(const std::string& name) { return cli_scratch("test_infer_tmp", name); }

// A trained neighbor-sum run, shared by the cases (trained once per test program).
const fs::path& trained_run() {
  static const fs::path run = [] {
    // One folder per test process: CTest runs the cases of this program in parallel, and each
    // would otherwise remove the run another is reading.
    const fs::path dir = scratch("trained_" + std::to_string(getpid()));
    REQUIRE(run_cli({"train", "neighbor-sum", "--epochs", "3", "--quiet", "--no-pictures", "--out", (dir / "run").string()},
                    dir, "train") == 0);
    return dir / "run";
  }();
  return run;
}

// n neighbor-sum sequences and their targets.
void sequences(int64_t n, std::vector<int32_t>* x, std::vector<int32_t>* y, uint64_t seed = 3) {
  attnkit::Rng rng(seed);
  const attnkit::ModelConfig c = attnkit::lesson_config("neighbor-sum");
  const attnkit::Dataset d = attnkit::generate_dataset(c, n, rng);
  *x = d.x, *y = d.y;
}

// The configurations the inference folds are checked on: the lessons, two causal layers, and
// pre-LayerNorm blocks with MLPs (small sizes of reversal-large's kind).
std::vector<attnkit::ModelConfig> inference_configs() {
  std::vector<attnkit::ModelConfig> out;
  for (const char* t : {"neighbor-sum", "duplicates", "reversal", "induction"}) out.push_back(attnkit::lesson_config(t));
  attnkit::ModelConfig big = attnkit::lesson_config("reversal-large");
  big.vocab = big.classes = 12, big.seq_len = 12, big.d_model = 32, big.block_mlp = 64, big.heads = 2;
  out.push_back(big);
  // Made-up multi-head models whose attention output feeds the MLP head (the multi-head value
  // fold): 4 heads of 16 with 10 value columns per head (ragged for any vector), and 4 causal
  // heads of 8 with 24 (8-lane rows on AVX-512).
  attnkit::ModelConfig four = attnkit::lesson_config("neighbor-sum");
  four.d_model = 64, four.heads = 4, four.mlp_hidden = 10;
  out.push_back(four);
  four.d_model = 32, four.mlp_hidden = 24, four.causal = true, four.task = "duplicates", four.vocab = 12, four.classes = 2;
  out.push_back(four);
  return out;
}

// Random valid tokens for n sequences of c.
std::vector<int32_t> random_tokens(const attnkit::ModelConfig& c, int64_t n, uint64_t seed) {
  attnkit::Rng rng(seed);
  std::vector<int32_t> x(static_cast<size_t>(n * c.seq_len));
  for (auto& v : x) v = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(c.vocab));
  return x;
}

// Runs ex's graph on n sequences; returns the logits and every layer's maps, concatenated.
std::vector<float> run_forward(attnkit::Executor& ex, const attnkit::Model& m, const std::vector<int32_t>& x, int64_t n) {
  const attnkit::ModelConfig& c = m.config;
  ex.set_batch(n);
  std::copy(x.begin(), x.begin() + n * c.seq_len, ex.i32(m.ids.id()));
  std::fill(ex.i32(m.targets.id()), ex.i32(m.targets.id()) + n * c.seq_len, -1);
  ex.forward();
  const float* logits = ex.f32(m.logits.id());
  std::vector<float> out(logits, logits + n * c.seq_len * c.classes);
  for (const auto& a : m.attention) {
    const float* w = ex.f32(a.attn().id());
    out.insert(out.end(), w, w + n * c.heads * c.seq_len * c.seq_len);
  }
  return out;
}

}  // namespace

TEST_CASE("inference graphs fold lookups and fuse ReLUs and give the training graph's forward results") {
  for (const attnkit::ModelConfig& c : inference_configs()) {
    INFO(c.task << " layers " << c.layers);
    const int64_t n = 37;
    const attnkit::Model train = attnkit::build_model(c, n, /*with_backward=*/true);
    const attnkit::Model infer = attnkit::build_model(c, n, /*with_backward=*/false);
    attnkit::Executor te(*train.graph, {1, 5}), ie(*infer.graph, {1, 5});
    REQUIRE(te.param_count() == ie.param_count());
    const std::vector<int32_t> x = random_tokens(c, n, 11);
    const std::vector<float> a = run_forward(te, train, x, n), b = run_forward(ie, infer, x, n);
    REQUIRE(a.size() == b.size());
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]) / (1.0 + std::abs(a[i])));
    CHECK(worst < 2e-5);
    // No loss, no separate ReLU or residual sum after a product, lookups with their addends.
    for (const attnkit::Node& node : infer.graph->nodes()) {
      CHECK(node.op != attnkit::OpKind::kCrossEntropy);
      if (node.op == attnkit::OpKind::kRelu) {
        const int64_t p = infer.graph->producer(node.in[0]);
        CHECK((p >= 0 && infer.graph->nodes()[static_cast<size_t>(p)].op != attnkit::OpKind::kLinear));
      }
      if (node.op == attnkit::OpKind::kAdd) {
        const int64_t p = infer.graph->producer(node.in[0]);
        CHECK_FALSE((p >= 0 && infer.graph->nodes()[static_cast<size_t>(p)].op == attnkit::OpKind::kEmbedding &&
                     !infer.graph->tensor(node.in[1]).batched));
      }
    }
    // Attention whose output feeds the MLP head mixes projected values instead (one head or
    // several, their outputs summed), and adds them to the head's lookup and applies its ReLU.
    if (c.layers == 1 && c.head == attnkit::HeadKind::kMlp && !c.pre_norm) {
      int summed = 0;
      for (const attnkit::Node& node : infer.graph->nodes()) {
        if (node.op == attnkit::OpKind::kAttention) {
          CHECK(node.attrs.sum_heads == (c.heads > 1));
          CHECK(node.attrs.relu);
          // It starts from the head's lookup: added to it, or read from its table (indexed).
          CHECK((node.accumulates(0) || (node.attrs.indexed && node.in[5] != attnkit::kNoTensor)));
          ++summed;
        }
        if (node.op == attnkit::OpKind::kAdd || node.op == attnkit::OpKind::kRelu) {
          const int64_t p = infer.graph->producer(node.in[0]);
          CHECK_FALSE((p >= 0 && infer.graph->nodes()[static_cast<size_t>(p)].op == attnkit::OpKind::kAttention));
        }
      }
      CHECK(summed == 1);
    }
    // The weights-only nodes come first.
    const size_t prefix = infer.graph->unbatched_prefix();
    for (size_t i = prefix; i < infer.graph->nodes().size(); ++i) {
      bool batched = false;
      for (attnkit::TensorId t : infer.graph->nodes()[i].out) batched = batched || infer.graph->tensor(t).batched;
      CHECK(batched);
    }
  }
}

TEST_CASE("indexed attention reads q k and v from per-token-and-position tables and looks scores up on every target") {
  attnkit::test::for_each_simd_target([&](const std::string&) {
    for (const attnkit::ModelConfig& c : inference_configs()) {
      for (int64_t n : {int64_t{37}, int64_t{700}}) {
        INFO(c.task << " layers " << c.layers << " heads " << c.heads << " batch " << n);
        const attnkit::Model train = attnkit::build_model(c, n, /*with_backward=*/true);
        const attnkit::Model infer = attnkit::build_model(c, n, /*with_backward=*/false);
        attnkit::ExecutorOptions one{1, 5};
        one.chunk_bytes = 0;
        attnkit::Executor te(*train.graph, one), ie(*infer.graph, one);
        const std::vector<int32_t> x = random_tokens(c, n, 23);
        const std::vector<float> a = run_forward(te, train, x, n), b = run_forward(ie, infer, x, n);
        REQUIRE(a.size() == b.size());
        double worst = 0;
        for (size_t i = 0; i < a.size(); ++i)
          worst = std::max(worst, std::abs(double(a[i]) - b[i]) / (1.0 + std::abs(a[i])));
        CHECK(worst < 2e-5);
        // The first layer's q, k, v are lookups of the ids with positions: its attention is
        // indexed; a score table once the scores of a call outnumber the table's (V·T)² (and
        // it takes at most 512 KB).
        int indexed = 0, tables = 0;
        for (const attnkit::Node& node : infer.graph->nodes())
          if (node.op == attnkit::OpKind::kAttention && node.attrs.indexed) {
            ++indexed;
            tables += node.in[6] != attnkit::kNoTensor;
          }
        if (c.pre_norm) continue;  // (LayerNorm first: no lookups in front of the attention)
        CHECK(indexed == 1);
        const int64_t rows = c.vocab * c.seq_len;
        const bool small = c.heads * rows * rows * 4 <= 512 * 1024;
        CHECK(tables == (small && rows * rows < n * c.seq_len * c.seq_len ? 1 : 0));
      }
    }
  });
}

TEST_CASE("with fixed parameters the weights-only nodes run on the first call and after parameters_changed only") {
  const attnkit::ModelConfig c = attnkit::lesson_config("neighbor-sum");
  const int64_t n = 700;
  const attnkit::Model m = attnkit::build_model(c, n, /*with_backward=*/false);
  attnkit::ExecutorOptions fixed{1, 5}, plain{1, 5};
  fixed.fixed_parameters = true;
  attnkit::ExecutorOptions fixed2 = fixed;  // two threads, each running whole chunks that all
  fixed2.threads = 2;                       // read the one prefix's tables
  fixed2.adaptive_threads = false;
  attnkit::Executor a(*m.graph, fixed), b(*m.graph, plain), a2(*m.graph, fixed2);
  REQUIRE(a.chunk_rows() > 0);
  REQUIRE(a2.chunks_per_thread());
  REQUIRE(m.graph->unbatched_prefix() > 0);
  const std::vector<int32_t> x = random_tokens(c, n, 31);
  const std::vector<float> first = run_forward(a, m, x, n);
  CHECK(first == run_forward(b, m, x, n));
  CHECK(run_forward(a, m, x, n) == first);  // the tables kept from the first call
  CHECK(run_forward(a2, m, x, n) == first);
  CHECK(run_forward(a2, m, x, n) == first);
  CHECK(run_forward(a, m, x, 7) == run_forward(b, m, x, 7));  // one chunk or less
  for (int64_t i = 0; i < a.param_count(); ++i) a.params()[i] *= 0.5f, b.params()[i] *= 0.5f, a2.params()[i] *= 0.5f;
  const std::vector<float> changed = run_forward(b, m, x, n);
  CHECK(run_forward(a, m, x, n) != changed);  // not told: the old tables (as documented)
  CHECK(run_forward(a2, m, x, n) != changed);
  a.parameters_changed();
  a2.parameters_changed();
  CHECK(run_forward(a, m, x, n) == changed);
  CHECK(run_forward(a2, m, x, n) == changed);
}

TEST_CASE("large batches run in chunks of rows with the whole batch's results and a chunk-sized arena") {
  for (const attnkit::ModelConfig& c : inference_configs()) {
    INFO(c.task << " layers " << c.layers);
    const int64_t n = 700;
    const attnkit::Model m = attnkit::build_model(c, n, /*with_backward=*/false);
    attnkit::ExecutorOptions whole{1, 5}, chunked{1, 5};
    whole.chunk_bytes = 0;
    chunked.chunk_bytes = 64 * 1024;
    attnkit::Executor a(*m.graph, whole), b(*m.graph, chunked);
    attnkit::ExecutorOptions two = chunked;
    two.threads = 2;
    two.adaptive_threads = false;
    attnkit::Executor b2(*m.graph, two);
    attnkit::ExecutorOptions probing = chunked;  // adaptive: probes may settle on one thread...
    probing.threads = 2;
    attnkit::Executor b3(*m.graph, probing);
    CHECK(a.chunk_rows() == 0);
    REQUIRE(b.chunk_rows() > 0);
    REQUIRE(b.chunk_rows() < n);
    // The plan does not depend on the thread count; on two threads each takes whole chunks.
    CHECK(b2.chunk_rows() == b.chunk_rows());
    CHECK(b2.plan().arena_bytes == b.plan().arena_bytes);
    CHECK(!a.chunks_per_thread());
    CHECK(b2.chunks_per_thread());
    INFO("chunk rows " << b.chunk_rows());
    CHECK(b.plan().arena_bytes * 4 < a.plan().arena_bytes);
    attnkit::check_plan(*m.graph, b.plan());
    const std::vector<int32_t> x = random_tokens(c, n, 17);
    for (int64_t rows : {n, int64_t{333}, b.chunk_rows(), b.chunk_rows() + 1, int64_t{1}}) {
      INFO("batch " << rows);
      const std::vector<float> ra = run_forward(a, m, x, rows);
      CHECK(run_forward(b, m, x, rows) == ra);   // bitwise: each row is computed the same way
      CHECK(run_forward(b2, m, x, rows) == ra);  // and on 2 threads
      CHECK(run_forward(b3, m, x, rows) == ra);
    }
    b3.set_adaptive_threads(false);  // ...until adaptive use is turned off: both threads, same rows
    CHECK(b3.threads_in_use() == 2);
    CHECK(run_forward(b3, m, x, n) == run_forward(a, m, x, n));
    // A steady-state chunked run allocates nothing, on one thread or on two (their arenas made
    // on the first run).
    for (attnkit::Executor* e : {&b, &b2}) {
      run_forward(*e, m, x, n);
      e->set_batch(n);
      const long before = g_allocations.load();
      for (int k = 0; k < 3; ++k) e->forward();
      const long allocations = g_allocations.load() - before;
      CHECK(allocations == 0);
    }
    // A bad token names its sequence and position, also when it is in a later chunk.
    std::vector<int32_t> bad = x;
    bad[static_cast<size_t>(650 * c.seq_len + 3)] = static_cast<int32_t>(c.vocab);
    b.set_batch(n);
    std::copy(bad.begin(), bad.end(), b.i32(m.ids.id()));
    CHECK_THROWS_WITH(b.forward(), Catch::Contains("input 'ids', sequence 650, position 3: value " +
                                                   std::to_string(c.vocab) + " is outside"));
  }
}

TEST_CASE("bf16 inference in chunks: the same bits on one thread and two, small batches too") {
  // A product's kernel depends on its rows in bf16 (16 at least), so two threads keep the
  // chunks one thread runs instead of cutting a small batch in two.
  for (const attnkit::ModelConfig& c : inference_configs()) {
    INFO(c.task << " layers " << c.layers);
    const int64_t n = 700;
    const attnkit::Model m = attnkit::build_model(c, n, /*with_backward=*/false);
    attnkit::ExecutorOptions one{1, 5}, two{2, 5};
    one.precision = two.precision = attnkit::Precision::kBf16;
    two.adaptive_threads = false;
    attnkit::Executor a(*m.graph, one), b(*m.graph, two);
    REQUIRE(b.chunks_per_thread());
    INFO("bf16 products: " << a.bf16_products());
    const std::vector<int32_t> x = random_tokens(c, n, 41);
    for (int64_t rows : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, b.chunk_rows() + 1, n}) {
      INFO("batch " << rows);
      CHECK(run_forward(b, m, x, rows) == run_forward(a, m, x, rows));
    }
  }
}

TEST_CASE("infer --data: npz and npy in, predictions logits attention rollout and metrics out, accuracy as eval") {
  const fs::path dir = scratch("formats");
  std::vector<int32_t> x, y;
  sequences(1234, &x, &y);
  attnkit::write_npz((dir / "xy.npz").string(), {{"X", attnkit::make_npy(x.data(), {1234, 10})},
                                                  {"Y", attnkit::make_npy(y.data(), {1234, 10})}});
  attnkit::write_npz((dir / "val.npz").string(), {{"X_val", attnkit::make_npy(x.data(), {1234, 10})},
                                                   {"Y_val", attnkit::make_npy(y.data(), {1234, 10})}});
  attnkit::write_npy((dir / "x.npy").string(), x.data(), {1234, 10});
  Child eval({"eval", "--checkpoint", trained_run().string(), "--data", (dir / "xy.npz").string()}, dir, "eval");
  REQUIRE(eval.wait() == 0);
  const std::string eval_out = slurp(eval.out);
  const std::string accuracy = eval_out.substr(eval_out.find("accuracy ") + 9, 6);

  for (const char* input : {"xy.npz", "val.npz", "x.npy"}) {
    INFO(input);
    const fs::path out = dir / (std::string("out_") + input);
    Child c({"infer", "--checkpoint", trained_run().string(), "--data", (dir / input).string(), "--out", out.string(),
             "--logits", "--batch-size", "100"},
            dir, "infer");
    REQUIRE(c.wait() == 0);
    const NpyArray p = attnkit::read_npy((out / "predictions.npy").string());
    CHECK(p.descr == "<i4");
    CHECK(p.shape == std::vector<int64_t>{1234, 10});
    CHECK(attnkit::read_npy((out / "logits.npy").string()).shape == std::vector<int64_t>{1234, 10, 10});
    const NpyArray a = attnkit::read_npy((out / "attention.npy").string());
    CHECK(a.shape == std::vector<int64_t>{1234, 1, 2, 10, 10});
    const std::vector<float> w = attnkit::to_float32(a, "attention.npy");
    for (int64_t r = 0; r < 1234 * 2 * 10; r += 97) {
      double sum = 0;
      for (int j = 0; j < 10; ++j) sum += w[static_cast<size_t>(r * 10 + j)];
      CHECK(std::abs(sum - 1.0) < 1e-5);
    }
    const auto m = json_file(out / "metrics.json");
    CHECK(m["N"] == 1234);
    CHECK(m["sequences_per_second"].get<double>() > 0);
    if (std::string(input) != "x.npy") {
      char buf[16];
      std::snprintf(buf, sizeof buf, "%.4f", m["accuracy"].get<double>());
      CHECK(std::string(buf) == accuracy);  // the number eval reports on the same data
    } else {
      CHECK(m["accuracy"].is_null());
    }
  }
  {  // Few sequences, a large --batch-size: buffers of the data's size (metrics name the batch used).
    attnkit::write_npy((dir / "three.npy").string(), x.data(), {3, 10});
    const fs::path out = dir / "three";
    REQUIRE(run_cli({"infer", "--checkpoint", trained_run().string(), "--data", (dir / "three.npy").string(), "--out",
                     out.string(), "--batch-size", "100000", "--quiet"},
                    dir, "three") == 0);
    CHECK(json_file(out / "metrics.json")["batch_size"] == 3);
    CHECK(attnkit::read_npy((out / "predictions.npy").string()).shape == std::vector<int64_t>{3, 10});
  }
  // A subset of the maps, and none.
  REQUIRE(run_cli({"infer", "--checkpoint", trained_run().string(), "--data", (dir / "x.npy").string(), "--out",
                   (dir / "some").string(), "--attention", "7,3,1200", "--quiet"},
                  dir, "some") == 0);
  CHECK(attnkit::read_npy((dir / "some" / "attention.npy").string()).shape == std::vector<int64_t>{3, 1, 2, 10, 10});
  CHECK(json_file(dir / "some" / "metrics.json")["attention_sequences"] == nlohmann::json({3, 7, 1200}));
  REQUIRE(run_cli({"infer", "--checkpoint", trained_run().string(), "--data", (dir / "x.npy").string(), "--out",
                   (dir / "none").string(), "--attention", "none", "--quiet"},
                  dir, "none") == 0);
  CHECK_FALSE(fs::exists(dir / "none" / "attention.npy"));
}

TEST_CASE("infer --data - answers each stdin line with a line of predictions") {
  const fs::path dir = scratch("stdin");
  std::ofstream(dir / "in.txt") << "1 2 3 4 5 6 7 8 9 0\n3 3 3 3 3 3 3 3 3 3\n";
  Child c({"infer", "--checkpoint", trained_run().string(), "--data", "-"}, dir, "stdin", 0, dir / "in.txt");
  REQUIRE(c.wait() == 0);
  attnkit::Predictor p = attnkit::Predictor::load(trained_run().string(), {1, 2});
  const std::vector<int32_t> lines = {1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3};
  const attnkit::Prediction& r = p.predict(lines.data(), 2);
  std::string expected;
  for (int i = 0; i < 20; ++i) expected += std::to_string(r.predictions[i]) + (i % 10 == 9 ? "\n" : " ");
  CHECK(slurp(c.out) == expected);
  std::ofstream(dir / "bad.txt") << "1 2 3 4 5 6 7 8 9 0\n1 2 x\n";
  Child bad({"infer", "--checkpoint", trained_run().string(), "--data", "-"}, dir, "bad", 0, dir / "bad.txt");
  CHECK(bad.wait() == 1);
  CHECK(slurp(bad.out) == expected.substr(0, 20));  // the good line was answered before the bad one
  CHECK(bad.stderr_text().find("stdin line 2, position 2: 'x' is not an integer token") != std::string::npos);
  std::ofstream(dir / "huge.txt") << "1 2 3 4 5 6 7 8 9 99999999999999999999\n";
  Child huge({"infer", "--checkpoint", trained_run().string(), "--data", "-"}, dir, "huge", 0, dir / "huge.txt");
  CHECK(huge.wait() == 1);
  CHECK(huge.stderr_text().find("stdin line 1, position 9: token 99999999999999999999 is outside the vocabulary") !=
        std::string::npos);
}

TEST_CASE("infer --data with bad input: one error line naming file array row and position and no folder left") {
  const fs::path dir = scratch("bad");
  std::vector<int32_t> x, y;
  sequences(50, &x, &y);
  std::vector<int32_t> big = x;
  big[3 * 10 + 4] = 10;  // outside the vocabulary
  attnkit::write_npy((dir / "vocab.npy").string(), big.data(), {50, 10});
  attnkit::write_npy((dir / "short.npy").string(), x.data(), {100, 5});
  std::vector<float> f(x.begin(), x.end());
  attnkit::write_npy((dir / "float.npy").string(), f.data(), {50, 10});
  attnkit::write_npy((dir / "good.npy").string(), x.data(), {50, 10});
  const std::string good = slurp(dir / "good.npy");
  std::ofstream(dir / "cut.npy", std::ios::binary) << good.substr(0, good.size() - 7);
  attnkit::write_npz((dir / "noX.npz").string(), {{"Z", attnkit::make_npy(x.data(), {50, 10})}});
  struct Bad {
    const char* file;
    std::string message;
  };
  for (const Bad& b : {Bad{"vocab.npy", "token 10 at [3, 4]"}, Bad{"short.npy", "sequences have length 5"},
                       Bad{"float.npy", "must be integers"}, Bad{"cut.npy", "cut.npy"},
                       Bad{"noX.npz", "no array 'X' or 'X_val'"}, Bad{"missing.npz", "missing.npz"}}) {
    INFO(b.file);
    const fs::path out = dir / "out";
    Child c({"infer", "--checkpoint", trained_run().string(), "--data", (dir / b.file).string(), "--out", out.string()},
            dir, "bad");
    CHECK(c.wait() == 1);
    const std::string err = c.stderr_text();
    CHECK(err.rfind("error: ", 0) == 0);
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
    CHECK(err.find(b.message) != std::string::npos);
    CHECK(err.find(b.file) != std::string::npos);
    CHECK_FALSE(fs::exists(out));
  }
}

TEST_CASE("infer --data memory does not grow with N: the arena is the batch's and the maps go to disk in pieces") {
  const fs::path dir = scratch("memory");
  long rss[2] = {0, 0};
  int64_t arena[2] = {0, 0};
  const int64_t sizes[2] = {2000, 200000};  // 200000 sequences: 160 MB of attention maps
  for (int k = 0; k < 2; ++k) {
    std::vector<int32_t> x, y;
    sequences(sizes[k], &x, &y, 9);
    attnkit::write_npy((dir / "x.npy").string(), x.data(), {sizes[k], 10});
    Child c({"infer", "--checkpoint", trained_run().string(), "--data", (dir / "x.npy").string(), "--out",
             (dir / ("out" + std::to_string(k))).string(), "--quiet"},
            dir, "mem");
    REQUIRE(c.wait(&rss[k]) == 0);
    arena[k] = json_file(dir / ("out" + std::to_string(k)) / "metrics.json")["arena_bytes"].get<int64_t>();
    fs::remove_all(dir / ("out" + std::to_string(k)));
  }
  CHECK(arena[0] == arena[1]);
  INFO("peak RSS " << rss[0] << " kB at N = 2000, " << rss[1] << " kB at N = 200000");
  // What grows is the tokens and targets as read, converted and checked (4 × 8 MB), not the
  // 160 MB of maps (the bound leaves room for the sanitizer build's allocator).
  CHECK(rss[1] - rss[0] < 64 * 1024);
}

TEST_CASE("Predictor answers as the training graph's forward does and allocates its buffers once") {
  const attnkit::Predictor p = attnkit::Predictor::load(trained_run().string(), {1, 64});
  attnkit::Predictor q = attnkit::Predictor::load((trained_run() / "model.safetensors").string(), {2, 64});
  std::vector<int32_t> x, y;
  sequences(200, &x, &y, 21);
  attnkit::Dataset d;
  d.size = 200, d.seq_len = 10, d.x = x, d.y = y;
  // The training graph (with backward) of the same checkpoint.
  const auto meta = attnkit::read_checkpoint_metadata((trained_run() / "model.safetensors").string());
  attnkit::ModelRunner train_graph(p.config(), 64, 1, 0, /*with_backward=*/true);
  train_graph.load((trained_run() / "model.safetensors").string());
  std::vector<int32_t> expected;
  train_graph.evaluate(d, &expected);
  for (int64_t start = 0; start < 200; start += 64) {
    const int64_t n = std::min<int64_t>(64, 200 - start);
    const attnkit::Prediction& r = q.predict(x.data() + start * 10, n);
    for (int64_t i = 0; i < n * 10; ++i) REQUIRE(r.predictions[i] == expected[static_cast<size_t>(start * 10 + i)]);
  }
  // Forward-only: no saved activations, but the multi-head value fold (fold_attention_values)
  // holds the projected values [B, T, heads·128] of neighbor-sum, twice the head's width, so the
  // inference arena is within a quarter of the training graph's rather than below it.
  CHECK(p.arena_bytes() * 4 < train_graph.executor().plan().arena_bytes * 5);
  std::vector<int32_t> bad(x.begin(), x.begin() + 10);
  bad[7] = 99;
  CHECK_THROWS_WITH(q.predict(bad.data(), 1), Catch::Contains("input 'ids', sequence 0, position 7: value 99 is outside [0, 10)"));
  CHECK_THROWS_WITH(q.predict(x.data(), 65), Catch::Contains("expected 1 to 64"));
}
