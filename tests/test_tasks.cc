// Task data, the general stack, attention rollout and the trainer (models/).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "engine/error.h"
#include "engine/npy.h"
#include "engine/npz.h"
#include "engine/safetensors.h"
#include "model_reference.h"
#include "models/rollout.h"
#include "models/tasks.h"
#include "models/trainer.h"

namespace attnkit {
namespace {

namespace fs = std::filesystem;

std::string scratch(const std::string& name) {
  fs::path dir = fs::path(ATTNKIT_BINARY_DIR) / "test_tasks_tmp";
  fs::create_directories(dir);
  return (dir / name).string();
}

TEST_CASE("a data set without targets (y empty) loads, evaluates to no positions, and y of another size is refused") {
  const ModelConfig c = lesson_config("neighbor-sum");
  Rng rng(11);
  Dataset d = generate_dataset(c, 40, rng);
  const std::string path = scratch("tokens_only.npy");
  write_npy(path, d.x.data(), {d.size, d.seq_len});
  const Dataset loaded = load_sequences(path, c, "the model");
  CHECK_FALSE(loaded.has_targets());
  CHECK(loaded.y.empty());
  CHECK(loaded.x == d.x);
  ModelRunner runner(c, 16, 1, 0, /*with_backward=*/false);
  std::vector<int32_t> predictions;
  const Accuracy none = runner.evaluate(loaded, &predictions);
  CHECK(none.total == 0);
  CHECK(predictions.size() == d.x.size());
  // The same tokens with their targets: the same predictions, every position scored.
  std::vector<int32_t> with_targets;
  const Accuracy scored = runner.evaluate(d, &with_targets);
  CHECK(scored.total == d.size * d.seq_len);
  CHECK(with_targets == predictions);
  // Without a predictions vector (the batch's own buffer): the same counts, and they are the
  // predictions' hits on the targets.
  const Accuracy counted = runner.evaluate(d);
  CHECK(counted.total == scored.total);
  CHECK(counted.correct == scored.correct);
  int64_t hits = 0;
  for (size_t i = 0; i < d.y.size(); ++i) hits += predictions[i] == d.y[i];
  CHECK(counted.correct == hits);
  Accuracy by_hand;
  by_hand.add(predictions.data(), d.y.data(), static_cast<int64_t>(d.y.size()));
  CHECK(by_hand.correct == hits);
  Dataset bad = d;
  bad.y.resize(bad.y.size() - 1);
  CHECK_THROWS_WITH(runner.evaluate(bad), Catch::Contains("need 400 tokens and targets (or no targets), not 400 and 399"));
  TaskData no_targets{loaded, d};
  CHECK_THROWS_WITH(Trainer(c, TrainerOptions{}, no_targets), Catch::Contains("training set: no targets"));
}

TEST_CASE("task rules give the lesson's targets") {
  SECTION("neighbor-sum: (x[i-1] + x[i+1]) mod 10 around the ring") {
    const ModelConfig c = lesson_config("neighbor-sum");
    const int32_t x[10] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
    int32_t y[10];
    task_targets(c, x, y);
    const int32_t want[10] = {(3 + 1) % 10, (3 + 4) % 10, (1 + 1) % 10, (4 + 5) % 10, (1 + 9) % 10,
                              (5 + 2) % 10, (9 + 6) % 10, (2 + 5) % 10, (6 + 3) % 10, (5 + 3) % 10};
    for (int i = 0; i < 10; ++i) CHECK(y[i] == want[i]);
  }
  SECTION("duplicates: 1 where the token occurs elsewhere") {
    const ModelConfig c = lesson_config("duplicates");
    const int32_t x[10] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 11};
    int32_t y[10];
    task_targets(c, x, y);
    const int32_t want[10] = {0, 1, 0, 1, 1, 0, 0, 0, 1, 0};
    for (int i = 0; i < 10; ++i) CHECK(y[i] == want[i]);
  }
  SECTION("reversal") {
    const ModelConfig c = lesson_config("reversal");
    const int32_t x[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    int32_t y[8];
    task_targets(c, x, y);
    for (int i = 0; i < 8; ++i) CHECK(y[i] == 7 - i);
  }
  SECTION("induction: the token after the latest earlier occurrence, -1 where none") {
    ModelConfig c = lesson_config("induction");
    c.seq_len = 8;
    const int32_t x[8] = {5, 7, 2, 9, 7, 2, 5, 7};
    int32_t y[8];
    task_targets(c, x, y);
    const int32_t want[8] = {-1, -1, -1, -1, 2, 9, 7, 2};
    for (int i = 0; i < 8; ++i) CHECK(y[i] == want[i]);
  }
}

TEST_CASE("generated data follows the rules and the seed") {
  for (const std::string& task : {"neighbor-sum", "duplicates", "reversal", "induction"}) {
    const ModelConfig c = lesson_config(task);
    const TaskData a = generate_task_data(c, 200, 50, 7), b = generate_task_data(c, 200, 50, 7);
    const TaskData other = generate_task_data(c, 200, 50, 8);
    CHECK(a.train.x == b.train.x);
    CHECK(a.val.y == b.val.y);
    CHECK(a.train.x != other.train.x);
    CHECK_NOTHROW(validate_dataset(a.train, c, "train"));
    std::vector<int32_t> y(static_cast<size_t>(c.seq_len));
    for (int64_t i = 0; i < a.train.size; ++i) {
      task_targets(c, a.train.tokens(i), y.data());
      REQUIRE(std::memcmp(y.data(), a.train.targets(i), y.size() * 4) == 0);
    }
  }
}

TEST_CASE("induction sequences: one repeated segment, every other token unique") {
  const ModelConfig c = lesson_config("induction");
  Rng rng(3);
  std::set<int64_t> lengths;
  for (int n = 0; n < 500; ++n) {
    std::vector<int32_t> x(static_cast<size_t>(c.seq_len)), y(x.size());
    generate_induction(c.seq_len, c.vocab, rng, x.data());
    task_targets(c, x.data(), y.data());
    int64_t first = -1, answered = 0;
    std::map<int32_t, int> count;
    for (int32_t t : x) ++count[t];
    for (const auto& [t, k] : count) REQUIRE(k <= 2);
    for (int64_t i = 0; i < c.seq_len; ++i)
      if (y[static_cast<size_t>(i)] >= 0) {
        if (first < 0) first = i;
        REQUIRE(i == first + answered);  // the answered positions are one contiguous run
        ++answered;
      }
    REQUIRE(answered >= 2);
    REQUIRE(answered <= c.seq_len / 2);
    lengths.insert(answered);
  }
  CHECK(lengths.size() == static_cast<size_t>(c.seq_len / 2 - 1));  // L takes every value 2..T/2
  CHECK_THROWS_AS(generate_induction(16, 10, rng, std::vector<int32_t>(16).data()), Error);
}

TEST_CASE("attention rollout matches lesson 004's hand example") {
  const int64_t T = 6;
  std::vector<float> maps(static_cast<size_t>(2 * T * T), 0.0f);
  float* A1 = maps.data();
  float* A2 = maps.data() + T * T;
  A1[0] = 1;  // layer 1: each token looks at the previous one
  for (int64_t i = 1; i < T; ++i) A1[i * T + i - 1] = 1;
  for (int64_t i = 0; i < T; ++i) A2[i * T + i] = 1;  // layer 2: identity, but "он" → 0.2 self, 0.8 "кота"
  A2[3 * T + 3] = 0.2f;
  A2[3 * T + 2] = 0.8f;
  const std::vector<float> R = attention_rollout(maps.data(), 2, 1, T);
  const double want[6][6] = {{1, 0, 0, 0, 0, 0},   {.5, .5, 0, 0, 0, 0}, {0, .5, .5, 0, 0, 0},
                             {0, .2, .5, .3, 0, 0}, {0, 0, 0, .5, .5, 0}, {0, 0, 0, 0, .5, .5}};
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) CHECK(R[static_cast<size_t>(i * T + j)] == Approx(want[i][j]).margin(1e-6));
}

// `rows` random rows of T positive weights summing to 1 (attention maps, as softmax makes them).
template <typename F>
std::vector<F> random_maps(Rng& rng, int64_t rows, int64_t T) {
  std::vector<F> maps(static_cast<size_t>(rows * T));
  for (int64_t r = 0; r < rows; ++r) {
    F s = 0;
    for (int64_t j = 0; j < T; ++j) s += (maps[static_cast<size_t>(r * T + j)] = static_cast<F>(rng.uniform()));
    for (int64_t j = 0; j < T; ++j) maps[static_cast<size_t>(r * T + j)] /= s;
  }
  return maps;
}

TEST_CASE("attention rollout of random softmax maps: rows sum to 1, heads averaged") {
  Rng rng(5);
  const int64_t L = 3, H = 2, T = 7;
  const std::vector<double> maps = random_maps<double>(rng, L * H * T, T);
  const std::vector<float> R = attention_rollout(maps.data(), L, H, T);  // float32, as the files hold it
  for (int64_t i = 0; i < T; ++i) {
    double s = 0;
    for (int64_t j = 0; j < T; ++j) s += R[static_cast<size_t>(i * T + j)];
    CHECK(s == Approx(1.0).margin(1e-6));
  }
  // One layer of two heads equals one layer of their mean.
  std::vector<double> mean(static_cast<size_t>(T * T));
  for (size_t e = 0; e < mean.size(); ++e) mean[e] = 0.5 * (maps[e] + maps[e + mean.size()]);
  const std::vector<float> a = attention_rollout(maps.data(), 1, 2, T), b = attention_rollout(mean.data(), 1, 1, T);
  for (size_t e = 0; e < a.size(); ++e) CHECK(a[e] == Approx(b[e]).margin(1e-7));
  CHECK_THROWS_AS(attention_rollout(maps.data(), 0, 1, T), Error);
}

TEST_CASE("attention rollout at T = 300 equals a naive double product, T over the limit is an Error naming it") {
  Rng rng(9);
  const int64_t L = 3, H = 2, T = 300;
  const std::vector<float> maps = random_maps<float>(rng, L * H * T, T);
  std::vector<double> want(static_cast<size_t>(T * T), 0.0), A(want.size()), next(want.size());
  for (int64_t i = 0; i < T; ++i) want[static_cast<size_t>(i * T + i)] = 1;
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t i = 0; i < T; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < T; ++j) {
        double a = 0;
        for (int64_t h = 0; h < H; ++h) a += maps[static_cast<size_t>(((l * H + h) * T + i) * T + j)];
        sum += (A[static_cast<size_t>(i * T + j)] = 0.5 * a / H + (i == j ? 0.5 : 0.0));
      }
      for (int64_t j = 0; j < T; ++j) A[static_cast<size_t>(i * T + j)] /= sum;
    }
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j) {
        double v = 0;
        for (int64_t k = 0; k < T; ++k) v += A[static_cast<size_t>(i * T + k)] * want[static_cast<size_t>(k * T + j)];
        next[static_cast<size_t>(i * T + j)] = v;
      }
    want.swap(next);
  }
  const std::vector<float> R = attention_rollout(maps.data(), L, H, T);
  double worst = 0;
  for (size_t e = 0; e < R.size(); ++e) worst = std::max(worst, std::abs(R[e] - want[e]));
  CHECK(worst < 1e-6);

  const int64_t big = kMaxRolloutT + 1;
  const std::vector<float> huge(static_cast<size_t>(big * big), 1.0f / static_cast<float>(big));
  CHECK_THROWS_WITH(attention_rollout(huge.data(), 1, 1, big),
                    Catch::Contains("T = 4097 is over the limit of 4096"));
}

