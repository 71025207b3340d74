#include "models/checkpoint_config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>

#include "engine/error.h"
#include "engine/file_bytes.h"
#include "models/model_config_json.h"
#include "models/trainer.h"

namespace attnkit {

using nlohmann::json;

namespace {

const char* head_name(HeadKind h) { return h == HeadKind::kMlp ? "mlp" : "layernorm-linear"; }

std::string float_text(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));  // round-trips a float
  return buf;
}

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

std::string dims_text(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// A JSON value as an entry's text: strings bare, everything else as JSON writes it.
std::string value_text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

const std::string& entry(const std::map<std::string, std::string>& meta, const std::string& key,
                         const std::string& path) {
  auto it = meta.find("config." + key);
  if (it == meta.end()) throw FileError(path + ": checkpoint metadata has no 'config." + key + "'");
  return it->second;
}

// Strict decimal integer: optional '-', digits, nothing else, within int64.
bool parse_int(const std::string& s, int64_t* out) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0])) || s[0] == '+') return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (*end != '\0' || errno != 0) return false;
  *out = v;
  return true;
}

int64_t int_entry(const std::map<std::string, std::string>& meta, const std::string& key,
                  const std::string& path) {
  const std::string& s = entry(meta, key, path);
  int64_t v = 0;
  if (!parse_int(s, &v))
    throw FileError(path + ": checkpoint metadata 'config." + key + "' = '" + printable(s) + "' is not an integer");
  return v;
}

// An integer entry within [lo, hi].
int64_t int_entry_in(const std::map<std::string, std::string>& meta, const std::string& key, int64_t lo, int64_t hi,
                     const std::string& path) {
  const int64_t v = int_entry(meta, key, path);
  if (v < lo || v > hi)
    throw FileError(path + ": checkpoint metadata 'config." + key + "' = '" + printable(entry(meta, key, path)) +
                    "' is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

// The model's entries as the JSON object model_config_from_json reads, each string converted
// to the JSON type of that field in model_config_to_json (so the field list lives there only).
json model_json_from_metadata(const std::map<std::string, std::string>& meta, const std::string& path) {
  const json prototype = model_config_to_json(ModelConfig{});
  json j = json::object();
  for (const auto& [key, proto] : prototype.items()) {
    const std::string& s = entry(meta, key, path);
    if (proto.is_boolean()) {
      if (s != "true" && s != "false")
        throw FileError(path + ": checkpoint metadata 'config." + key + "' = '" + printable(s) + "' is not true/false");
      j[key] = s == "true";
    } else if (proto.is_number_integer()) {
      j[key] = int_entry(meta, key, path);
    } else {
      j[key] = s;
    }
  }
  return j;
}

// The config field a parameter's existence (or kind) depends on, for a tensor one side lacks;
// "layers" for the attention and embedding parameters every layer or model has.
std::string structural_field(const std::string& name) {
  if (name.compare(0, 4, "pos.") == 0) return "positions";
  if (name.compare(0, 5, "head.") == 0) return "head";
  std::string rest = name;
  if (rest.compare(0, 7, "layers.") == 0) {
    const size_t dot = rest.find('.', 7);
    if (dot == std::string::npos) return "layers";
    rest = rest.substr(dot + 1);
  }
  if (rest.compare(0, 4, "ln1.") == 0 || rest.compare(0, 4, "ln2.") == 0) return "pre_norm";
  if (rest.compare(0, 4, "mlp.") == 0) return "block_mlp";
  return "layers";
}

}  // namespace

json model_config_to_json(const ModelConfig& c) {
  return {
      {"task", c.task},
      {"vocab", c.vocab},
      {"classes", c.classes},
      {"seq_len", c.seq_len},
      {"d_model", c.d_model},
      {"heads", c.heads},
      {"layers", c.layers},
      {"positions", c.positions},
      {"causal", c.causal},
      {"head", head_name(c.head)},
      {"mlp_hidden", c.mlp_hidden},
      {"pre_norm", c.pre_norm},
      {"block_mlp", c.block_mlp},
  };
}

ModelConfig model_config_from_json(const json& j, const std::string& source) {
  const std::string where = source + ": model config";
  if (!j.is_object()) throw FileError(where + " is " + j.dump() + ", not a JSON object");
  const json prototype = model_config_to_json(ModelConfig{});
  for (const auto& [key, value] : j.items())
    if (!prototype.contains(key)) throw FileError(where + " has an unknown field '" + key + "'");
  auto field = [&](const char* key) -> const json& {
    auto it = j.find(key);
    if (it == j.end()) throw FileError(where + " has no field '" + key + "'");
    return *it;
  };
  auto integer = [&](const char* key) {
    const json& v = field(key);
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())))
      throw FileError(where + " field '" + key + "' is " + v.dump() + ", not an integer");
    return v.get<int64_t>();
  };
  auto boolean = [&](const char* key) {
    const json& v = field(key);
    if (!v.is_boolean()) throw FileError(where + " field '" + key + "' is " + v.dump() + ", not true/false");
    return v.get<bool>();
  };
  auto text = [&](const char* key) {
    const json& v = field(key);
    if (!v.is_string()) throw FileError(where + " field '" + key + "' is " + v.dump() + ", not a string");
    return v.get<std::string>();
  };
  ModelConfig c;
  c.task = text("task");
  c.vocab = integer("vocab");
  c.classes = integer("classes");
  c.seq_len = integer("seq_len");
  c.d_model = integer("d_model");
  c.heads = integer("heads");
  c.layers = integer("layers");
  c.positions = boolean("positions");
  c.causal = boolean("causal");
  const std::string head = text("head");
  if (head != "mlp" && head != "layernorm-linear")
    throw FileError(where + " field 'head' is \"" + head + "\", not \"mlp\" or \"layernorm-linear\"");
  c.head = head == "mlp" ? HeadKind::kMlp : HeadKind::kLayerNormLinear;
  c.mlp_hidden = integer("mlp_hidden");
  c.pre_norm = boolean("pre_norm");
  c.block_mlp = integer("block_mlp");
  try {
    validate_config(c);
  } catch (const Error& e) {
    throw FileError(source + ": " + e.what());
  }
  return c;
}

