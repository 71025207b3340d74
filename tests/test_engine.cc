#include <algorithm>
// The engine end to end on the lesson models: gradients against finite differences of a
// double-precision reference, the memory plan, zero steady-state allocations, determinism,
// smaller batches without re-planning.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "engine/executor.h"
#include "engine/functional.h"
#include "engine/rng.h"
#include "model_reference.h"

#include "allocation_counter.h"

namespace attnkit {
namespace {

void fill_batch(const ModelConfig& c, Rng& rng, int64_t batch, std::vector<int32_t>& ids,
                std::vector<int32_t>& targets) {
  ids.resize(static_cast<size_t>(batch * c.seq_len));
  targets.resize(ids.size());
  for (auto& x : ids) x = static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.vocab)));
  for (auto& y : targets) y = static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.classes)));
}

void load(Executor& ex, const Model& m, const std::vector<int32_t>& ids, const std::vector<int32_t>& targets) {
  ex.set_batch(static_cast<int64_t>(ids.size()) / m.config.seq_len);
  std::memcpy(ex.i32(m.ids.id()), ids.data(), ids.size() * 4);
  std::memcpy(ex.i32(m.targets.id()), targets.data(), targets.size() * 4);
}

// Every element of got within rel × the largest |want| of want's.
void require_grads_close(const std::vector<float>& got, const std::vector<float>& want, float rel) {
  float scale = 0;
  for (float v : want) scale = std::max(scale, std::abs(v));
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("gradient element " << i);
    REQUIRE(std::abs(got[i] - want[i]) <= rel * scale);
  }
}

std::vector<ModelConfig> configs_under_test() {
  std::vector<ModelConfig> cs = {lesson_config("neighbor-sum"), lesson_config("duplicates"),
                                 lesson_config("reversal")};
  ModelConfig deep = lesson_config("reversal");  // two causal layers
  deep.task = "two-layer-causal";
  deep.layers = 2;
  deep.heads = 4;
  deep.causal = true;
  cs.push_back(deep);
  ModelConfig block = lesson_config("reversal");  // a small 2-layer pre-LN transformer
  block.task = "pre-norm-transformer";
  block.layers = 2;
  block.heads = 2;
  block.pre_norm = true;
  block.block_mlp = 24;
  cs.push_back(block);
  return cs;
}

TEST_CASE("lesson model losses match a double reference and gradients match finite differences") {
  for (ModelConfig c : configs_under_test()) {
   for (const bool fold : {true, false}) {  // projections of lookups folded into the tables, or not
    c.fold_embedding_projections = fold;
    SECTION(c.task + (fold ? "" : " (unfolded)")) {
      const int64_t batch = 3;
      Model m = build_model(c, batch);
      Executor ex(*m.graph, {1, 7});
      // Perturb zero-initialized biases so their gradients are exercised at a generic point.
      Rng rng(11);
      for (int64_t i = 0; i < ex.param_count(); ++i) ex.params()[i] += static_cast<float>(0.05 * rng.normal());
      std::vector<int32_t> ids, targets;
      fill_batch(c, rng, batch, ids, targets);
      targets[1] = -1;  // an ignored position
      load(ex, m, ids, targets);
      ex.train_step(nullptr);
      const float loss = ex.f32(m.loss.id())[0];
      test::RefParams p = test::ref_params(*m.graph, ex.params());
      const double ref = test::ref_loss(c, p, ids, targets, batch);
      REQUIRE(loss == Approx(ref).epsilon(1e-5));

      for (const ParamInfo& info : m.graph->params()) {
        INFO("parameter " << info.name);
        const int64_t checks = std::min<int64_t>(info.numel, 12);
        for (int64_t j = 0; j < checks; ++j) {
          const int64_t idx = j == 0 ? 0 : static_cast<int64_t>(rng.below(static_cast<uint64_t>(info.numel)));
          auto& v = p.values[info.name][static_cast<size_t>(idx)];
          const double saved = v, h = 1e-5;
          v = saved + h;
          const double up = test::ref_loss(c, p, ids, targets, batch);
          v = saved - h;
          const double down = test::ref_loss(c, p, ids, targets, batch);
          v = saved;
          const double numeric = (up - down) / (2 * h);
          const double analytic = ex.grads()[info.offset + idx];
          INFO("element " << idx << ": analytic " << analytic << " numeric " << numeric);
          REQUIRE(std::abs(analytic - numeric) <= 2e-4 + 2e-3 * std::abs(numeric));
        }
      }
    }
   }
  }
}

// Forward matrix products whose x has `rows` rows.
int count_products(const Graph& g, int64_t rows) {
  int n = 0;
  for (size_t i = 0; i < g.forward_nodes(); ++i) {
    const Node& node = g.nodes()[i];
    if (node.op == OpKind::kLinear && g.tensor(node.in[0]).shape.rows() == rows) ++n;
  }
  return n;
}

