// BlockModel (runtime/model/block_model.h): the activation arena, the saved-tensor table, the unit
// protocol of the passes and the token and loss staging that every family shares.
#include "runtime/model/block_model.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "core/check.h"
#include "kernels/cpu_backend.h"
#include "kernels/device_facts.h"

namespace hoist::runtime {

namespace {

int64_t PaddedBytes(int64_t count, DType type) {
  return (count * static_cast<int64_t>(DTypeSize(type)) + 63) / 64 * 64;
}

}  // namespace

int64_t BlockModel::Arrays::bytes() const {
  int64_t sum = 0;
  for (const Slot& slot : slots_) sum += PaddedBytes(slot.count, slot.type);
  return sum;
}

void BlockModel::Arrays::Carve(void* base) const {
  char* cursor = static_cast<char*>(base);
  for (const Slot& slot : slots_) {
    void* at = slot.count > 0 ? cursor : nullptr;
    if (slot.fp32 != nullptr) *slot.fp32 = static_cast<float*>(at);
    if (slot.typed != nullptr) *slot.typed = at;
    cursor += PaddedBytes(slot.count, slot.type);
  }
}

BlockModel::BlockModel(const ModelConfig& config, int max_B, int max_T, DType activation_type,
                       const ActivationCheckpointingConfig& checkpointing, Declaration declaration)
    : config_(config),
      max_B_(max_B),
      max_T_(max_T),
      activation_type_(activation_type),
      checkpointing_(checkpointing),
      declaration_(std::move(declaration)) {
  const int saved = static_cast<int>(declaration_.saved.size());
  HOIST_CHECK(saved >= 1 && saved < 64)
      << declaration_.name << " declares " << saved << " saved tensors";
  HOIST_CHECK_EQ(declaration_.unit_offsets.size(), static_cast<size_t>(config_.n_layer) + 3);
  HOIST_CHECK(declaration_.initialize_unit != nullptr && declaration_.initialize_range != nullptr)
      << declaration_.name << " declares no initialisation";
  output_ = saved - 1;
  kept_index_.resize(static_cast<size_t>(saved));
  kept_layers_.assign(static_cast<size_t>(saved), 0);
  stack_.assign(static_cast<size_t>(saved), nullptr);
  work_.assign(static_cast<size_t>(saved), nullptr);
  for (int s = 0; s < saved; ++s) {
    std::vector<int>& index = kept_index_[static_cast<size_t>(s)];
    int& kept = kept_layers_[static_cast<size_t>(s)];
    for (int l = 0; l < config_.n_layer; ++l) index.push_back(Kept(s, l) ? kept++ : -1);
  }
}

BlockModel::~BlockModel() = default;

std::unique_ptr<kernels::Backend> BlockModel::CpuBackendOn(Device* device) {
  HOIST_CHECK(device != nullptr);
  return std::make_unique<kernels::CpuBackend>(device);
}

Status BlockModel::AttachTo(kernels::Backend* backend, zero::ParamStore* store) {
  HOIST_CHECK(backend != nullptr);
  store_ = store;
  backend_ = backend;
  HOIST_RETURN_IF_ERROR(Allocate(&backend->device()));
  return CreateLora(config_, int64_t{max_B_} * max_T_, backend, activation_type_);
}

Model::ActivationBytes BlockModel::CountActivations(DeviceKind device) {
  HOIST_CHECK(backend_ == nullptr) << "counting the activations of an allocated model";
  footprint_device_ = device;
  ActivationBytes bytes;
  const Status counted = AllocateActivations(nullptr, &bytes);
  HOIST_CHECK(counted.ok()) << counted.ToString();
  bytes.device += LoraScratchBytes(config_, int64_t{max_B_} * max_T_, activation_type_);
  return bytes;
}

DeviceKind BlockModel::device_kind() const {
  return backend_ != nullptr ? backend_->kind() : footprint_device_;
}

Status BlockModel::Allocate(Device* device) {
  if (store_ == nullptr) {
    HOIST_ASSIGN_OR_RETURN(
        own_store_, FlatParamStore::Create(StoreUnitOffsets(config_, declaration_.unit_offsets),
                                           backend_, activation_type_));
    store_ = own_store_.get();
  }
  ActivationBytes bytes;
  HOIST_RETURN_IF_ERROR(AllocateActivations(device, &bytes));
  HOIST_RETURN_IF_ERROR(Prepare());
  return stream().Synchronize();
}

bool BlockModel::Kept(int s, int l) const {
  if (s == output_) return true;
  switch (checkpointing_.policy) {
    case CheckpointPolicy::kNone: return true;
    case CheckpointPolicy::kFull:
    case CheckpointPolicy::kEveryK: return !checkpointing_.Checkpointed(l);
    case CheckpointPolicy::kSelective: return declaration_.saved[static_cast<size_t>(s)].selective;
  }
  return true;
}

Status BlockModel::AllocateActivations(Device* device, ActivationBytes* bytes) {
  const int64_t L = config_.n_layer, C = config_.n_embd;
  const int64_t BT = int64_t{max_B_} * max_T_;
  const int64_t Vp = config_.padded_vocab_size();
  Arrays activations(activation_type_), scratch(activation_type_), pinned(activation_type_);
  activations.Typed(&encoded_, BT * C);
  activations.Typed(&lnf_, BT * C);
  activations.Typed(&logits_, BT * Vp);
  activations.Fp32(&losses_, BT);
  scratch.Typed(&dresidual_, BT * C);
  scratch.Typed(&dln_, BT * C);
  DeclareArrays(activations, scratch);
  // Per saved tensor: a stack of the layers that keep it, and one working layer when some layer
  // recomputes it.
  for (int s = 0; s < static_cast<int>(declaration_.saved.size()); ++s) {
    const auto i = static_cast<size_t>(s);
    const int64_t count = SavedCount(s, max_B_, max_T_);
    const DType type = declaration_.saved[i].fp32 ? DType::kFloat32 : activation_type_;
    if (kept_layers_[i] < L) activations.Typed(&work_[i], count, type);
    const bool on_host =
        s == output_ && checkpointing_.cpu_checkpointing && checkpointing_.enabled();
    (on_host ? pinned : activations).Typed(&stack_[i], kept_layers_[i] * count, type);
  }
  const int64_t pinned_bytes = pinned.bytes();
  const int64_t activation_bytes = activations.bytes();
  const int64_t scratch_bytes = scratch.bytes();
  const int64_t token_bytes = 2 * BT * int64_t{sizeof(int32_t)};  // inputs, then targets
  const int64_t workspace_bytes = AttentionWorkspaceBytes();
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
  activations.Carve(activations_.data());
  HOIST_ASSIGN_OR_RETURN(scratch_, allocate(scratch_bytes));
  scratch.Carve(scratch_.data());
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
    // A GPU's kernels read and write these block inputs where they are: only memory its driver
    // pinned is theirs to reach (the pool falls back to plain pages when it cannot pin).
    const std::string& driver = kernels::DeviceFactsOf(device_kind()).host_pinning_driver;
    if (backend_ != nullptr && !driver.empty() && !pinned_.driver_pinned()) {
      return ResourceExhaustedError("activation_checkpointing.cpu_checkpointing: " + driver +
                                    " could not pin " + FormatBytes(pinned_bytes) +
                                    " of host memory for the kept block inputs; free host "
                                    "memory, or turn cpu_checkpointing off (the inputs then stay "
                                    "on the device)");
    }
    pinned.Carve(pinned_.data());
  }
  return Status::Ok();
}

