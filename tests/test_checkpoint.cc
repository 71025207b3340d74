// Checkpoints: exact resume (bitwise), atomic resave, and strict validation on load.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "engine/checkpoint.h"
#include "engine/executor.h"
#include "engine/file_io.h"
#include "engine/rng.h"
#include "engine/safetensors.h"
#include "models/lessons.h"

namespace attnkit {
namespace {

namespace fs = std::filesystem;

// One folder per test case: CTest runs the cases as parallel processes, and one case looks
// for temporary files another one's save may have in flight.
std::string scratch_dir(const std::string& test) {
  fs::path dir = fs::path(ATTNKIT_BINARY_DIR) / "test_checkpoint_tmp" / test;
  fs::create_directories(dir);
  return dir.string();
}

struct Batch { std::vector<int32_t> ids, targets; };

std::vector<Batch> make_batches(const ModelConfig& c, int64_t batch, int n, uint64_t seed) {
  Rng rng(seed);
  std::vector<Batch> out(static_cast<size_t>(n));
  for (Batch& b : out) {
    b.ids.resize(static_cast<size_t>(batch * c.seq_len));
    b.targets.resize(b.ids.size());
    for (auto& x : b.ids) x = static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.vocab)));
    for (auto& y : b.targets) y = static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.classes)));
  }
  return out;
}

float step(Executor& ex, const Model& m, Adam& adam, const Batch& b) {
  ex.set_batch(static_cast<int64_t>(b.ids.size()) / m.config.seq_len);
  std::memcpy(ex.i32(m.ids.id()), b.ids.data(), b.ids.size() * 4);
  std::memcpy(ex.i32(m.targets.id()), b.targets.data(), b.targets.size() * 4);
  ex.train_step(&adam);
  return ex.f32(m.loss.id())[0];
}

std::vector<float> snapshot(const float* p, int64_t n) { return std::vector<float>(p, p + n); }

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

TrainingState sample_state() {
  TrainingState st;
  st.step = 5;
  st.epoch = 2;
  st.batch_in_epoch = 17;
  Rng data_rng(99);
  data_rng.next();
  st.rng_state = data_rng.state();
  st.rng_state[3] = UINT64_MAX;  // the full range survives the decimal round trip
  st.config = {{"task", "neighbor-sum"}, {"d_model", "32"}, {"lr", "0.001"}};
  return st;
}