TEST_CASE("projections of embedding lookups are folded into the tables: same loss and gradients") {
  for (const char* task : {"neighbor-sum", "duplicates", "reversal"}) {
    INFO(task);
    ModelConfig c = lesson_config(task);
    const int64_t batch = 8;
    std::vector<int32_t> ids, targets;
    Rng rng(5);
    fill_batch(c, rng, batch, ids, targets);
    std::vector<float> loss(2), grads[2];
    for (int fold = 0; fold < 2; ++fold) {
      c.fold_embedding_projections = fold == 1;
      Model m = build_model(c, batch);
      // Folded: Q, K and V are computed from the (vocab-row) tables, and an MLP head's first
      // layer absorbs the output projection (head.0(h + a·Wo + bo) = h·W folded + a·(Wo·W) +
      // …), so two products multiply batch × T rows; unfolded, Q, K, V, O and the head's.
      // The product after the attention goes too: (P·V)·W + b = Σ_h P_h·(V_h·W_h) + b with
      // V_h·W_h on the tables (fold_attention_values; with two heads the attention sums its
      // heads' outputs), one batch product left.
      const int batch_products = count_products(*m.graph, batch * c.seq_len);
      CHECK(batch_products == (fold ? 1 : 4 + (c.head == HeadKind::kMlp ? 2 : 1)));
      // With positions, each folded lookup adds the projected position table on the way.
      int lookups_with_addend = 0;
      for (const Node& node : m.graph->nodes())
        lookups_with_addend += node.op == OpKind::kEmbedding && node.in[2] != kNoTensor;
      CHECK(lookups_with_addend == (fold && c.positions ? (c.head == HeadKind::kMlp ? 4 : 3) : 0));
      // With two heads (neighbor-sum), each table's per-head value products are one Linear with
      // attrs.heads (engine/op_linear.cc), not a narrow of x and of W, a Linear and a concat
      // per head.
      int heads_products = 0, narrows = 0;
      for (const Node& node : m.graph->nodes()) {
        heads_products += node.op == OpKind::kLinear && node.attrs.heads > 1;
        narrows += node.op == OpKind::kNarrow || node.op == OpKind::kConcat;
      }
      CHECK(heads_products == (fold && c.heads > 1 ? (c.positions ? 2 : 1) : 0));
      CHECK(narrows == 0);
      Executor ex(*m.graph, {1, 7});
      load(ex, m, ids, targets);
      ex.train_step(nullptr);
      loss[fold] = ex.f32(m.loss.id())[0];
      grads[fold].assign(ex.grads(), ex.grads() + ex.param_count());
    }
    REQUIRE(loss[1] == Approx(loss[0]).epsilon(1e-5));
    require_grads_close(grads[1], grads[0], 1e-5f);
  }
  // The lookup sum h = tok(ids) + pos(t) is folded into every projection that used it, so
  // its node is gone: reading it is an error that names it; kept tensors stay readable.
  {
    Model m = build_model(lesson_config("neighbor-sum"), 4);
    Executor ex(*m.graph, {1, 7});
    const TensorId h = m.graph->find("tok.weight(ids)+pos.weight(arange(10))");
    REQUIRE(h != kNoTensor);
    REQUIRE_THROWS_WITH(ex.f32(h), Catch::Contains("tok.weight(ids)+pos.weight(arange(10))") &&
                                       Catch::Contains("not computed"));
    REQUIRE_NOTHROW(ex.f32(m.attention[0].attn().id()));
    REQUIRE_NOTHROW(ex.f32(m.logits.id()));
  }
  // Not folded where the tables are not smaller than the batch: 1 sequence of 10 tokens
  // against 10 token + 10 position rows.
  Model small = build_model(lesson_config("neighbor-sum"), 1);
  CHECK(count_products(*small.graph, 10) == 6);
}

TEST_CASE("attention values read from a per-(token, position) table: same loss and gradients") {
  std::vector<ModelConfig> configs = configs_under_test();
  configs.push_back(lesson_config("induction"));
  for (ModelConfig c : configs) {
    INFO(c.task);
    const int64_t batch = 12;
    std::vector<int32_t> ids, targets;
    Rng rng(21);
    fill_batch(c, rng, batch, ids, targets);
    std::vector<float> loss(3), grads[3];
    for (int run = 0; run < 3; ++run) {  // 0: rows materialized; 1, 2: the table, on 1 and 2 threads
      c.index_attention_values = run > 0;
      Model m = build_model(c, batch);
      int indexed = 0, scatters = 0, starts = 0, start_grads = 0;
      for (const Node& node : m.graph->nodes()) {
        indexed += node.op == OpKind::kAttention && node.attrs.v_indexed;
        scatters += node.op == OpKind::kAttentionValuesBackward;
        starts += node.op == OpKind::kAttention && node.attrs.v_indexed && node.in.size() > 5 && node.in[5] != kNoTensor;
        start_grads += node.op == OpKind::kAttentionValuesBackward && node.out.size() > 1 && node.out[1] != kNoTensor;
      }
      // The folded head's residual sum h·W + b + attention (neighbor-sum's head(h + attn(h))):
      // a start table the attention reads, its gradient from the same backward node.
      CHECK(starts == (c.task == "neighbor-sum" && run > 0 ? 1 : std::min(starts, indexed)));
      CHECK(start_grads == starts);
      // Head-summed attentions whose values are a lookup: the first layer's (later layers read
      // the one before; a pre-norm layer a layer norm), with several heads (summed by
      // fold_attention_values).
      CHECK(indexed == (run > 0 && c.heads > 1 && !c.pre_norm ? 1 : 0));
      CHECK(scatters == indexed);
      Executor ex(*m.graph, {run == 2 ? 2 : 1, 7});
      load(ex, m, ids, targets);
      ex.train_step(nullptr);
      loss[static_cast<size_t>(run)] = ex.f32(m.loss.id())[0];
      grads[run].assign(ex.grads(), ex.grads() + ex.param_count());
    }
    REQUIRE(loss[1] == Approx(loss[0]).epsilon(1e-6));
    require_grads_close(grads[1], grads[0], 1e-6f);
    // The thread count changes no bit.
    REQUIRE(loss[2] == loss[1]);
    REQUIRE(std::memcmp(grads[2].data(), grads[1].data(), grads[1].size() * sizeof(float)) == 0);
  }
}