TEST_CASE("general stack: pre-LN blocks with MLP match the double reference, and one layer keeps lesson names") {
  ModelConfig c = lesson_config("reversal");
  c.layers = 2, c.heads = 2, c.pre_norm = true, c.block_mlp = 16, c.causal = true;
  Model m = build_model(c, 3);
  Executor ex(*m.graph, {1, 11});
  const TaskData d = generate_task_data(c, 3, 1, 1);
  ex.set_batch(3);
  std::memcpy(ex.i32(m.ids.id()), d.train.x.data(), d.train.x.size() * 4);
  std::memcpy(ex.i32(m.targets.id()), d.train.y.data(), d.train.y.size() * 4);
  ex.forward();
  const double ref = test::ref_loss(c, test::ref_params(*m.graph, ex.params()), d.train.x, d.train.y, 3);
  CHECK(ex.f32(m.loss.id())[0] == Approx(ref).epsilon(1e-4));
  std::set<std::string> names;
  for (const ParamInfo& p : m.graph->params()) names.insert(p.name);
  CHECK(names.count("layers.1.ln2.weight") == 1);
  CHECK(names.count("layers.0.mlp.2.bias") == 1);

  Model lesson = build_model(lesson_config("neighbor-sum"), 2);
  std::vector<std::string> lesson_names;
  for (const ParamInfo& p : lesson.graph->params()) lesson_names.push_back(p.name);
  CHECK(lesson_names.front() == "tok.weight");
  CHECK(std::find(lesson_names.begin(), lesson_names.end(), "attn.q.weight") != lesson_names.end());

  ModelConfig bad = c;
  bad.heads = 3;
  CHECK_THROWS_AS(build_model(bad, 2), Error);
  const ModelConfig big = lesson_config("reversal-large");
  CHECK(big.vocab == 64);
  CHECK(big.seq_len == 128);
  CHECK(big.d_model == 256);
  CHECK(big.block_mlp == 1024);
}

