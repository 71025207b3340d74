// The executor's per-node profiling: the record run_nodes fills while profiling is on (thread 0
// timestamps every node), read back as per-node times and as a table of the slowest nodes.
#include "engine/executor.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace attnkit {

void Executor::set_profiling(bool on, bool keep_record) {
  profiling_ = on;
  if (!on || (keep_record && !node_seconds_.empty())) return;
  profiled_runs_ = 0;
  node_seconds_.assign(graph_.nodes().size() + 1, 0.0);
}

std::vector<Executor::NodeTime> Executor::node_times() const {
  std::vector<NodeTime> out;
  const auto& nodes = graph_.nodes();
  for (size_t i = 0; i < node_seconds_.size(); ++i) {
    NodeTime t;
    t.node = i;
    t.seconds = node_seconds_[i];
    if (i == nodes.size()) {
      t.what = "adam (all parameters)";
    } else {
      const Node& n = nodes[i];
      // "linear_backward [64, 10, 32] <- [64, 10, 32] [32, 128] [64, 10, 128]  'grad(tok.weight…'"
      t.what = op_def(n.op).name;
      std::string name;
      for (TensorId o : n.out)
        if (o != kNoTensor) {
          t.what += " " + graph_.tensor(o).shape.str();
          name = graph_.tensor(o).name;
          break;
        }
      t.what += " <-";
      for (TensorId in : n.in)
        if (in != kNoTensor) t.what += " " + graph_.tensor(in).shape.str();
      if (name.size() > 48) name = name.substr(0, 45) + "...";
      if (!name.empty()) t.what += "  '" + name + "'";
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::string Executor::profile_report(size_t max_lines) const {
  std::vector<NodeTime> times = node_times();
  double total = 0;
  for (const NodeTime& t : times) total += t.seconds;
  std::stable_sort(times.begin(), times.end(),
                   [](const NodeTime& a, const NodeTime& b) { return a.seconds > b.seconds; });
  const double runs = profiled_runs_ > 0 ? static_cast<double>(profiled_runs_) : 1.0;
  std::string out;
  char line[96];
  std::snprintf(line, sizeof line, "%d runs, %.1f us per run; slowest nodes:\n", static_cast<int>(profiled_runs_),
                total / runs * 1e6);
  out += line;
  for (size_t i = 0; i < times.size() && i < max_lines; ++i) {
    std::snprintf(line, sizeof line, "%5.1f%% %9.1f us  #%-4zu ", total > 0 ? 100.0 * times[i].seconds / total : 0.0,
                  times[i].seconds / runs * 1e6, times[i].node);
    out += line + times[i].what + "\n";
  }
  return out;
}

}  // namespace attnkit