TEST_CASE("save, load into a fresh executor and Adam, and resume bit for bit") {
  const ModelConfig c = lesson_config("neighbor-sum");
  const int64_t batch = 4;
  const std::vector<Batch> batches = make_batches(c, batch, 8, 5);
  const std::string path = scratch_dir("resume") + "/resume.safetensors";

  Model m = build_model(c, batch);
  Executor ex(*m.graph, {1, 7});
  Adam adam(ex.param_count(), AdamOptions{});
  for (int i = 0; i < 5; ++i) step(ex, m, adam, batches[static_cast<size_t>(i)]);
  TrainingState st = sample_state();
  save_checkpoint(path, ex, &adam, st);

  // The original continues.
  std::vector<float> losses_a;
  for (int i = 5; i < 8; ++i) losses_a.push_back(step(ex, m, adam, batches[static_cast<size_t>(i)]));
  const std::vector<float> params_a = snapshot(ex.params(), ex.param_count());

  // A fresh model, differently initialized, resumes from the file.
  Model m2 = build_model(c, batch);
  Executor ex2(*m2.graph, {1, 12345});
  Adam adam2(ex2.param_count(), AdamOptions{});
  TrainingState st2;
  load_checkpoint(path, ex2, &adam2, st2);
  CHECK(adam2.steps() == 5);
  CHECK(st2.step == 5);
  CHECK(st2.epoch == st.epoch);
  CHECK(st2.batch_in_epoch == st.batch_in_epoch);
  CHECK(st2.rng_state == st.rng_state);
  CHECK(st2.config == st.config);
  std::vector<float> losses_b;
  for (int i = 5; i < 8; ++i) losses_b.push_back(step(ex2, m2, adam2, batches[static_cast<size_t>(i)]));
  const std::vector<float> params_b = snapshot(ex2.params(), ex2.param_count());

  REQUIRE(bitwise_equal(losses_a, losses_b));
  REQUIRE(bitwise_equal(params_a, params_b));
  REQUIRE(bitwise_equal(snapshot(adam.m(), adam.size()), snapshot(adam2.m(), adam2.size())));
  REQUIRE(bitwise_equal(snapshot(adam.v(), adam.size()), snapshot(adam2.v(), adam2.size())));

  SECTION("the file is plain safetensors with the documented layout") {
    const SafetensorsFile f = read_safetensors(path);
    REQUIRE(f.tensors.size() == 3 * m.graph->params().size());
    for (const ParamInfo& p : m.graph->params()) {
      const TensorBlob* t = f.find(p.name);
      REQUIRE(t != nullptr);
      CHECK(t->dtype == "F32");
      const Shape& s = m.graph->tensor(p.tensor).shape;
      CHECK(t->shape == std::vector<int64_t>(s.dims.begin(), s.dims.begin() + s.rank));
      CHECK(f.find("optimizer.m." + p.name) != nullptr);
      CHECK(f.find("optimizer.v." + p.name) != nullptr);
    }
    CHECK(f.find("tok.weight") != nullptr);
    CHECK(f.metadata.at("attnkit.format") == "1");
    CHECK(f.metadata.at("attnkit.step") == "5");
    CHECK(f.metadata.at("attnkit.epoch") == "2");
    CHECK(f.metadata.at("attnkit.batch_in_epoch") == "17");
    CHECK(f.metadata.at("attnkit.rng").find("18446744073709551615") != std::string::npos);
    const auto meta = read_checkpoint_metadata(path);
    CHECK(meta.at("config.task") == "neighbor-sum");
    CHECK(meta.at("config.d_model") == "32");
  }

  SECTION("parameters only, without an optimizer") {
    const std::string p2 = scratch_dir("resume") + "/params_only.safetensors";
    save_checkpoint(p2, ex, nullptr, st);
    CHECK(read_safetensors(p2).tensors.size() == m.graph->params().size());
    Model m3 = build_model(c, batch);
    Executor ex3(*m3.graph, {1, 3});
    TrainingState st3;
    load_checkpoint(p2, ex3, nullptr, st3);
    CHECK(st3.step == st.step);
    CHECK(bitwise_equal(snapshot(ex3.params(), ex3.param_count()), params_a));
    // Loading it with an Adam needs the moments: a named error, nothing changed.
    Adam adam3(ex3.param_count(), AdamOptions{});
    TrainingState st4;
    REQUIRE_THROWS_AS(load_checkpoint(p2, ex3, &adam3, st4), FileError);
    REQUIRE_THROWS_WITH(load_checkpoint(p2, ex3, &adam3, st4),
                        Catch::Contains(p2) && Catch::Contains("optimizer.m."));
    CHECK(adam3.steps() == 0);
    CHECK(st4.step == 0);
  }
}

