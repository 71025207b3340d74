#include "models/tasks.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "engine/error.h"
#include "engine/hash.h"
#include "engine/npy.h"
#include "engine/npz.h"

namespace attnkit {
namespace {

enum class Rule { kNeighborSum, kDuplicates, kReversal, kInduction };

Rule rule_of(const std::string& task) {
  if (task == "neighbor-sum") return Rule::kNeighborSum;
  if (task == "duplicates") return Rule::kDuplicates;
  if (task == "reversal" || task == "reversal-large") return Rule::kReversal;
  if (task == "induction") return Rule::kInduction;
  (void)lesson_config(task);  // throws the "unknown task" error listing the known ones
  throw Error("task '" + task + "' has no data rule");
}

}  // namespace

TrainingConfig lesson_training(const std::string& task) {
  TrainingConfig t;
  switch (rule_of(task)) {
    case Rule::kNeighborSum: t.epochs = 8, t.batch_size = 64, t.lr = 0.01f; break;
    case Rule::kDuplicates: t.epochs = 8, t.batch_size = 64, t.lr = 0.003f; break;
    case Rule::kReversal:
      t.epochs = 3, t.batch_size = 32, t.lr = 0.003f, t.train_size = 2000;
      if (task == "reversal") t.snapshot_steps = {0, 10, 20, 30, 60};
      if (task == "reversal-large") t.epochs = 1, t.lr = 1e-3f, t.train_size = 640, t.val_size = 64;
      break;
    case Rule::kInduction:
      t.epochs = 12, t.batch_size = 64, t.lr = 0.001f, t.train_size = 8000, t.val_size = 500;
      break;
  }
  return t;
}

void task_targets(const ModelConfig& c, const int32_t* x, int32_t* y) {
  const int64_t T = c.seq_len;
  switch (rule_of(c.task)) {
    case Rule::kNeighborSum:
      for (int64_t i = 0; i < T; ++i)
        y[i] = static_cast<int32_t>((x[(i + T - 1) % T] + x[(i + 1) % T]) % c.vocab);
      break;
    case Rule::kDuplicates:
      for (int64_t i = 0; i < T; ++i) {
        y[i] = 0;
        for (int64_t j = 0; j < T; ++j)
          if (j != i && x[j] == x[i]) y[i] = 1;
      }
      break;
    case Rule::kReversal:
      for (int64_t i = 0; i < T; ++i) y[i] = x[T - 1 - i];
      break;
    case Rule::kInduction:
      for (int64_t i = 0; i < T; ++i) {
        y[i] = -1;
        for (int64_t j = i - 1; j >= 0; --j)
          if (x[j] == x[i]) {
            y[i] = x[j + 1];
            break;
          }
      }
      break;
  }
}

void generate_induction(int64_t T, int64_t V, Rng& rng, int32_t* x) {
  if (T < 4 || V < T)
    throw Error("induction needs seq_len >= 4 and vocab >= seq_len (got T = " + std::to_string(T) +
                ", V = " + std::to_string(V) + ")");
  const int64_t L = 2 + static_cast<int64_t>(rng.below(static_cast<uint64_t>(T / 2 - 1)));
  std::vector<int32_t> pool(static_cast<size_t>(V));
  std::iota(pool.begin(), pool.end(), 0);
  rng.shuffle(pool.data(), V);  // the first T − L are u: distinct, uniformly drawn
  const int32_t* u = pool.data();
  const int64_t s = static_cast<int64_t>(rng.below(static_cast<uint64_t>(T - 2 * L + 1)));
  const int64_t d = s + L + static_cast<int64_t>(rng.below(static_cast<uint64_t>(T - L - (s + L) + 1)));
  int64_t n = 0;
  for (int64_t i = 0; i < d; ++i) x[n++] = u[i];
  for (int64_t i = s; i < s + L; ++i) x[n++] = u[i];
  for (int64_t i = d; i < T - L; ++i) x[n++] = u[i];
}

void task_sequence(const ModelConfig& c, Rng& rng, int32_t* x) {
  if (rule_of(c.task) == Rule::kInduction) return generate_induction(c.seq_len, c.vocab, rng, x);
  for (int64_t i = 0; i < c.seq_len; ++i) x[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.vocab)));
}

Dataset generate_dataset(const ModelConfig& c, int64_t n, Rng& rng) {
  if (n < 1) throw Error("dataset size must be at least 1, got " + std::to_string(n));
  Dataset d;
  d.size = n, d.seq_len = c.seq_len;
  d.x.resize(static_cast<size_t>(n * c.seq_len));
  d.y.resize(d.x.size());
  for (int64_t i = 0; i < n; ++i) {
    int32_t* x = d.x.data() + i * c.seq_len;
    task_sequence(c, rng, x);
    task_targets(c, x, d.y.data() + i * c.seq_len);
  }
  return d;
}

