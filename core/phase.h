// The phases of a training step, one enum for all who name them: the trainer's timers (the JSONL
// log's `phases` and the metrics' `phase` label), the memory profiler, the model's phase hook
// and the memory estimate.
#pragma once

namespace hoist {

enum class Phase {
  kData = 0,   // the loader filling the micro-batches
  kForward,    // forward passes through the embedding and the blocks
  kBackward,   // backward passes (with stage 2/3 the reduce-scatters they start overlap them)
  kReduce,     // at the accumulation boundary: finishing the gradient reduction, the global norm
  kOptimizer,  // the optimizer step on the owned shard and gathering the updated parameters
  kLoss,       // the head: final norm, logits and the loss, forward and backward
  kOffload,    // the optimizer step on offloaded states (the CPU's AdamW, NVMe streaming)
};
inline constexpr int kNumPhases = 7;
// The phases each step's record times, in this order: data, forward (the loss included),
// backward, reduce, optimizer.
inline constexpr int kNumTimedPhases = 5;

// "data", "forward", "backward", "reduce", "optimizer", "loss", "offload".
constexpr const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kData: return "data";
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kReduce: return "reduce";
    case Phase::kOptimizer: return "optimizer";
    case Phase::kLoss: return "loss";
    case Phase::kOffload: return "offload";
  }
  return "unknown";
}

}  // namespace hoist
