#include "runtime/memory/memory_estimate.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>
#include <vector>

#include "core/check.h"
#include "kernels/device_facts.h"
#include "runtime/config/engine_options.h"
#include "runtime/data/data_loader.h"
#include "runtime/memory/memory_report.h"
#include "runtime/model/lora.h"
#include "zero/param_store.h"

namespace hoist::runtime {
namespace {

using zero::StoreCall;
using Op = StoreCall::Op;

// A ParamStore that serves whole fp32 units and writes down every call, to learn the order in
// which the model asks for them.
class RecordingStore final : public zero::ParamStore {
 public:
  // Buffers for whole fp32 units: an allocation that fails is the caller's error, not a crash.
  static StatusOr<std::unique_ptr<RecordingStore>> Create(const std::vector<zero::UnitSpec>& units,
                                                          Device* device) {
    std::unique_ptr<RecordingStore> store(new RecordingStore());
    store->offsets_.push_back(0);
    for (const zero::UnitSpec& unit : units) {
      store->offsets_.push_back(store->offsets_.back() + unit.size);
    }
    const int64_t bytes = store->offsets_.back() * int64_t{sizeof(float)};
    HOIST_ASSIGN_OR_RETURN(store->params_, device->Allocate(bytes, Category::kParam));
    HOIST_ASSIGN_OR_RETURN(store->grads_, device->Allocate(bytes, Category::kGrad));
    return store;
  }
  StatusOr<const void*> AcquireParams(int unit) override {
    calls_->push_back({Op::kAcquireParams, unit});
    return static_cast<const void*>(params_.as<float>() + offsets_[static_cast<size_t>(unit)]);
  }
  void ReleaseParams(int unit) override { calls_->push_back({Op::kReleaseParams, unit}); }
  void Prefetch(int unit) override { calls_->push_back({Op::kPrefetch, unit}); }
  StatusOr<float*> AcquireGrads(int unit) override {
    calls_->push_back({Op::kAcquireGrads, unit});
    return grads_.as<float>() + offsets_[static_cast<size_t>(unit)];
  }
  void ReleaseGrads(int unit) override { calls_->push_back({Op::kReleaseGrads, unit}); }
  Status status() const override { return Status::Ok(); }

  void RecordInto(std::vector<StoreCall>* calls) { calls_ = calls; }

 private:
  RecordingStore() = default;

  std::vector<int64_t> offsets_;  // unit u is [u, u + 1) of the buffers
  Buffer params_, grads_;
  std::vector<StoreCall>* calls_ = nullptr;
};

void AddTable(MemorySnapshot::Table* into, const MemorySnapshot::Table& from) {
  for (int p = 0; p < kNumPlaces; ++p) {
    for (int c = 0; c < kNumCategories; ++c) (*into)[p][c] += from[p][c];
  }
}

}  // namespace

StatusOr<zero::ModelPasses> ModelStorePasses(const ModelConfig& config) {
  // The same family and depth, as small as it goes: the calls depend on nothing else.
  ModelConfig tiny;
  tiny.family = config.family;
  tiny.n_layer = config.n_layer;
  tiny.n_head = 1;
  tiny.n_kv_head = 1;
  tiny.n_embd = 4;
  tiny.intermediate_size = 4;
  tiny.vocab_size = 2;
  tiny.seq_len = 1;
  tiny.tie_word_embeddings = config.tie_word_embeddings;
  tiny.lora = config.lora;  // the adapters' units follow the base's
  tiny.lora.init_from.clear();
  MemoryTracker tracker;  // the caller's tracker never sees this
  CpuDevice device(Place::kDevice, &tracker);
  std::vector<zero::UnitSpec> units = ModelUnits(tiny);
  if (tiny.lora.enabled()) {
    HOIST_ASSIGN_OR_RETURN(const LoraLayout layout, LoraLayout::For(tiny));
    for (const zero::UnitSpec& unit : layout.Units()) units.push_back(unit);
  }
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<RecordingStore> store,
                         RecordingStore::Create(units, &device));
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                         CreateModel(tiny, 1, 1, &device, store.get()));
  zero::ModelPasses passes;
  const int32_t token = 1;
  store->RecordInto(&passes.forward);
  HOIST_RETURN_IF_ERROR(model->Forward(&token, &token, 1, 1, 1.0f).status());
  store->RecordInto(&passes.backward);
  HOIST_RETURN_IF_ERROR(model->Backward());
  store->RecordInto(nullptr);
  return passes;
}