TaskData generate_task_data(const ModelConfig& c, int64_t train_size, int64_t val_size, uint64_t seed) {
  Rng rng(seed);
  TaskData data;
  data.train = generate_dataset(c, train_size, rng);
  data.val = generate_dataset(c, val_size, rng);
  return data;
}

namespace {

std::string at_text(const Dataset& d, size_t i) {
  return "[" + std::to_string(i / static_cast<size_t>(d.seq_len)) + ", " +
         std::to_string(i % static_cast<size_t>(d.seq_len)) + "]";
}

// validate_dataset with the tokens' and the targets' names apart (e.g. "data.npz: 'X_train'"
// and "data.npz: 'Y_train'"); `what` names both. The messages name the other party to the
// disagreement as config_source ("the model", "the checkpoint runs/x/model.safetensors").
void validate_against(const Dataset& d, const ModelConfig& c, const std::string& what, const std::string& x_what,
                      const std::string& y_what, const std::string& config_source) {
  if (d.size < 1) throw Error(what + ": no sequences");
  if (d.seq_len != c.seq_len)
    throw Error(what + ": sequences have length " + std::to_string(d.seq_len) + " but " + config_source +
                " has T (seq_len) " + std::to_string(c.seq_len));
  const size_t positions = static_cast<size_t>(d.size * d.seq_len);
  if (d.x.size() != positions || (!d.y.empty() && d.y.size() != positions))
    throw Error(what + ": " + std::to_string(d.size) + " sequences of " + std::to_string(d.seq_len) + " need " +
                std::to_string(positions) + " tokens and targets (or no targets), not " + std::to_string(d.x.size()) +
                " and " + std::to_string(d.y.size()));
  for (size_t i = 0; i < d.x.size(); ++i) {
    if (d.x[i] < 0 || d.x[i] >= c.vocab) {
      const auto [lo, hi] = std::minmax_element(d.x.begin(), d.x.end());
      if (*hi >= c.vocab)
        throw Error(x_what + " has tokens up to " + std::to_string(*hi) + " but " + config_source + " has vocab " +
                    std::to_string(c.vocab) + " (first outside the vocabulary [0, " + std::to_string(c.vocab) +
                    "): token " + std::to_string(d.x[i]) + " at " + at_text(d, i) + ")");
      throw Error(x_what + " has a negative token " + std::to_string(*lo) + " (first: " + std::to_string(d.x[i]) +
                  " at " + at_text(d, i) + "), outside the vocabulary [0, " + std::to_string(c.vocab) + ") of " +
                  config_source);
    }
  }
  for (size_t i = 0; i < d.y.size(); ++i) {
    if (d.y[i] < -1 || d.y[i] >= c.classes) {
      const auto [lo, hi] = std::minmax_element(d.y.begin(), d.y.end());
      if (*hi >= c.classes)
        throw Error(y_what + " has targets up to " + std::to_string(*hi) + " but " + config_source + " has classes " +
                    std::to_string(c.classes) + " (first outside [0, " + std::to_string(c.classes) + "): target " +
                    std::to_string(d.y[i]) + " at " + at_text(d, i) + ")");
      throw Error(y_what + " has target " + std::to_string(*lo) + " (first: " + std::to_string(d.y[i]) + " at " +
                  at_text(d, i) + "), outside [0, " + std::to_string(c.classes) + ") of " + config_source +
                  " (or -1 = ignored)");
    }
  }
}

}  // namespace

void validate_dataset(const Dataset& d, const ModelConfig& c, const std::string& what,
                      const std::string& config_source) {
  validate_against(d, c, what, what, what, config_source);
}

namespace {

// A token or target array's dtype (integers) and shape (2-D), before its values are read.
void check_token_array(char kind, const std::string& descr, const std::vector<int64_t>& shape, const std::string& what) {
  if (kind != 'i' && kind != 'u')
    throw FileError(what + " has dtype " + descr + "; token and target arrays must be integers");
  if (shape.size() != 2) {
    std::string s;
    for (int64_t v : shape) s += (s.empty() ? "" : ", ") + std::to_string(v);
    throw FileError(what + " has shape (" + s + "); expected 2-D [sequences, T]");
  }
}

std::vector<int32_t> int_array(const std::map<std::string, NpyArray>& arrays, const std::string& path,
                               const std::string& name, std::vector<int64_t>* shape) {
  auto it = arrays.find(name);
  if (it == arrays.end()) {
    std::string have;
    for (const auto& [k, v] : arrays) have += (have.empty() ? "" : ", ") + k;
    throw FileError(path + ": no array '" + name + "' (expected X_train, Y_train, X_val, Y_val; found " +
                    (have.empty() ? "none" : have) + ")");
  }
  const NpyArray& a = it->second;
  const std::string what = path + ": '" + name + "'";
  check_token_array(a.kind(), a.descr, a.shape, what);
  *shape = a.shape;
  return to_int32(a, what);
}

Dataset dataset_from(const std::map<std::string, NpyArray>& arrays, const std::string& path,
                     const std::string& xs, const std::string& ys, const ModelConfig& c,
                     const std::string& config_source) {
  std::vector<int64_t> xshape, yshape;
  Dataset d;
  d.x = int_array(arrays, path, xs, &xshape);
  d.y = int_array(arrays, path, ys, &yshape);
  if (xshape != yshape)
    throw FileError(path + ": '" + xs + "' is [" + std::to_string(xshape[0]) + ", " + std::to_string(xshape[1]) +
                    "] but '" + ys + "' is [" + std::to_string(yshape[0]) + ", " + std::to_string(yshape[1]) +
                    "]; they must have the same shape");
  d.size = xshape[0], d.seq_len = xshape[1];
  validate_against(d, c, path + ": '" + xs + "'/'" + ys + "'", path + ": '" + xs + "'", path + ": '" + ys + "'",
                   config_source);
  return d;
}

}  // namespace

