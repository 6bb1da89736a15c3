// The memory a training job will take, per rank, computed from its config without running it:
// what `hoist estimate` prints and `hoist plan` searches over.
//
// The estimate adds up what the trainer allocates, each part from the code that sizes it:
//   the ZeRO engine (zero/memory_estimate.h): parameters, gradients and optimizer states wherever
//     they live, gathered units, gradient reductions in flight, offload buffers and files; it
//     replays the model's ParamStore calls, recorded from a model of the same depth;
//   the model's activations (ModelActivationFootprint): every saved tensor the
//     checkpointing policy keeps, the working layers, backward scratch, logits;
//   the trainer's micro-batch buffer and the built-in data's tokens.
// Activations are allocated once and held, so the peak of a place is its resident bytes plus
// the engine's largest phase. The numbers are the memory tracker's (the JSONL log's `peak` and
// `peak_total`), which does not see the process's untracked memory (the C++ heap of small
// objects, the BLAS library's buffers, code): the end-of-run table shows both.
//
// Pure functions of their arguments; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/memory_tracker.h"
#include "core/status.h"
#include "runtime/config/config.h"
#include "runtime/model/model.h"
#include "zero/memory_estimate.h"

namespace hoist::runtime {

// Every rank holds the same bytes: ZeRO pads each unit to a multiple of the ranks, so every
// shard has the same size.
struct MemoryEstimate {
  int world_size = 1;
  DeviceKind device = DeviceKind::kCpu;  // what the model and the engine compute on
  int64_t parameters = 0;  // Ψ, the model's parameter count (the padded vocabulary included)
  // The parameters trained: Ψ, or with LoRA the adapters' (the base is frozen).
  int64_t trainable_parameters = 0;
  zero::EngineMemoryEstimate engine;
  Model::ActivationBytes activations;  // the model's, held from creation on
  int64_t batch_bytes = 0;             // the micro-batch's tokens and targets (device)
  int64_t data_bytes = 0;              // the built-in data's tokens (host, workspace)

  // What the tracker's peak and peak_total will hold: the JSONL log's `peak` and `peak_total`.
  MemorySnapshot::Table peak{};
  std::array<int64_t, kNumPlaces> peak_total{};
  // When each place peaks: "forward", "backward" or "step" (the engine phase with the most
  // transient bytes there), or "throughout" when nothing of it comes and goes.
  std::array<std::string, kNumPlaces> peak_during;

  // Model states by the ZeRO paper's formula (16 bytes per parameter split by stage), for
  // comparison with the engine's, which adds padding, persistent units and offload.
  int64_t zero_paper_model_states = 0;

  int64_t Peak(Place p, Category c) const { return peak[int(p)][int(c)]; }
  int64_t PeakTotal(Place p) const { return peak_total[int(p)]; }
};

// The estimate for each rank of `config` (already resolved for `world_size` ranks) computing on
// `device`. On a GPU (kCuda) Place::kDevice is the GPU's memory as the tracker counts it (the
// caching allocator's requests); host buffers of the trainer are kHost; outside the estimate
// stay the CUDA context, cuBLASLt's workspace, NCCL's buffers and the caching allocator's
// rounding and cache (its reserved bytes minus its allocated bytes). Errors: what the engine
// would refuse for these options.
StatusOr<MemoryEstimate> EstimateMemory(const Config& config, int world_size,
                                        DeviceKind device = DeviceKind::kCpu);

// The ParamStore calls of one training micro-batch of `config`'s model, recorded from a model of
// its family and depth at the smallest widths (the order depends on nothing else).
StatusOr<zero::ModelPasses> ModelStorePasses(const ModelConfig& config);
// EstimateMemory with the model's calls given (ModelStorePasses(config.model)), for
// callers that estimate many variants of one model.
StatusOr<MemoryEstimate> EstimateMemory(const Config& config, int world_size,
                                        const zero::ModelPasses& passes,
                                        DeviceKind device = DeviceKind::kCpu);

// {"peak": {place: {category: bytes}}, "peak_total": {place: bytes}, "peak_during": {place:
// "forward" | "backward" | "step" | "throughout"}, "parameters", "world_size",
// "zero_paper_model_states", "parts": {"model_states": {params, grads, optimizer},
// "activations": {device, host_pinned}, "batch", "data"}}: `peak` and `peak_total` in the JSONL
// log's shapes, so that the two compare key by key.
nlohmann::json MemoryEstimateJson(const MemoryEstimate& estimate);

// The estimate for people: a table of peak bytes by place and category, the predicted peak of
// each place with its phase, and the ZeRO paper's model states beside the engine's. With
// `ranks_per_node` > 0, also the host and NVMe bytes of one node.
std::string FormatMemoryEstimate(const MemoryEstimate& estimate, const Config& config,
                                 int ranks_per_node = 0);

// "16GiB", "512MiB", "1.5TB", "4096" (bytes), "2k": a size with an optional binary (KiB, MiB,
// GiB, TiB; also K, M, G, T) or decimal (kB, MB, GB, TB) unit, case-insensitive. InvalidArgument
// naming `what` and the accepted forms otherwise.
StatusOr<int64_t> ParseBytes(const std::string& text, const std::string& what);

}  // namespace hoist::runtime
