// The model configuration as JSON and as checkpoint entries (models/checkpoint_config.h,
// models/model_config_json.h), checkpoints whose config disagrees with their tensors or whose
// weights are not finite, and the trainer's graph sized for the data, not the batch size.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <new>

#include "engine/checkpoint.h"
#include "engine/error.h"
#include "engine/safetensors.h"
#include "file_test_util.h"
#include "models/model_config_json.h"
#include "models/predictor.h"
#include "models/trainer.h"

namespace attnkit {
namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using testing::require_file_error;

struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("attnkit_test_config") {}
};

bool same_config(const ModelConfig& a, const ModelConfig& b) {
  return a.task == b.task && a.vocab == b.vocab && a.classes == b.classes && a.seq_len == b.seq_len &&
         a.d_model == b.d_model && a.heads == b.heads && a.layers == b.layers && a.positions == b.positions &&
         a.causal == b.causal && a.head == b.head && a.mlp_hidden == b.mlp_hidden && a.pre_norm == b.pre_norm &&
         a.block_mlp == b.block_mlp;
}

// A real checkpoint of `c` (untrained parameters, an Adam, the trainer's config entries).
void write_checkpoint(const std::string& path, const ModelConfig& c) {
  Model m = build_model(c, 2);
  Executor ex(*m.graph, {1, 3});
  Adam adam(ex.param_count(), AdamOptions{});
  TrainerOptions o;
  o.training = lesson_training(c.task);
  TrainingState st;
  st.config = config_entries(c, o);
  save_checkpoint(path, ex, &adam, st);
}

// The checkpoint at `from` rewritten to `to` with one metadata entry changed.
void edit_metadata(const std::string& from, const std::string& to, const std::string& key, const std::string& value) {
  SafetensorsFile f = read_safetensors(from);
  REQUIRE(f.metadata.count(key) == 1);
  f.metadata[key] = value;
  write_safetensors(to, f.tensors, f.metadata);
}

ModelConfig config_of(const std::string& path) {
  return model_config_from_metadata(read_checkpoint_metadata(path), path);
}

// `real` rewritten to `edited` with config.KEY = value: read(edited) must be a FileError
// naming the file and `phrase`.
template <class Read>
void expect_edit_error(const std::string& real, const std::string& edited, const std::string& key,
                       const std::string& value, const std::string& phrase, const Read& read) {
  edit_metadata(real, edited, "config." + key, value);
  INFO(key << " = " << value);
  require_file_error([&] { read(edited); }, edited, phrase);
}

TEST_CASE("model config JSON: every lesson config round-trips, field by field") {
  for (const std::string& task : known_tasks()) {
    const ModelConfig c = lesson_config(task);
    const nlohmann::json j = model_config_to_json(c);
    INFO(j.dump());
    CHECK(j.size() == 13);
    CHECK(j.at("seq_len") == c.seq_len);
    CHECK(j.at("head") == (c.head == HeadKind::kMlp ? "mlp" : "layernorm-linear"));
    CHECK(same_config(model_config_from_json(j, "x.json"), c));
    CHECK(same_config(model_config_from_json(nlohmann::json::parse(j.dump()), "x.json"), c));
  }
}

TEST_CASE("model config JSON: a missing, mistyped, unknown or invalid field is a FileError naming source and field") {
  const nlohmann::json good = model_config_to_json(lesson_config("neighbor-sum"));
  auto expect = [](const nlohmann::json& j, const std::string& phrase) {
    require_file_error([&] { model_config_from_json(j, "runs/x/metrics.json"); }, "runs/x/metrics.json", phrase);
  };
  nlohmann::json j = good;
  j.erase("d_model");
  expect(j, "'d_model'");
  j = good;
  j["d_model"] = "32";
  expect(j, "field 'd_model' is \"32\", not an integer");
  j = good;
  j["vocab"] = 10.5;
  expect(j, "field 'vocab' is 10.5");
  j = good;
  j["vocab"] = std::numeric_limits<uint64_t>::max();
  expect(j, "field 'vocab'");
  j = good;
  j["causal"] = 1;
  expect(j, "field 'causal' is 1, not true/false");
  j = good;
  j["head"] = "linear";
  expect(j, "field 'head' is \"linear\"");
  j = good;
  j["T"] = 10;
  expect(j, "unknown field 'T'");
  j = good;
  j["heads"] = 3;
  expect(j, "d_model 32 is not divisible by heads 3");
  j = good;
  j["seq_len"] = 0;
  expect(j, "seq_len must be positive");
  expect(nlohmann::json::array(), "not a JSON object");
}

