#include "runtime/gpt2.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda/workspace.h"

namespace hoist::runtime {

Gpt2Model::Gpt2Model(const ModelConfig& config, int max_B, int max_T, DType activation_type,
                     const ActivationCheckpointingConfig& checkpointing)
    : config_(config),
      layout_(ParamLayout::For(config)),
      max_B_(max_B),
      max_T_(max_T),
      activation_type_(activation_type),
      checkpointing_(checkpointing) {
  for (int s = 0; s < kNumSaved; ++s) {
    std::vector<int>& index = kept_index_[static_cast<size_t>(s)];
    int& kept = kept_layers_[static_cast<size_t>(s)];
    for (int l = 0; l < config_.n_layer; ++l) index.push_back(Kept(s, l) ? kept++ : -1);
  }
  // Recomputing the attention rewrites its output and its probabilities together.
  for (int l = 0; l < config_.n_layer; ++l) {
    HOIST_CHECK_EQ(Kept(kSavedAtt, l), Kept(kSavedAtty, l)) << "layer " << l;
  }
}

Gpt2Model::~Gpt2Model() = default;

StatusOr<std::unique_ptr<Gpt2Model>> Gpt2Model::Create(
    const ModelConfig& config, int max_B, int max_T, Device* device, zero::ParamStore* store,
    DType activation_type, const ActivationCheckpointingConfig& checkpointing) {
  HOIST_CHECK(device != nullptr);
  auto backend = std::make_unique<kernels::CpuBackend>(device);
  kernels::Backend* raw = backend.get();
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<Gpt2Model> model,
                         Create(config, max_B, max_T, raw, store, activation_type, checkpointing));
  model->own_backend_ = std::move(backend);
  return model;
}

StatusOr<std::unique_ptr<Gpt2Model>> Gpt2Model::Create(
    const ModelConfig& config, int max_B, int max_T, kernels::Backend* backend,
    zero::ParamStore* store, DType activation_type,
    const ActivationCheckpointingConfig& checkpointing) {
  HOIST_CHECK(backend != nullptr);
  HOIST_RETURN_IF_ERROR(
      CheckModelArguments(config, max_B, max_T, store, activation_type, checkpointing));
  std::unique_ptr<Gpt2Model> model(
      new Gpt2Model(config, max_B, max_T, activation_type, checkpointing));
  model->store_ = store;
  model->backend_ = backend;
  HOIST_RETURN_IF_ERROR(model->Allocate(&backend->device()));
  HOIST_RETURN_IF_ERROR(
      model->CreateLora(config, int64_t{max_B} * max_T, backend, activation_type));
  return model;
}

Gpt2Model::ActivationBytes Gpt2Model::ActivationFootprint(
    const ModelConfig& config, int max_B, int max_T, DType activation_type,
    const ActivationCheckpointingConfig& checkpointing, DeviceKind device) {
  Gpt2Model model(config, max_B, max_T, activation_type, checkpointing);
  model.footprint_device_ = device;
  ActivationBytes bytes;
  const Status counted = model.AllocateActivations(nullptr, &bytes);
  HOIST_CHECK(counted.ok()) << counted.ToString();
  bytes.device += LoraScratchBytes(config, int64_t{max_B} * max_T, activation_type);
  return bytes;
}

Status Gpt2Model::Allocate(Device* device) {
  if (store_ == nullptr) {
    HOIST_ASSIGN_OR_RETURN(own_store_,
                           FlatParamStore::Create(StoreUnitOffsets(config_, layout_.unit_offsets),
                                                  backend_, activation_type_));
    store_ = own_store_.get();
  }
  ActivationBytes bytes;
  return AllocateActivations(device, &bytes);
}

bool Gpt2Model::Kept(int s, int l) const {
  if (s == kSavedResidual3) return true;
  switch (checkpointing_.policy) {
    case CheckpointPolicy::kNone: return true;
    case CheckpointPolicy::kFull:
    case CheckpointPolicy::kEveryK: return !checkpointing_.Checkpointed(l);
    case CheckpointPolicy::kSelective:
      return s == kSavedQkv || s == kSavedResidual2 || s == kSavedFch;
  }
  return true;
}

bool Gpt2Model::KeptOnHost(int s) const {
  return s == kSavedResidual3 && checkpointing_.cpu_checkpointing && checkpointing_.enabled();
}