void* BlockModel::At(int s, int l) const {
  const auto i = static_cast<size_t>(s);
  const int index = kept_index_[i][static_cast<size_t>(l)];
  if (index < 0) return work_[i];
  const DType type = declaration_.saved[i].fp32 ? DType::kFloat32 : activation_type_;
  return ElementPtr(stack_[i], type, index * SavedCount(s, last_B_, last_T_));
}

Status BlockModel::Zero(void* p, int64_t count) {
  return backend_->Zero(p, count * static_cast<int64_t>(DTypeSize(activation_type_)), stream());
}

Status BlockModel::Lora(LoraModule::Site site, int l, void* y, const void* x,
                        const void* adapters) {
  if (lora_ == nullptr) return Status::Ok();
  return lora_->Forward(site, l, y, x, adapters, last_B_, last_T_);
}

Status BlockModel::LoraBackward(LoraModule::Site site, int l, void* dx, const void* dy,
                                const void* x, const void* adapters, float* grads) {
  if (lora_ == nullptr) return Status::Ok();
  return lora_->Backward(site, l, dx, dy, x, adapters, grads, last_B_, last_T_);
}

float* BlockModel::params() {
  HOIST_CHECK(own_store_ != nullptr) << "params() of a model whose weights live in a ZeRO store";
  return own_store_->params();
}

float* BlockModel::grads() {
  HOIST_CHECK(own_store_ != nullptr) << "grads() of a model whose gradients live in a ZeRO store";
  return own_store_->grads();
}

const float* BlockModel::logits() const {
  HOIST_CHECK(activation_type_ == DType::kFloat32) << "logits() of a 16-bit model";
  return static_cast<const float*>(logits_);
}

