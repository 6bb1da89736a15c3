// LlamaModel's construction, memory and weights (runtime/llama.h); its passes are in
// llama_pass.cc.
#include "runtime/llama.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/check.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda/workspace.h"
#include "kernels/rope.h"

namespace hoist::runtime {

LlamaModel::LlamaModel(const ModelConfig& config, int max_B, int max_T, DType activation_type,
                       const ActivationCheckpointingConfig& checkpointing)
    : config_(config),
      layout_(LlamaLayout::For(config)),
      NH_(config.n_head),
      NKV_(config.kv_heads()),
      hd_(config.head_dim()),
      C_(config.n_embd),
      I_(config.intermediate_size),
      QKV_((config.n_head + 2 * config.kv_heads()) * config.head_dim()),
      max_B_(max_B),
      max_T_(max_T),
      activation_type_(activation_type),
      checkpointing_(checkpointing) {
  for (int s = 0; s < kNumSaved; ++s) {
    std::vector<int>& index = kept_index_[static_cast<size_t>(s)];
    int& kept = kept_layers_[static_cast<size_t>(s)];
    for (int l = 0; l < config_.n_layer; ++l) index.push_back(Kept(s, l) ? kept++ : -1);
  }
  for (int l = 0; l < config_.n_layer; ++l) {
    HOIST_CHECK_EQ(Kept(kSavedAtt, l), Kept(kSavedAtty, l)) << "layer " << l;
  }
}

LlamaModel::~LlamaModel() = default;

namespace {

// The dimensions a Llama needs to fit together, named by their config.json keys.
Status CheckLlamaConfig(const ModelConfig& m) {
  auto invalid = [](const std::string& what) {
    return InvalidArgumentError("Llama model: " + what);
  };
  if (m.family != ModelFamily::kLlama) {
    return invalid(std::string("model.model_type is \"") + ModelFamilyName(m.family) +
                   "\", not \"llama\"");
  }
  if (m.n_layer < 1 || m.n_head < 1 || m.n_embd < 1 || m.vocab_size < 1) {
    return invalid(
        "num_hidden_layers, num_attention_heads, hidden_size and vocab_size must be "
        ">= 1");
  }
  if (m.n_embd % m.n_head != 0 || m.head_dim() % 2 != 0) {
    return invalid("hidden_size " + std::to_string(m.n_embd) + " must be num_attention_heads " +
                   std::to_string(m.n_head) + " times an even head size");
  }
  if (m.kv_heads() < 1 || m.n_head % m.kv_heads() != 0) {
    return invalid("num_attention_heads " + std::to_string(m.n_head) +
                   " must be a multiple of num_key_value_heads " + std::to_string(m.kv_heads()));
  }
  if (m.intermediate_size < 1) {
    return invalid("intermediate_size must be >= 1, found " + std::to_string(m.intermediate_size));
  }
  if (!(m.rms_norm_eps > 0.0f)) return invalid("rms_norm_eps must be > 0");
  return Status::Ok();
}

kernels::RopeScaling ScalingOf(const RopeScalingConfig& r) {
  kernels::RopeScaling s;
  s.llama3 = r.llama3;
  s.factor = r.factor;
  s.low_freq_factor = r.low_freq_factor;
  s.high_freq_factor = r.high_freq_factor;
  s.original_max_position_embeddings = r.original_max_position_embeddings;
  return s;
}

}  // namespace

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Create(
    const ModelConfig& config, int max_B, int max_T, Device* device, zero::ParamStore* store,
    DType activation_type, const ActivationCheckpointingConfig& checkpointing) {
  HOIST_CHECK(device != nullptr);
  auto backend = std::make_unique<kernels::CpuBackend>(device);
  kernels::Backend* raw = backend.get();
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model,
                         Create(config, max_B, max_T, raw, store, activation_type, checkpointing));
  model->own_backend_ = std::move(backend);
  return model;
}

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Create(
    const ModelConfig& config, int max_B, int max_T, kernels::Backend* backend,
    zero::ParamStore* store, DType activation_type,
    const ActivationCheckpointingConfig& checkpointing) {
  HOIST_CHECK(backend != nullptr);
  HOIST_RETURN_IF_ERROR(CheckLlamaConfig(config));
  HOIST_RETURN_IF_ERROR(
      CheckModelArguments(config, max_B, max_T, store, activation_type, checkpointing));
  std::unique_ptr<LlamaModel> model(
      new LlamaModel(config, max_B, max_T, activation_type, checkpointing));
  model->store_ = store;
  model->backend_ = backend;
  HOIST_RETURN_IF_ERROR(model->Allocate(&backend->device()));
  HOIST_RETURN_IF_ERROR(
      model->CreateLora(config, int64_t{max_B} * max_T, backend, activation_type));
  return model;
}

