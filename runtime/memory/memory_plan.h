// The memory-budget planner: for a job and a device-memory budget per rank, the ZeRO stage,
// optimizer and parameter offload, activation-checkpointing policy and micro-batch size that fit,
// ranked by a model of the step time. What `hoist plan` prints and `hoist train --memory-budget`
// trains.
//
// The search. Every other setting of the base config is kept; over
//   zero_optimization.stage                 0, 1, 2, 3;
//   offload_optimizer.device                none, cpu, nvme (stages 1-3);
//   offload_optimizer.ratio                 with cpu: 1, 0.75, 0.5, 0.25 (the share offloaded;
//                                           the rest of the states stay on the device);
//   offload_param.device                    none, cpu, nvme (stage 3);
//   activation_checkpointing                none, selective, every_k (k = 2, and the base's k),
//                                           full; every_k and full also with cpu_checkpointing;
//   optimizer.type                          with PlanOptions::allow_8bit_optimizer and an
//                                           AdamW (or Adam) base: also AdamW8bit, with every
//                                           placement of the optimizer above; an AdamW8bit base
//                                           keeps AdamW8bit;
//   train_micro_batch_size_per_gpu          each divisor m of train_batch_size / N, with
//                                           gradient_accumulation_steps = train_batch_size/(m N),
//                                           so train_batch_size stays;
// each point is the base config re-parsed with the overrides that set it (so every rule of the
// config applies) and estimated with EstimateMemory (runtime/memory/memory_estimate.h), the model's
// ParamStore calls recorded once for all of them. NVMe points need an NVMe budget (a size or
// kNoNvmeLimit) and a directory: the base's nvme_path, else PlanOptions::nvme_path; without
// either they are left out with a note. A point fits when
//   device peak_total                         <= device_budget_bytes,
//   (host + host_pinned peak_total) x R        <= host_budget_bytes (when > 0),
//   nvme peak_total x R                        <= nvme_budget_bytes (when not kNoNvmeLimit),
// with R ranks per node (PlanOptions::DeviceOk, HostOk, NvmeOk). Messages name only the limits
// that were set.
//
// The cost model: the predicted seconds of one optimizer step on one rank, the sum of four parts
// (no overlap assumed, so it ranks choices rather than predicting a wall clock). Symbols: L
// layers, C width, H heads, T sequence length, Vp padded vocabulary, Ψ parameters, N ranks, R
// ranks per node, m micro-batch, g accumulation steps, τ = m g T tokens per rank and step, p the
// bytes of the compute type (4 in fp32, 2 in bf16/fp16), c those of communication_data_type,
// Ψn = ceil(Ψ/N) a rank's shard, a = (N-1)/N.
//   compute_s    3 F τ / flops_per_s. F, the forward FLOPs per token, from GPT-2's shapes:
//                2(12 L C^2 + Vp C) in the matmuls (qkv, attention projection, MLP up and down,
//                the tied LM head), 4 L T C in attention (scores and weighted values; the causal
//                mask is not discounted), and the element-wise ops counted as FLOPs: per block
//                2 layernorms at 8C, 2 residual adds at C, GELU at 10 per element of 4C, softmax
//                at 5 per score (H T per token); the final layernorm 8C and the loss 5 Vp.
//                Backward is twice the forward.
//   recompute_s  the recomputation per token / flops_per_s: full recomputes each block's forward
//                but its MLP output projection (16 C^2 + 4 T C + the block's element-wise ops), in
//                all L blocks; every_k the same in ceil(L/k) blocks (0, k, 2k, ...); selective
//                recomputes attention (4 T C), softmax, the layernorms and GELU in every block.
//                model.attention "tiled" adds what its backward recomputes in any policy: the
//                scores and softmax of every block (2 T C + 5 H T).
//   comm_s       ring collectives' bytes per rank / link_bytes_per_s: stages 0 and 1 all-reduce
//                the gradients once per step (2aΨc); stages 1 and 2 all-gather the updated
//                weights (aΨp); stages 2 and 3 reduce-scatter each micro-batch's gradients (aΨc,
//                or 2aΨc with zero_optimization.reduce_scatter false); stage 3 gathers the
//                weights in forward and in backward of each micro-batch (2aΨp g). 0 on one rank.
//   offload_s    host-link bytes / host_link_bytes_per_s + NVMe bytes / (nvme_bytes_per_s / R),
//                the node's drive being shared by its R ranks: optimizer offload moves the
//                gradient shard down and the updated weights up (2Ψn p, host link; times
//                offload_optimizer.ratio for a partial offload to cpu) and on nvme
//                also reads and writes master weights and both moments (24Ψn, NVMe); parameter
//                offload brings the shards in for forward and backward of each micro-batch (2Ψn p
//                g over the host link; on nvme also 2 max(0, Ψn - max_in_cpu) p g from the
//                drive); cpu_checkpointing moves every block's input down in forward and back
//                in backward (2 L m T C p g, host link).
// 8-bit moments change no term: the model counts no optimizer time, and offload moves gradients
// and weights, not moments. Ties (one rank: no communication) go to the 32-bit optimizer (8-bit
// states change the numerics, so the plan takes them only where they fit what 32-bit cannot, or
// let a faster setting fit), then the lower stage, less offload (then ratio 1 before a partial
// offload), less checkpointing and then the larger micro-batch.
//
// Pure functions of their arguments, apart from MeasureMatmulFlopRate (which times the CPU) and
// PlanMemory when it measures; thread-safe. No call logs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/config/config.h"
#include "runtime/memory/memory_estimate.h"