TEST_CASE("ReLUs and residual sums fused into the products around them: bitwise the same step") {
  std::vector<ModelConfig> configs = configs_under_test();
  configs.push_back(lesson_config("reversal-large"));
  for (const ModelConfig& base : configs) {
    INFO(base.task);
    const int64_t batch = 2;
    std::vector<int32_t> ids, targets;
    Rng rng(9);
    fill_batch(base, rng, batch, ids, targets);
    std::vector<float> loss(2), grads[2], logits[2];
    int adds[2] = {0, 0}, residual_products = 0;
    for (int fuse = 0; fuse < 2; ++fuse) {
      ModelConfig c = base;
      c.fuse_elementwise = fuse == 1;
      Model m = build_model(c, batch);
      int relu = 0, relu_backward = 0, fused_forward = 0, fused_backward = 0;
      for (const Node& node : m.graph->nodes()) {
        relu += node.op == OpKind::kRelu;
        relu_backward += node.op == OpKind::kReluBackward;
        fused_forward += node.op == OpKind::kLinear && node.attrs.relu;
        fused_backward += node.op == OpKind::kLinearBackward && node.attrs.relu;
        adds[fuse] += node.op == OpKind::kAdd;
        // (a sum into a product's store, or into a one-head attention's, which then accumulates)
        if (fuse)
          residual_products += (node.op == OpKind::kLinear && node.in.size() > 3) ||
                               (node.op == OpKind::kAttention && node.accumulate != 0);
      }
      if (c.block_mlp > 0) {
        // A ReLU per layer between the MLP's products: a node of its own and its backward, or
        // run in the first product and in the dx product of the second.
        CHECK(relu == (fuse ? 0 : c.layers));
        CHECK(relu_backward == (fuse ? 0 : c.layers));
        CHECK(fused_forward == (fuse ? c.layers : 0));
        CHECK(fused_backward == (fuse ? c.layers : 0));
      }
      for (int step = 0; step < 2; ++step) {  // the second step runs on updated parameters
        Executor ex(*m.graph, {1, 3});
        load(ex, m, ids, targets);
        ex.train_step(nullptr);
        if (step == 1) continue;
        loss[fuse] = ex.f32(m.loss.id())[0];
        grads[fuse].assign(ex.grads(), ex.grads() + ex.param_count());
        const float* l = ex.f32(m.logits.id());
        logits[fuse].assign(l, l + batch * c.seq_len * c.classes);
      }
    }
    // Every residual sum of a projection went into its product (or, the product folded into a
    // one-head attention, into the attention).
    CHECK(adds[0] - adds[1] == residual_products);
    if (base.block_mlp > 0) CHECK(residual_products == 2 * base.layers);  // attention and MLP
    if (base.head == HeadKind::kMlp) CHECK(residual_products >= 1);  // the folded head's sum
    REQUIRE(std::memcmp(&loss[0], &loss[1], sizeof(float)) == 0);
    REQUIRE(grads[0].size() == grads[1].size());
    REQUIRE(std::memcmp(grads[0].data(), grads[1].data(), grads[0].size() * sizeof(float)) == 0);
    REQUIRE(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)) == 0);
  }
}

TEST_CASE("memory plan: no live overlap and arena within 5% of the liveness lower bound") {
  std::vector<ModelConfig> configs = configs_under_test();
  configs.push_back(lesson_config("reversal-large"));  // 2 pre-LN blocks, D 256, T 128
  configs.push_back(lesson_config("induction"));
  int64_t in_place = 0;  // (a model whose elementwise ops all went into products has none)
  for (const ModelConfig& c : configs) {
    Model m = build_model(c, c.seq_len > 64 ? 32 : 64);
    MemoryPlan plan = plan_memory(*m.graph);
    INFO(c.task << ": arena " << plan.arena_bytes << " lower bound " << plan.lower_bound_bytes);
    REQUIRE_NOTHROW(check_plan(*m.graph, plan));
    REQUIRE(plan.lower_bound_bytes > 0);
    REQUIRE(plan.arena_bytes <= plan.lower_bound_bytes * 105 / 100);
    in_place += plan.in_place_count;
  }
  REQUIRE(in_place > 0);
}

TEST_CASE("memory plan: random graphs never overlap live tensors") {
  Rng rng(2024);
  for (int trial = 0; trial < 60; ++trial) {
    Graph g(1 + static_cast<int64_t>(rng.below(16)));
    const int64_t T = 1 + static_cast<int64_t>(rng.below(12));
    int64_t D = 4 * (1 + static_cast<int64_t>(rng.below(8)));
    Tensor ids = g.input("ids", {T}, DType::kI32);
    Tensor targets = g.input("targets", {T}, DType::kI32);
    Tensor h = Embedding(g, "tok", 7, D)(ids);
    std::vector<Tensor> pool = {h};
    const int layers = 2 + static_cast<int>(rng.below(6));
    for (int l = 0; l < layers; ++l) {
      const std::string name = "l" + std::to_string(l);
      Tensor x = pool[rng.below(pool.size())];
      if (x.shape().last() != D) x = h;
      switch (rng.below(5)) {
        case 0: h = ReLU()(Linear(g, name, D, D)(x)); break;
        case 1: h = x + MultiHeadAttention(g, name, D, D % 8 == 0 ? 2 : 1, rng.below(2) == 0)(x); break;
        case 2: h = LayerNorm(g, name, D)(x) + h; break;
        case 3: h = Linear(g, name + "b", 2 * D, D)(ReLU()(Linear(g, name, D, 2 * D)(x))); break;
        default: h = x + h; break;
      }
      pool.push_back(h);
    }
    Tensor loss = cross_entropy(Linear(g, "out", D, 5)(h), targets);
    g.backward(loss);
    MemoryPlan plan = plan_memory(g);
    INFO("trial " << trial);
    REQUIRE_NOTHROW(check_plan(g, plan));
    REQUIRE(plan.arena_bytes >= plan.lower_bound_bytes);
  }
}

TEST_CASE("a steady-state training step makes no heap allocation") {
  for (int threads : {1, 2}) {
    Model m = build_model(lesson_config("neighbor-sum"), 64);
    Executor ex(*m.graph, {threads, 0});
    Adam adam(ex.param_count(), {0.01f});
    Rng rng(5);
    std::vector<int32_t> ids, targets;
    fill_batch(m.config, rng, 64, ids, targets);
    load(ex, m, ids, targets);
    for (int i = 0; i < 3; ++i) ex.train_step(&adam);  // warm-up: thread pools, scratch
    const long before = g_allocations.load();
    g_abort_on_allocation = std::getenv("ATTNKIT_ABORT_ON_ALLOCATION") != nullptr;
    for (int i = 0; i < 25; ++i) {
      ex.set_batch(i % 5 == 4 ? 40 : 64);  // partial batches too
      ex.train_step(&adam);
      ex.forward();
    }
    g_abort_on_allocation = false;
    const long allocations = g_allocations.load() - before;  // before INFO, which allocates
    INFO(threads << " threads");
    REQUIRE(allocations == 0);
  }
}