std::map<std::string, std::string> config_entries(const ModelConfig& c, const TrainerOptions& o) {
  std::map<std::string, std::string> e;
  const json model = model_config_to_json(c);  // a named object: items() refers into it
  for (const auto& [key, value] : model.items()) e[key] = value_text(value);
  e["epochs"] = std::to_string(o.training.epochs);
  e["batch_size"] = std::to_string(o.training.batch_size);
  e["lr"] = float_text(o.training.lr);
  e["train_size"] = std::to_string(o.training.train_size);
  e["val_size"] = std::to_string(o.training.val_size);
  e["snapshot_steps"] = o.training.snapshot_steps.empty() ? "none" : join(o.training.snapshot_steps);
  e["seed"] = std::to_string(o.seed);
  e["sample"] = std::to_string(o.sample);
  e["data"] = o.data_path.empty() ? "generated" : o.data_path;
  if (!o.data_fingerprint.empty()) e["data_fnv1a"] = o.data_fingerprint;
  if (o.train_shards >= 2) e["train_shards"] = std::to_string(o.train_shards);  // (the sums' order: the run's bits)
  return e;
}

ModelConfig model_config_from_metadata(const std::map<std::string, std::string>& meta, const std::string& path) {
  const ModelConfig c = model_config_from_json(model_json_from_metadata(meta, path), path);
  check_config_against_tensors(c, read_safetensors_header(path), path);
  return c;
}

void require_known_task(const ModelConfig& c, const std::string& path) {
  const std::vector<std::string>& tasks = known_tasks();
  if (std::find(tasks.begin(), tasks.end(), c.task) != tasks.end()) return;
  std::string known;
  for (const auto& t : tasks) known += (known.empty() ? "" : ", ") + t;
  throw FileError(path + ": checkpoint metadata 'config.task' = '" + printable(c.task) + "' is not a task (known: " + known + ")");
}

TrainerOptions trainer_options_from_metadata(const std::map<std::string, std::string>& meta, const std::string& path) {
  // The command line's ranges (tools/cli_parser.cc); generated sets are drawn in memory at
  // that size, data from a file brings its own.
  constexpr int64_t kMaxEpochs = 1000000000, kMaxBatchSize = 1000000, kMaxGeneratedSize = 100000000;
  constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();
  TrainerOptions o;
  const std::string& data = entry(meta, "data", path);
  o.data_path = data == "generated" ? "" : data;
  o.training.epochs = int_entry_in(meta, "epochs", 0, kMaxEpochs, path);
  o.training.batch_size = int_entry_in(meta, "batch_size", 1, kMaxBatchSize, path);
  const std::string& lr = entry(meta, "lr", path);
  char* end = nullptr;
  o.training.lr = std::strtof(lr.c_str(), &end);
  if (lr.empty() || *end != '\0' || !(o.training.lr > 0) || !std::isfinite(o.training.lr))
    throw FileError(path + ": checkpoint metadata 'config.lr' = '" + printable(lr) + "' is not a positive finite number");
  const int64_t max_size = o.data_path.empty() ? kMaxGeneratedSize : kMaxInt;
  o.training.train_size = int_entry_in(meta, "train_size", 1, max_size, path);
  o.training.val_size = int_entry_in(meta, "val_size", 0, max_size, path);  // a Trainer may have none
  const std::string& steps = entry(meta, "snapshot_steps", path);
  if (steps != "none") {
    size_t pos = 0;
    while (pos <= steps.size()) {
      const size_t comma = std::min(steps.find(',', pos), steps.size());
      const std::string item = steps.substr(pos, comma - pos);
      int64_t v = 0;
      if (!parse_int(item, &v) || v < 0)
        throw FileError(path + ": checkpoint metadata 'config.snapshot_steps' = '" + printable(steps) + "' is malformed");
      o.training.snapshot_steps.push_back(v);
      pos = comma + 1;
    }
  }
  o.seed = static_cast<uint64_t>(int_entry_in(meta, "seed", 0, kMaxInt, path));
  o.sample = int_entry_in(meta, "sample", 0, std::max<int64_t>(o.training.val_size - 1, 0), path);
  if (meta.count("config.train_shards"))  // absent: none (and in checkpoints older than the entry)
    o.train_shards = static_cast<int>(int_entry_in(meta, "train_shards", 2, ExecutorOptions::kMaxTrainShards, path));
  const auto fingerprint = meta.find("config.data_fnv1a");  // absent in older checkpoints
  if (fingerprint != meta.end()) {
    const std::string& f = fingerprint->second;
    if (f.size() != 16 || f.find_first_not_of("0123456789abcdef") != std::string::npos)
      throw FileError(path + ": checkpoint metadata 'config.data_fnv1a' = '" + printable(f) + "' is not 16 hex digits");
    o.data_fingerprint = f;
  }
  return o;
}

