#include "checkpoint.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "error.h"
#include "file_bytes.h"
#include "safetensors.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoints write the host's float bytes; safetensors is little-endian"
#endif

namespace attnkit {
namespace {

constexpr const char* kFormatKey = "attnkit.format";
constexpr const char* kFormat = "1";
constexpr const char* kStepKey = "attnkit.step";
constexpr const char* kEpochKey = "attnkit.epoch";
constexpr const char* kBatchKey = "attnkit.batch_in_epoch";
constexpr const char* kRngKey = "attnkit.rng";
constexpr const char* kConfigPrefix = "config.";
const std::string kMomentM = "optimizer.m.";
const std::string kMomentV = "optimizer.v.";

std::string dquote(const std::string& s) { return "\"" + printable(s) + "\""; }

std::vector<int64_t> dims_of(const Shape& s) {
  return std::vector<int64_t>(s.dims.begin(), s.dims.begin() + s.rank);
}

std::string dims_str(const std::vector<int64_t>& d) {
  std::string out = "[";
  for (size_t i = 0; i < d.size(); ++i) out += (i ? ", " : "") + std::to_string(d[i]);
  return out + "]";
}

// Strict unsigned decimal: digits only, no sign, no spaces, no overflow.
bool parse_u64(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

const std::string& require_field(const std::map<std::string, std::string>& meta,
                                 const std::string& key, const std::string& path) {
  auto it = meta.find(key);
  if (it == meta.end()) throw FileError(path + ": checkpoint metadata lacks " + dquote(key));
  return it->second;
}

int64_t parse_count(const std::map<std::string, std::string>& meta, const std::string& key,
                    const std::string& path) {
  const std::string& s = require_field(meta, key, path);
  uint64_t v = 0;
  if (!parse_u64(s, &v) || v > static_cast<uint64_t>(INT64_MAX))
    throw FileError(path + ": checkpoint metadata " + dquote(key) + " is " + dquote(s) +
                    ", not a non-negative decimal integer");
  return static_cast<int64_t>(v);
}

std::array<uint64_t, 4> parse_rng(const std::map<std::string, std::string>& meta,
                                  const std::string& path) {
  const std::string& s = require_field(meta, kRngKey, path);
  std::array<uint64_t, 4> state{};
  size_t pos = 0;
  for (size_t i = 0; i < 4; ++i) {
    const size_t end = i < 3 ? s.find(' ', pos) : s.size();
    if (end == std::string::npos || !parse_u64(s.substr(pos, end - pos), &state[i]))
      throw FileError(path + ": checkpoint metadata " + dquote(kRngKey) + " is " + dquote(s) +
                      ", not four decimal uint64 separated by single spaces");
    pos = end + 1;
  }
  return state;
}

void check_format(const std::map<std::string, std::string>& meta, const std::string& path) {
  const std::string& f = require_field(meta, kFormatKey, path);
  if (f != kFormat)
    throw FileError(path + ": checkpoint metadata " + dquote(kFormatKey) + " is " + dquote(f) +
                    ", not a supported format (expected " + dquote(kFormat) + ")");
}

// The tensor `name` of the file, checked to be F32 with the parameter's shape.
const TensorBlob& expect_tensor(const SafetensorsFile& file, const std::string& name,
                                const std::vector<int64_t>& shape, const std::string& path) {
  const TensorBlob* t = file.find(name);
  if (t == nullptr) throw FileError(path + ": checkpoint is missing tensor " + dquote(name));
  if (t->dtype != "F32")
    throw FileError(path + ": tensor " + dquote(name) + " has dtype " + t->dtype +
                    ", expected F32");
  if (t->shape != shape)
    throw FileError(path + ": tensor " + dquote(name) + " has shape " + dims_str(t->shape) +
                    " but the model's parameter has shape " + dims_str(shape));
  // parse_safetensors guarantees bytes == numel · 4; re-check cheaply anyway.
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  if (t->bytes.size() != static_cast<size_t>(numel) * sizeof(float))
    throw FileError(path + ": tensor " + dquote(name) + " holds " +
                    std::to_string(t->bytes.size()) + " bytes, expected " +
                    std::to_string(numel * 4));
  return *t;
}

// The first NaN or ±Inf among a tensor's F32 values, or -1 when all are finite.
int64_t first_nonfinite_value(const TensorBlob& t) {
  const int64_t n = static_cast<int64_t>(t.bytes.size() / sizeof(float));
  for (int64_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, t.bytes.data() + i * sizeof(float), sizeof v);
    if (!std::isfinite(v)) return i;
  }
  return -1;
}

// Refuses a tensor holding NaN or Inf: a model loaded from it would evaluate and predict
// without any sign of the fault, and training from it would spread the fault to every weight.
void check_finite(const TensorBlob& t, const std::string& path) {
  const int64_t i = first_nonfinite_value(t);
  if (i < 0) return;
  float v;
  std::memcpy(&v, t.bytes.data() + i * sizeof(float), sizeof v);
  std::vector<int64_t> index(t.shape.size());
  int64_t rest = i;
  for (size_t d = t.shape.size(); d-- > 0;) {
    index[d] = rest % t.shape[d];
    rest /= t.shape[d];
  }
  const std::string value = std::isnan(v) ? "NaN" : v > 0 ? "Inf" : "-Inf";
  throw FileError(path + ": tensor " + dquote(t.name) + " " + dims_str(t.shape) + " holds " + value +
                  " at flat position " + std::to_string(i) + " (index " + dims_str(index) +
                  "); a checkpoint with non-finite values is not loaded");
}

}  // namespace

void save_checkpoint(const std::string& path, const Executor& ex, const Adam* adam,
                     const TrainingState& st) {
  const Graph& g = ex.graph();
  if (adam != nullptr && adam->size() != ex.param_count())
    throw Error("save_checkpoint " + path + ": Adam holds " + std::to_string(adam->size()) +
                " moments per block but the model has " + std::to_string(ex.param_count()) +
                " parameters");
  std::vector<TensorView> views;
  views.reserve(g.params().size() * (adam ? 3 : 1));
  for (const ParamInfo& p : g.params())
    views.push_back({p.name, "F32", dims_of(g.tensor(p.tensor).shape), ex.params() + p.offset});
  if (adam != nullptr) {
    for (const ParamInfo& p : g.params())
      views.push_back({kMomentM + p.name, "F32", dims_of(g.tensor(p.tensor).shape), adam->m() + p.offset});
    for (const ParamInfo& p : g.params())
      views.push_back({kMomentV + p.name, "F32", dims_of(g.tensor(p.tensor).shape), adam->v() + p.offset});
  }

  std::map<std::string, std::string> meta;
  for (const auto& [key, value] : st.config) {
    if (key.empty()) throw FileError(path + ": checkpoint config has an empty key");
    meta[kConfigPrefix + key] = value;
  }
  const int64_t step = adam != nullptr ? adam->steps() : st.step;
  if (step < 0 || st.epoch < 0 || st.batch_in_epoch < 0)
    throw FileError(path + ": checkpoint step, epoch and batch_in_epoch must be non-negative");
  meta[kFormatKey] = kFormat;
  meta[kStepKey] = std::to_string(step);
  meta[kEpochKey] = std::to_string(st.epoch);
  meta[kBatchKey] = std::to_string(st.batch_in_epoch);
  meta[kRngKey] = std::to_string(st.rng_state[0]) + " " + std::to_string(st.rng_state[1]) + " " +
                  std::to_string(st.rng_state[2]) + " " + std::to_string(st.rng_state[3]);
  write_safetensors(path, views, meta);
}

void load_checkpoint(const std::string& path, Executor& ex, Adam* adam, TrainingState& st,
                     const std::function<void(const TrainingState&)>& check) {
  const Graph& g = ex.graph();
  if (adam != nullptr && adam->size() != ex.param_count())
    throw Error("load_checkpoint " + path + ": Adam holds " + std::to_string(adam->size()) +
                " moments per block but the model has " + std::to_string(ex.param_count()) +
                " parameters");
  const SafetensorsFile file = read_safetensors(path);

  // Metadata first, into temporaries.
  check_format(file.metadata, path);
  TrainingState loaded;
  loaded.step = parse_count(file.metadata, kStepKey, path);
  loaded.epoch = parse_count(file.metadata, kEpochKey, path);
  loaded.batch_in_epoch = parse_count(file.metadata, kBatchKey, path);
  loaded.rng_state = parse_rng(file.metadata, path);
  const size_t prefix = std::strlen(kConfigPrefix);
  for (const auto& [key, value] : file.metadata)
    if (key.compare(0, prefix, kConfigPrefix) == 0) loaded.config[key.substr(prefix)] = value;

  // Every tensor must be one we expect; every expected tensor must be there and fit.
  std::set<std::string> known;
  for (const ParamInfo& p : g.params()) {
    known.insert(p.name);
    known.insert(kMomentM + p.name);
    known.insert(kMomentV + p.name);
  }
  for (const TensorBlob& t : file.tensors)
    if (!known.count(t.name))
      throw FileError(path + ": unexpected tensor " + dquote(t.name) +
                      " (the model has no such parameter)");
  struct Copy { const TensorBlob* src; float* dst; };
  std::vector<Copy> copies;
  for (const ParamInfo& p : g.params()) {
    const std::vector<int64_t> shape = dims_of(g.tensor(p.tensor).shape);
    copies.push_back({&expect_tensor(file, p.name, shape, path), ex.params() + p.offset});
    if (adam != nullptr) {
      copies.push_back({&expect_tensor(file, kMomentM + p.name, shape, path), adam->m() + p.offset});
      copies.push_back({&expect_tensor(file, kMomentV + p.name, shape, path), adam->v() + p.offset});
    }
  }

  for (const Copy& c : copies) check_finite(*c.src, path);
  if (check) check(loaded);

  // Everything checked: commit. Nothing below throws.
  for (const Copy& c : copies)
    if (!c.src->bytes.empty()) std::memcpy(c.dst, c.src->bytes.data(), c.src->bytes.size());
  ex.parameters_changed();
  if (adam != nullptr) adam->restore(loaded.step);
  st = std::move(loaded);
}

std::map<std::string, std::string> read_checkpoint_metadata(const std::string& path) {
  SafetensorsFile file = read_safetensors(path);
  check_format(file.metadata, path);
  return std::move(file.metadata);
}

}  // namespace attnkit