std::vector<float> train_losses(const ModelConfig& c, int threads, int steps, bool adaptive = false) {
  Model m = build_model(c, 32);
  Executor ex(*m.graph, {threads, 3, adaptive});  // not adaptive: really use them all
  Adam adam(ex.param_count(), {0.003f});
  Rng rng(9);
  std::vector<int32_t> ids, targets;
  std::vector<float> losses;
  for (int i = 0; i < steps; ++i) {
    fill_batch(c, rng, i % 4 == 3 ? 17 : 32, ids, targets);
    load(ex, m, ids, targets);
    ex.train_step(&adam);
    losses.push_back(ex.f32(m.loss.id())[0]);
  }
  return losses;
}

TEST_CASE("same seed and threads give bitwise the same losses, and so do other thread counts") {
  for (const ModelConfig& c : configs_under_test()) {
    INFO(c.task);
    const auto a = train_losses(c, 1, 12), b = train_losses(c, 1, 12);
    REQUIRE(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
    const auto t2 = train_losses(c, 2, 12), t3 = train_losses(c, 3, 12), t8 = train_losses(c, 8, 12);
    REQUIRE(std::memcmp(a.data(), t2.data(), a.size() * 4) == 0);
    REQUIRE(std::memcmp(a.data(), t3.data(), a.size() * 4) == 0);
    REQUIRE(std::memcmp(a.data(), t8.data(), a.size() * 4) == 0);  // more threads than cores
    REQUIRE(a.back() < a.front());
  }
}

TEST_CASE("adaptive thread use switches between thread counts without changing results") {
  const ModelConfig c = lesson_config("reversal");
  const auto serial = train_losses(c, 1, 300), adaptive = train_losses(c, 2, 300, true);
  REQUIRE(std::memcmp(serial.data(), adaptive.data(), serial.size() * 4) == 0);
  // Step 1 runs alone on 2 threads; the first probe starts at the second step with blocks of 3:
  // steps 2-4 on 2 threads, 5-7 on one (whatever the timings say; a verdict can come only after
  // that pair of blocks).
  Model m = build_model(c, 32);
  Executor ex(*m.graph, {2, 3, true});
  Adam adam(ex.param_count(), {0.003f});
  Rng rng(9);
  std::vector<int32_t> ids, targets;
  fill_batch(c, rng, 32, ids, targets);
  load(ex, m, ids, targets);
  for (int i = 0; i < 7; ++i) ex.train_step(&adam);
  CHECK(ex.training_steps() == 7);
  CHECK(ex.parallel_training_steps() == 4);
}

namespace {
// Runs a ThreadProbe for `runs` runs, run i (counted from 0 over the probe's life) taking
// seconds(i, parallel); returns "P"/"S" per run.
template <class F>
std::string probe_runs(attnkit::ThreadProbe& p, int runs, int& i, const F& seconds) {
  std::string kinds;
  for (int r = 0; r < runs; ++r, ++i) {
    const bool parallel = p.next_parallel();
    kinds += parallel ? 'P' : 'S';
    p.record(parallel, seconds(i, parallel));
  }
  return kinds;
}
std::string probe_runs(attnkit::ThreadProbe& p, int runs, int& i, double parallel_s, double serial_s) {
  return probe_runs(p, runs, i, [&](int, bool parallel) { return parallel ? parallel_s : serial_s; });
}
}  // namespace

TEST_CASE("the thread probe ends early on a clear verdict either way and runs whole when close") {
  using attnkit::ThreadProbe;
  int i = 0;
  SECTION("parallel runs clearly faster: one pair of blocks, then parallel, the next probe twice as late") {
    ThreadProbe p;
    // Run 0 alone, then a parallel block (runs 1-3) and a serial one (4-6). A block's first run
    // is not counted: a parallel 100 s there would otherwise make the verdict serial.
    CHECK(probe_runs(p, 7, i, [](int run, bool parallel) { return run == 1 ? 100.0 : parallel ? 1.0 : 1.8; }) ==
          "PPPPSSS");
    CHECK_FALSE(p.probing());
    CHECK(p.parallel());
    CHECK(p.probe_interval() == 2 * ThreadProbe::kFirstInterval);
    CHECK(probe_runs(p, 127, i, 1.0, 1.8) == std::string(127, 'P'));
    // The next probe, 128 runs later: parallel runs now clearly slower, so the verdict changes
    // and the interval starts again from the first.
    CHECK(probe_runs(p, 6, i, 3.0, 1.0) == "PPPSSS");
    CHECK_FALSE(p.parallel());
    CHECK(p.probe_interval() == ThreadProbe::kFirstInterval);
  }
  SECTION("parallel runs clearly slower: one pair of blocks, then one thread") {
    ThreadProbe p;
    // (A serial 100 s as a block's first run is not counted either.)
    CHECK(probe_runs(p, 7, i, [](int run, bool parallel) { return run == 4 ? 100.0 : parallel ? 3.0 : 1.0; }) ==
          "PPPPSSS");
    CHECK_FALSE(p.parallel());
    CHECK(p.probe_interval() == ThreadProbe::kFirstInterval);
    CHECK(probe_runs(p, 63, i, 3.0, 1.0) == std::string(63, 'S'));
    CHECK(probe_runs(p, 1, i, 3.0, 1.0) == "P");  // the next probe starts
    CHECK(p.probing());
  }
  SECTION("close times: the whole probe, then parallel only when 5% faster") {
    ThreadProbe p;
    CHECK(probe_runs(p, 13, i, 1.0, 1.06) == "PPPPSSSPPPSSS");
    CHECK(p.parallel());
    ThreadProbe q;
    CHECK(probe_runs(q, 13, i, 1.0, 1.04) == "PPPPSSSPPPSSS");
    CHECK_FALSE(q.parallel());
    CHECK(probe_runs(q, 2, i, 1.0, 1.04) == "SS");
  }
  SECTION("reset: parallel at once; probing again when the interval runs out") {
    ThreadProbe p;
    probe_runs(p, 7, i, 3.0, 1.0);
    CHECK_FALSE(p.parallel());
    p.reset();
    CHECK(p.parallel());
    CHECK(probe_runs(p, 63, i, 3.0, 1.0) == std::string(63, 'P'));
    CHECK_FALSE(p.probing());
    CHECK(probe_runs(p, 1, i, 3.0, 1.0) == "P");
    CHECK(p.probing());
  }
}

TEST_CASE("per-node profiling times every node and the optimizer without changing results") {
  const ModelConfig c = lesson_config("neighbor-sum");
  for (int threads : {1, 2}) {
    INFO(threads << " threads");
    Model m = build_model(c, 16), plain = build_model(c, 16);
    Executor ex(*m.graph, {threads, 2, false}), reference(*plain.graph, {threads, 2, false});
    Adam adam(ex.param_count(), {0.01f}), adam_ref(reference.param_count(), {0.01f});
    Rng rng(4);
    std::vector<int32_t> ids, targets;
    fill_batch(c, rng, 16, ids, targets);
    load(ex, m, ids, targets);
    load(reference, plain, ids, targets);
    REQUIRE(ex.node_times().empty());  // off by default: nothing recorded
    ex.set_profiling(true);
    for (int i = 0; i < 3; ++i) {
      ex.train_step(&adam);
      reference.train_step(&adam_ref);
    }
    ex.forward();
    reference.forward();
    REQUIRE(ex.profiled_runs() == 4);
    REQUIRE(ex.f32(m.loss.id())[0] == reference.f32(plain.loss.id())[0]);
    const auto times = ex.node_times();
    REQUIRE(times.size() == m.graph->nodes().size() + 1);
    double total = 0;
    for (const auto& t : times) {
      REQUIRE(t.seconds >= 0);
      total += t.seconds;
    }
    REQUIRE(total > 0);
    REQUIRE(times.back().what.find("adam") != std::string::npos);
    REQUIRE(times[0].what.rfind("embedding", 0) == 0);
    const std::string report = ex.profile_report(5);
    REQUIRE(report.find("4 runs") == 0);
    REQUIRE(std::count(report.begin(), report.end(), '\n') == 6);  // title + 5 nodes
    // Off: the record stays; on with keep_record: it goes on; on: a new record.
    ex.set_profiling(false);
    ex.train_step(&adam);
    REQUIRE(ex.profiled_runs() == 4);
    REQUIRE(ex.node_times()[0].seconds == times[0].seconds);
    ex.set_profiling(true, true);
    ex.train_step(&adam);
    REQUIRE(ex.profiled_runs() == 5);
    REQUIRE(ex.node_times()[0].seconds > times[0].seconds);
    ex.set_profiling(true);
    REQUIRE(ex.profiled_runs() == 0);
    REQUIRE(ex.node_times()[0].seconds == 0);
  }
}

TEST_CASE("a smaller batch runs on the graph planned for a larger one") {
  const ModelConfig c = lesson_config("reversal");
  Model big = build_model(c, 64), small = build_model(c, 5);
  Executor eb(*big.graph, {2, 4, false}), es(*small.graph, {1, 4});
  Rng rng(3);
  std::vector<int32_t> ids, targets;
  fill_batch(c, rng, 5, ids, targets);
  load(eb, big, ids, targets);
  load(es, small, ids, targets);
  eb.train_step(nullptr);
  es.train_step(nullptr);
  REQUIRE(eb.f32(big.loss.id())[0] == es.f32(small.loss.id())[0]);
  REQUIRE(std::memcmp(eb.grads(), es.grads(), static_cast<size_t>(eb.param_count()) * 4) == 0);
  // Attention maps of the last run stay readable: rows sum to 1.
  const float* a = eb.f32(big.attention[0].attn().id());
  for (int64_t r = 0; r < 5 * 1 * c.seq_len; ++r) {
    double s = 0;
    for (int64_t j = 0; j < c.seq_len; ++j) s += a[r * c.seq_len + j];
    REQUIRE(s == Approx(1.0).epsilon(1e-5));
  }
}

TEST_CASE("bad graphs and inputs are reported with names and shapes") {
  Graph g(4);
  Tensor ids = g.input("ids", {6}, DType::kI32);
  Tensor x = Embedding(g, "tok", 9, 8)(ids);
  Linear wrong(g, "wrong", 7, 3);
  REQUIRE_THROWS_WITH(wrong(x), Catch::Contains("linear") && Catch::Contains("[4, 6, 8]") && Catch::Contains("[7, 3]"));
  REQUIRE_THROWS_WITH(MultiHeadAttention(g, "mha", 8, 3), Catch::Contains("3 heads"));
  Tensor loss = cross_entropy(Linear(g, "out", 8, 4)(x), g.input("targets", {6}, DType::kI32));
  g.backward(loss);
  Executor ex(g);
  std::fill(ex.i32(ids.id()), ex.i32(ids.id()) + 24, 0);
  ex.i32(ids.id())[5] = 9;
  REQUIRE_THROWS_WITH(ex.forward(), Catch::Contains("'ids'") && Catch::Contains("value 9"));
  // Every id input is checked on every run (the checks are found once, when the executor is
  // made): the targets too, by a training step, after the ids are mended.
  ex.i32(ids.id())[5] = 8;
  const TensorId targets = g.find("targets");
  REQUIRE(targets != kNoTensor);
  std::fill(ex.i32(targets), ex.i32(targets) + 24, 1);
  REQUIRE_NOTHROW(ex.train_step(nullptr));
  ex.i32(targets)[13] = 4;
  REQUIRE_THROWS_WITH(ex.train_step(nullptr), Catch::Contains("'targets'") && Catch::Contains("sequence 2, position 1") &&
                                                  Catch::Contains("value 4"));
  ex.i32(targets)[13] = 3;
  ex.i32(ids.id())[0] = -1;
  REQUIRE_THROWS_WITH(ex.train_step(nullptr), Catch::Contains("'ids'") && Catch::Contains("value -1"));
  REQUIRE_THROWS_WITH(ex.set_batch(5), Catch::Contains("batch 5"));
}

TEST_CASE("a deep residual chain builds with its intermediates' names cut short", "[engine]") {
  // h = h + h·0.5 spells h twice in the new name: uncut, 80 layers would need 2^80 characters.
  Graph g(2);
  Tensor x = g.input("x", {3, 4}, DType::kF32);
  Tensor h = x;
  for (int layer = 0; layer < 80; ++layer) h = h + h * 0.5f;
  g.keep(h);
  for (TensorId t = 0; t < static_cast<TensorId>(g.tensors().size()); ++t)
    REQUIRE(g.tensor(t).name.size() <= Graph::kMaxTensorName);
  REQUIRE(g.tensor(h.id()).name.size() == Graph::kMaxTensorName);
  REQUIRE(g.tensor(h.id()).name.substr(Graph::kMaxTensorName - 3) == "...");
  REQUIRE(g.tensor(x.id()).name == "x");
  Executor ex(g, {2, 1});
  for (int64_t i = 0; i < 24; ++i) ex.f32(x.id())[i] = 0.01f * static_cast<float>(i - 12);
  ex.forward();
  for (int64_t i = 0; i < 24; ++i)
    REQUIRE(ex.f32(h.id())[i] == Approx(0.01 * (i - 12) * std::pow(1.5, 80)).epsilon(1e-4));
}

}  // namespace
}  // namespace attnkit