TEST_CASE("checkpoint config entries keep their key format, and entries written in it still load") {
  const ModelConfig c = lesson_config("reversal");
  TrainerOptions o;
  o.training = lesson_training("reversal");
  o.seed = 7;
  const auto e = config_entries(c, o);
  const std::map<std::string, std::string> want = {
      {"task", "reversal"}, {"vocab", "10"}, {"classes", "10"}, {"seq_len", "8"}, {"d_model", "32"},
      {"heads", "1"}, {"layers", "1"}, {"positions", "true"}, {"causal", "false"}, {"head", "layernorm-linear"},
      {"mlp_hidden", "0"}, {"pre_norm", "false"}, {"block_mlp", "0"}, {"epochs", "3"}, {"batch_size", "32"},
      {"lr", "0.00300000003"}, {"train_size", "2000"}, {"val_size", "500"}, {"snapshot_steps", "0,10,20,30,60"},
      {"seed", "7"}, {"sample", "0"}, {"data", "generated"}};
  CHECK(e == want);

  // A checkpoint whose entries are written by hand in that format (as older versions wrote
  // them) loads to the same configuration and options.
  TempDir dir;
  const std::string path = dir / "old.safetensors";
  Model m = build_model(c, 2);
  Executor ex(*m.graph, {1, 1});
  TrainingState st;
  st.config = want;
  save_checkpoint(path, ex, nullptr, st);
  const auto meta = read_checkpoint_metadata(path);
  CHECK(same_config(model_config_from_metadata(meta, path), c));
  const TrainerOptions back = trainer_options_from_metadata(meta, path);
  CHECK(back.training.snapshot_steps == std::vector<int64_t>{0, 10, 20, 30, 60});
  CHECK(back.training.lr == o.training.lr);
  CHECK(back.seed == 7);
  CHECK(back.data_path.empty());

  auto meta_bad = meta;
  meta_bad["config.positions"] = "yes";
  require_file_error([&] { model_config_from_metadata(meta_bad, path); }, path, "'config.positions' = 'yes'");
  meta_bad = meta;
  meta_bad["config.d_model"] = "32x";
  require_file_error([&] { model_config_from_metadata(meta_bad, path); }, path, "'config.d_model' = '32x'");
  meta_bad = meta;
  meta_bad.erase("config.block_mlp");
  require_file_error([&] { model_config_from_metadata(meta_bad, path); }, path, "'config.block_mlp'");
}

TEST_CASE("a checkpoint config asking for absurd sizes is refused before anything is allocated") {
  TempDir dir;
  const std::string real = dir / "real.safetensors";
  const std::string edited = dir / "edited.safetensors";
  write_checkpoint(real, lesson_config("neighbor-sum"));
  CHECK(same_config(config_of(real), lesson_config("neighbor-sum")));

  // Each edit must give a FileError (a std::bad_alloc would escape these checks and fail).
  auto expect = [&](const std::string& key, const std::string& value, const std::string& phrase) {
    expect_edit_error(real, edited, key, value, phrase, config_of);
  };
  expect("d_model", "1000000000",
         "config d_model = 1000000000 but tensor 'tok.weight' has shape [10, 32] (dimension 1 is d_model)");
  expect("seq_len", "100000000",
         "config seq_len = 100000000 but tensor 'pos.weight' has shape [10, 32] (dimension 0 is seq_len)");
  expect("vocab", "1000000000", "config vocab = 1000000000 but tensor 'tok.weight' has shape [10, 32]");
  expect("classes", "1000000", "config classes = 1000000 but tensor 'head.2.weight' has shape [128, 10]");
  expect("mlp_hidden", "1000000000", "config mlp_hidden = 1000000000 but tensor 'head.0.weight'");
  expect("layers", "1000000000", "config layers = 1000000000 but the checkpoint holds only");
  expect("layers", "2", "config layers = 2 but the checkpoint has no tensor 'layers.0.attn.q.weight'");
  expect("positions", "false", "config positions = false but the checkpoint has tensor 'pos.weight' [10, 32]");
  expect("block_mlp", "1000000", "config block_mlp = 1000000 but the checkpoint has no tensor 'mlp.0.weight'");
  expect("head", "layernorm-linear",
         "config head = layernorm-linear but tensor 'head.0.weight' has shape [32, 128] where the config makes it "
         "[d_model] = [32]");
  expect("heads", "1000000000", "d_model 32 is not divisible by heads 1000000000");

  // A stack with blocks: sizes that come from block_mlp and the layer count.
  ModelConfig big = lesson_config("neighbor-sum");
  big.layers = 2, big.pre_norm = true, big.block_mlp = 48;
  write_checkpoint(real, big);
  CHECK(same_config(config_of(real), big));
  expect("block_mlp", "100000000", "config block_mlp = 100000000 but tensor 'layers.0.mlp.0.weight' has shape [32, 48]");
  expect("layers", "3", "config layers = 3 but the checkpoint has no tensor 'layers.2.attn.q.weight'");
  expect("layers", "1", "config layers = 1 but the checkpoint has no tensor 'attn.q.weight'");
  expect("pre_norm", "false", "config pre_norm = false but the checkpoint has tensor 'layers.0.ln1.weight'");
}

