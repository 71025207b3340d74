#include "engine/op_table.h"

namespace attnkit {

// Each op's definition lives in its own file (engine/op_*.cc).
extern const OpDef kEmbeddingOp, kEmbeddingBackwardOp;
extern const OpDef kLinearOp, kLinearBackwardOp;
extern const OpDef kAddOp, kReluOp, kReluBackwardOp, kAccumulateOp, kBiasBackwardOp, kOnesOp;
extern const OpDef kLayerNormOp, kLayerNormBackwardOp;
extern const OpDef kAttentionOp, kAttentionBackwardOp;
extern const OpDef kCrossEntropyOp, kCrossEntropyBackwardOp;

const OpDef& op_def(OpKind kind) {
  switch (kind) {
    case OpKind::kEmbedding: return kEmbeddingOp;
    case OpKind::kEmbeddingBackward: return kEmbeddingBackwardOp;
    case OpKind::kLinear: return kLinearOp;
    case OpKind::kLinearBackward: return kLinearBackwardOp;
    case OpKind::kAdd: return kAddOp;
    case OpKind::kRelu: return kReluOp;
    case OpKind::kReluBackward: return kReluBackwardOp;
    case OpKind::kAccumulate: return kAccumulateOp;
    case OpKind::kBiasBackward: return kBiasBackwardOp;
    case OpKind::kOnes: return kOnesOp;
    case OpKind::kLayerNorm: return kLayerNormOp;
    case OpKind::kLayerNormBackward: return kLayerNormBackwardOp;
    case OpKind::kAttention: return kAttentionOp;
    case OpKind::kAttentionBackward: return kAttentionBackwardOp;
    case OpKind::kCrossEntropy: return kCrossEntropyOp;
    case OpKind::kCrossEntropyBackward: return kCrossEntropyBackwardOp;
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