namespace attnkit {
namespace {

// One training step (no update) of config c at `batch` with the executor's train_chunk_rows
// = chunk, on the same parameters and data: its loss and parameter gradients.
struct StepResult {
  float loss;
  std::vector<float> grads;
  int64_t chunk_rows;
};

// Seed 7 on exactly `threads` threads (no adaptive choice).
ExecutorOptions exact_threads(int threads) {
  ExecutorOptions o;
  o.threads = threads;
  o.seed = 7;
  o.adaptive_threads = false;
  return o;
}

// The first `rows` sequences of ids and targets as the executor's batch.
void load_rows(Executor& ex, const Model& m, const std::vector<int32_t>& ids, const std::vector<int32_t>& targets,
               int64_t rows) {
  const auto n = static_cast<std::ptrdiff_t>(rows * m.config.seq_len);
  load(ex, m, std::vector<int32_t>(ids.begin(), ids.begin() + n), std::vector<int32_t>(targets.begin(), targets.begin() + n));
}

StepResult chunked_step(const ModelConfig& c, int64_t batch, int64_t chunk, int threads, int64_t run_batch,
                        const std::vector<int32_t>& ids, const std::vector<int32_t>& targets) {
  Model m = build_model(c, batch);
  ExecutorOptions o = exact_threads(threads);
  o.train_chunk_rows = chunk;
  Executor ex(*m.graph, o);
  load_rows(ex, m, ids, targets, run_batch);
  ex.train_step(nullptr);
  return {ex.f32(m.loss.id())[0], std::vector<float>(ex.grads(), ex.grads() + ex.param_count()), ex.chunk_rows()};
}

}  // namespace

TEST_CASE("a training step in chunks of batch entries: the whole batch's loss and gradients") {
  for (ModelConfig c : configs_under_test()) {
    SECTION(c.task) {
      const int64_t batch = 13;
      Rng rng(5);
      std::vector<int32_t> ids, targets;
      fill_batch(c, rng, batch, ids, targets);
      // Ignored positions, unevenly over the chunks: the mean is over the whole batch's count.
      for (size_t k = 0; k < targets.size(); k += 3) targets[k] = -1;
      for (int64_t k = 0; k < 2 * c.seq_len; ++k) targets[static_cast<size_t>(k)] = -1;
      const StepResult whole = chunked_step(c, batch, 0, 1, batch, ids, targets);
      REQUIRE(whole.chunk_rows == 0);
      for (int64_t chunk : {int64_t{1}, int64_t{4}, int64_t{5}}) {  // 13 = 3 × 4 + 1: a short last chunk
        INFO("chunks of " << chunk);
        const StepResult got = chunked_step(c, batch, chunk, 1, batch, ids, targets);
        REQUIRE(got.chunk_rows == chunk);
        CHECK(got.loss == Approx(whole.loss).epsilon(2e-6));
        require_grads_close(got.grads, whole.grads, 2e-5f);
        // The double reference of the same batch.
        Model m = build_model(c, batch);
        Executor ex(*m.graph, {1, 7});
        const double ref = test::ref_loss(c, test::ref_params(*m.graph, ex.params()), ids, targets, batch);
        CHECK(got.loss == Approx(ref).epsilon(1e-5));
        // Thread-count invariance holds in chunks too: the chunk size never depends on it.
        const StepResult two = chunked_step(c, batch, chunk, 2, batch, ids, targets);
        REQUIRE(two.loss == got.loss);
        REQUIRE(two.grads == got.grads);
      }
      // A smaller batch than the graph's: chunks of its own rows (5 = 4 + 1), or one.
      const StepResult small_whole = chunked_step(c, batch, 0, 1, 5, ids, targets);
      for (int64_t chunk : {int64_t{4}, int64_t{8}}) {
        const StepResult small = chunked_step(c, batch, chunk, 1, 5, ids, targets);
        CHECK(small.loss == Approx(small_whole.loss).epsilon(2e-6));
        require_grads_close(small.grads, small_whole.grads, 2e-5f);
      }
    }
  }
}

TEST_CASE("training in chunks: Adam steps and evaluations as with whole batches") {
  ModelConfig c = lesson_config("reversal");
  const int64_t batch = 16;
  Rng rng(9);
  std::vector<int32_t> ids, targets;
  fill_batch(c, rng, batch, ids, targets);
  Model mw = build_model(c, batch), mc = build_model(c, batch);
  ExecutorOptions o;
  o.seed = 3;
  o.train_chunk_rows = 0;
  Executor whole(*mw.graph, o);
  o.train_chunk_rows = 3;
  Executor chunked(*mc.graph, o);
  REQUIRE(chunked.chunk_rows() == 3);
  Adam aw(whole.param_count(), AdamOptions{0.01f}), ac(chunked.param_count(), AdamOptions{0.01f});
  load(whole, mw, ids, targets);
  load(chunked, mc, ids, targets);
  for (int s = 0; s < 5; ++s) {
    whole.train_step(&aw);
    chunked.train_step(&ac);
    INFO("step " << s);
    CHECK(chunked.f32(mc.loss.id())[0] == Approx(whole.f32(mw.loss.id())[0]).epsilon(1e-4));
  }
  // An evaluation on the same parameters: every row's kept logits, computed chunk by chunk.
  std::copy(whole.params(), whole.params() + whole.param_count(), chunked.params());
  whole.forward();
  chunked.forward();
  const int64_t n = batch * c.seq_len * c.classes;
  const std::vector<float> lw(whole.f32(mw.logits.id()), whole.f32(mw.logits.id()) + n);
  const std::vector<float> lc(chunked.f32(mc.logits.id()), chunked.f32(mc.logits.id()) + n);
  require_grads_close(lc, lw, 1e-5f);
  CHECK(chunked.f32(mc.loss.id())[0] == Approx(whole.f32(mw.loss.id())[0]).epsilon(1e-6));
}

// Steps of config c at `batch` (max_batch 13) with train_shards = shards on `threads` threads
// from the same parameters and data, Adam updating: the losses and the parameters after.
struct ShardRun {
  std::vector<float> losses, params, grads;
};

ShardRun shard_run(const ModelConfig& c, int shards, int threads, int64_t run_batch, const std::vector<int32_t>& ids,
                   const std::vector<int32_t>& targets, int steps) {
  Model m = build_model(c, 13);
  ExecutorOptions o = exact_threads(threads);
  o.train_shards = shards;
  Executor ex(*m.graph, o);
  REQUIRE(ex.train_shards() == (shards >= 2 ? shards : 0));
  Adam adam(ex.param_count(), AdamOptions{0.01f});
  load_rows(ex, m, ids, targets, run_batch);
  ShardRun r;
  for (int s = 0; s < steps; ++s) {
    ex.train_step(&adam);
    r.losses.push_back(ex.f32(m.loss.id())[0]);
  }
  r.params.assign(ex.params(), ex.params() + ex.param_count());
  r.grads.assign(ex.grads(), ex.grads() + ex.param_count());
  return r;
}

TEST_CASE("train_shards: the shards' summed gradients, bitwise the same on any thread count") {
  for (ModelConfig c : configs_under_test()) {
    SECTION(c.task) {
      Rng rng(5);
      std::vector<int32_t> ids, targets;
      fill_batch(c, rng, 13, ids, targets);
      for (size_t k = 0; k < targets.size(); k += 3) targets[k] = -1;  // ignored positions, unevenly
      for (int64_t run_batch : {int64_t{13}, int64_t{5}, int64_t{1}}) {  // 13 = 7 + 6; 5; 1 (an empty shard)
        INFO("batch " << run_batch);
        // One step from the same parameters: the whole batch's loss and gradient, summed in
        // another order.
        const ShardRun whole = shard_run(c, 0, 1, run_batch, ids, targets, 1);
        for (int shards : {2, 3}) {
          INFO(shards << " shards");
          const ShardRun one = shard_run(c, shards, 1, run_batch, ids, targets, 1);
          CHECK(one.losses[0] == Approx(whole.losses[0]).epsilon(2e-6));
          require_grads_close(one.grads, whole.grads, 2e-5f);
          for (int threads : {2, 3}) {  // the same bits on any thread count
            INFO(threads << " threads");
            const ShardRun many = shard_run(c, shards, threads, run_batch, ids, targets, 1);
            REQUIRE(many.losses == one.losses);
            REQUIRE(many.grads == one.grads);
            REQUIRE(many.params == one.params);
          }
        }
      }
      // Several Adam steps: still bitwise the same on 1 and 2 threads, and close to whole batches.
      const ShardRun whole = shard_run(c, 0, 1, 13, ids, targets, 4);
      const ShardRun one = shard_run(c, 2, 1, 13, ids, targets, 4);
      const ShardRun two = shard_run(c, 2, 2, 13, ids, targets, 4);
      REQUIRE(two.losses == one.losses);
      REQUIRE(two.params == one.params);
      for (size_t s = 0; s < whole.losses.size(); ++s) CHECK(one.losses[s] == Approx(whole.losses[s]).epsilon(1e-4));
    }
  }
}

TEST_CASE("train_shards: bad settings are errors naming the option, and steady steps allocate nothing") {
  Model m = build_model(lesson_config("neighbor-sum"), 64);
  ExecutorOptions bad;
  bad.train_shards = -1;
  CHECK_THROWS_WITH(Executor(*m.graph, bad), Catch::Contains("train_shards must be 0 (off) to 64, got -1"));
  bad.train_shards = 2;
  bad.train_chunk_rows = 8;
  CHECK_THROWS_WITH(Executor(*m.graph, bad), Catch::Contains("train_shards and train_chunk_rows > 0 exclude each other"));
  // A graph whose loss is read again in the forward cannot run on parts of its batch.
  Graph g(4);
  Tensor x = g.input("x", {3, 5}, DType::kF32);
  Tensor y = g.input("y", {3}, DType::kI32);
  Linear lin(g, "lin", 5, 4);
  Tensor scaled = cross_entropy(lin(x), y) * 2.0f;
  g.keep(scaled);
  g.backward(scaled);
  ExecutorOptions shards;
  shards.train_shards = 2;
  CHECK_THROWS_WITH(Executor(g, shards), Catch::Contains("train_shards needs a graph whose training step can run on parts"));
  {
    // A kept result of the parameters alone is each shard's same value, not their sum; the
    // loss is the shards' summed shares of the whole batch's mean.
    Graph h(6);
    Tensor hx = h.input("x", {6, 5}, DType::kF32);
    Tensor hy = h.input("y", {6}, DType::kI32);
    Linear hl(h, "lin", 5, 4);
    Tensor doubled = hl.weight * 2.0f;
    h.keep(doubled);
    Tensor hloss = cross_entropy(hl(hx), hy);
    h.backward(hloss);
    ExecutorOptions whole_o, shard_o;
    shard_o.train_shards = 3;
    Executor whole(h, whole_o), sharded(h, shard_o);
    REQUIRE(sharded.train_shards() == 3);
    for (Executor* e : {&whole, &sharded}) {
      for (int k = 0; k < 30; ++k) e->f32(hx.id())[k] = 0.1f * static_cast<float>(k % 7) - 0.3f;
      for (int k = 0; k < 6; ++k) e->i32(hy.id())[k] = k % 4;
      e->train_step(nullptr);
    }
    for (int k = 0; k < 20; ++k) CHECK(sharded.f32(doubled.id())[k] == whole.f32(doubled.id())[k]);
    CHECK(sharded.f32(hloss.id())[0] == Approx(whole.f32(hloss.id())[0]).epsilon(1e-6));
  }
  for (int threads : {1, 2}) {
    ExecutorOptions o;
    o.threads = threads;
    o.train_shards = 2;
    Executor ex(*m.graph, o);
    Adam adam(ex.param_count(), {0.01f});
    Rng rng(5);
    std::vector<int32_t> ids, targets;
    fill_batch(m.config, rng, 64, ids, targets);
    load(ex, m, ids, targets);
    for (int i = 0; i < 3; ++i) ex.train_step(&adam);  // warm-up: thread pools, arenas, scratch
    const long before = g_allocations.load();
    for (int i = 0; i < 25; ++i) {
      ex.set_batch(i % 5 == 4 ? 40 : 64);  // partial batches too
      ex.train_step(&adam);
      ex.forward();
    }
    const long allocations = g_allocations.load() - before;  // before INFO, which allocates
    INFO(threads << " threads");
    REQUIRE(allocations == 0);
    // Profiled: shard 0's nodes and the sum with the update, one run a step.
    ex.set_profiling(true);
    for (int i = 0; i < 3; ++i) ex.train_step(&adam);
    ex.set_profiling(false);
    CHECK(ex.profiled_runs() == 3);
    const std::vector<Executor::NodeTime> times = ex.node_times();
    REQUIRE(times.size() == m.graph->nodes().size() + 1);
    CHECK(times.front().seconds > 0);
    CHECK(times.back().seconds > 0);
  }
}

TEST_CASE("training in chunks only where every node allows it") {
  // A loss read again in the forward (here: scaled) is the mean of one chunk while the chunks
  // run: such a graph trains on whole batches.
  Graph g(4);
  Tensor x = g.input("x", {3, 5}, DType::kF32);
  Tensor y = g.input("y", {3}, DType::kI32);
  Linear lin(g, "lin", 5, 4);
  Tensor loss = cross_entropy(lin(x), y);
  Tensor scaled = loss * 2.0f;
  g.keep(scaled);
  g.backward(scaled);
  ExecutorOptions o;
  o.train_chunk_rows = 2;
  Executor ex(g, o);
  CHECK(ex.chunk_rows() == 0);
  // The same graph without it trains in chunks.
  Graph h(4);
  Tensor hx = h.input("x", {3, 5}, DType::kF32);
  Tensor hy = h.input("y", {3}, DType::kI32);
  Linear hlin(h, "lin", 5, 4);
  h.backward(cross_entropy(hlin(hx), hy));
  Executor hex(h, o);
  CHECK(hex.chunk_rows() == 2);
  // tok(ids) + pos(positions) chunks (the position table's gradient is summed over rows, per
  // chunk); a retained gradient of the unbatched pos(positions) would hold one chunk's share.
  for (bool retain : {false, true}) {
    Graph p(4);
    Tensor ids = p.input("ids", {3}, DType::kI32);
    Tensor positions = p.input_unbatched("positions", {3}, DType::kI32);
    Tensor targets = p.input("targets", {3}, DType::kI32);
    Embedding tok(p, "tok", 6, 5), pos(p, "pos", 3, 5);
    Tensor where = pos(positions);
    Linear head(p, "head", 5, 4);
    Tensor l = cross_entropy(head(tok(ids) + where), targets);
    if (retain) p.retain_grad(where);
    p.backward(l);
    Executor pex(p, o);
    CHECK(pex.chunk_rows() == (retain ? 0 : 2));
  }
  // A cross-entropy over unbatched logits: the chunks would count it once each.
  Graph u(4);
  Tensor ux = u.input_unbatched("x", {3, 5}, DType::kF32);
  Tensor uy = u.input_unbatched("y", {3}, DType::kI32);
  Tensor bx = u.input("bx", {3, 5}, DType::kF32);
  Linear ul(u, "lin", 5, 4);
  Tensor ulogits = ul(ux);
  Tensor unused = ul(bx);
  u.keep(unused);
  u.backward(cross_entropy(ulogits, uy));
  Executor uex(u, o);
  CHECK(uex.chunk_rows() == 0);
}

}  // namespace attnkit