Dataset load_sequences(const std::string& path, const ModelConfig& c, const std::string& config_source) {
  const bool npz = path.size() > 4 && path.compare(path.size() - 4, 4, ".npz") == 0;
  const bool npy = path.size() > 4 && path.compare(path.size() - 4, 4, ".npy") == 0;
  if (!npz && !npy) throw FileError(path + ": expected a .npz (X, optional Y) or an .npy of tokens [N, T]");
  Dataset d;
  if (npy) {  // tokens alone, checked by the header, then read straight into d.x
    const NpyReader reader(path);
    check_token_array(reader.kind(), reader.descr(), reader.shape(), path + ": 'X'");
    d.x = reader.read_int32(path + ": 'X'");
    d.size = reader.shape()[0], d.seq_len = reader.shape()[1];
    validate_against(d, c, path, path, path + ": 'Y'", config_source);
    return d;
  }
  std::string xs = "X", ys = "Y";
  const std::map<std::string, NpyArray> arrays = read_npz(path);
  if (!arrays.count("X") && arrays.count("X_val")) xs = "X_val", ys = "Y_val";
  if (!arrays.count(xs)) {
    std::string have;
    for (const auto& [k, v] : arrays) have += (have.empty() ? "" : ", ") + k;
    throw FileError(path + ": no array 'X' or 'X_val' (found " + (have.empty() ? "none" : have) + ")");
  }
  std::vector<int64_t> xshape, yshape;
  const std::string xname = path + ": '" + xs + "'";
  d.x = int_array(arrays, path, xs, &xshape);
  d.size = xshape[0], d.seq_len = xshape[1];
  if (arrays.count(ys) > 0) {
    d.y = int_array(arrays, path, ys, &yshape);
    if (xshape != yshape)
      throw FileError(path + ": '" + xs + "' is [" + std::to_string(xshape[0]) + ", " + std::to_string(xshape[1]) +
                      "] but '" + ys + "' is [" + std::to_string(yshape[0]) + ", " + std::to_string(yshape[1]) +
                      "]; they must have the same shape");
  }
  validate_against(d, c, xname, xname, path + ": '" + ys + "'", config_source);
  return d;
}

uint64_t task_data_fingerprint(const TaskData& data) {
  Fnv1a h;
  for (const Dataset* d : {&data.train, &data.val}) {
    h.add(&d->size, sizeof d->size);
    h.add(d->x);
    h.add(d->y);
  }
  return h.h;
}

TaskData load_task_data(const std::string& path, const ModelConfig& c, const std::string& config_source) {
  const auto arrays = read_npz(path);
  TaskData data;
  data.train = dataset_from(arrays, path, "X_train", "Y_train", c, config_source);
  data.val = dataset_from(arrays, path, "X_val", "Y_val", c, config_source);
  // A set without a single answer trains nothing, or scores an accuracy of 0 of 0 positions.
  for (const auto& [set, name] : {std::pair<const Dataset*, const char*>{&data.train, "Y_train"}, {&data.val, "Y_val"}})
    if (std::none_of(set->y.begin(), set->y.end(), [](int32_t t) { return t >= 0; }))
      throw FileError(path + ": '" + name + "' has no target to learn or score: all " + std::to_string(set->y.size()) +
                      " are -1 (no answer)");
  return data;
}

MajorityBaseline majority_baseline(const Dataset& d) {
  std::map<int32_t, int64_t> counts;
  for (int32_t y : d.y)
    if (y != -1) ++counts[y];
  MajorityBaseline b;
  for (const auto& [cls, n] : counts) {
    if (n > b.accuracy.correct) b.cls = cls, b.accuracy.correct = n;
    b.accuracy.total += n;
  }
  return b;
}

}  // namespace attnkit