StatusOr<MemoryEstimate> EstimateMemory(const Config& config, int world_size, DeviceKind device) {
  HOIST_ASSIGN_OR_RETURN(const zero::ModelPasses passes, ModelStorePasses(config.model));
  return EstimateMemory(config, world_size, passes, device);
}

StatusOr<MemoryEstimate> EstimateMemory(const Config& config, int world_size,
                                        const zero::ModelPasses& passes, DeviceKind device) {
  const kernels::DeviceFacts& facts = kernels::DeviceFactsOf(device);
  // A device with memory of its own: the engine stages what it moves between the two.
  const bool accelerator = !facts.computes_in_host_memory;
  if (world_size < 1) return InvalidArgumentError("the number of ranks must be >= 1");
  const std::vector<zero::UnitSpec> units = ModelUnits(config.model);
  const zero::ZeroOptions options = ZeroOptionsFrom(config);
  // With LoRA, the frozen base's engine and the adapters' side by side (as the trainer builds
  // them); the model's passes number the adapters after the base.
  std::vector<zero::EngineUnits> engines;
  if (config.model.lora.enabled()) {
    engines.push_back({units, FrozenBaseOptions(options), config.model.lora.nf4_base,
                       config.model.lora.nf4_double_quant});
    engines.push_back({TrainedUnits(config.model), AdapterOptions(options)});
  } else {
    engines.push_back({units, options});
  }
  const int B = static_cast<int>(config.train_micro_batch_size_per_gpu);
  const int T = config.model.seq_len;
  const int micro_batches = static_cast<int>(config.gradient_accumulation_steps);

  // The model's and the trainer's own memory, held throughout.
  MemorySnapshot::Table held{};
  const Model::ActivationBytes activations = ModelActivationFootprint(
      config.model, B, T, config.precision(), config.activation_checkpointing, device);
  const int64_t batch_bytes = int64_t{2} * B * T * int64_t{sizeof(int32_t)};
  int64_t data_bytes = DataLoader::TrackedHostBytes(config.data.train, Split::kTrain);
  if (config.train.eval_interval > 0 && !config.data.val.empty()) {
    data_bytes += DataLoader::TrackedHostBytes(config.data.val, Split::kVal);
  }
  // The trainer's micro-batch is host memory: its device's where the device computes in it.
  const Place host = facts.computes_in_host_memory ? Place::kDevice : Place::kHost;
  held[int(Place::kDevice)][int(Category::kActivation)] = activations.device;
  held[int(host)][int(Category::kActivation)] += batch_bytes;
  held[int(Place::kHostPinned)][int(Category::kActivation)] = activations.host_pinned;
  held[int(Place::kHost)][int(Category::kWorkspace)] = data_bytes;
  held[int(Place::kDevice)][int(Category::kWorkspace)] += facts.backend_workspace_bytes;

  HOIST_ASSIGN_OR_RETURN(zero::EngineMemoryEstimate engine,
                         zero::EstimateEngineMemory(engines, world_size, /*rank=*/0, passes,
                                                    micro_batches, accelerator));
  MemoryEstimate e;
  e.world_size = world_size;
  e.device = device;
  e.parameters = ModelParameterCount(config.model);
  e.activations = activations;
  e.batch_bytes = batch_bytes;
  e.data_bytes = data_bytes;
  e.peak = engine.PeakTable();
  AddTable(&e.peak, held);
  for (int p = 0; p < kNumPlaces; ++p) {
    int64_t held_total = 0;
    for (int c = 0; c < kNumCategories; ++c) held_total += held[p][c];
    // Held bytes are there in every phase, so the place peaks in the engine's largest phase.
    int largest = int(Phase::kForward);
    for (Phase phase : zero::kEstimatePhases) {
      if (engine.extra_total[int(phase)][p] > engine.extra_total[largest][p]) largest = int(phase);
    }
    e.peak_total[p] = engine.PeakTotal(static_cast<Place>(p)) + held_total;
    e.peak_during[p] =
        engine.extra_total[largest][p] > 0 ? PhaseName(static_cast<Phase>(largest)) : "throughout";
  }
  e.trainable_parameters = e.parameters;
  e.zero_paper_model_states = zero::ZeroPaperModelStateBytes(
      e.parameters, config.zero.stage, world_size, config.precision() != DType::kFloat32);
  if (config.model.lora.enabled()) {
    // The paper's formula for the adapters, beside the frozen base's compute-type weights (whole,
    // or a 1/N share in stage 3).
    e.trainable_parameters = 0;
    for (const zero::UnitSpec& unit : TrainedUnits(config.model)) {
      e.trainable_parameters += unit.size;
    }
    const int64_t base_bytes = e.parameters * static_cast<int64_t>(DTypeSize(config.precision()));
    e.zero_paper_model_states =
        zero::ZeroPaperModelStateBytes(e.trainable_parameters, config.zero.stage, world_size,
                                       config.precision() != DType::kFloat32) +
        (config.zero.stage == 3 ? (base_bytes + world_size - 1) / world_size : base_bytes);
  }
  e.engine = std::move(engine);
  return e;
}

