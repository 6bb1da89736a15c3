#include "runtime/model/model.h"

#include <cstdio>
#include <string>

#include "core/check.h"
#include "kernels/cpu_backend.h"
#include "runtime/model/model_family.h"

namespace hoist::runtime {

Status StoredMatmulForward(kernels::Backend& backend, void* out, const void* inp,
                           const zero::StoredWeight& weight, const void* bias, int N, int C, int OC,
                           DType type, const Stream& stream) {
  if (weight.dense != nullptr) {
    return backend.MatmulForward(out, inp, weight.dense, bias, N, C, OC, type, nullptr, stream);
  }
  return backend.MatmulForwardNf4(out, inp, weight.nf4, bias, N, C, OC, type, weight.workspace,
                                  weight.workspace_bytes, stream);
}

Status StoredMatmulBackward(kernels::Backend& backend, void* dinp, float* dweight, float* dbias,
                            const void* dout, const void* inp, const zero::StoredWeight& weight,
                            int N, int C, int OC, DType type, const Stream& stream) {
  if (weight.dense != nullptr) {
    return backend.MatmulBackward(dinp, dweight, dbias, dout, inp, weight.dense, N, C, OC, type,
                                  stream);
  }
  if (dweight != nullptr || dbias != nullptr) {
    return FailedPreconditionError(
        "a gradient was asked of a 4-bit weight or its bias, which are frozen");
  }
  if (dinp == nullptr) return Status::Ok();
  return backend.MatmulBackwardNf4(dinp, dout, weight.nf4, N, C, OC, type, weight.workspace,
                                   weight.workspace_bytes, stream);
}

Status CheckModelArguments(const ModelConfig& config, int max_B, int max_T,
                           const zero::ParamStore* store, DType activation_type,
                           const ActivationCheckpointingConfig& checkpointing) {
  if (max_B <= 0 || max_T <= 0 || max_T > config.seq_len) {
    return InvalidArgumentError("micro-batch (" + std::to_string(max_B) + ", " +
                                std::to_string(max_T) + ") does not fit model.seq_len " +
                                std::to_string(config.seq_len));
  }
  if (checkpointing.every_k < 1) {
    return InvalidArgumentError("activation_checkpointing.every_k must be >= 1, found " +
                                std::to_string(checkpointing.every_k));
  }
  if (store != nullptr && store->param_type() != activation_type) {
    return InvalidArgumentError(std::string("the model computes in ") + DTypeName(activation_type) +
                                " but its parameter store serves " +
                                DTypeName(store->param_type()));
  }
  return Status::Ok();
}

Status Model::CreateLora(const ModelConfig& config, int64_t max_N, kernels::Backend* backend,
                         DType type) {
  if (!config.lora.enabled()) return Status::Ok();
  HOIST_ASSIGN_OR_RETURN(LoraLayout layout, LoraLayout::For(config));
  HOIST_ASSIGN_OR_RETURN(lora_, LoraPass::Create(layout, max_N, backend, type));
  return Status::Ok();
}

std::vector<int64_t> Model::StoreUnitOffsets(const ModelConfig& config, std::vector<int64_t> base) {
  if (!config.lora.enabled()) return base;
  StatusOr<LoraLayout> layout = LoraLayout::For(config);
  HOIST_CHECK(layout.ok()) << layout.status().ToString();
  for (int l = 0; l < layout->n_layer; ++l) base.push_back(base.back() + layout->unit_size);
  return base;
}

int64_t Model::LoraScratchBytes(const ModelConfig& config, int64_t max_N, DType type) {
  if (!config.lora.enabled()) return 0;
  StatusOr<LoraLayout> layout = LoraLayout::For(config);
  HOIST_CHECK(layout.ok()) << layout.status().ToString();
  return LoraPass::ScratchBytes(*layout, max_N, type);
}

std::vector<zero::UnitSpec> ModelUnits(const ModelConfig& config) {
  return FamilyOf(config.family).units(config);
}

int64_t ModelParameterCount(const ModelConfig& config) {
  int64_t total = 0;
  for (const zero::UnitSpec& unit : ModelUnits(config)) total += unit.size;
  return total;
}

Status CheckModelSize(const ModelConfig& config) {
  // In long double, which holds every product of these int dimensions without overflow.
  const long double total = FamilyOf(config.family).parameter_bound(config);
  if (total > static_cast<long double>(kMaxModelParameters)) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.3Lg", total);
    return InvalidArgumentError(std::string("the model's dimensions make ") + text +
                                " parameters, more than hoist's 2^50; check n_layer, n_embd, "
                                "vocab_size, positions and intermediate_size");
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<Model>> CreateModel(const ModelConfig& config, int max_B, int max_T,
                                             kernels::Backend* backend, zero::ParamStore* store,
                                             DType activation_type,
                                             const ActivationCheckpointingConfig& checkpointing) {
  return FamilyOf(config.family)
      .create(config, max_B, max_T, backend, store, activation_type, checkpointing);
}

StatusOr<std::unique_ptr<Model>> CreateModel(const ModelConfig& config, int max_B, int max_T,
                                             Device* device, zero::ParamStore* store,
                                             DType activation_type,
                                             const ActivationCheckpointingConfig& checkpointing) {
  HOIST_CHECK(device != nullptr);
  auto backend = std::make_unique<kernels::CpuBackend>(device);
  HOIST_ASSIGN_OR_RETURN(
      std::unique_ptr<Model> model,
      CreateModel(config, max_B, max_T, backend.get(), store, activation_type, checkpointing));
  model->OwnBackend(std::move(backend));
  return model;
}

Model::ActivationBytes ModelActivationFootprint(const ModelConfig& config, int max_B, int max_T,
                                                DType activation_type,
                                                const ActivationCheckpointingConfig& checkpointing,
                                                DeviceKind device) {
  return FamilyOf(config.family)
      .activation_footprint(config, max_B, max_T, activation_type, checkpointing, device);
}

}  // namespace hoist::runtime
