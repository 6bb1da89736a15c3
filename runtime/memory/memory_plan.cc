#include "runtime/memory/memory_plan.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "comm/communicator.h"
#include "core/check.h"
#include "core/memory_tracker.h"
#include "kernels/cpu/ops.h"
#include "runtime/config/engine_options.h"
#include "runtime/model/gpt2.h"
#include "runtime/model/model_family.h"

namespace hoist::runtime {
namespace {

// Names the configs the planner parses in their errors and notices.
constexpr char kSource[] = "the planned config";

int PolicyRank(CheckpointPolicy policy) {
  switch (policy) {
    case CheckpointPolicy::kNone: return 0;
    case CheckpointPolicy::kSelective: return 1;
    case CheckpointPolicy::kEveryK: return 2;
    case CheckpointPolicy::kFull: return 3;
  }
  return 4;
}

// ---- The cost model's FLOPs (see the header for the terms). ----

// The element-wise ops of one block per token: 2 layernorms, 2 residual adds, GELU, softmax.
double BlockElementwiseFlops(const ModelConfig& m) {
  const double C = m.n_embd, H = m.n_head, T = m.seq_len;
  return 2 * 8 * C + 2 * C + 10 * 4 * C + 5 * H * T;
}

// The weights of one block's matmuls (each multiply-add of a token is 2 FLOPs per weight), and
// those of its last projection (the MLP's output, whose result every checkpointing policy keeps).
double BlockMatmulWeights(const ModelConfig& m) {
  return FamilyOf(m.family).block_matmul_weights(m);
}
double LastProjectionWeights(const ModelConfig& m) {
  return FamilyOf(m.family).last_projection_weights(m);
}

double ForwardFlopsPerToken(const ModelConfig& m) {
  const double L = m.n_layer, C = m.n_embd, T = m.seq_len, Vp = m.padded_vocab_size();
  const double matmuls = 2 * (L * BlockMatmulWeights(m) + Vp * C);
  const double attention = 4 * L * T * C;
  return matmuls + attention + L * BlockElementwiseFlops(m) + 8 * C + 5 * Vp;
}

int CheckpointedBlocks(const ActivationCheckpointingConfig& ac, int n_layer) {
  int blocks = 0;
  for (int l = 0; l < n_layer; ++l) blocks += ac.Checkpointed(l) ? 1 : 0;
  return blocks;
}

double RecomputeFlopsPerToken(const Config& config) {
  const ModelConfig& m = config.model;
  const double L = m.n_layer, C = m.n_embd, H = m.n_head, T = m.seq_len;
  const ActivationCheckpointingConfig& ac = config.activation_checkpointing;
  double flops = 0;
  switch (ac.policy) {
    case CheckpointPolicy::kNone: break;
    case CheckpointPolicy::kFull:
    case CheckpointPolicy::kEveryK:
      // The block's forward without the MLP output projection, whose output is the kept block
      // output.
      flops = CheckpointedBlocks(ac, m.n_layer) *
              (2 * (BlockMatmulWeights(m) - LastProjectionWeights(m)) + 4 * T * C +
               BlockElementwiseFlops(m));
      break;
    case CheckpointPolicy::kSelective:
      flops = L * (4 * T * C + 5 * H * T + 2 * 8 * C + 10 * 4 * C);
      break;
  }
  if (m.attention == AttentionKind::kTiled) flops += L * (2 * T * C + 5 * H * T);
  return flops;
}

// ---- The search. ----

// The directories NVMe points put their scratch files in; empty: NVMe not considered.
struct NvmePaths {
  std::string optimizer, param;
};

// Whether zero_optimization.`key` is set (non-null) in the config's JSON.
bool RawZeroHas(const Config& config, const char* key) {
  if (config.raw == nullptr) return false;
  const nlohmann::json& raw = *config.raw;
  if (!raw.is_object() || !raw.contains("zero_optimization")) return false;
  const nlohmann::json& zero = raw["zero_optimization"];
  return zero.is_object() && zero.contains(key) && !zero[key].is_null();
}

bool RawEveryKSet(const Config& config) {
  if (config.raw == nullptr) return false;
  const nlohmann::json& raw = *config.raw;
  if (!raw.is_object() || !raw.contains("activation_checkpointing")) return false;
  const nlohmann::json& ac = raw["activation_checkpointing"];
  return ac.is_object() && ac.contains("every_k") && !ac["every_k"].is_null();
}

void AddOffloadOverrides(const char* section, const char* legacy_key, Placement device,
                         const std::string& base_path, const std::string& nvme_path,
                         const Config& base, std::vector<std::string>* out) {
  const std::string prefix = std::string("zero_optimization.") + section;
  // The legacy `cpu_offload` spelling may not stand beside the section it abbreviates.
  if (RawZeroHas(base, legacy_key)) {
    out->push_back(std::string("zero_optimization.") + legacy_key + "=null");
  }
  out->push_back(prefix + ".device=" + OffloadDeviceName(device));
  if (device == Placement::kNvme && base_path.empty()) {
    out->push_back(prefix + ".nvme_path=" + nlohmann::json(nvme_path).dump());
  }
}

// offload_optimizer.ratio: the choice's with cpu, else 1 (which every device takes).
void AddRatioOverride(const PlanChoice& choice, std::vector<std::string>* out) {
  const double ratio = choice.offload_optimizer == Placement::kHost ? choice.offload_ratio : 1.0;
  out->push_back("zero_optimization.offload_optimizer.ratio=" + nlohmann::json(ratio).dump());
}

void AddPolicyOverrides(const PlanChoice& choice, const Config& base,
                        std::vector<std::string>* out) {
  out->push_back(std::string("activation_checkpointing.policy=") +
                 CheckpointPolicyName(choice.policy));
  if (choice.policy == CheckpointPolicy::kEveryK) {
    out->push_back("activation_checkpointing.every_k=" + std::to_string(choice.every_k));
  } else if (RawEveryKSet(base)) {
    out->push_back("activation_checkpointing.every_k=null");
  }
}

void AddBatchOverrides(const PlanChoice& choice, const Config& base,
                       std::vector<std::string>* out) {
  out->push_back("train_batch_size=" + std::to_string(base.train_batch_size));
  out->push_back("train_micro_batch_size_per_gpu=" + std::to_string(choice.micro_batch));
  out->push_back("gradient_accumulation_steps=" + std::to_string(choice.accumulation));
}

// optimizer.type: AdamW8bit where the choice has 8-bit moments and the base does not (the search
// never turns an 8-bit base into a 32-bit one).
void AddOptimizerOverride(const PlanChoice& choice, const Config& base,
                          std::vector<std::string>* out) {
  if (choice.optimizer_8bit && base.optimizer.type != "AdamW8bit") {
    out->push_back("optimizer.type=\"AdamW8bit\"");
  }
}

// Every key the search sets, whether or not it differs from the base.
std::vector<std::string> AllOverrides(const PlanChoice& choice, const Config& base,
                                      const NvmePaths& paths) {
  std::vector<std::string> out = {"zero_optimization.stage=" + std::to_string(choice.stage)};
  AddOffloadOverrides("offload_optimizer", "cpu_offload", choice.offload_optimizer,
                      base.zero.offload_optimizer.nvme_path, paths.optimizer, base, &out);
  AddRatioOverride(choice, &out);
  AddOffloadOverrides("offload_param", "cpu_offload_param", choice.offload_param,
                      base.zero.offload_param.nvme_path, paths.param, base, &out);
  AddPolicyOverrides(choice, base, &out);
  out.push_back(std::string("activation_checkpointing.cpu_checkpointing=") +
                (choice.cpu_checkpointing ? "true" : "false"));
  AddBatchOverrides(choice, base, &out);
  AddOptimizerOverride(choice, base, &out);
  return out;
}

// Only the keys whose value changes.
std::vector<std::string> ChangedOverrides(const PlanChoice& choice, const Config& base,
                                          const NvmePaths& paths) {
  const PlanChoice from = PlanChoice::Of(base);
  std::vector<std::string> out;
  if (choice.stage != from.stage) {
    out.push_back("zero_optimization.stage=" + std::to_string(choice.stage));
  }
  if (choice.offload_optimizer != from.offload_optimizer) {
    AddOffloadOverrides("offload_optimizer", "cpu_offload", choice.offload_optimizer,
                        base.zero.offload_optimizer.nvme_path, paths.optimizer, base, &out);
  }
  if (choice.offload_optimizer != from.offload_optimizer ||
      choice.offload_ratio != from.offload_ratio) {
    AddRatioOverride(choice, &out);
  }
  if (choice.offload_param != from.offload_param) {
    AddOffloadOverrides("offload_param", "cpu_offload_param", choice.offload_param,
                        base.zero.offload_param.nvme_path, paths.param, base, &out);
  }
  if (choice.policy != from.policy || choice.every_k != from.every_k) {
    AddPolicyOverrides(choice, base, &out);
  }
  if (choice.cpu_checkpointing != from.cpu_checkpointing) {
    out.push_back(std::string("activation_checkpointing.cpu_checkpointing=") +
                  (choice.cpu_checkpointing ? "true" : "false"));
  }
  if (choice.micro_batch != from.micro_batch) AddBatchOverrides(choice, base, &out);
  AddOptimizerOverride(choice, base, &out);
  return out;
}

std::vector<PlanChoice> Choices(const Config& base, int world_size, bool nvme, bool allow_8bit) {
  const int64_t per_rank = base.train_batch_size / world_size;
  const int n_layer = base.model.n_layer;
  struct Policy {
    CheckpointPolicy policy;
    int every_k;
    bool cpu;
  };
  std::vector<Policy> policies = {{CheckpointPolicy::kNone, 2, false},
                                  {CheckpointPolicy::kSelective, 2, false},
                                  {CheckpointPolicy::kFull, 2, false},
                                  {CheckpointPolicy::kFull, 2, true}};
  std::vector<int> ks = {2};
  const ActivationCheckpointingConfig& ac = base.activation_checkpointing;
  if (ac.policy == CheckpointPolicy::kEveryK && ac.every_k != 2) ks.push_back(ac.every_k);
  for (int k : ks) {
    // every_k that checkpoints every block is full.
    if ((n_layer + k - 1) / k >= n_layer) continue;
    policies.push_back({CheckpointPolicy::kEveryK, k, false});
    policies.push_back({CheckpointPolicy::kEveryK, k, true});
  }
  std::vector<Placement> devices = {Placement::kDevice, Placement::kHost};
  if (nvme) devices.push_back(Placement::kNvme);

  std::vector<PlanChoice> out;
  for (int stage = 0; stage <= 3; ++stage) {
    for (Placement optimizer : devices) {
      if (stage == 0 && optimizer != Placement::kDevice) continue;
      // A partial offload (ratio < 1) keeps the rest of the states on the device: a point
      // between no offload and full offload to the host.
      std::vector<double> ratios = {1.0};
      if (optimizer == Placement::kHost) ratios = {1.0, 0.75, 0.5, 0.25};
      for (double ratio : ratios) {
        for (Placement param : devices) {
          if (stage < 3 && param != Placement::kDevice) continue;
          for (const Policy& policy : policies) {
            for (int64_t micro = 1; micro <= per_rank; ++micro) {
              if (per_rank % micro != 0) continue;
              PlanChoice choice;
              choice.stage = stage;
              choice.offload_optimizer = optimizer;
              choice.offload_ratio = ratio;
              choice.offload_param = param;
              choice.policy = policy.policy;
              choice.every_k = policy.every_k;
              choice.cpu_checkpointing = policy.cpu;
              choice.micro_batch = micro;
              choice.accumulation = per_rank / micro;
              out.push_back(choice);
            }
          }
        }
      }
    }
  }

  // Moments in 8 bits: an AdamW8bit job keeps them, an AdamW job may take them too, wherever
  // the engine keeps moments.
  const bool base_8bit = base.optimizer.type == "AdamW8bit";
  if (!base_8bit && !allow_8bit) return out;
  std::vector<PlanChoice> eight_bit;
  for (const PlanChoice& choice : out) {
    eight_bit.push_back(choice);
    eight_bit.back().optimizer_8bit = true;
  }
  if (base_8bit) return eight_bit;
  out.insert(out.end(), eight_bit.begin(), eight_bit.end());
  return out;
}

// The order of the plan: predicted step time, then the simpler setting.
bool Better(const PlanCandidate& a, const PlanCandidate& b) {
  if (a.cost.total_s != b.cost.total_s) return a.cost.total_s < b.cost.total_s;
  const PlanChoice& x = a.choice;
  const PlanChoice& y = b.choice;
  if (x.optimizer_8bit != y.optimizer_8bit) return !x.optimizer_8bit;
  if (x.stage != y.stage) return x.stage < y.stage;
  if (x.offload_optimizer != y.offload_optimizer) return x.offload_optimizer < y.offload_optimizer;
  if (x.offload_ratio != y.offload_ratio) return x.offload_ratio > y.offload_ratio;
  if (x.offload_param != y.offload_param) return x.offload_param < y.offload_param;
  if (x.policy != y.policy) return PolicyRank(x.policy) < PolicyRank(y.policy);
  if (x.every_k != y.every_k) return x.every_k > y.every_k;
  if (x.cpu_checkpointing != y.cpu_checkpointing) return !x.cpu_checkpointing;
  return x.micro_batch > y.micro_batch;
}

// The candidate with the least `key` among those `keep` accepts, or null.
template <typename Keep, typename Key>
const PlanCandidate* Least(const std::vector<PlanCandidate>& all, Keep keep, Key key) {
  const PlanCandidate* best = nullptr;
  for (const PlanCandidate& c : all) {
    if (!keep(c)) continue;
    if (best == nullptr || key(c) < key(*best) || (key(c) == key(*best) && Better(c, *best))) {
      best = &c;
    }
  }
  return best;
}

Status NothingFits(const std::vector<PlanCandidate>& all, const PlanOptions& o) {
  auto device = [](const PlanCandidate& c) { return c.device_bytes; };
  auto host = [](const PlanCandidate& c) { return c.host_bytes_per_node; };
  auto nvme = [](const PlanCandidate& c) { return c.nvme_bytes_per_node; };
  std::ostringstream m;
  m << "no setting of the ZeRO stage, offload, activation checkpointing and micro-batch fits a "
       "device budget of "
    << FormatBytes(o.device_budget_bytes) << " per rank";
  if (o.HostLimited()) {
    m << " with " << FormatBytes(o.host_budget_bytes) << " of host memory per node";
  }
  if (o.NvmeLimited()) {
    m << (o.HostLimited() ? " and " : " with ") << FormatBytes(o.nvme_budget_bytes)
      << " of NVMe per node";
  }
  m << " (" << all.size() << " settings estimated)";

  const int device_fits = static_cast<int>(
      std::count_if(all.begin(), all.end(), [&](const PlanCandidate& c) { return o.DeviceOk(c); }));
  if (device_fits > 0) {
    m << "; " << device_fits << " of them fit the device budget but not the node's limits";
    const PlanCandidate* least_host = Least(
        all, [&](const PlanCandidate& c) { return o.DeviceOk(c) && o.NvmeOk(c); }, host);
    if (least_host != nullptr) {
      m << ": the least host memory among them is "
        << FormatBytesExactly(least_host->host_bytes_per_node) << " per node, with "
        << least_host->choice.Describe() << "; raise the host-memory budget to at least that";
    }
    const PlanCandidate* least_nvme = Least(
        all, [&](const PlanCandidate& c) { return o.DeviceOk(c) && o.HostOk(c); }, nvme);
    if (least_nvme != nullptr) {
      m << (least_host != nullptr ? ", or" : ":") << " the least NVMe space among them is "
        << FormatBytesExactly(least_nvme->nvme_bytes_per_node) << " per node, with "
        << least_nvme->choice.Describe() << "; raise the NVMe budget to at least that";
    }
  }
  const PlanCandidate* smallest = Least(
      all, [&](const PlanCandidate& c) { return o.HostOk(c) && o.NvmeOk(c); }, device);
  if (smallest != nullptr) {
    m << "; the smallest device budget that fits is " << FormatBytesExactly(smallest->device_bytes)
      << " per rank, with " << smallest->choice.Describe() << "; give at least that";
  } else {
    const PlanCandidate* any = Least(
        all, [](const PlanCandidate&) { return true; }, device);
    if (any != nullptr) {
      // Only a limit that was set can block: the host's, the NVMe's or both.
      const bool host_blocks = o.HostLimited(), nvme_blocks = o.NvmeLimited();
      m << "; no setting fits the "
        << (host_blocks && nvme_blocks ? "host-memory and NVMe limits"
            : host_blocks              ? "host-memory limit"
                                       : "NVMe limit")
        << " at any device budget: the smallest device peak, "
        << FormatBytesExactly(any->device_bytes) << " with " << any->choice.Describe()
        << ", needs ";
      if (host_blocks) m << FormatBytes(any->host_bytes_per_node) << " of host memory";
      if (host_blocks && nvme_blocks) m << " and ";
      if (nvme_blocks) m << FormatBytes(any->nvme_bytes_per_node) << " of NVMe";
      m << " per node";
    }
  }
  return ResourceExhaustedError(m.str());
}

PlanCandidate Evaluate(const Config& config, MemoryEstimate estimate, int world_size, int ranks,
                       const CostRates& rates) {
  PlanCandidate c;
  c.choice = PlanChoice::Of(config);
  c.device_bytes = estimate.PeakTotal(Place::kDevice);
  c.host_bytes_per_node =
      (estimate.PeakTotal(Place::kHost) + estimate.PeakTotal(Place::kHostPinned)) * ranks;
  c.nvme_bytes_per_node = estimate.PeakTotal(Place::kNvme) * ranks;
  c.estimate = std::move(estimate);
  c.cost = EstimateStepCost(config, world_size, ranks, rates);
  return c;
}

}  // namespace

double MeasureMatmulFlopRate() {
  constexpr int kRows = 512, kIn = 768, kOut = 768;
  // Scratch for the timing alone, freed on return: not a tracked training allocation.
  std::vector<float> inp(size_t{kRows} * kIn), weight(size_t{kOut} * kIn),
      out(size_t{kRows} * kOut);
  for (size_t i = 0; i < inp.size(); ++i) inp[i] = static_cast<float>(i % 13) * 0.01f;
  for (size_t i = 0; i < weight.size(); ++i) weight[i] = static_cast<float>(i % 7) * 0.01f;
  kernels::cpu::MatmulForward(out.data(), inp.data(), weight.data(), nullptr, kRows, kIn, kOut);
  double best_s = std::numeric_limits<double>::infinity();
  for (int run = 0; run < 3; ++run) {
    const auto start = std::chrono::steady_clock::now();
    kernels::cpu::MatmulForward(out.data(), inp.data(), weight.data(), nullptr, kRows, kIn, kOut);
    best_s = std::min(
        best_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return 2.0 * kRows * kIn * kOut / std::max(best_s, 1e-9);
}

PlanChoice PlanChoice::Of(const Config& config) {
  PlanChoice c;
  c.stage = config.zero.stage;
  c.offload_optimizer = config.zero.offload_optimizer.device;
  c.offload_ratio = config.zero.offload_optimizer.ratio;
  c.offload_param = config.zero.offload_param.device;
  c.policy = config.activation_checkpointing.policy;
  c.every_k = c.policy == CheckpointPolicy::kEveryK ? config.activation_checkpointing.every_k : 2;
  c.cpu_checkpointing = config.activation_checkpointing.cpu_checkpointing;
  c.micro_batch = config.train_micro_batch_size_per_gpu;
  c.accumulation = config.gradient_accumulation_steps;
  c.optimizer_8bit = config.optimizer.type == "AdamW8bit";
  return c;
}

std::string PlanChoice::PolicyName() const {
  std::ostringstream name;
  name << CheckpointPolicyName(policy);
  if (policy == CheckpointPolicy::kEveryK) name << "(" << every_k << ")";
  if (cpu_checkpointing) name << "+cpu";
  return name.str();
}

std::string PlanChoice::Describe() const {
  std::ostringstream out;
  out << "stage " << stage << ", offload optimizer " << OffloadDeviceName(offload_optimizer);
  if (offload_optimizer == Placement::kHost && offload_ratio < 1) {
    out << " (ratio " << offload_ratio << ")";
  }
  out << " + params " << OffloadDeviceName(offload_param) << ", checkpointing "
      << CheckpointPolicyName(policy);
  if (policy == CheckpointPolicy::kEveryK) out << "(" << every_k << ")";
  if (cpu_checkpointing) out << " with inputs on host";
  out << ", micro-batch " << micro_batch << " x " << accumulation;
  if (optimizer_8bit) out << ", 8-bit AdamW";
  return out.str();
}

StepCost EstimateStepCost(const Config& config, int world_size, int ranks_per_node,
                          const CostRates& rates) {
  HOIST_CHECK(rates.flops_per_s > 0 && rates.link_bytes_per_s > 0 &&
              rates.host_link_bytes_per_s > 0 && rates.nvme_bytes_per_s > 0);
  HOIST_CHECK_GE(world_size, 1);
  const ModelConfig& m = config.model;
  const double psi = static_cast<double>(ModelParameterCount(m));
  const double n = world_size;
  const double shard = std::ceil(psi / n);
  const double a = (n - 1) / n;
  const double p = static_cast<double>(DTypeSize(config.precision()));
  const double c = static_cast<double>(DTypeSize(config.communication_data_type));
  const double micro = static_cast<double>(config.train_micro_batch_size_per_gpu);
  const double g = static_cast<double>(config.gradient_accumulation_steps);
  const double tokens = micro * g * m.seq_len;
  const int stage = config.zero.stage;

  StepCost cost;
  cost.model_flops = 3 * ForwardFlopsPerToken(m) * tokens;
  cost.recompute_flops = RecomputeFlopsPerToken(config) * tokens;

  if (stage <= 1) cost.comm_bytes += 2 * a * psi * c;
  if (stage == 1 || stage == 2) cost.comm_bytes += a * psi * p;
  if (stage >= 2) cost.comm_bytes += g * (config.zero.reduce_scatter ? a : 2 * a) * psi * c;
  if (stage == 3) cost.comm_bytes += 2 * a * psi * p * g;

  const Placement optimizer = config.zero.offload_optimizer.device;
  const Placement param = config.zero.offload_param.device;
  // A partial offload moves only its share of the gradients and weights.
  const double offloaded =
      optimizer == Placement::kHost ? config.zero.offload_optimizer.ratio : 1.0;
  if (optimizer != Placement::kDevice) cost.host_link_bytes += 2 * shard * p * offloaded;
  if (optimizer == Placement::kNvme) {
    // Read and written each step: the fp32 master and moments (12 bytes a parameter), or the
    // master with 8-bit codes and their absmaxes (4 + 2 + 8/256).
    const double per_element =
        config.optimizer.type == "AdamW8bit" ? 4.0 + 2.0 + 8.0 / 256.0 : 3.0 * 4.0;
    cost.nvme_bytes += 2 * per_element * shard;
  }
  if (param != Placement::kDevice) cost.host_link_bytes += 2 * shard * p * g;
  if (param == Placement::kNvme) {
    // Up to max_in_cpu elements of the shards stay in host memory; the rest are read each time.
    const double on_drive =
        std::max(0.0, shard - static_cast<double>(config.zero.offload_param.max_in_cpu));
    cost.nvme_bytes += 2 * on_drive * p * g;
  }
  const ActivationCheckpointingConfig& ac = config.activation_checkpointing;
  if (ac.cpu_checkpointing && ac.enabled()) {
    // The model keeps every block's input on the host under cpu_checkpointing.
    cost.host_link_bytes += 2.0 * m.n_layer * micro * m.seq_len * m.n_embd * p * g;
  }

  cost.compute_s = cost.model_flops / rates.flops_per_s;
  cost.recompute_s = cost.recompute_flops / rates.flops_per_s;
  cost.comm_s = cost.comm_bytes / rates.link_bytes_per_s;
  cost.offload_s = cost.host_link_bytes / rates.host_link_bytes_per_s +
                   cost.nvme_bytes * std::max(ranks_per_node, 1) / rates.nvme_bytes_per_s;
  cost.total_s = cost.compute_s + cost.recompute_s + cost.comm_s + cost.offload_s;
  return cost;
}

StatusOr<MemoryPlan> PlanMemory(const Config& base, int world_size, const PlanOptions& options) {
  if (world_size < 1) return InvalidArgumentError("the number of ranks must be >= 1");
  if (options.device_budget_bytes <= 0) {
    return InvalidArgumentError("the device-memory budget must be > 0 bytes, found " +
                                std::to_string(options.device_budget_bytes));
  }
  if (options.host_budget_bytes < 0 ||
      (options.nvme_budget_bytes < 0 && options.nvme_budget_bytes != kNoNvmeLimit)) {
    return InvalidArgumentError(
        "the host-memory and NVMe budgets must be >= 0 bytes (0: no host limit, no NVMe)");
  }
  if (base.train_batch_size % world_size != 0) {
    return InvalidArgumentError("train_batch_size " + std::to_string(base.train_batch_size) +
                                " is not a multiple of the " + std::to_string(world_size) +
                                " ranks; resolve the config for this world size first");
  }
  MemoryPlan plan;
  plan.world_size = world_size;
  plan.options = options;
  PlanOptions& used = plan.options;
  used.ranks_per_node =
      options.ranks_per_node > 0 ? std::min(options.ranks_per_node, world_size) : world_size;
  plan.ranks_per_node = used.ranks_per_node;
  if (used.rates.flops_per_s <= 0) used.rates.flops_per_s = MeasureMatmulFlopRate();
  const int ranks = used.ranks_per_node;

  NvmePaths paths;
  const std::string& optimizer_path = base.zero.offload_optimizer.nvme_path;
  const std::string& param_path = base.zero.offload_param.nvme_path;
  paths.optimizer = !optimizer_path.empty() ? optimizer_path
                    : !param_path.empty()   ? param_path
                                            : options.nvme_path;
  paths.param = !param_path.empty() ? param_path : paths.optimizer;
  bool nvme = false;
  if (options.nvme_budget_bytes == 0) {
    plan.notes.push_back("NVMe offload not considered: no NVMe budget was given");
  } else if (paths.optimizer.empty()) {
    plan.notes.push_back(
        "NVMe offload not considered: the config names no nvme_path "
        "(zero_optimization.offload_optimizer.nvme_path) and no NVMe directory was given");
  } else {
    nvme = true;
  }

  const std::string text = base.raw != nullptr ? base.raw->dump() : std::string("{}");
  // Every point has the base's depth, so one recording of the model's calls serves them all.
  HOIST_ASSIGN_OR_RETURN(const zero::ModelPasses passes, ModelStorePasses(base.model));
  std::vector<PlanCandidate> all;
  Status first_refusal = Status::Ok();
  for (const PlanChoice& choice : Choices(base, world_size, nvme, used.allow_8bit_optimizer)) {
    StatusOr<Config> config =
        ParseConfigQuietly(text, AllOverrides(choice, base, paths), world_size, kSource);
    StatusOr<MemoryEstimate> estimate =
        config.ok() ? EstimateMemory(*config, world_size, passes, used.device)
                    : StatusOr<MemoryEstimate>(config.status());
    if (!estimate.ok()) {
      if (plan.refused++ == 0) first_refusal = estimate.status();
      continue;
    }
    ++plan.evaluated;
    all.push_back(Evaluate(*config, std::move(estimate).value(), world_size, ranks, used.rates));
  }
  if (plan.refused > 0) {
    plan.notes.push_back(std::to_string(plan.refused) +
                         " settings were refused by the config's rules or the engine, the first "
                         "with: " +
                         first_refusal.message());
  }
  if (all.empty()) {
    return first_refusal.WithContext("no setting of the job can be estimated");
  }
  if (StatusOr<MemoryEstimate> estimate = EstimateMemory(base, world_size, passes, used.device);
      estimate.ok()) {
    plan.base = Evaluate(base, std::move(estimate).value(), world_size, ranks, used.rates);
    plan.base_fits = used.Fits(*plan.base);
  }

  for (const PlanCandidate& c : all) {
    if (used.Fits(c)) plan.candidates.push_back(c);
  }
  if (plan.candidates.empty()) return NothingFits(all, used);
  std::stable_sort(plan.candidates.begin(), plan.candidates.end(), Better);

  // The best as the fewest overrides of the base; the full set where the few would not give the
  // same settings (a key of the base that interacts with them).
  const PlanChoice& best = plan.candidates.front().choice;
  plan.overrides = ChangedOverrides(best, base, paths);
  StatusOr<Config> config = ParseConfigQuietly(text, plan.overrides, world_size, kSource);
  if (!config.ok() || !(PlanChoice::Of(*config) == best)) {
    plan.overrides = AllOverrides(best, base, paths);
    config = ParseConfigQuietly(text, plan.overrides, world_size, kSource);
  }
  HOIST_RETURN_IF_ERROR(config.status());
  plan.best = std::move(config).value();
  return plan;
}

}  // namespace hoist::runtime