TEST_CASE("npz datasets: read numpy's arrays, reject wrong names, dtypes, shapes and tokens") {
  const ModelConfig c = lesson_config("neighbor-sum");
  const TaskData d = generate_task_data(c, 20, 5, 2);
  auto arr = [](const Dataset& s, const std::vector<int32_t>& v) { return make_npy(v.data(), {s.size, s.seq_len}); };
  std::map<std::string, NpyArray> good = {{"X_train", arr(d.train, d.train.x)}, {"Y_train", arr(d.train, d.train.y)},
                                          {"X_val", arr(d.val, d.val.x)}, {"Y_val", arr(d.val, d.val.y)}};
  const std::string path = scratch("good.npz");
  write_npz(path, good);
  const TaskData back = load_task_data(path, c);
  CHECK(back.train.x == d.train.x);
  CHECK(back.val.y == d.val.y);

  auto expect_error = [&](std::map<std::string, NpyArray> arrays, const std::string& fragment) {
    const std::string p = scratch("bad.npz");
    write_npz(p, arrays);
    try {
      load_task_data(p, c);
      FAIL("no error for " << fragment);
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(fragment) != std::string::npos);
      CHECK(std::string(e.what()).find("bad.npz") != std::string::npos);
    }
  };
  auto without = good;
  without.erase("Y_val");
  expect_error(without, "no array 'Y_val'");
  auto floats = good;
  std::vector<float> f(d.train.x.begin(), d.train.x.end());
  floats["X_train"] = make_npy(f.data(), {20, 10});
  expect_error(floats, "dtype <f4");
  auto wrong_t = good;
  wrong_t["X_val"] = make_npy(d.train.x.data(), {10, 20});
  expect_error(wrong_t, "'X_val'");
  auto big_token = good;
  std::vector<int32_t> x = d.train.x;
  x[13] = 10;
  big_token["X_train"] = make_npy(x.data(), {20, 10});
  expect_error(big_token, "has tokens up to 10 but the model has vocab 10 (first outside the vocabulary [0, 10): token 10 at [1, 3])");
  auto bad_target = good;
  std::vector<int32_t> y = d.train.y;
  y[0] = -2;
  bad_target["Y_train"] = make_npy(y.data(), {20, 10});
  expect_error(bad_target, "target -2");
}