Status BlockModel::InitializeWeights(uint64_t seed) {
  const std::vector<int64_t>& offsets = declaration_.unit_offsets;
  std::vector<float> unit;
  for (size_t u = 0; u + 1 < offsets.size(); ++u) {
    const int64_t size = offsets[u + 1] - offsets[u];
    unit.resize(static_cast<size_t>(size));
    InitializeUnit(static_cast<int>(u), seed, unit.data());
    HOIST_RETURN_IF_ERROR(backend_->Copy(params() + offsets[u], unit.data(),
                                         size * int64_t{sizeof(float)},
                                         kernels::CopyDirection::kHostToDevice, stream()));
    HOIST_RETURN_IF_ERROR(stream().Synchronize());
  }
  return Status::Ok();
}

Status BlockModel::ZeroGradients() {
  if (own_store_ == nullptr) return Status::Ok();
  HOIST_RETURN_IF_ERROR(
      backend_->Zero(grads(), own_store_->elements() * int64_t{sizeof(float)}, stream()));
  return stream().Synchronize();
}

StatusOr<float> BlockModel::Forward(const int32_t* inputs, const int32_t* targets, int B, int T,
                                    float dloss) {
  HOIST_CHECK(B > 0 && B <= max_B_ && T > 0 && T <= max_T_)
      << "batch (" << B << ", " << T << ") exceeds (" << max_B_ << ", " << max_T_ << ")";
  HOIST_CHECK(dloss == 0.0f || targets != nullptr) << "a backward pass needs targets";
  if (inputs == nullptr) {
    return InvalidArgumentError(std::string(declaration_.name) + "::Forward: inputs is null");
  }
  // A pass that failed midway left units acquired from the store and buffers half written: the
  // model computes nothing more (its error again).
  HOIST_RETURN_IF_ERROR(failed_);
  const int head_unit = declaration_.tied_head ? 0 : config_.n_layer + 1;
  if (backward_ready_) {  // a training forward whose backward never came: hand back the head
    store_->ReleaseParams(head_unit);
    backward_ready_ = false;
  }
  last_B_ = B;
  last_T_ = T;
  StatusOr<float> loss = RunForward(inputs, targets, dloss);
  if (!loss.ok()) failed_ = loss.status();
  return loss;
}