void check_config_against_tensors(const ModelConfig& c, const SafetensorsHeader& header, const std::string& path) {
  const json config_json = model_config_to_json(c);
  auto field_text = [&](const std::string& field) {
    return "config " + field + " = " + value_text(config_json.at(field));
  };
  std::vector<const TensorInfo*> params;  // the file's parameter tensors (not Adam's moments)
  for (const TensorInfo& t : header.tensors)
    if (t.name.compare(0, 10, "optimizer.") != 0) params.push_back(&t);
  // Every layer has parameters of its own, so more layers than tensors cannot fit; checked
  // first, as the probe model below has as many layers as the config.
  if (c.layers > static_cast<int64_t>(params.size()))
    throw FileError(path + ": " + field_text("layers") + " but the checkpoint holds only " +
                    std::to_string(params.size()) + " parameter tensors");

  // A probe model of the config with every size replaced by a distinct marker: each dimension
  // of its parameters names the field it comes from, at no cost in the config's sizes.
  struct Marker { int64_t value; const char* field; int64_t actual; };
  const Marker markers[] = {{3, "vocab", c.vocab},           {5, "classes", c.classes},
                            {7, "seq_len", c.seq_len},       {11, "d_model", c.d_model},
                            {13, "mlp_hidden", c.mlp_hidden}, {17, "block_mlp", c.block_mlp}};
  ModelConfig probe = c;
  probe.vocab = 3, probe.classes = 5, probe.seq_len = 7, probe.d_model = 11, probe.heads = 1;
  probe.mlp_hidden = 13, probe.block_mlp = c.block_mlp > 0 ? 17 : 0;
  probe.fold_embedding_projections = false, probe.fuse_elementwise = false;
  const Model m = build_model(probe, 1, /*with_backward=*/false);

  std::set<std::string> declared;
  for (const ParamInfo& p : m.graph->params()) {
    declared.insert(p.name);
    const TensorInfo* t = header.find(p.name);
    if (t == nullptr) {
      const std::string field = structural_field(p.name);
      throw FileError(path + ": " + field_text(field) + " but the checkpoint has no tensor '" + p.name +
                      "' (a model of this config has one)");
    }
    const Shape& s = m.graph->tensor(p.tensor).shape;
    std::vector<int64_t> expected;
    std::string fields;
    for (int d = 0; d < s.rank; ++d) {
      const Marker* mk = nullptr;
      for (const Marker& x : markers)
        if (x.value == s[d]) mk = &x;
      expected.push_back(mk ? mk->actual : s[d]);
      fields += d ? ", " : "";
      fields += mk ? std::string(mk->field) : std::to_string(s[d]);
      if (mk && static_cast<int>(t->shape.size()) == s.rank && t->shape[static_cast<size_t>(d)] != mk->actual)
        throw FileError(path + ": " + field_text(mk->field) + " but tensor '" + p.name + "' has shape " +
                        dims_text(t->shape) + " (dimension " + std::to_string(d) + " is " + mk->field + ")");
    }
    if (t->shape != expected) {
      // A different rank: a different kind of layer under this name (e.g. the other head).
      const std::string field = structural_field(p.name);
      throw FileError(path + ": " + (field == "layers" ? "" : field_text(field) + " but ") + "tensor '" + p.name +
                      "' has shape " + dims_text(t->shape) + " where the config makes it [" + fields + "] = " +
                      dims_text(expected));
    }
  }
  for (const TensorInfo* t : params)
    if (!declared.count(t->name))
      throw FileError(path + ": " + field_text(structural_field(t->name)) + " but the checkpoint has tensor '" +
                      printable(t->name) + "' " + dims_text(t->shape) + " (a model of this config has none)");
}

}  // namespace attnkit