Model::ActivationBytes LlamaModel::ActivationFootprint(
    const ModelConfig& config, int max_B, int max_T, DType activation_type,
    const ActivationCheckpointingConfig& checkpointing, DeviceKind device) {
  LlamaModel model(config, max_B, max_T, activation_type, checkpointing);
  model.footprint_device_ = device;
  ActivationBytes bytes;
  const Status counted = model.AllocateActivations(nullptr, &bytes);
  HOIST_CHECK(counted.ok()) << counted.ToString();
  bytes.device += LoraScratchBytes(config, int64_t{max_B} * max_T, activation_type);
  return bytes;
}

Status LlamaModel::Allocate(Device* device) {
  if (store_ == nullptr) {
    HOIST_ASSIGN_OR_RETURN(own_store_,
                           FlatParamStore::Create(StoreUnitOffsets(config_, layout_.unit_offsets),
                                                  backend_, activation_type_));
    store_ = own_store_.get();
  }
  ActivationBytes bytes;
  HOIST_RETURN_IF_ERROR(AllocateActivations(device, &bytes));
  // The rotary table and the zero position table, once.
  HOIST_ASSIGN_OR_RETURN(
      std::vector<float> inv_freq,
      kernels::RopeInvFreq(hd_, config_.rope_theta, ScalingOf(config_.rope_scaling)));
  const kernels::RopeTable table = kernels::MakeRopeTable(inv_freq, max_T_);
  const int64_t table_bytes = int64_t{max_T_} * (hd_ / 2) * int64_t{sizeof(float)};
  HOIST_RETURN_IF_ERROR(backend_->Copy(rope_cos_, table.cos.data(), table_bytes,
                                       kernels::CopyDirection::kHostToDevice, stream()));
  HOIST_RETURN_IF_ERROR(backend_->Copy(rope_sin_, table.sin.data(), table_bytes,
                                       kernels::CopyDirection::kHostToDevice, stream()));
  HOIST_RETURN_IF_ERROR(backend_->Zero(
      zero_positions_, int64_t{max_T_} * C_ * int64_t(DTypeSize(activation_type_)), stream()));
  return stream().Synchronize();
}

bool LlamaModel::Kept(int s, int l) const {
  if (s == kSavedResidual3) return true;
  switch (checkpointing_.policy) {
    case CheckpointPolicy::kNone: return true;
    case CheckpointPolicy::kFull:
    case CheckpointPolicy::kEveryK: return !checkpointing_.Checkpointed(l);
    case CheckpointPolicy::kSelective:
      return s == kSavedQkv || s == kSavedResidual2 || s == kSavedGateUp;
  }
  return true;
}

bool LlamaModel::KeptOnHost(int s) const {
  return s == kSavedResidual3 && checkpointing_.cpu_checkpointing && checkpointing_.enabled();
}