TEST_CASE("every corrupted checkpoint entry is a FileError naming the file, the key and the value") {
  TempDir dir;
  const std::string real = dir / "real.safetensors";
  const std::string edited = dir / "edited.safetensors";
  write_checkpoint(real, lesson_config("neighbor-sum"));
  auto expect = [&](const std::string& key, const std::string& value, const std::string& phrase) {
    expect_edit_error(real, edited, key, value, phrase, [](const std::string& path) {
      const auto meta = read_checkpoint_metadata(path);
      require_known_task(model_config_from_metadata(meta, path), path);  // as eval and --resume read it
      trainer_options_from_metadata(meta, path);
    });
  };
  expect("lr", "nan", "'config.lr' = 'nan' is not a positive finite number");
  expect("lr", "-0.01", "'config.lr' = '-0.01' is not a positive finite number");
  expect("lr", "inf", "'config.lr' = 'inf'");
  expect("batch_size", "0", "'config.batch_size' = '0' is outside [1, 1000000]");
  expect("epochs", "99999999999", "'config.epochs' = '99999999999' is outside [0, 1000000000]");
  expect("epochs", "-1", "'config.epochs' = '-1' is outside");
  expect("seed", "-1", "'config.seed' = '-1' is outside [0, 9223372036854775807]");
  expect("train_size", "0", "'config.train_size' = '0' is outside [1, 100000000]");
  expect("val_size", "1000000000", "'config.val_size' = '1000000000' is outside [0, 100000000]");
  expect("sample", "500", "'config.sample' = '500' is outside [0, 499]");
  expect("task", "foo", "'config.task' = 'foo' is not a task (known: neighbor-sum");
  // Control bytes (a terminal title sequence) are escaped in the message, not sent to the terminal.
  expect("epochs", "x\a\x1b]0;title\a", "'config.epochs' = 'x\\x07\\x1b]0;title\\x07' is not an integer");
  // reversal's head has no hidden layer: its mlp_hidden is unused, but not any number.
  write_checkpoint(real, lesson_config("reversal"));
  expect("mlp_hidden", "-1", "mlp_hidden must be >= 0, got -1");
}

// The checkpoint at `from` rewritten to `to` with element `flat` of tensor `name` set to v.
void poison(const std::string& from, const std::string& to, const std::string& name, int64_t flat, float v) {
  SafetensorsFile f = read_safetensors(from);
  for (TensorBlob& t : f.tensors)
    if (t.name == name) std::memcpy(t.bytes.data() + flat * 4, &v, 4);
  write_safetensors(to, f.tensors, f.metadata);
}

TEST_CASE("a checkpoint with NaN or Inf in a weight or a moment is refused on load, naming tensor and position") {
  TempDir dir;
  const std::string real = dir / "real.safetensors";
  const std::string bad = dir / "bad.safetensors";
  const ModelConfig c = lesson_config("neighbor-sum");
  write_checkpoint(real, c);
  ModelRunner runner(config_of(real), 4, 1, 0, false);
  runner.load(real);

  poison(real, bad, "attn.q.weight", 1 * 32 + 2, std::nanf(""));
  require_file_error([&] { runner.load(bad); }, bad,
                     "tensor \"attn.q.weight\" [32, 32] holds NaN at flat position 34 (index [1, 2])");
  poison(real, bad, "head.2.bias", 9, -std::numeric_limits<float>::infinity());
  require_file_error([&] { runner.load(bad); }, bad, "tensor \"head.2.bias\" [10] holds -Inf at flat position 9 (index [9])");

  // Adam's moments too, when loaded with an Adam.
  ModelRunner trainable(c, 4, 1, 0, true);
  Adam adam(trainable.executor().param_count(), AdamOptions{});
  poison(real, bad, "optimizer.v.tok.weight", 0, std::numeric_limits<float>::infinity());
  require_file_error([&] { trainable.load(bad, &adam); }, bad, "tensor \"optimizer.v.tok.weight\" [10, 32] holds Inf");
  trainable.load(bad);  // without an Adam the moments are not read
}