Status Gpt2Model::AllocateActivations(Device* device, ActivationBytes* bytes) {
  const int64_t L = config_.n_layer, C = config_.n_embd, NH = config_.n_head;
  const int64_t BT = int64_t{max_B_} * max_T_, T = max_T_;
  const int64_t Vp = config_.padded_vocab_size();
  const DType a = activation_type_, f32 = DType::kFloat32;

  // Each entry: the pointer to set (an fp32 array, or one in the activation type), its element
  // count and type; laid out back to back.
  struct Slot {
    float** fp32;
    void** typed;
    int64_t count;
    DType type;
  };
  auto fp32 = [&](float** ptr, int64_t count) { return Slot{ptr, nullptr, count, f32}; };
  auto typed = [&](void** ptr, int64_t count) { return Slot{nullptr, ptr, count, a}; };
  std::vector<Slot> activation_slots = {
      typed(&encoded_, BT * C), fp32(&ln1_mean_, L * BT),
      fp32(&ln1_rstd_, L * BT), fp32(&lse_, tiled() ? L * max_B_ * NH * T : 0),
      fp32(&ln2_mean_, L * BT), fp32(&ln2_rstd_, L * BT),
      typed(&lnf_, BT * C),     fp32(&lnf_mean_, BT),
      fp32(&lnf_rstd_, BT),     typed(&logits_, BT * Vp),
      fp32(&losses_, BT)};
  std::vector<Slot> pinned_slots;
  // Per saved tensor: a stack of the layers that keep it, and one working layer when some layer
  // recomputes it.
  for (int s = 0; s < kNumSaved; ++s) {
    const auto i = static_cast<size_t>(s);
    const int64_t count = SavedCount(s, max_B_, max_T_);
    const DType type = SavedType(s);
    if (kept_layers_[i] < L) activation_slots.push_back({nullptr, &work_[i], count, type});
    (KeptOnHost(s) ? pinned_slots : activation_slots)
        .push_back({nullptr, &stack_[i], kept_layers_[i] * count, type});
  }
  const Slot scratch_slots[] = {typed(&dresidual_, BT * C), typed(&dln_, BT * C),
                                typed(&datty_, BT * C),     typed(&dqkv_, BT * 3 * C),
                                typed(&dfch_, BT * 4 * C),  typed(&dfch_gelu_, BT * 4 * C)};

  // Every array starts on a 64-byte boundary so SIMD loads of row starts stay aligned.
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
  const int64_t token_bytes = 2 * BT * int64_t{sizeof(int32_t)};  // inputs, then targets
  // The backend's workspace for the attention; the CPU's kernels need none. Counted without a
  // backend (ActivationFootprint), it is the CUDA backend's formula or none.
  const int Ci = static_cast<int>(C), NHi = static_cast<int>(NH);
  const bool cuda = backend_ == nullptr && footprint_device_ == DeviceKind::kCuda;
  int64_t attention_workspace_bytes = 0, tiled_workspace_bytes = 0;
  if (backend_ != nullptr) {
    attention_workspace_bytes =
        tiled() ? 0 : backend_->AttentionWorkspaceBytes(max_B_, max_T_, Ci, NHi, a);
    tiled_workspace_bytes =
        tiled() ? backend_->TiledAttentionWorkspaceBytes(max_B_, max_T_, NHi) : 0;
  } else if (cuda) {
    attention_workspace_bytes =
        tiled() ? 0 : kernels::cuda::AttentionWorkspaceBytes(max_B_, max_T_, Ci, NHi, a);
    tiled_workspace_bytes =
        tiled() ? kernels::cuda::TiledAttentionBackwardWorkspaceBytes(max_B_, max_T_, NHi) : 0;
  }
  const int64_t workspace_bytes = std::max(attention_workspace_bytes, tiled_workspace_bytes);
  const int64_t page = offload::PinnedHostPool::kPageBytes;
  bytes->device = activation_bytes + scratch_bytes + token_bytes + workspace_bytes;
  bytes->host_pinned = (pinned_bytes + page - 1) / page * page;
  if (device == nullptr) return Status::Ok();

  // Out of memory here names the micro-batch and what shrinks its activations.
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
    // A GPU's kernels read and write these block inputs where they are: only memory the CUDA
    // driver pinned is theirs to reach (the pool falls back to plain pages when it cannot pin).
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

int64_t Gpt2Model::SavedCount(int s, int B, int T) const {
  const int64_t BT = int64_t{B} * T, C = config_.n_embd, NH = config_.n_head;
  switch (s) {
    case kSavedQkv: return BT * 3 * C;
    case kSavedAtt: return tiled() ? 0 : int64_t{B} * NH * T * T;
    case kSavedFch:
    case kSavedFchGelu: return BT * 4 * C;
    default: return BT * C;
  }
}

DType Gpt2Model::SavedType(int s) const {
  return s == kSavedAtt ? DType::kFloat32 : activation_type_;
}

void* Gpt2Model::At(int s, int l) const {
  const auto i = static_cast<size_t>(s);
  const int index = kept_index_[i][static_cast<size_t>(l)];
  if (index < 0) return work_[i];
  return ElementPtr(stack_[i], SavedType(s), index * SavedCount(s, last_B_, last_T_));
}

bool Gpt2Model::Ok(const Status& op) {
  if (status_.ok() && !op.ok()) status_ = op;
  return status_.ok();
}

bool Gpt2Model::Zero(void* p, int64_t count) {
  return Ok(backend_->Zero(p, count * static_cast<int64_t>(DTypeSize(activation_type_)), stream()));
}

float* Gpt2Model::params() {
  HOIST_CHECK(own_store_ != nullptr) << "params() of a model whose weights live in a ZeRO store";
  return own_store_->params();
}
const float* Gpt2Model::params() const { return const_cast<Gpt2Model*>(this)->params(); }
float* Gpt2Model::grads() {
  HOIST_CHECK(own_store_ != nullptr) << "grads() of a model whose gradients live in a ZeRO store";
  return own_store_->grads();
}
const float* Gpt2Model::grads() const { return const_cast<Gpt2Model*>(this)->grads(); }

void Gpt2Model::InitializeUnit(int unit, uint64_t seed, float* out) const {
  InitializeGpt2Unit(config_, unit, seed, out);
}

void Gpt2Model::InitializeRange(int unit, uint64_t seed, int64_t begin, int64_t count,
                                float* out) const {
  InitializeGpt2Range(config_, unit, seed, begin, count, out);
}

void Gpt2Model::InitializeWeights(uint64_t seed) {
  // Drawn on the host a unit at a time, then copied to the backend's device.
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

namespace {

// One transformer block's gradients within its unit's fp32 buffer.
struct BlockGrads {
  float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw,
      *fcprojb;

  // A null unit (a frozen base's gradients) gives null tensors.
  BlockGrads(float* unit, const ParamLayout& layout) {
    auto at = [&](int tensor) {
      return unit == nullptr ? nullptr : unit + layout.local_offsets[tensor];
    };
    ln1w = at(kLn1W), ln1b = at(kLn1B), qkvw = at(kQkvW), qkvb = at(kQkvB);
    attprojw = at(kAttProjW), attprojb = at(kAttProjB), ln2w = at(kLn2W), ln2b = at(kLn2B);
    fcw = at(kFcW), fcb = at(kFcB), fcprojw = at(kFcProjW), fcprojb = at(kFcProjB);
  }
};

// One block's weights as the store gives them (acquired: what AcquireParams returned): the
// matmuls' as zero::StoredWeight (dense, or 4-bit in a frozen 4-bit base), the layernorms' and
// the biases in the compute type.
struct BlockWeights {
  const void *ln1w, *ln1b, *qkvb, *attprojb, *ln2w, *ln2b, *fcb, *fcprojb;
  zero::StoredWeight qkvw, attprojw, fcw, fcprojw;

  BlockWeights(const zero::ParamStore& store, int unit, const void* acquired,
               const ParamLayout& layout) {
    auto at = [&](int tensor) {
      return store.Weight(unit, acquired, layout.local_offsets[tensor]);
    };
    ln1w = at(kLn1W).dense, ln1b = at(kLn1B).dense, qkvb = at(kQkvB).dense;
    attprojb = at(kAttProjB).dense, ln2w = at(kLn2W).dense, ln2b = at(kLn2B).dense;
    fcb = at(kFcB).dense, fcprojb = at(kFcProjB).dense;
    qkvw = at(kQkvW), attprojw = at(kAttProjW), fcw = at(kFcW), fcprojw = at(kFcProjW);
  }
};

}  // namespace

bool Gpt2Model::Lora(LoraModule::Site site, int l, void* y, const void* x, const void* adapters) {
  return lora_ == nullptr || Ok(lora_->Forward(site, l, y, x, adapters, last_B_, last_T_));
}

bool Gpt2Model::LoraBackward(LoraModule::Site site, int l, void* dx, const void* dy, const void* x,
                             const void* adapters, float* grads) {
  return lora_ == nullptr ||
         Ok(lora_->Backward(site, l, dx, dy, x, adapters, grads, last_B_, last_T_));
}

const void* Gpt2Model::Weight(const void* unit, int tensor) const {
  return ElementPtr(unit, activation_type_, layout_.local_offsets[tensor]);
}

float Gpt2Model::Forward(const int32_t* inputs, const int32_t* targets, int B, int T, float dloss) {
  HOIST_CHECK(B > 0 && B <= max_B_ && T > 0 && T <= max_T_)
      << "batch (" << B << ", " << T << ") exceeds (" << max_B_ << ", " << max_T_ << ")";
  HOIST_CHECK(dloss == 0.0f || targets != nullptr) << "a backward pass needs targets";
  const int L = config_.n_layer, C = config_.n_embd, NH = config_.n_head;
  const int V = config_.vocab_size, Vp = config_.padded_vocab_size();
  const int64_t BT = int64_t{B} * T;
  const int N = static_cast<int>(BT);
  const int kEmbedding = 0, kFinal = L + 1;
  if (backward_ready_) {  // a training forward whose backward never came: hand back its weights
    store_->ReleaseParams(kEmbedding);
    backward_ready_ = false;
  }
  last_B_ = B;
  last_T_ = T;
  // A store that cannot serve a unit (its memory ran out, a collective failed) hands out null and
  // keeps the error in status(), which the caller checks after the pass: the pass stops there.
  const float kFailed = std::numeric_limits<float>::quiet_NaN();
  if (!store_->status().ok() || !status_.ok()) return kFailed;
  const DType a = activation_type_;
  const Stream& st = stream();

  EnterPhase(Phase::kForwardEmbedding, -1);
  // Through the model's own host copy: a pass that stops early returns without waiting for the
  // stream, and the caller's arrays may be gone before a queued copy reads them. (The last pass
  // ended with a wait, or failed for good, so nothing queued reads host_tokens_ now.)
  if (inputs == nullptr) {
    (void)Ok(InvalidArgumentError("Gpt2Model::Forward: inputs is null"));
    return kFailed;
  }
  const size_t positions = static_cast<size_t>(BT);
  std::memcpy(host_tokens_.data(), inputs, positions * sizeof(int32_t));
  if (targets != nullptr) {
    std::memcpy(host_tokens_.data() + positions, targets, positions * sizeof(int32_t));
  }
  if (!Ok(backend_->Copy(inputs_, host_tokens_.data(), BT * int64_t{sizeof(int32_t)},
                         kernels::CopyDirection::kHostToDevice, st))) {
    return kFailed;
  }
  if (targets != nullptr &&
      !Ok(backend_->Copy(targets_, host_tokens_.data() + positions, BT * int64_t{sizeof(int32_t)},
                         kernels::CopyDirection::kHostToDevice, st))) {
    return kFailed;
  }
  const void* embedding = store_->AcquireParams(kEmbedding);
  if (embedding == nullptr) return kFailed;
  store_->Prefetch(1);
  if (!Ok(backend_->EncoderForward(encoded_, inputs_, Weight(embedding, kWte),
                                   Weight(embedding, kWpe), B, T, C, a, st))) {
    return kFailed;
  }
  store_->ReleaseParams(kEmbedding);
  const void* residual = encoded_;
  for (int l = 0; l < L; ++l) {
    EnterPhase(Phase::kForwardBlock, l);
    const void* weights = store_->AcquireParams(1 + l);
    if (weights == nullptr) return kFailed;
    const BlockWeights w(*store_, 1 + l, weights, layout_);
    const void* adapters = nullptr;
    if (lora_ != nullptr && (adapters = store_->AcquireParams(lora_->unit(l))) == nullptr) {
      return kFailed;
    }
    store_->Prefetch(l + 1 < L ? 2 + l : kFinal);
    // Layer l's arrays: its slice of the kept stacks, or the working layer of a tensor it
    // recomputes in backward.
    void* ln1 = At(kSavedLn1, l);
    float* ln1_mean = ln1_mean_ + l * BT;
    float* ln1_rstd = ln1_rstd_ + l * BT;
    void* qkv = At(kSavedQkv, l);
    void* atty = At(kSavedAtty, l);
    void* residual2 = At(kSavedResidual2, l);
    void* ln2 = At(kSavedLn2, l);
    float* ln2_mean = ln2_mean_ + l * BT;
    float* ln2_rstd = ln2_rstd_ + l * BT;
    void* fch = At(kSavedFch, l);
    void* fch_gelu = At(kSavedFchGelu, l);
    void* residual3 = At(kSavedResidual3, l);
    void* scratch = dresidual_;  // free during forward: holds each projection's output

    const bool block =
        Ok(backend_->LayerNormForward(ln1, ln1_mean, ln1_rstd, residual, w.ln1w, w.ln1b, N, C, a,
                                      st)) &&
        Ok(StoredMatmulForward(*backend_, qkv, ln1, w.qkvw, w.qkvb, N, C, 3 * C, a, st)) &&
        Lora(LoraModule::kGpt2Attn, l, qkv, ln1, adapters) &&
        Ok(tiled() ? backend_->AttentionForwardTiled(atty, lse_ + int64_t{l} * B * NH * T, qkv, B,
                                                     T, C, NH, a, st)
                   : backend_->AttentionForward(atty, static_cast<float*>(At(kSavedAtt, l)), qkv,
                                                attention_workspace_.data(), B, T, C, NH, a, st)) &&
        Ok(StoredMatmulForward(*backend_, scratch, atty, w.attprojw, w.attprojb, N, C, C, a, st)) &&
        Lora(LoraModule::kGpt2AttnProj, l, scratch, atty, adapters) &&
        Ok(backend_->ResidualForward(residual2, residual, scratch, BT * C, a, st)) &&
        Ok(backend_->LayerNormForward(ln2, ln2_mean, ln2_rstd, residual2, w.ln2w, w.ln2b, N, C, a,
                                      st)) &&
        Ok(StoredMatmulForward(*backend_, fch, ln2, w.fcw, w.fcb, N, C, 4 * C, a, st)) &&
        Lora(LoraModule::kGpt2Fc, l, fch, ln2, adapters) &&
        Ok(backend_->GeluForward(fch_gelu, fch, BT * 4 * C, a, st)) &&
        Ok(StoredMatmulForward(*backend_, scratch, fch_gelu, w.fcprojw, w.fcprojb, N, 4 * C, C, a,
                               st)) &&
        Lora(LoraModule::kGpt2MlpProj, l, scratch, fch_gelu, adapters) &&
        Ok(backend_->ResidualForward(residual3, residual2, scratch, BT * C, a, st));
    if (!block) return kFailed;
    if (adapters != nullptr) store_->ReleaseParams(lora_->unit(l));
    store_->ReleaseParams(1 + l);
    residual = residual3;
  }
  EnterPhase(Phase::kForwardHead, -1);
  const void* final_norm = store_->AcquireParams(kFinal);
  if (final_norm == nullptr) return kFailed;
  store_->Prefetch(kEmbedding);
  if (!Ok(backend_->LayerNormForward(lnf_, lnf_mean_, lnf_rstd_, residual,
                                     Weight(final_norm, kLnfW), Weight(final_norm, kLnfB), N, C, a,
                                     st))) {
    return kFailed;
  }
  store_->ReleaseParams(kFinal);
  // The LM head is tied to the token embedding: logits = lnf @ wte^T. A training forward keeps
  // the embeddings until Backward has used them for the head's gradient.
  embedding = store_->AcquireParams(kEmbedding);
  if (embedding == nullptr) return kFailed;
  if (!Ok(backend_->MatmulForward(logits_, lnf_, Weight(embedding, kWte), nullptr, N, C, Vp, a,
                                  nullptr, st))) {
    return kFailed;
  }

  if (targets == nullptr || dloss <= 0.0f) store_->ReleaseParams(kEmbedding);
  if (targets == nullptr) {
    if (!Ok(st.Synchronize())) return kFailed;
    return 0.0f;
  }
  if (!Ok(backend_->SoftmaxCrossEntropy(losses_, dloss > 0.0f ? logits_ : nullptr, logits_,
                                        targets_, dloss / static_cast<float>(BT), N, V, Vp, a,
                                        st)) ||
      !Ok(backend_->Copy(host_losses_.data(), losses_, BT * int64_t{sizeof(float)},
                         kernels::CopyDirection::kDeviceToHost, st)) ||
      !Ok(st.Synchronize())) {
    return kFailed;
  }
  double sum = 0.0;
  for (int64_t i = 0; i < BT; ++i) sum += host_losses_[static_cast<size_t>(i)];
  backward_ready_ = dloss > 0.0f;
  return static_cast<float>(sum / static_cast<double>(BT));
}

void Gpt2Model::RecomputeBlock(int l, const void* residual, const void* weights,
                               const void* adapters) {
  const int B = last_B_, T = last_T_;
  const int C = config_.n_embd, NH = config_.n_head;
  const int64_t BT = int64_t{B} * T;
  const int N = static_cast<int>(BT);
  const DType a = activation_type_;
  const Stream& st = stream();
  const BlockWeights p(*store_, 1 + l, weights, layout_);
  // The same ops, in forward's order, on the same inputs; each step runs only when its output
  // was not kept (a step's inputs are then kept or recomputed just before it). Every layer keeps
  // residual3, so the last projection never runs again. An op that fails stops the
  // recomputation; the caller sees it in status_.
  auto recompute = [&](int s) { return status_.ok() && !Kept(s, l); };
  void* scratch = datty_;  // free until the attention projection's backward
  if (recompute(kSavedLn1)) {
    (void)Ok(backend_->LayerNormForward(At(kSavedLn1, l), ln1_mean_ + l * BT, ln1_rstd_ + l * BT,
                                        residual, p.ln1w, p.ln1b, N, C, a, st));
  }
  if (recompute(kSavedQkv) && Ok(StoredMatmulForward(*backend_, At(kSavedQkv, l), At(kSavedLn1, l),
                                                     p.qkvw, p.qkvb, N, C, 3 * C, a, st))) {
    (void)Lora(LoraModule::kGpt2Attn, l, At(kSavedQkv, l), At(kSavedLn1, l), adapters);
  }
  if (recompute(kSavedAtty)) {
    (void)Ok(tiled() ? backend_->AttentionForwardTiled(At(kSavedAtty, l),
                                                       lse_ + int64_t{l} * B * NH * T,
                                                       At(kSavedQkv, l), B, T, C, NH, a, st)
                     : backend_->AttentionForward(
                           At(kSavedAtty, l), static_cast<float*>(At(kSavedAtt, l)),
                           At(kSavedQkv, l), attention_workspace_.data(), B, T, C, NH, a, st));
  }
  if (recompute(kSavedResidual2) &&
      Ok(StoredMatmulForward(*backend_, scratch, At(kSavedAtty, l), p.attprojw, p.attprojb, N, C, C,
                             a, st)) &&
      Lora(LoraModule::kGpt2AttnProj, l, scratch, At(kSavedAtty, l), adapters)) {
    (void)Ok(backend_->ResidualForward(At(kSavedResidual2, l), residual, scratch, BT * C, a, st));
  }
  if (recompute(kSavedLn2)) {
    (void)Ok(backend_->LayerNormForward(At(kSavedLn2, l), ln2_mean_ + l * BT, ln2_rstd_ + l * BT,
                                        At(kSavedResidual2, l), p.ln2w, p.ln2b, N, C, a, st));
  }
  if (recompute(kSavedFch) && Ok(StoredMatmulForward(*backend_, At(kSavedFch, l), At(kSavedLn2, l),
                                                     p.fcw, p.fcb, N, C, 4 * C, a, st))) {
    (void)Lora(LoraModule::kGpt2Fc, l, At(kSavedFch, l), At(kSavedLn2, l), adapters);
  }
  if (recompute(kSavedFchGelu)) {
    (void)Ok(backend_->GeluForward(At(kSavedFchGelu, l), At(kSavedFch, l), BT * 4 * C, a, st));
  }
}

void Gpt2Model::Backward() {
  // After a store failure (see Forward) the pass is abandoned: the caller reads status().
  if (!store_->status().ok() || !status_.ok()) {
    backward_ready_ = false;
    return;
  }
  HOIST_CHECK(backward_ready_) << "Backward without a Forward that had targets and dloss";
  backward_ready_ = false;
  const int B = last_B_, T = last_T_;
  const int L = config_.n_layer, C = config_.n_embd, NH = config_.n_head;
  const int Vp = config_.padded_vocab_size();
  const int64_t BT = int64_t{B} * T;
  const int N = static_cast<int>(BT);
  const int kEmbedding = 0, kFinal = L + 1;
  const DType a = activation_type_;
  const Stream& st = stream();
  auto grad = [&](float* unit, int tensor) { return unit + layout_.local_offsets[tensor]; };

  // logits_ holds dlogits. dresidual_ carries the gradient of the residual stream down the
  // layers; the residual adds pass it through unchanged, so it is never copied. The embeddings'
  // gradient buffer stays with us from the head (first) to the token embedding (last).
  EnterPhase(Phase::kBackwardHead, -1);
  const void* dlogits = logits_;
  // A frozen base (LoRA) gets no gradients: only the input gradients flow down to the adapters.
  const bool frozen = frozen_base();
  float* embedding_grads = frozen ? nullptr : store_->AcquireGrads(kEmbedding);
  if (!frozen && embedding_grads == nullptr) return;
  auto grad_or_null = [&](float* unit, int tensor) {
    return unit == nullptr ? nullptr : grad(unit, tensor);
  };
  {
    const void* embedding = store_->AcquireParams(kEmbedding);  // still held since Forward
    store_->Prefetch(kFinal);
    if (!Zero(dln_, BT * C) ||
        !Ok(backend_->MatmulBackward(dln_, grad_or_null(embedding_grads, kWte), nullptr, dlogits,
                                     lnf_, Weight(embedding, kWte), N, C, Vp, a, st))) {
      return;
    }
    store_->ReleaseParams(kEmbedding);
    store_->ReleaseParams(kEmbedding);
  }
  {
    const void* final_norm = store_->AcquireParams(kFinal);
    if (final_norm == nullptr) return;
    if (L > 0) store_->Prefetch(L);
    float* final_grads = frozen ? nullptr : store_->AcquireGrads(kFinal);
    if (!frozen && final_grads == nullptr) return;
    if (!Zero(dresidual_, BT * C)) return;
    const void* last_residual = L > 0 ? At(kSavedResidual3, L - 1) : encoded_;
    if (!Ok(backend_->LayerNormBackward(
            dresidual_, grad_or_null(final_grads, kLnfW), grad_or_null(final_grads, kLnfB), dln_,
            last_residual, Weight(final_norm, kLnfW), lnf_mean_, lnf_rstd_, N, C, a, st))) {
      return;
    }
    if (!frozen) store_->ReleaseGrads(kFinal);
    store_->ReleaseParams(kFinal);
  }

  for (int l = L - 1; l >= 0; --l) {
    EnterPhase(Phase::kBackwardBlock, l);
    const void* weights = store_->AcquireParams(1 + l);
    if (weights == nullptr) return;
    const BlockWeights w(*store_, 1 + l, weights, layout_);
    if (l > 0) store_->Prefetch(l);
    const void* adapters = nullptr;
    float* adapter_grads = nullptr;
    if (lora_ != nullptr) {
      adapters = store_->AcquireParams(lora_->unit(l));
      if (adapters == nullptr) return;
      adapter_grads = store_->AcquireGrads(lora_->unit(l));
      if (adapter_grads == nullptr) return;
    }
    float* grads = frozen ? nullptr : store_->AcquireGrads(1 + l);
    if (!frozen && grads == nullptr) return;
    const BlockGrads g(grads, layout_);
    // The layer's input is the previous layer's residual3; what this layer did not keep is
    // recomputed from it first.
    const void* residual = l == 0 ? encoded_ : At(kSavedResidual3, l - 1);
    bool recomputes = false;
    for (int s = 0; s < kNumSaved; ++s) recomputes = recomputes || !Kept(s, l);
    if (recomputes) {
      const auto start = std::chrono::steady_clock::now();
      RecomputeBlock(l, residual, weights, adapters);
      ++recomputed_blocks_;
      recompute_s_ +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    if (!status_.ok()) return;
    const void* ln1 = At(kSavedLn1, l);
    const float* ln1_mean = ln1_mean_ + l * BT;
    const float* ln1_rstd = ln1_rstd_ + l * BT;
    const void* qkv = At(kSavedQkv, l);
    const void* atty = At(kSavedAtty, l);
    const void* residual2 = At(kSavedResidual2, l);
    const void* ln2 = At(kSavedLn2, l);
    const float* ln2_mean = ln2_mean_ + l * BT;
    const float* ln2_rstd = ln2_rstd_ + l * BT;
    const void* fch = At(kSavedFch, l);
    const void* fch_gelu = At(kSavedFchGelu, l);

    // MLP: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))).
    const bool mlp =
        Zero(dfch_gelu_, BT * 4 * C) &&
        Ok(StoredMatmulBackward(*backend_, dfch_gelu_, g.fcprojw, g.fcprojb, dresidual_, fch_gelu,
                                w.fcprojw, N, 4 * C, C, a, st)) &&
        LoraBackward(LoraModule::kGpt2MlpProj, l, dfch_gelu_, dresidual_, fch_gelu, adapters,
                     adapter_grads) &&
        Zero(dfch_, BT * 4 * C) &&
        Ok(backend_->GeluBackward(dfch_, fch, dfch_gelu_, BT * 4 * C, a, st)) &&
        Zero(dln_, BT * C) &&
        Ok(StoredMatmulBackward(*backend_, dln_, g.fcw, g.fcb, dfch_, ln2, w.fcw, N, C, 4 * C, a,
                                st)) &&
        LoraBackward(LoraModule::kGpt2Fc, l, dln_, dfch_, ln2, adapters, adapter_grads) &&
        Ok(backend_->LayerNormBackward(dresidual_, g.ln2w, g.ln2b, dln_, residual2, w.ln2w,
                                       ln2_mean, ln2_rstd, N, C, a, st));
    if (!mlp) return;

    // Attention: residual2 = residual + attproj(attention(qkv(ln1(residual)))).
    const bool attention =
        Zero(datty_, BT * C) &&
        Ok(StoredMatmulBackward(*backend_, datty_, g.attprojw, g.attprojb, dresidual_, atty,
                                w.attprojw, N, C, C, a, st)) &&
        LoraBackward(LoraModule::kGpt2AttnProj, l, datty_, dresidual_, atty, adapters,
                     adapter_grads) &&
        Zero(dqkv_, BT * 3 * C) &&
        Ok(tiled() ? backend_->AttentionBackwardTiled(
                         dqkv_, datty_, qkv, atty, lse_ + int64_t{l} * B * NH * T,
                         attention_workspace_.data(), B, T, C, NH, a, st)
                   : backend_->AttentionBackward(
                         dqkv_, datty_, qkv, static_cast<const float*>(At(kSavedAtt, l)),
                         attention_workspace_.data(), B, T, C, NH, a, st)) &&
        Zero(dln_, BT * C) &&
        Ok(StoredMatmulBackward(*backend_, dln_, g.qkvw, g.qkvb, dqkv_, ln1, w.qkvw, N, C, 3 * C, a,
                                st)) &&
        LoraBackward(LoraModule::kGpt2Attn, l, dln_, dqkv_, ln1, adapters, adapter_grads) &&
        Ok(backend_->LayerNormBackward(dresidual_, g.ln1w, g.ln1b, dln_, residual, w.ln1w, ln1_mean,
                                       ln1_rstd, N, C, a, st));
    if (!attention) return;
    if (!frozen) store_->ReleaseGrads(1 + l);
    if (lora_ != nullptr) {
      store_->ReleaseGrads(lora_->unit(l));
      store_->ReleaseParams(lora_->unit(l));
    }
    store_->ReleaseParams(1 + l);
  }
  EnterPhase(Phase::kBackwardEmbedding, -1);
  if (!frozen) {
    if (!Ok(backend_->EncoderBackward(grad(embedding_grads, kWte), grad(embedding_grads, kWpe),
                                      dresidual_, inputs_, B, T, C, a, st))) {
      return;
    }
    store_->ReleaseGrads(kEmbedding);
  }
  // A model with its own store is read by the caller (grads()) right after: wait for the work.
  if (own_store_ != nullptr) (void)Ok(st.Synchronize());
}

void Gpt2Model::ZeroGradients() {
  if (own_store_ == nullptr) return;
  if (Ok(backend_->Zero(grads(), own_store_->elements() * int64_t{sizeof(float)}, stream()))) {
    (void)Ok(stream().Synchronize());
  }
}

}  // namespace hoist::runtime