Status LlamaModel::AllocateActivations(Device* device, ActivationBytes* bytes) {
  const int64_t L = config_.n_layer, C = C_, NH = NH_, T = max_T_;
  const int64_t BT = int64_t{max_B_} * max_T_;
  const int64_t Vp = config_.padded_vocab_size();
  const DType a = activation_type_, f32 = DType::kFloat32;

  struct Slot {
    float** fp32;
    void** typed;
    int64_t count;
    DType type;
  };
  auto fp32 = [&](float** ptr, int64_t count) { return Slot{ptr, nullptr, count, f32}; };
  auto typed = [&](void** ptr, int64_t count) { return Slot{nullptr, ptr, count, a}; };
  std::vector<Slot> activation_slots = {fp32(&rope_cos_, T * (hd_ / 2)),
                                        fp32(&rope_sin_, T * (hd_ / 2)),
                                        typed(&zero_positions_, T * C),
                                        fp32(&dpositions_, T * C),
                                        typed(&encoded_, BT * C),
                                        fp32(&rstd1_, L * BT),
                                        fp32(&lse_, tiled() ? L * max_B_ * NH * T : 0),
                                        fp32(&rstd2_, L * BT),
                                        typed(&lnf_, BT * C),
                                        fp32(&rstdf_, BT),
                                        typed(&logits_, BT * Vp),
                                        fp32(&losses_, BT)};
  std::vector<Slot> pinned_slots;
  for (int s = 0; s < kNumSaved; ++s) {
    const auto i = static_cast<size_t>(s);
    const int64_t count = SavedCount(s, max_B_, max_T_);
    const DType type = SavedType(s);
    if (kept_layers_[i] < L) activation_slots.push_back({nullptr, &work_[i], count, type});
    (KeptOnHost(s) ? pinned_slots : activation_slots)
        .push_back({nullptr, &stack_[i], kept_layers_[i] * count, type});
  }
  const Slot scratch_slots[] = {typed(&dresidual_, BT * C),    typed(&dln_, BT * C),
                                typed(&datty_, BT * NH * hd_), typed(&dqkv_, BT * QKV_),
                                typed(&dgateup_, BT * 2 * I_), typed(&dswiglu_, BT * I_)};

  auto padded = [](const Slot& slot) {
    return (slot.count * static_cast<int64_t>(DTypeSize(slot.type)) + 63) / 64 * 64;
  };
  auto total = [&](const auto& slots) {
    int64_t sum = 0;
    for (const Slot& slot : slots) sum += padded(slot);
    return sum;
  };
  auto carve = [&](const auto& slots, void* base) {
    char* cursor = static_cast<char*>(base);
    for (const Slot& slot : slots) {
      void* at = slot.count > 0 ? cursor : nullptr;
      if (slot.fp32 != nullptr) *slot.fp32 = static_cast<float*>(at);
      if (slot.typed != nullptr) *slot.typed = at;
      cursor += padded(slot);
    }
  };
  const int64_t pinned_bytes = total(pinned_slots);
  const int64_t activation_bytes = total(activation_slots);
  const int64_t scratch_bytes = total(scratch_slots);
  const int64_t token_bytes = 2 * BT * int64_t{sizeof(int32_t)};
  const int NHi = static_cast<int>(NH);
  int64_t workspace_bytes = 0;
  if (backend_ != nullptr) {
    workspace_bytes = tiled()
                          ? backend_->GqaTiledAttentionWorkspaceBytes(max_B_, max_T_, NHi)
                          : backend_->GqaAttentionWorkspaceBytes(max_B_, max_T_, NHi, NKV_, hd_, a);
  } else if (footprint_device_ == DeviceKind::kCuda) {
    workspace_bytes =
        tiled() ? kernels::cuda::TiledAttentionBackwardWorkspaceBytes(max_B_, max_T_, NHi)
                : kernels::cuda::GqaAttentionWorkspaceBytes(max_B_, max_T_, NHi, NKV_, hd_, a);
  }
  const int64_t page = offload::PinnedHostPool::kPageBytes;
  bytes->device = activation_bytes + scratch_bytes + token_bytes + workspace_bytes;
  bytes->host_pinned = (pinned_bytes + page - 1) / page * page;
  if (device == nullptr) return Status::Ok();

  auto allocate = [&](int64_t n) -> StatusOr<Buffer> {
    StatusOr<Buffer> buffer = device->Allocate(n, Category::kActivation);
    if (buffer.ok()) return buffer;
    return Status(buffer.status().code(),
                  "the activations of a " + std::to_string(max_B_) + " x " +
                      std::to_string(max_T_) + " micro-batch: " + buffer.status().message() +
                      ". To make room: a smaller train_micro_batch_size_per_gpu, "
                      "activation_checkpointing, model.attention \"tiled\", or a higher "
                      "zero_optimization.stage or offload for the model states (hoist plan "
                      "--memory BYTES lists the settings that fit)");
  };
  HOIST_ASSIGN_OR_RETURN(activations_, allocate(activation_bytes));
  carve(activation_slots, activations_.data());
  HOIST_ASSIGN_OR_RETURN(scratch_, allocate(scratch_bytes));
  carve(scratch_slots, scratch_.data());
  HOIST_ASSIGN_OR_RETURN(tokens_, allocate(token_bytes));
  inputs_ = tokens_.as<int32_t>();
  targets_ = inputs_ + BT;
  if (workspace_bytes > 0) {
    HOIST_ASSIGN_OR_RETURN(attention_workspace_, allocate(workspace_bytes));
  }
  host_losses_.resize(static_cast<size_t>(BT));
  host_tokens_.resize(static_cast<size_t>(2 * BT));
  if (pinned_bytes > 0) {
    pinned_pool_ = std::make_unique<offload::PinnedHostPool>(*device->tracker());
    HOIST_ASSIGN_OR_RETURN(pinned_, pinned_pool_->Allocate(pinned_bytes, Category::kActivation));
    if (backend_ != nullptr && backend_->kind() == DeviceKind::kCuda && !pinned_.cuda_pinned()) {
      return ResourceExhaustedError(
          "activation_checkpointing.cpu_checkpointing: the CUDA driver could not pin " +
          FormatBytes(pinned_bytes) +
          " of host memory for the kept block inputs; free host memory, or turn "
          "cpu_checkpointing off (the inputs then stay on the GPU)");
    }
    carve(pinned_slots, pinned_.data());
  }
  return Status::Ok();
}