TEST_CASE("trainer: the graph follows the training set, not a batch size far above it") {
  const ModelConfig c = lesson_config("neighbor-sum");
  auto options = [](int64_t batch) {
    TrainerOptions o;
    o.training = lesson_training("neighbor-sum");
    o.training.epochs = 2;
    o.training.batch_size = batch;
    o.seed = 3;
    o.threads = 2;
    return o;
  };
  const TaskData data = generate_task_data(c, 50, 20, 3);
  Trainer huge(c, options(1000000), data);
  Trainer fitting(c, options(50), data);
  CHECK(huge.executor().graph().max_batch() == 50);
  CHECK(huge.executor().plan().arena_bytes == fitting.executor().plan().arena_bytes);
  CHECK(huge.executor().plan().arena_bytes < (int64_t{64} << 20));
  CHECK(huge.batches_per_epoch() == 1);
  huge.train();
  fitting.train();
  REQUIRE(huge.losses().size() == 2);
  CHECK(std::memcmp(huge.losses().data(), fitting.losses().data(), 2 * sizeof(float)) == 0);
  CHECK(huge.evaluate(huge.data().val).correct == fitting.evaluate(fitting.data().val).correct);

  // Batch sizes within the set keep their graph.
  Trainer normal(c, options(16), data);
  CHECK(normal.executor().graph().max_batch() == 16);
}

TEST_CASE("a library model's checkpoint (its own task name, no validation set) loads in a Predictor, eval's task check names it") {
  TempDir dir;
  ModelConfig c = lesson_config("reversal");
  TaskData data;  // drawn by reversal's rule; no validation set
  Rng rng(1);
  data.train = generate_dataset(c, 40, rng);
  c.task = "my-reversal";                           // a model of the library user's own
  TrainerOptions o;
  o.training = lesson_training("reversal");
  o.training.epochs = 1;
  o.training.val_size = 0;
  const std::string path = dir / "m.safetensors";
  Trainer t(c, o, std::move(data));
  t.train();
  t.save(path);
  const auto meta = read_checkpoint_metadata(path);
  CHECK(model_config_from_metadata(meta, path).task == "my-reversal");
  CHECK(trainer_options_from_metadata(meta, path).training.val_size == 0);
  Predictor p = Predictor::load(path, {1, 2});
  CHECK(p.step() == t.step());
  require_file_error([&] { require_known_task(model_config_from_metadata(meta, path), path); }, path,
                     "'config.task' = 'my-reversal' is not a task");
}

TEST_CASE("trainer: a checkpoint records its data file's fingerprint, other data is refused, older checkpoints resume") {
  TempDir dir;
  const ModelConfig c = lesson_config("neighbor-sum");
  TrainerOptions o;
  o.training = lesson_training("neighbor-sum");
  o.training.epochs = 1;
  o.data_path = "lesson.npz";  // a name for the data: the Trainer fingerprints what it is given
  const std::string path = dir / "m.safetensors", old = dir / "old.safetensors";
  Trainer first(c, o, generate_task_data(c, 40, 10, 1));
  first.train();
  first.save(path);
  const auto meta = read_checkpoint_metadata(path);
  REQUIRE(meta.count("config.data_fnv1a") == 1);
  CHECK(meta.at("config.data_fnv1a") == first.options().data_fingerprint);
  CHECK(meta.at("config.data_fnv1a").size() == 16);

  Trainer same(c, o, generate_task_data(c, 40, 10, 1));
  same.resume(path);
  CHECK(same.step() == first.step());
  Trainer other(c, o, generate_task_data(c, 40, 10, 2));
  require_file_error([&] { other.resume(path); }, path, "lesson.npz holds other data");
  CHECK(other.step() == 0);  // nothing loaded

  // A checkpoint from before the entry resumes on any data, as it did.
  SafetensorsFile f = read_safetensors(path);
  f.metadata.erase("config.data_fnv1a");
  write_safetensors(old, f.tensors, f.metadata);
  CHECK(trainer_options_from_metadata(read_checkpoint_metadata(old), old).data_fingerprint.empty());
  other.resume(old);
  CHECK(other.step() == first.step());
}

}  // namespace
}  // namespace attnkit
