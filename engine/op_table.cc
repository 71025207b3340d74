#include "engine/op_table.h"

namespace attnkit {

// Each op's definition lives in its own file (engine/op_*.cc).
#define ATTNKIT_OP_DECLARE(kind, def) extern const OpDef def;
ATTNKIT_OPS(ATTNKIT_OP_DECLARE)
#undef ATTNKIT_OP_DECLARE

const OpDef& op_def(OpKind kind) {
  switch (kind) {
#define ATTNKIT_OP_CASE(kind, def) \
  case OpKind::kind:               \
    return def;
    ATTNKIT_OPS(ATTNKIT_OP_CASE)
#undef ATTNKIT_OP_CASE
    case OpKind::kCount: break;
  }
  throw Error("op table: unknown op kind " + std::to_string(static_cast<int>(kind)));
}

void set_out_accumulate(Node& node, size_t i, const Autodiff::Target& t) {
  if (node.out.size() <= i) node.out.resize(i + 1, kNoTensor);
  node.out[i] = t.tensor;
  if (t.accumulate) node.accumulate |= 1u << i;
}

}  // namespace attnkit