nlohmann::json MemoryEstimateJson(const MemoryEstimate& e) {
  MemorySnapshot snapshot;
  snapshot.peak_total = e.peak_total;
  nlohmann::json phases = nlohmann::json::object();
  for (int p = 0; p < kNumPlaces; ++p) {
    if (e.peak_total[p] > 0) phases[PlaceName(Place(p))] = e.peak_during[p];
  }
  const zero::ModelStateBytes& states = e.engine.model_states;
  return {{"world_size", e.world_size},
          {"device", kernels::DeviceFactsOf(e.device).name},
          {"parameters", e.parameters},
          {"trainable_parameters", e.trainable_parameters},
          {"peak", MemoryTableJson(e.peak)},
          {"peak_total", PeakTotalJson(snapshot)},
          {"peak_during", std::move(phases)},
          {"zero_paper_model_states", e.zero_paper_model_states},
          {"parts",
           {{"model_states",
             {{"params", states.params}, {"grads", states.grads}, {"optimizer", states.optimizer}}},
            {"activations",
             {{"device", e.activations.device}, {"host_pinned", e.activations.host_pinned}}},
            {"batch", e.batch_bytes},
            {"data", e.data_bytes}}}};
}

std::string FormatMemoryEstimate(const MemoryEstimate& e, const Config& config,
                                 int ranks_per_node) {
  std::ostringstream out;
  const ActivationCheckpointingConfig& ac = config.activation_checkpointing;
  out << "model: " << ModelDisplayName(config.model.family) << ", " << config.model.n_layer
      << " layers, " << config.model.n_embd << " wide, " << e.parameters << " parameters";
  if (config.model.lora.enabled()) {
    const LoraConfig& lora = config.model.lora;
    out << " (frozen) + " << e.trainable_parameters << " in LoRA adapters (r " << lora.r
        << ", alpha " << lora.alpha << ")";
  }
  out << "; micro-batch " << config.train_micro_batch_size_per_gpu << " x " << config.model.seq_len
      << " tokens, " << DTypeName(config.precision()) << ", ZeRO stage " << config.zero.stage
      << " on " << e.world_size << (e.world_size == 1 ? " rank" : " ranks") << "\n";
  out << "activation checkpointing: " << CheckpointPolicyName(ac.policy);
  if (ac.policy == CheckpointPolicy::kEveryK) out << " (one block in " << ac.every_k << ")";
  if (ac.cpu_checkpointing) out << ", block inputs in pinned host memory";
  out << "; attention " << (config.model.attention == AttentionKind::kTiled ? "tiled" : "direct")
      << "\n";
  out << "offload: optimizer " << OffloadDeviceName(config.zero.offload_optimizer.device);
  if (config.zero.offload_optimizer.device == Placement::kHost &&
      config.zero.offload_optimizer.ratio < 1) {
    out << " (ratio " << config.zero.offload_optimizer.ratio
        << ": the leading units' states stay on the device)";
  }
  out << ", parameters " << OffloadDeviceName(config.zero.offload_param.device) << "\n\n";

  // The peak table: one row per place used, one column per category.
  out << "predicted peak per rank:\n";
  char line[256];
  std::snprintf(line, sizeof(line), "  %-12s", "place");
  out << line;
  for (int c = 0; c < kNumCategories; ++c) {
    std::snprintf(line, sizeof(line), " %11s", CategoryName(Category(c)));
    out << line;
  }
  out << "  "
      << "peak (sum at once)\n";
  for (int p = 0; p < kNumPlaces; ++p) {
    if (e.peak_total[p] == 0) continue;
    std::snprintf(line, sizeof(line), "  %-12s", PlaceName(Place(p)));
    out << line;
    for (int c = 0; c < kNumCategories; ++c) {
      std::snprintf(line, sizeof(line), " %11s",
                    e.peak[p][c] == 0 ? "-" : FormatBytes(e.peak[p][c]).c_str());
      out << line;
    }
    out << "  " << FormatBytes(e.peak_total[p])
        << (e.peak_during[p] == "throughout" ? " " : " during ") << e.peak_during[p] << "\n";
  }
  const zero::ModelStateBytes& s = e.engine.model_states;
  out << "\nmodel states: " << FormatBytes(s.params + s.grads + s.optimizer) << " (params "
      << FormatBytes(s.params) << ", grads " << FormatBytes(s.grads) << ", optimizer "
      << FormatBytes(s.optimizer) << "); the ZeRO paper's formula gives "
      << FormatBytes(e.zero_paper_model_states);
  // The paper counts 32-bit Adam states (12 bytes a parameter in mixed precision).
  if (config.optimizer.type == "AdamW8bit") out << " for 32-bit Adam states";
  out << "\n";
  out << "activations: " << FormatBytes(e.activations.device) << " on the device";
  if (e.activations.host_pinned > 0) {
    out << ", " << FormatBytes(e.activations.host_pinned) << " in pinned host memory";
  }
  out << "\n";
  if (ranks_per_node > 0) {
    const int64_t host = e.peak_total[int(Place::kHost)] + e.peak_total[int(Place::kHostPinned)];
    out << "per node (" << ranks_per_node << " ranks): host " << FormatBytes(host * ranks_per_node)
        << " (pinned " << FormatBytes(e.peak_total[int(Place::kHostPinned)] * ranks_per_node)
        << "), nvme " << FormatBytes(e.peak_total[int(Place::kNvme)] * ranks_per_node) << "\n";
  }
  out << "(" << kernels::DeviceFactsOf(e.device).untracked_memory << ")\n";
  return out.str();
}