TEST_CASE("a failed save leaves the previous checkpoint intact") {
  const ModelConfig c = lesson_config("neighbor-sum");
  Model m = build_model(c, 2);
  Executor ex(*m.graph, {1, 7});
  Adam adam(ex.param_count(), AdamOptions{});
  const std::string path = scratch_dir("atomic") + "/atomic.safetensors";
  TrainingState st = sample_state();
  save_checkpoint(path, ex, &adam, st);
  const std::vector<uint8_t> before = file_bytes(path);

  // Resaving over it works and leaves no temporaries behind.
  const Batch b = make_batches(c, 2, 1, 3)[0];
  step(ex, m, adam, b);
  save_checkpoint(path, ex, &adam, st);
  const std::vector<uint8_t> after = file_bytes(path);
  CHECK(after != before);
  for (const auto& e : fs::directory_iterator(scratch_dir("atomic")))
    CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);

  // A save that cannot be written throws FileError naming the file.
  const std::string bad = scratch_dir("atomic") + "/no-such-dir/ckpt.safetensors";
  REQUIRE_THROWS_AS(save_checkpoint(bad, ex, &adam, st), FileError);
  REQUIRE_THROWS_WITH(save_checkpoint(bad, ex, &adam, st), Catch::Contains("no-such-dir"));

  // A save that fails while writing (a bad config key) leaves the old file as it was.
  TrainingState broken = st;
  broken.config[""] = "x";
  REQUIRE_THROWS_AS(save_checkpoint(path, ex, &adam, broken), FileError);
  CHECK(file_bytes(path) == after);

  // Same if the path is a directory: the rename fails, the directory and file survive.
  const std::string dir_path = scratch_dir("atomic") + "/a-directory";
  fs::create_directories(dir_path);
  REQUIRE_THROWS_AS(save_checkpoint(dir_path, ex, &adam, st), FileError);
  CHECK(fs::is_directory(dir_path));

  Model m2 = build_model(c, 2);
  Executor ex2(*m2.graph, {1, 8});
  Adam adam2(ex2.param_count(), AdamOptions{});
  TrainingState st2;
  load_checkpoint(path, ex2, &adam2, st2);
  CHECK(bitwise_equal(snapshot(ex2.params(), ex2.param_count()), snapshot(ex.params(), ex.param_count())));
  CHECK(adam2.steps() == 1);
}

