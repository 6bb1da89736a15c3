// The trainer's starting weights taken from another tool's checkpoint (model.init_from).
#include <algorithm>
#include <vector>

#include "comm/agree.h"
#include "core/logging.h"
#include "runtime/gpt2_weights.h"
#include "runtime/lora.h"
#include "runtime/model.h"
#include "runtime/trainer.h"

namespace hoist::runtime {

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
  if (quantized_base_ != nullptr) {
    return quantized_base_->Initialize(
        [&](int unit, float* out) { model_->InitializeUnit(unit, seed, out); });
  }
  return base_engine().Initialize(
      [&](int unit, float* out) { model_->InitializeUnit(unit, seed, out); });
}

Status Trainer::FillBase(const zero::ZeroEngine::RangeFill& fill) {
  if (quantized_base_ == nullptr) return base_engine().Initialize(fill);
  // Whole units: the 4-bit base is whole on every rank.
  const std::vector<zero::UnitSpec> units = ModelUnits(config_.model);
  return quantized_base_->Initialize(
      [&](int unit, float* out) { fill(unit, 0, units[static_cast<size_t>(unit)].size, out); });
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