StatusOr<int64_t> ParseBytes(const std::string& text, const std::string& what) {
  auto refuse = [&] {
    return InvalidArgumentError(what + ": cannot read \"" + text +
                                "\" as a size; write a number of bytes with an optional unit, "
                                "e.g. 16GiB, 512MiB, 80GB or 1073741824");
  };
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    ++i;
  }
  if (i == 0) return refuse();
  double number = 0;
  try {
    size_t used = 0;
    number = std::stod(text.substr(0, i), &used);
    if (used != i) return refuse();
  } catch (...) {
    return refuse();
  }
  std::string unit = text.substr(i);
  unit.erase(0, unit.find_first_not_of(' '));
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const struct {
    const char* name;
    double scale;
  } kUnits[] = {{"", 1},
                {"b", 1},
                {"k", 1024.0},
                {"kib", 1024.0},
                {"kb", 1e3},
                {"m", 1048576.0},
                {"mib", 1048576.0},
                {"mb", 1e6},
                {"g", 1073741824.0},
                {"gib", 1073741824.0},
                {"gb", 1e9},
                {"t", 1099511627776.0},
                {"tib", 1099511627776.0},
                {"tb", 1e12}};
  for (const auto& u : kUnits) {
    if (unit != u.name) continue;
    const double bytes = number * u.scale;
    if (!(bytes >= 1) || bytes > 9.0e18) {
      return InvalidArgumentError(what + ": \"" + text +
                                  "\" must be at least 1 byte and below 8 EiB");
    }
    return static_cast<int64_t>(std::llround(bytes));
  }
  return refuse();
}

}  // namespace hoist::runtime