StatusOr<float> BlockModel::RunForward(const int32_t* inputs, const int32_t* targets, float dloss) {
  const int B = last_B_, T = last_T_, L = config_.n_layer, C = config_.n_embd;
  const int V = config_.vocab_size, Vp = config_.padded_vocab_size();
  const int64_t BT = int64_t{B} * T;
  const int N = static_cast<int>(BT);
  const int kEmbedding = 0, kFinal = L + 1;
  const bool tied = declaration_.tied_head;
  const Stream& st = stream();

  EnterPhase(Phase::kForward, -1);
  // Through the model's own host copy: a pass that stops early returns without waiting for the
  // stream, and the caller's arrays may be gone before a queued copy reads them. (The last pass
  // ended with a wait, or failed for good, so nothing queued reads host_tokens_ now.)
  const size_t positions = static_cast<size_t>(BT);
  std::memcpy(host_tokens_.data(), inputs, positions * sizeof(int32_t));
  if (targets != nullptr) {
    std::memcpy(host_tokens_.data() + positions, targets, positions * sizeof(int32_t));
  }
  HOIST_RETURN_IF_ERROR(backend_->Copy(inputs_, host_tokens_.data(), BT * int64_t{sizeof(int32_t)},
                                       kernels::CopyDirection::kHostToDevice, st));
  if (targets != nullptr) {
    HOIST_RETURN_IF_ERROR(backend_->Copy(targets_, host_tokens_.data() + positions,
                                         BT * int64_t{sizeof(int32_t)},
                                         kernels::CopyDirection::kHostToDevice, st));
  }
  HOIST_ASSIGN_OR_RETURN(const void* embedding, store_->AcquireParams(kEmbedding));
  store_->Prefetch(1);
  HOIST_RETURN_IF_ERROR(EmbedForward(embedding));
  store_->ReleaseParams(kEmbedding);

  const uint64_t all = Bit(static_cast<int>(declaration_.saved.size())) - 1;
  const void* residual = encoded_;
  for (int l = 0; l < L; ++l) {
    EnterPhase(Phase::kForward, l);
    HOIST_ASSIGN_OR_RETURN(const void* weights, store_->AcquireParams(1 + l));
    const void* adapters = nullptr;
    if (lora_ != nullptr) {
      HOIST_ASSIGN_OR_RETURN(adapters, store_->AcquireParams(lora_->unit(l)));
    }
    store_->Prefetch(l + 1 < L ? 2 + l : kFinal);
    // dresidual_ is free during forward: it holds the projections' outputs.
    HOIST_RETURN_IF_ERROR(BlockForward(l, residual, weights, adapters, dresidual_, all));
    if (adapters != nullptr) store_->ReleaseParams(lora_->unit(l));
    store_->ReleaseParams(1 + l);
    residual = At(output_, l);
  }

  EnterPhase(Phase::kLoss, -1);
  HOIST_ASSIGN_OR_RETURN(const void* final_unit, store_->AcquireParams(kFinal));
  if (tied) store_->Prefetch(kEmbedding);
  HOIST_RETURN_IF_ERROR(FinalNormForward(final_unit, residual));
  // The head: logits = lnf @ W^T, W the token embedding (tied) or the final unit's own matrix.
  // A training forward keeps the head's unit until Backward has used it.
  const void* head = final_unit;
  if (tied) {
    store_->ReleaseParams(kFinal);
    HOIST_ASSIGN_OR_RETURN(head, store_->AcquireParams(kEmbedding));
  }
  HOIST_RETURN_IF_ERROR(backend_->MatmulForward(logits_, lnf_,
                                                Weight(head, declaration_.head_offset), nullptr, N,
                                                C, Vp, activation_type_, nullptr, st));
  // Soft-capped logits (Gemma 2): the logits a caller reads are the capped ones; a training
  // forward leaves them raw and the cross-entropy caps them and differentiates through the cap.
  const bool training = targets != nullptr && dloss > 0.0f;
  const float cap = config_.final_logit_softcapping;
  if (cap > 0.0f && !training) {
    HOIST_RETURN_IF_ERROR(
        backend_->SoftcapForward(logits_, int64_t{N} * Vp, cap, activation_type_, st));
  }
  if (!training) store_->ReleaseParams(tied ? kEmbedding : kFinal);
  if (targets == nullptr) {
    HOIST_RETURN_IF_ERROR(st.Synchronize());
    return 0.0f;
  }
  // The mean is over the positions whose target counts: a negative target is a position the loss
  // is masked off (a prompt token), which the cross-entropy gives no loss and no gradient.
  const int32_t* host_targets = host_tokens_.data() + positions;
  const int64_t counted =
      std::count_if(host_targets, host_targets + BT, [](int32_t target) { return target >= 0; });
  const float weight = counted > 0 ? dloss / static_cast<float>(counted) : 0.0f;
  HOIST_RETURN_IF_ERROR(backend_->SoftmaxCrossEntropy(losses_, training ? logits_ : nullptr,
                                                      logits_, targets_, weight, N, V, Vp,
                                                      training ? cap : 0.0f, activation_type_, st));
  HOIST_RETURN_IF_ERROR(backend_->Copy(host_losses_.data(), losses_, BT * int64_t{sizeof(float)},
                                       kernels::CopyDirection::kDeviceToHost, st));
  HOIST_RETURN_IF_ERROR(st.Synchronize());
  double sum = 0.0;
  for (int64_t i = 0; i < BT; ++i) sum += host_losses_[static_cast<size_t>(i)];
  backward_ready_ = dloss > 0.0f;
  return counted > 0 ? static_cast<float>(sum / static_cast<double>(counted)) : 0.0f;
}

Status BlockModel::Backward() {
  HOIST_RETURN_IF_ERROR(failed_);  // see Forward
  HOIST_CHECK(backward_ready_) << "Backward without a Forward that had targets and dloss";
  backward_ready_ = false;
  Status done = RunBackward();
  if (!done.ok()) failed_ = done;
  return done;
}

Status BlockModel::HeadBackward(const void* head, float* head_grads) {
  const int64_t BT = int64_t{last_B_} * last_T_;
  const int64_t offset = declaration_.head_offset;
  HOIST_RETURN_IF_ERROR(Zero(dln_, BT * config_.n_embd));
  return backend_->MatmulBackward(
      dln_, head_grads == nullptr ? nullptr : head_grads + offset, nullptr, logits_, lnf_,
      Weight(head, offset), static_cast<int>(BT), config_.n_embd, Vp(), activation_type_, stream());
}

