// The trainer's model and engines (with LoRA, the frozen base's store beside the adapters'
// engine), and their starting weights: drawn, or taken from another tool's checkpoint
// (model.init_from) and a PEFT adapter (lora.init_from).
#include <algorithm>
#include <vector>

#include "comm/agree.h"
#include "core/logging.h"
#include "runtime/checkpoint/base_identity.h"
#include "runtime/config/engine_options.h"
#include "runtime/interchange/peft_adapter.h"
#include "runtime/memory/host_memory.h"
#include "runtime/model/gpt2_weights.h"
#include "runtime/model/lora.h"
#include "runtime/model/model.h"
#include "runtime/train/trainer.h"

namespace hoist::runtime {

Status Trainer::CreateModel() {
  const int B = static_cast<int>(config_.train_micro_batch_size_per_gpu);
  const int T = config_.model.seq_len;
  engine_comm_ = comm_;
  HOIST_RETURN_IF_ERROR(OpenAccelerator());
  const std::vector<zero::UnitSpec> units = TrainedUnits(config_.model);
  zero::ZeroOptions zero_options = ZeroOptionsFrom(config_);
  HOIST_RETURN_IF_ERROR(PrepareOffload(units, &zero_options));
  const bool lora = config_.model.lora.enabled();
  // The whole job against the node's memory, before any of it is allocated: refused with the
  // numbers rather than killed by the OOM killer. (A device with memory of its own keeps the
  // model states there, which its allocator guards.)
  if (accelerator_.in_host_memory) {
    HOIST_RETURN_IF_ERROR(PreflightJobHostMemory(
        config_, *comm_, options_.host_memory ? &*options_.host_memory : nullptr));
  }
  {
    // Opening the scratch files and allocating the buffers can fail on one rank alone (a disk
    // filled since the check, a device out of memory): every rank stops with that rank's reason.
    // With LoRA the base model's weights are frozen in an engine of their own (partitioned as
    // the stage says, offloaded with offload_param) and the adapters train in engine_.
    const zero::ZeroOptions trained_options = lora ? AdapterOptions(zero_options) : zero_options;
    if (lora && config_.model.lora.nf4_base) {
      Status refused;
      if (zero_options.stage == 3 || config_.zero.offload_param.device != Placement::kDevice) {
        refused = InvalidArgumentError(
            "lora.base_quantization \"nf4\" keeps the 4-bit base whole on every rank: use "
            "zero_optimization.stage 0, 1 or 2 without offload_param (the adapters' states are "
            "partitioned as the stage says)");
      }
      HOIST_RETURN_IF_ERROR(comm::AgreeOnStatus(*comm_, refused));
      auto base = zero::QuantizedStore::Create(ModelUnits(config_.model), config_.precision(),
                                               backend_, config_.model.lora.nf4_double_quant);
      HOIST_RETURN_IF_ERROR(comm::AgreeOnStatus(*comm_, base.status()));
      quantized_base_ = std::move(base).value();
    } else if (lora) {
      auto base = zero::ZeroEngine::Create(ModelUnits(config_.model),
                                           FrozenBaseOptions(zero_options), engine_comm_, backend_);
      HOIST_RETURN_IF_ERROR(comm::AgreeOnStatus(*comm_, base.status()));
      base_engine_ = std::move(base).value();
    }
    auto engine = zero::ZeroEngine::Create(units, trained_options, engine_comm_, backend_);
    HOIST_RETURN_IF_ERROR(comm::AgreeOnStatus(*comm_, engine.status()));
    engine_ = std::move(engine).value();
    // The base's own host waits (an offloaded shard's upload) wait for the compute stream, which
    // may be waiting on the adapters' reductions: those are settled first, within the timeout.
    if (base_engine_ != nullptr) base_engine_->SettleFirst(engine_.get());
  }
  zero::ParamStore* store = engine_.get();
  if (lora) {
    zero::ParamStore* base = quantized_base_ != nullptr
                                 ? static_cast<zero::ParamStore*>(quantized_base_.get())
                                 : base_engine_.get();
    joined_store_ = std::make_unique<zero::JoinedParamStore>(
        base, static_cast<int>(ModelUnits(config_.model).size()), engine_.get());
    store = joined_store_.get();
  }
  {
    auto model = runtime::CreateModel(config_.model, B, T, backend_, store, config_.precision(),
                                      config_.activation_checkpointing);
    HOIST_RETURN_IF_ERROR(comm::AgreeOnStatus(*comm_, model.status()));
    model_ = std::move(model).value();
  }
  model_->set_phase_hook([this](Phase phase, int block) { EnterPhase(phase, block); });
  return Status::Ok();
}

Status Trainer::InitializeFrom(const std::string& path) {
  StatusOr<std::unique_ptr<WeightSource>> opened = OpenWeightSource(path);
  Status read = opened.status();
  if (read.ok()) {
    // The config was read from the same files (ReadModel): they must still describe this model.
    // FillRange writes the source's units into the engine's: their layouts must be the same,
    // every unit's size included (a Llama's MLP width or key/value heads, not only its layers).
    const ModelConfig& from = (*opened)->model();
    const ModelConfig& m = config_.model;
    const std::vector<zero::UnitSpec> source_units = ModelUnits(from), units = ModelUnits(m);
    const bool same_units = std::equal(
        source_units.begin(), source_units.end(), units.begin(), units.end(),
        [](const zero::UnitSpec& a, const zero::UnitSpec& b) { return a.size == b.size; });
    if (from.family != m.family || !same_units || from.positions() != m.positions()) {
      read = FailedPreconditionError("model.init_from " + path +
                                     " no longer describes the model the job was configured "
                                     "with; it changed while the job started");
    }
  }
  if (read.ok() && config_.model.lora.enabled()) {
    // What the checkpoints record, and a resume checks, of the base the adapters train on.
    StatusOr<nlohmann::json> identity = BaseIdentity(**opened);
    if (identity.ok()) {
      base_identity_ = std::move(identity).value();
    } else {
      read = identity.status();
    }
  }
  // A unit that cannot be read leaves zeros and the error, and the ranks agree on it before
  // anything trains.
  // Each rank reads what it keeps: its shard of every unit at stage 3.
  const zero::ZeroEngine::RangeFill fill = [&](int unit, int64_t begin, int64_t count, float* out) {
    if (!read.ok()) return;
    read = (*opened)->FillRange(unit, begin, count, out);
  };
  // A store that refuses what it was given (a non-finite weight for the 4-bit base) fails on
  // this rank: every rank stops with the first rank's reason rather than waiting for it.
  const Status filled = FillBase(fill);
  if (read.ok()) read = filled;
  HOIST_RETURN_IF_ERROR(comm::AgreeOnStatus(*comm_, read));
  hf_config_ = (*opened)->hf_config();
  if (comm_->rank() == 0) HOIST_LOG(INFO) << "initialized the weights from " << path;
  return Status::Ok();
}

Status Trainer::InitializeBase() {
  if (!config_.model.init_from.empty()) return InitializeFrom(config_.model.init_from);
  const uint64_t seed = config_.train.seed;
  // Each store asks for the ranges it keeps, drawn without the rest of their units.
  return FillBase([&](int unit, int64_t begin, int64_t count, float* out) {
    model_->InitializeRange(unit, seed, begin, count, out);
  });
}

Status Trainer::FillBase(const zero::ZeroEngine::RangeFill& fill) {
  if (quantized_base_ == nullptr) return base_engine().Initialize(fill);
  return quantized_base_->Initialize(fill);
}

Status Trainer::InitializeAdapters() {
  HOIST_ASSIGN_OR_RETURN(const LoraLayout layout, LoraLayout::For(config_.model));
  const LoraConfig& lora = config_.model.lora;
  if (lora.init_from.empty()) {
    const uint64_t seed = config_.train.seed;
    return engine_->Initialize(
        [&](int unit, float* out) { InitializeLoraUnit(layout, unit, seed, out); });
  }
  // Small: every rank reads the whole adapter and keeps its part.
  std::vector<float> adapters;
  Status read = ReadPeftAdapters(lora.init_from, config_.model.family, layout, &adapters);
  HOIST_RETURN_IF_ERROR(comm::AgreeOnStatus(*comm_, read));
  HOIST_RETURN_IF_ERROR(engine_->Initialize([&](int unit, float* out) {
    std::copy_n(adapters.begin() + unit * layout.unit_size, layout.unit_size, out);
  }));
  if (comm_->rank() == 0) HOIST_LOG(INFO) << "initialized the adapters from " << lora.init_from;
  return Status::Ok();
}

}  // namespace hoist::runtime
