#include "engine/planner.h"

#include <algorithm>
#include <numeric>

#include "engine/op_table.h"

namespace attnkit {
namespace {

int64_t aligned(int64_t bytes) { return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

struct Block {
  int64_t size = 0, first = 0, last = 0, offset = -1;
};

}  // namespace

int64_t MemoryPlan::bytes(const Graph& g, TensorId t) const {
  const TensorDesc& d = g.tensor(t);
  if (rows <= 0 || !d.batched || d.shape[0] <= 0) return d.bytes();
  return d.bytes() / d.shape[0] * rows;
}

MemoryPlan plan_memory(const Graph& g, const PlanOptions& options) {
  const auto& tensors = g.tensors();
  const auto& nodes = g.nodes();
  const size_t nt = tensors.size();
  const int64_t end = static_cast<int64_t>(nodes.size());
  MemoryPlan plan;
  plan.rows = options.rows > 0 && options.rows <= g.max_batch() ? options.rows : 0;
  plan.offsets.assign(nt, -1);
  plan.first_use.assign(nt, -1);
  plan.last_use.assign(nt, -1);
  plan.kept_offsets.assign(nt, -1);
  // A chunked plan's results: batched kept tensors some node writes, in a block of their own.
  auto is_result = [&](size_t t) {
    return plan.rows > 0 && tensors[t].storage == Storage::kArena && tensors[t].keep && tensors[t].batched;
  };
  if (plan.rows > 0) {
    std::vector<bool> written(nt, false);
    for (const Node& n : nodes)
      for (TensorId t : n.out)
        if (t != kNoTensor) written[static_cast<size_t>(t)] = true;
    for (size_t t = 0; t < nt; ++t)
      if (is_result(t) && written[t]) {
        plan.kept_offsets[t] = plan.kept_bytes;
        plan.kept_bytes += aligned(tensors[t].bytes());
      }
  }

  // Liveness of each arena tensor: from the first node that writes it to the last that
  // touches it; kept tensors live to the end of the run.
  auto is_arena = [&](TensorId t) {
    return t != kNoTensor && tensors[static_cast<size_t>(t)].storage == Storage::kArena && !is_result(static_cast<size_t>(t));
  };
  auto touch = [&](TensorId t, int64_t i) {
    if (!is_arena(t)) return;
    auto& f = plan.first_use[static_cast<size_t>(t)];
    auto& l = plan.last_use[static_cast<size_t>(t)];
    if (f < 0) f = i;
    l = std::max(l, i);
  };
  for (int64_t i = 0; i < end; ++i) {
    const Node& n = nodes[static_cast<size_t>(i)];
    for (TensorId t : n.out) touch(t, i);
    for (TensorId t : n.scratch) touch(t, i);
    for (TensorId t : n.in) touch(t, i);
  }
  for (size_t t = 0; t < nt; ++t)
    if (plan.first_use[t] >= 0 && tensors[t].keep) plan.last_use[t] = end;
  // A training step in chunks adds each chunk's share to its unbatched kept results (the
  // loss): they hold their value from the first chunk to the end of the last.
  if (plan.rows > 0 && g.has_backward())
    for (size_t t = 0; t < nt; ++t)
      if (plan.first_use[t] >= 0 && tensors[t].keep && !tensors[t].batched) plan.first_use[t] = 0;
  // A chunked inference run computes the graph's unbatched prefix once and then runs the rest
  // chunk by chunk: what the prefix writes for the rest lives until the last chunk is done. (A
  // chunked training step runs every node for each chunk.)
  if (plan.rows > 0 && !g.has_backward()) {
    const int64_t prefix = static_cast<int64_t>(g.unbatched_prefix());
    for (size_t t = 0; t < nt; ++t)
      if (plan.first_use[t] >= 0 && plan.first_use[t] < prefix && plan.last_use[t] >= prefix) plan.last_use[t] = end;
  }

  // One block per buffer; in-place outputs join their input's block.
  std::vector<int> block_of(nt, -1);
  std::vector<Block> blocks;
  std::vector<bool> keeps_block;
  for (size_t t = 0; t < nt; ++t) {
    if (plan.first_use[t] < 0) continue;
    block_of[t] = static_cast<int>(blocks.size());
    blocks.push_back({aligned(plan.bytes(g, static_cast<TensorId>(t))), plan.first_use[t], plan.last_use[t], -1});
  }
  for (int64_t i = 0; i < end; ++i) {
    const Node& n = nodes[static_cast<size_t>(i)];
    if (!op_def(n.op).in_place || n.out.empty() || !is_arena(n.out[0]) || n.accumulates(0)) continue;
    const TensorId o = n.out[0];
    if (plan.first_use[static_cast<size_t>(o)] != i || tensors[static_cast<size_t>(o)].keep) continue;
    for (TensorId in : n.in) {
      if (!is_arena(in) || in == o || tensors[static_cast<size_t>(in)].keep) continue;
      Block& bi = blocks[static_cast<size_t>(block_of[static_cast<size_t>(in)])];
      if (bi.last != i || tensors[static_cast<size_t>(in)].bytes() != tensors[static_cast<size_t>(o)].bytes() ||
          plan.bytes(g, in) != plan.bytes(g, o))
        continue;
      Block& bo = blocks[static_cast<size_t>(block_of[static_cast<size_t>(o)])];
      bi.last = std::max(bi.last, bo.last);
      bo.size = 0;  // retired: the output lives in the input's buffer
      block_of[static_cast<size_t>(o)] = block_of[static_cast<size_t>(in)];
      ++plan.in_place_count;
      break;
    }
  }

  // Greedy placement, largest first, each at the lowest offset free over its lifetime.
  std::vector<size_t> order(blocks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (blocks[a].size != blocks[b].size) return blocks[a].size > blocks[b].size;
    return blocks[a].first < blocks[b].first;
  });
  std::vector<size_t> placed;
  std::vector<std::pair<int64_t, int64_t>> busy;  // [offset, offset + size) of overlapping blocks
  for (size_t bi : order) {
    Block& b = blocks[bi];
    if (b.size == 0) continue;
    busy.clear();
    for (size_t pj : placed) {
      const Block& p = blocks[pj];
      if (p.first <= b.last && b.first <= p.last) busy.emplace_back(p.offset, p.offset + p.size);
    }
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (const auto& [lo, hi] : busy) {
      if (offset + b.size <= lo) break;
      offset = std::max(offset, hi);
    }
    b.offset = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + b.size);
    placed.push_back(bi);
  }