int64_t LlamaModel::SavedCount(int s, int B, int T) const {
  const int64_t BT = int64_t{B} * T;
  switch (s) {
    case kSavedQkv: return BT * QKV_;
    case kSavedAtty: return BT * NH_ * hd_;
    case kSavedAtt: return tiled() ? 0 : int64_t{B} * NH_ * T * T;
    case kSavedGateUp: return BT * 2 * I_;
    case kSavedSwiGlu: return BT * I_;
    default: return BT * C_;
  }
}

DType LlamaModel::SavedType(int s) const {
  return s == kSavedAtt ? DType::kFloat32 : activation_type_;
}

void* LlamaModel::At(int s, int l) const {
  const auto i = static_cast<size_t>(s);
  const int index = kept_index_[i][static_cast<size_t>(l)];
  if (index < 0) return work_[i];
  return ElementPtr(stack_[i], SavedType(s), index * SavedCount(s, last_B_, last_T_));
}

const void* LlamaModel::Weight(const void* unit, int tensor) const {
  return ElementPtr(unit, activation_type_, layout_.local_offsets[tensor]);
}

bool LlamaModel::Ok(const Status& op) {
  if (status_.ok() && !op.ok()) status_ = op;
  return status_.ok();
}

bool LlamaModel::Zero(void* p, int64_t count) {
  return Ok(backend_->Zero(p, count * static_cast<int64_t>(DTypeSize(activation_type_)), stream()));
}

float* LlamaModel::params() {
  HOIST_CHECK(own_store_ != nullptr) << "params() of a model whose weights live in a ZeRO store";
  return own_store_->params();
}

float* LlamaModel::grads() {
  HOIST_CHECK(own_store_ != nullptr) << "grads() of a model whose gradients live in a ZeRO store";
  return own_store_->grads();
}

const float* LlamaModel::logits() const {
  HOIST_CHECK(activation_type_ == DType::kFloat32) << "logits() of a 16-bit model";
  return static_cast<const float*>(logits_);
}

void LlamaModel::InitializeUnit(int unit, uint64_t seed, float* out) const {
  InitializeLlamaUnit(config_, unit, seed, out);
}

void LlamaModel::InitializeRange(int unit, uint64_t seed, int64_t begin, int64_t count,
                                 float* out) const {
  InitializeLlamaRange(config_, unit, seed, begin, count, out);
}

void LlamaModel::InitializeWeights(uint64_t seed) {
  std::vector<float> unit;
  for (int u = 0; u < layout_.num_units(); ++u) {
    unit.resize(static_cast<size_t>(layout_.unit_size(u)));
    InitializeUnit(u, seed, unit.data());
    if (!Ok(backend_->Copy(params() + layout_.unit_offsets[u], unit.data(),
                           layout_.unit_size(u) * int64_t{sizeof(float)},
                           kernels::CopyDirection::kHostToDevice, stream())) ||
        !Ok(stream().Synchronize())) {
      return;
    }
  }
}

void LlamaModel::ZeroGradients() {
  if (own_store_ == nullptr) return;
  if (Ok(backend_->Zero(grads(), own_store_->elements() * int64_t{sizeof(float)}, stream()))) {
    (void)Ok(stream().Synchronize());
  }
}

}  // namespace hoist::runtime