namespace hoist::runtime {

// The speeds the cost model divides by.
struct CostRates {
  double flops_per_s = 0;               // 0: MeasureMatmulFlopRate() (PlanMemory measures once)
  double link_bytes_per_s = 12.5e9;     // between ranks: 100 Gb/s, one InfiniBand HDR100 port
  double host_link_bytes_per_s = 24e9;  // device <-> host: PCIe 4.0 x16 as copies sustain it
  double nvme_bytes_per_s = 3e9;        // per node: one PCIe 4.0 NVMe drive, reads and writes alike
};

// A nominal compute rate for plans that must come out the same on every rank and every restart
// (`hoist train --memory-budget`): a few cores' worth of fp32 GEMM.
inline constexpr double kNominalFlopsPerS = 1e11;

// fp32 FLOP/s of kernels/cpu MatmulForward on this machine, timed on a (512 x 768) x (768 x 768)
// product: the best of a few runs after a warm-up (tens of milliseconds). Blocks.
double MeasureMatmulFlopRate();

// One point of the search.
struct PlanChoice {
  int stage = 0;
  Placement offload_optimizer = Placement::kDevice;
  double offload_ratio = 1.0;  // offload_optimizer.ratio (below 1 with cpu only)
  Placement offload_param = Placement::kDevice;
  CheckpointPolicy policy = CheckpointPolicy::kNone;
  int every_k = 2;  // read with kEveryK
  bool cpu_checkpointing = false;
  int64_t micro_batch = 1;
  int64_t accumulation = 1;
  bool optimizer_8bit = false;  // optimizer.type AdamW8bit