TEST_CASE("npz datasets that disagree with a checkpoint's config name the checkpoint as the other party") {
  const ModelConfig c = lesson_config("neighbor-sum");  // vocab 10, T 10
  const TaskData d = generate_task_data(c, 20, 5, 2);
  std::vector<int32_t> x = d.train.x;
  x[3] = 12;
  x[40] = 15;
  std::map<std::string, NpyArray> arrays = {{"X_train", make_npy(x.data(), {20, 10})},
                                            {"Y_train", make_npy(d.train.y.data(), {20, 10})},
                                            {"X_val", make_npy(d.val.x.data(), {5, 10})},
                                            {"Y_val", make_npy(d.val.y.data(), {5, 10})}};
  const std::string path = scratch("data.npz");
  write_npz(path, arrays);
  const std::string source = "the checkpoint runs/x/model.safetensors";
  auto message = [&](const std::string& p) {
    try {
      load_task_data(p, c, source);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message(path) == path + ": 'X_train' has tokens up to 15 but the checkpoint runs/x/model.safetensors has "
                               "vocab 10 (first outside the vocabulary [0, 10): token 12 at [0, 3])");

  std::vector<int32_t> y = d.val.y;
  y[7] = 11;
  arrays["X_train"] = make_npy(d.train.x.data(), {20, 10});
  arrays["Y_val"] = make_npy(y.data(), {5, 10});
  write_npz(path, arrays);
  CHECK(message(path) == path + ": 'Y_val' has targets up to 11 but the checkpoint runs/x/model.safetensors has "
                               "classes 10 (first outside [0, 10): target 11 at [0, 7])");

  arrays["X_val"] = make_npy(d.train.x.data(), {10, 20});
  arrays["Y_val"] = make_npy(d.train.y.data(), {10, 20});
  write_npz(path, arrays);
  CHECK(message(path) == path + ": 'X_val'/'Y_val': sequences have length 20 but the checkpoint "
                               "runs/x/model.safetensors has T (seq_len) 10");
}

TrainerOptions small_options(int64_t epochs) {
  TrainerOptions o;
  o.training = lesson_training("neighbor-sum");
  o.training.epochs = epochs;
  o.training.train_size = 300;  // 5 batches: the last one partial (300 = 4·64 + 44)
  o.training.val_size = 20;
  o.training.snapshot_steps = {0, 3, 7};
  o.seed = 4;
  o.threads = 2;
  return o;
}

TEST_CASE("trainer: a stop asked for before the last step stops, during the last step lets the run finish") {
  const ModelConfig c = lesson_config("neighbor-sum");
  const TrainerOptions o = small_options(2);  // 10 steps
  const TaskData d = generate_task_data(c, o.training.train_size, o.training.val_size, o.seed);
  Trainer early(c, o, d);
  CHECK_FALSE(early.train({}, {}, [&] { return early.step() >= 7; }));  // asked after step 7: stops there
  CHECK(early.step() == 7);
  Trainer late(c, o, d);
  int epochs_seen = 0;
  CHECK(late.train({}, [&](const EpochReport&) { ++epochs_seen; }, [&] { return late.step() >= 10; }));
  CHECK(late.step() == 10);
  CHECK(epochs_seen == 2);  // the last epoch's end (its evaluation) ran too
}

TEST_CASE("trainer: 4 epochs + resume to 8 equals 8 epochs, bitwise") {
  const ModelConfig c = lesson_config("neighbor-sum");
  auto data = [&](const TrainerOptions& o) {
    return generate_task_data(c, o.training.train_size, o.training.val_size, o.seed);
  };
  const TrainerOptions o8 = small_options(8), o4 = small_options(4);
  Trainer full(c, o8, data(o8));
  full.train();
  CHECK(full.step() == 8 * 5);
  CHECK(full.losses().size() == 40);
  CHECK(full.snapshot_steps() == std::vector<int64_t>{0, 3, 7});

  Trainer first(c, o4, data(o4));
  first.train();
  const std::string path = scratch("half.safetensors");
  first.save(path);
  const auto meta = read_checkpoint_metadata(path);
  CHECK(model_config_from_metadata(meta, path).d_model == 32);
  CHECK(trainer_options_from_metadata(meta, path).training.snapshot_steps == std::vector<int64_t>{0, 3, 7});

  {  // A data position that is not where the step leaves the data (epoch 5 at step 20 of 5 batches
     // per epoch) is refused: it would skip or repeat training without a word.
    SafetensorsFile f = read_safetensors(path);
    f.metadata["attnkit.epoch"] = "5";
    const std::string odd = scratch("odd_epoch.safetensors");
    write_safetensors(odd, f.tensors, f.metadata);
    Trainer t(c, o8, data(o8));
    CHECK_THROWS_WITH(t.resume(odd), Catch::Contains("odd_epoch.safetensors: data position (epoch 5, batch 0 of 5 per "
                                                     "epoch) is not where step 20 leaves the training set"));
    // The data-order generator's impossible all-zero state (its shuffle would never end).
    f.metadata["attnkit.epoch"] = "4";
    f.metadata["attnkit.rng"] = "0 0 0 0";
    write_safetensors(odd, f.tensors, f.metadata);
    CHECK_THROWS_WITH(t.resume(odd), Catch::Contains("odd_epoch.safetensors: data-order generator state 'attnkit.rng' "
                                                     "is all zero"));
    // Refused before anything is loaded: the trainer is the fresh one it was.
    Trainer fresh(c, o8, data(o8));
    CHECK(t.step() == 0);
    CHECK(std::memcmp(t.executor().params(), fresh.executor().params(),
                      static_cast<size_t>(fresh.executor().param_count()) * 4) == 0);
  }

  Trainer second(c, o8, data(o8));
  second.resume(path);
  CHECK(second.step() == 20);
  second.train();
  REQUIRE(second.losses().size() == 20);
  for (size_t i = 0; i < 20; ++i) REQUIRE(std::memcmp(&second.losses()[i], &full.losses()[20 + i], 4) == 0);
  const Executor& a = full.executor();
  const Executor& b = second.executor();
  CHECK(std::memcmp(a.params(), b.params(), static_cast<size_t>(a.param_count()) * 4) == 0);
  CHECK(full.evaluate(full.data().val).correct == second.evaluate(second.data().val).correct);
}

TEST_CASE("trainer learns duplicates well above chance in a short run") {
  const ModelConfig c = lesson_config("duplicates");
  TrainerOptions o;
  o.training = lesson_training("duplicates");
  o.training.epochs = 3;
  o.threads = 2;
  Trainer t(c, o, generate_task_data(c, o.training.train_size, 300, 1));
  double last_acc = 0;
  t.train({}, [&](const EpochReport& r) { last_acc = r.val_accuracy; });
  const Accuracy acc = t.evaluate(t.data().val);
  CHECK(acc.value() == last_acc);
  CHECK(acc.value() > 0.85);  // always answering "no repeat" scores about 0.6
  const SequenceResult r = t.run_sequence(t.data().val.tokens(0));
  REQUIRE(r.attention.size() == 100);
  for (int i = 0; i < 10; ++i) {
    double s = 0;
    for (int j = 0; j < 10; ++j) s += r.attention[static_cast<size_t>(i * 10 + j)];
    CHECK(s == Approx(1.0).margin(1e-5));
  }
}

}  // namespace
}  // namespace attnkit

TEST_CASE("majority baseline: the most common target's share, -1 not counted, ties to the smaller class") {
  attnkit::Dataset d;
  d.size = 2, d.seq_len = 4;
  d.y = {1, 0, 1, -1, 2, 1, 0, -1};  // 1 ×3, 0 ×2, 2 ×1 of 6 scored
  attnkit::MajorityBaseline b = attnkit::majority_baseline(d);
  CHECK(b.cls == 1);
  CHECK(b.accuracy.correct == 3);
  CHECK(b.accuracy.total == 6);
  d.y = {2, 0, 2, 0, -1, -1, -1, -1};
  b = attnkit::majority_baseline(d);
  CHECK(b.cls == 0);
  CHECK(b.accuracy.value() == 0.5);
  d.y.assign(8, -1);
  b = attnkit::majority_baseline(d);
  CHECK(b.cls == -1);
  CHECK(b.accuracy.total == 0);
}