  // The liveness lower bound: the most bytes alive at any one node.
  std::vector<int64_t> live(static_cast<size_t>(end) + 1, 0);
  for (const Block& b : blocks)
    if (b.size)
      for (int64_t i = b.first; i <= b.last; ++i) live[static_cast<size_t>(i)] += b.size;
  plan.lower_bound_bytes = live.empty() ? 0 : *std::max_element(live.begin(), live.end());

  plan.buffer = block_of;
  for (size_t t = 0; t < nt; ++t) {
    if (block_of[t] < 0) continue;
    const Block& b = blocks[static_cast<size_t>(block_of[t])];
    plan.offsets[t] = b.offset;
    plan.first_use[t] = std::min(plan.first_use[t], b.first);
    plan.last_use[t] = b.last;
  }
  return plan;
}

void check_plan(const Graph& g, const MemoryPlan& plan) {
  const auto& tensors = g.tensors();
  std::vector<size_t> arena;
  for (size_t t = 0; t < tensors.size(); ++t)
    if (plan.offsets[t] >= 0) arena.push_back(t);
  for (size_t a = 0; a < arena.size(); ++a) {
    const size_t ta = arena[a];
    const int64_t a0 = plan.offsets[ta], a1 = a0 + plan.bytes(g, static_cast<TensorId>(ta));
    if (a1 > plan.arena_bytes) throw Error("plan: " + g.describe(static_cast<TensorId>(ta)) + " runs past the arena");
    for (size_t b = a + 1; b < arena.size(); ++b) {
      const size_t tb = arena[b];
      const int64_t b0 = plan.offsets[tb], b1 = b0 + plan.bytes(g, static_cast<TensorId>(tb));
      if (plan.buffer[ta] == plan.buffer[tb]) continue;  // an in-place pair sharing one buffer
      const bool time = plan.first_use[ta] <= plan.last_use[tb] && plan.first_use[tb] <= plan.last_use[ta];
      const bool space = a0 < b1 && b0 < a1;
      if (time && space)
        throw Error("plan: " + g.describe(static_cast<TensorId>(ta)) + " and " +
                    g.describe(static_cast<TensorId>(tb)) + " overlap while both alive");
    }
  }
}

}  // namespace attnkit