  // The choice a parsed config makes.
  static PlanChoice Of(const Config& config);
  // "stage 3, offload optimizer cpu + params none, checkpointing every_k(2) on host, micro-batch
  // 2 x 4" (", 8-bit AdamW" after it where optimizer_8bit).
  std::string Describe() const;
  // "every_k(2)+cpu", "selective", ...: the policy column of a table.
  std::string PolicyName() const;
  bool operator==(const PlanChoice&) const = default;
};

// The step-time prediction of one config, by the parts above.
struct StepCost {
  double model_flops = 0;      // forward and backward, per rank and step
  double recompute_flops = 0;  // activation recomputation, per rank and step
  double comm_bytes = 0;       // sent per rank and step by the collectives' ring algorithms
  double host_link_bytes = 0;  // device <-> host per rank and step
  double nvme_bytes = 0;       // read and written per rank and step
  double compute_s = 0, recompute_s = 0, comm_s = 0, offload_s = 0;
  double total_s = 0;
};

// The cost model above for `config` (resolved for `world_size` ranks, R = ranks_per_node) at
// `rates` (flops_per_s > 0).
StepCost EstimateStepCost(const Config& config, int world_size, int ranks_per_node,
                          const CostRates& rates);

// PlanOptions::nvme_budget_bytes: NVMe offload considered, with no limit on its space (for a
// job whose start checks the drive's free space itself).
inline constexpr int64_t kNoNvmeLimit = -1;

struct PlanCandidate;

struct PlanOptions {
  int64_t device_budget_bytes = 0;  // per rank; > 0
  int64_t host_budget_bytes = 0;    // host + host_pinned per node; 0: no limit
  int64_t nvme_budget_bytes = 0;    // per node; 0: NVMe offload not considered; or kNoNvmeLimit
  int ranks_per_node = 0;           // 0: all ranks on one node
  // The directory for NVMe points when the base config names none.
  std::string nvme_path;
  CostRates rates;
  // What the ranks train on. On a GPU (kCuda) the device budget is its memory, which the
  // estimate counts with the accelerator's staging (host update, parameter offload).
  DeviceKind device = DeviceKind::kCpu;
  // Also search 8-bit AdamW moments for an AdamW job (they change its numerics: the caller opts
  // in, `--allow-8bit-optimizer`).
  bool allow_8bit_optimizer = false;

  bool HostLimited() const { return host_budget_bytes > 0; }
  // A size was given (not 0, not kNoNvmeLimit).
  bool NvmeLimited() const { return nvme_budget_bytes > 0; }
  // Whether `c` keeps within each budget (a point that puts nothing on NVMe keeps within any).
  bool DeviceOk(const PlanCandidate& c) const;
  bool HostOk(const PlanCandidate& c) const;
  bool NvmeOk(const PlanCandidate& c) const;
  bool Fits(const PlanCandidate& c) const { return DeviceOk(c) && HostOk(c) && NvmeOk(c); }
};

// One evaluated point.
struct PlanCandidate {
  PlanChoice choice;
  MemoryEstimate estimate;
  int64_t device_bytes = 0;         // device peak_total per rank
  int64_t host_bytes_per_node = 0;  // (host + host_pinned peak_total) x R
  int64_t nvme_bytes_per_node = 0;  // nvme peak_total x R
  StepCost cost;
};

inline bool PlanOptions::DeviceOk(const PlanCandidate& c) const {
  return c.device_bytes <= device_budget_bytes;
}
inline bool PlanOptions::HostOk(const PlanCandidate& c) const {
  return !HostLimited() || c.host_bytes_per_node <= host_budget_bytes;
}
inline bool PlanOptions::NvmeOk(const PlanCandidate& c) const {
  return c.nvme_bytes_per_node == 0 || nvme_budget_bytes == kNoNvmeLimit ||
         c.nvme_bytes_per_node <= nvme_budget_bytes;
}

struct MemoryPlan {
  int world_size = 1;
  int ranks_per_node = 1;
  PlanOptions options;  // as used: ranks_per_node and rates.flops_per_s resolved
  // The points that fit, best first (the cost model's order, ties as above).
  std::vector<PlanCandidate> candidates;
  // The base config as given, when it can be estimated, and whether it fits the budgets.
  std::optional<PlanCandidate> base;
  bool base_fits = false;
  int evaluated = 0;  // points estimated, fitting or not
  int refused = 0;    // points the config rules or the engine refuse (e.g. a micro-batch too big)
  // The base config with `overrides` applied: candidates.front()'s settings.
  Config best;
  // "key.path=value" (the form of ParseConfig's overrides and `--set`), only the keys that change.
  std::vector<std::string> overrides;
  // What the search left out and why, one sentence each.
  std::vector<std::string> notes;
};

// Searches the settings above for `base` (resolved for `world_size` ranks; base.raw its effective
// JSON). ResourceExhausted when no point fits, naming the smallest device budget that would (and
// its settings), and the host or NVMe limit where that is what blocks; InvalidArgument for
// budgets out of range (a device budget <= 0, a host budget < 0, an NVMe budget < 0 other than
// kNoNvmeLimit) or a base config none of whose points can be estimated.
StatusOr<MemoryPlan> PlanMemory(const Config& base, int world_size, const PlanOptions& options);

}  // namespace hoist::runtime