TEST_CASE("loading a wrong or damaged checkpoint throws a named error and changes nothing") {
  const std::string dir = scratch_dir("damaged");
  const std::string dup_path = dir + "/duplicates.safetensors";
  const std::string ok_path = dir + "/neighbor.safetensors";
  {
    Model md = build_model(lesson_config("duplicates"), 2);
    Executor exd(*md.graph, {1, 1});
    Adam ad(exd.param_count(), AdamOptions{});
    save_checkpoint(dup_path, exd, &ad, sample_state());
  }
  Model m = build_model(lesson_config("neighbor-sum"), 2);
  Executor ex(*m.graph, {1, 2});
  Adam adam(ex.param_count(), AdamOptions{});
  save_checkpoint(ok_path, ex, &adam, sample_state());

  // Perturb the live state so "unchanged" is distinguishable from "reloaded".
  for (int64_t i = 0; i < ex.param_count(); ++i) ex.params()[i] += 0.25f;
  for (int64_t i = 0; i < adam.size(); ++i) adam.m()[i] = 1.0f;
  adam.restore(42);
  TrainingState st;
  st.step = 42;
  st.config["keep"] = "me";
  const std::vector<float> params0 = snapshot(ex.params(), ex.param_count());
  const std::vector<float> m0 = snapshot(adam.m(), adam.size());
  auto unchanged = [&] {
    CHECK(bitwise_equal(snapshot(ex.params(), ex.param_count()), params0));
    CHECK(bitwise_equal(snapshot(adam.m(), adam.size()), m0));
    CHECK(adam.steps() == 42);
    CHECK(st.step == 42);
    CHECK(st.config.at("keep") == "me");
  };

  SECTION("a different model: a tensor named, both shapes given") {
    std::string message;
    try {
      load_checkpoint(dup_path, ex, &adam, st);
    } catch (const FileError& e) {
      message = e.what();
    }
    INFO(message);
    REQUIRE(!message.empty());
    CHECK(message.find(dup_path) != std::string::npos);
    CHECK(message.find("tensor \"") != std::string::npos);
    // Two shapes "[..]" appear, and they differ.
    const size_t a = message.find('['), b = message.find('[', message.find(']'));
    REQUIRE(a != std::string::npos);
    REQUIRE(b != std::string::npos);
    CHECK(message.substr(a, message.find(']', a) - a) != message.substr(b, message.find(']', b) - b));
    unchanged();
  }

  SECTION("a truncated file") {
    std::vector<uint8_t> bytes = file_bytes(ok_path);
    bytes.resize(bytes.size() / 2);
    const std::string cut = dir + "/truncated.safetensors";
    write_file_atomic(cut, bytes.data(), bytes.size());
    REQUIRE_THROWS_AS(load_checkpoint(cut, ex, &adam, st), FileError);
    REQUIRE_THROWS_WITH(load_checkpoint(cut, ex, &adam, st), Catch::Contains(cut));
    REQUIRE_THROWS_AS(read_checkpoint_metadata(cut), FileError);
    unchanged();
  }

  SECTION("a missing file") {
    const std::string missing = dir + "/does-not-exist.safetensors";
    REQUIRE_THROWS_WITH(load_checkpoint(missing, ex, &adam, st), Catch::Contains(missing));
    unchanged();
  }

  // Rewrites the good file with one change and expects a FileError mentioning `needle`.
  const SafetensorsFile good = read_safetensors(ok_path);
  auto expect_rejected = [&](SafetensorsFile f, const std::string& needle) {
    const std::string p = dir + "/edited.safetensors";
    write_safetensors(p, f.tensors, f.metadata);
    REQUIRE_THROWS_AS(load_checkpoint(p, ex, &adam, st), FileError);
    REQUIRE_THROWS_WITH(load_checkpoint(p, ex, &adam, st), Catch::Contains(p) && Catch::Contains(needle));
    unchanged();
  };

  SECTION("a NaN in a parameter: tensor, flat position and index named") {
    SafetensorsFile f = good;
    TensorBlob* t = nullptr;
    for (TensorBlob& b : f.tensors)
      if (b.name == "tok.weight") t = &b;
    REQUIRE(t != nullptr);
    const float nan = std::nanf("");
    std::memcpy(t->bytes.data() + (2 * 32 + 5) * 4, &nan, 4);
    expect_rejected(f, "tensor \"tok.weight\" [10, 32] holds NaN at flat position 69 (index [2, 5])");
  }
  SECTION("an Inf in an Adam moment") {
    SafetensorsFile f = good;
    const float inf = std::numeric_limits<float>::infinity();
    for (TensorBlob& b : f.tensors)
      if (b.name == "optimizer.m.tok.weight") std::memcpy(b.bytes.data(), &inf, 4);
    expect_rejected(f, "tensor \"optimizer.m.tok.weight\" [10, 32] holds Inf at flat position 0 (index [0, 0])");
  }
  SECTION("a missing parameter tensor") {
    SafetensorsFile f = good;
    f.tensors.erase(f.tensors.begin());
    expect_rejected(f, good.tensors.front().name);
  }
  SECTION("an unexpected tensor") {
    SafetensorsFile f = good;
    f.tensors.push_back({"extra.weight", "F32", {2}, std::vector<uint8_t>(8, 0)});
    expect_rejected(f, "extra.weight");
  }
  SECTION("a wrong dtype") {
    SafetensorsFile f = good;
    TensorBlob& t = f.tensors.front();
    t.dtype = "I32";
    expect_rejected(f, t.name);
  }
  SECTION("a shape with the right size but the wrong layout") {
    SafetensorsFile f = good;
    TensorBlob* t = nullptr;
    for (TensorBlob& x : f.tensors) if (x.shape.size() == 2 && x.shape[0] != x.shape[1]) { t = &x; break; }
    REQUIRE(t != nullptr);
    std::swap(t->shape[0], t->shape[1]);
    expect_rejected(f, t->name);
  }
  SECTION("missing metadata fields") {
    for (const char* key : {"attnkit.format", "attnkit.step", "attnkit.epoch",
                            "attnkit.batch_in_epoch", "attnkit.rng"}) {
      SafetensorsFile f = good;
      f.metadata.erase(key);
      expect_rejected(f, key);
    }
  }
  SECTION("garbled metadata fields") {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"attnkit.format", "2"},         {"attnkit.step", "-1"},
        {"attnkit.step", "5x"},          {"attnkit.step", ""},
        {"attnkit.epoch", " 3"},         {"attnkit.batch_in_epoch", "99999999999999999999"},
        {"attnkit.rng", "1 2 3"},        {"attnkit.rng", "1 2 3 4 5"},
        {"attnkit.rng", "1  2 3 4"},     {"attnkit.rng", "1 2 3 18446744073709551616"}};
    for (const auto& [key, value] : cases) {
      INFO(key << " = '" << value << "'");
      SafetensorsFile f = good;
      f.metadata[key] = value;
      expect_rejected(f, key);
    }
  }
}

}  // namespace
}  // namespace attnkit