Status BlockModel::RunBackward() {
  const int L = config_.n_layer;
  const int64_t BT = int64_t{last_B_} * last_T_;
  const int kEmbedding = 0, kFinal = L + 1;
  const bool tied = declaration_.tied_head;
  // A frozen base (LoRA) gets no gradients: only the input gradients flow down to the adapters.
  const bool frozen = frozen_base();

  // logits_ holds dlogits. dresidual_ carries the gradient of the residual stream down the
  // layers. With a tied head the embedding's gradient buffer stays with us from the head (first)
  // to the token embedding (last); untied, the final unit's serves the head and the final norm.
  EnterPhase(Phase::kLoss, -1);
  float* embedding_grads = nullptr;
  float* final_grads = nullptr;
  const void* final_unit = nullptr;
  if (tied) {
    if (!frozen) {
      HOIST_ASSIGN_OR_RETURN(embedding_grads, store_->AcquireGrads(kEmbedding));
    }
    HOIST_ASSIGN_OR_RETURN(const void* head,
                           store_->AcquireParams(kEmbedding));  // still held since Forward
    store_->Prefetch(kFinal);
    HOIST_RETURN_IF_ERROR(HeadBackward(head, embedding_grads));
    store_->ReleaseParams(kEmbedding);
    store_->ReleaseParams(kEmbedding);
    HOIST_ASSIGN_OR_RETURN(final_unit, store_->AcquireParams(kFinal));
    if (L > 0) store_->Prefetch(L);
    if (!frozen) {
      HOIST_ASSIGN_OR_RETURN(final_grads, store_->AcquireGrads(kFinal));
    }
  } else {
    HOIST_ASSIGN_OR_RETURN(final_unit, store_->AcquireParams(kFinal));  // still held since Forward
    if (!frozen) {
      HOIST_ASSIGN_OR_RETURN(final_grads, store_->AcquireGrads(kFinal));
    }
    HOIST_RETURN_IF_ERROR(HeadBackward(final_unit, final_grads));
    store_->ReleaseParams(kFinal);
    if (L > 0) store_->Prefetch(L);
  }
  const void* last_residual = L > 0 ? At(output_, L - 1) : encoded_;
  HOIST_RETURN_IF_ERROR(Zero(dresidual_, BT * config_.n_embd));
  HOIST_RETURN_IF_ERROR(FinalNormBackward(final_unit, final_grads, last_residual));
  if (!frozen) store_->ReleaseGrads(kFinal);
  store_->ReleaseParams(kFinal);

  for (int l = L - 1; l >= 0; --l) {
    EnterPhase(Phase::kBackward, l);
    HOIST_ASSIGN_OR_RETURN(const void* weights, store_->AcquireParams(1 + l));
    if (l > 0) store_->Prefetch(l);
    const void* adapters = nullptr;
    float* adapter_grads = nullptr;
    if (lora_ != nullptr) {
      HOIST_ASSIGN_OR_RETURN(adapters, store_->AcquireParams(lora_->unit(l)));
      HOIST_ASSIGN_OR_RETURN(adapter_grads, store_->AcquireGrads(lora_->unit(l)));
    }
    float* grads = nullptr;
    if (!frozen) {
      HOIST_ASSIGN_OR_RETURN(grads, store_->AcquireGrads(1 + l));
    }
    // The layer's input is the previous layer's output; what this layer did not keep is
    // recomputed from it first. dln_ is free until the block's backward: it holds the
    // projections' outputs.
    const void* residual = l == 0 ? encoded_ : At(output_, l - 1);
    uint64_t recompute = 0;
    for (int s = 0; s < output_; ++s) {
      if (!Kept(s, l)) recompute |= Bit(s);
    }
    if (recompute != 0) {
      const auto start = std::chrono::steady_clock::now();
      const Status recomputed = BlockForward(l, residual, weights, adapters, dln_, recompute);
      ++recomputed_blocks_;
      recompute_s_ +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      HOIST_RETURN_IF_ERROR(recomputed);
    }
    HOIST_RETURN_IF_ERROR(BlockBackward(l, residual, weights, grads, adapters, adapter_grads));
    if (!frozen) store_->ReleaseGrads(1 + l);
    if (lora_ != nullptr) {
      store_->ReleaseGrads(lora_->unit(l));
      store_->ReleaseParams(lora_->unit(l));
    }
    store_->ReleaseParams(1 + l);
  }

  EnterPhase(Phase::kBackward, -1);
  if (!frozen) {
    if (!tied) {
      HOIST_ASSIGN_OR_RETURN(embedding_grads, store_->AcquireGrads(kEmbedding));
    }
    HOIST_RETURN_IF_ERROR(EmbedBackward(embedding_grads));
    store_->ReleaseGrads(kEmbedding);
  }
  // A model with its own store is read by the caller (grads()) right after: wait for the work.
  if (own_store_ != nullptr) return stream().Synchronize();
  return Status::Ok();
}

}  // namespace hoist::runtime
