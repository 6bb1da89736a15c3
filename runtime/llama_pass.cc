// LlamaModel's forward and backward passes (runtime/llama.h).
#include <chrono>
#include <cstring>
#include <limits>
#include <string>

#include "core/check.h"
#include "runtime/llama.h"

namespace hoist::runtime {

namespace {

// One block's gradients within its unit's fp32 buffer.
struct BlockGrads {
  float *ln1, *qkv, *o, *ln2, *gate_up, *down;

  // A null unit (a frozen base's gradients) gives null tensors.
  BlockGrads(float* unit, const LlamaLayout& layout) {
    auto at = [&](int tensor) {
      return unit == nullptr ? nullptr : unit + layout.local_offsets[tensor];
    };
    ln1 = at(kLlamaInputNorm), qkv = at(kLlamaQkv), o = at(kLlamaOProj);
    ln2 = at(kLlamaPostNorm), gate_up = at(kLlamaGateUp), down = at(kLlamaDown);
  }
};

// One block's weights as the store gives them (acquired: what AcquireParams returned): the
// matmuls' as zero::StoredWeight (dense, or 4-bit in a frozen 4-bit base), the norms' in the
// compute type.
struct BlockWeights {
  const void *ln1, *ln2;
  zero::StoredWeight qkv, o, gate_up, down;

  BlockWeights(const zero::ParamStore& store, int unit, const void* acquired,
               const LlamaLayout& layout) {
    auto at = [&](int tensor) {
      return store.Weight(unit, acquired, layout.local_offsets[tensor]);
    };
    ln1 = at(kLlamaInputNorm).dense, ln2 = at(kLlamaPostNorm).dense;
    qkv = at(kLlamaQkv), o = at(kLlamaOProj), gate_up = at(kLlamaGateUp), down = at(kLlamaDown);
  }
};

}  // namespace

// Forward's ops for layer l; `run(s)` says whether to compute saved tensor s (forward: all of
// them; a recomputation: those the layer did not keep, each from what was kept or recomputed just
// before it). The same ops on the same inputs in the same order give the same bits.
template <typename Run>
bool LlamaModel::BlockForward(int l, const void* residual, const void* weights,
                              const void* adapters, void* scratch, Run run) {
  const int B = last_B_, T = last_T_, C = C_;
  const int64_t BT = int64_t{B} * T;
  const int N = static_cast<int>(BT), A = NH_ * hd_;
  const DType a = activation_type_;
  const float eps = config_.rms_norm_eps;
  const Stream& st = stream();
  const BlockWeights w(*store_, 1 + l, weights, layout_);
  float* lse = lse_ == nullptr ? nullptr : lse_ + int64_t{l} * B * NH_ * T;
  if (run(kSavedLn1) && !Ok(backend_->RmsNormForward(At(kSavedLn1, l), rstd1_ + l * BT, residual,
                                                     w.ln1, N, C, eps, a, st))) {
    return false;
  }
  if (run(kSavedQkv) &&
      !(Ok(StoredMatmulForward(*backend_, At(kSavedQkv, l), At(kSavedLn1, l), w.qkv, nullptr, N, C,
                               QKV_, a, st)) &&
        Lora(LoraModule::kLlamaQ, l, At(kSavedQkv, l), At(kSavedLn1, l), adapters) &&
        Lora(LoraModule::kLlamaK, l, At(kSavedQkv, l), At(kSavedLn1, l), adapters) &&
        Lora(LoraModule::kLlamaV, l, At(kSavedQkv, l), At(kSavedLn1, l), adapters) &&
        Ok(backend_->RopeForward(At(kSavedQkv, l), rope_cos_, rope_sin_, B, T, NH_, NKV_, hd_, a,
                                 st)))) {
    return false;
  }
  if (run(kSavedAtty) &&
      !Ok(tiled() ? backend_->GqaAttentionForwardTiled(At(kSavedAtty, l), lse, At(kSavedQkv, l), B,
                                                       T, NH_, NKV_, hd_, a, st)
                  : backend_->GqaAttentionForward(
                        At(kSavedAtty, l), static_cast<float*>(At(kSavedAtt, l)), At(kSavedQkv, l),
                        attention_workspace_.data(), B, T, NH_, NKV_, hd_, a, st))) {
    return false;
  }
  if (run(kSavedResidual2) &&
      !(Ok(StoredMatmulForward(*backend_, scratch, At(kSavedAtty, l), w.o, nullptr, N, A, C, a,
                               st)) &&
        Lora(LoraModule::kLlamaO, l, scratch, At(kSavedAtty, l), adapters) &&
        Ok(backend_->ResidualForward(At(kSavedResidual2, l), residual, scratch, BT * C, a, st)))) {
    return false;
  }
  if (run(kSavedLn2) &&
      !Ok(backend_->RmsNormForward(At(kSavedLn2, l), rstd2_ + l * BT, At(kSavedResidual2, l), w.ln2,
                                   N, C, eps, a, st))) {
    return false;
  }
  if (run(kSavedGateUp) &&
      !(Ok(StoredMatmulForward(*backend_, At(kSavedGateUp, l), At(kSavedLn2, l), w.gate_up, nullptr,
                               N, C, 2 * I_, a, st)) &&
        Lora(LoraModule::kLlamaGate, l, At(kSavedGateUp, l), At(kSavedLn2, l), adapters) &&
        Lora(LoraModule::kLlamaUp, l, At(kSavedGateUp, l), At(kSavedLn2, l), adapters))) {
    return false;
  }
  if (run(kSavedSwiGlu) &&
      !Ok(backend_->SwiGluForward(At(kSavedSwiGlu, l), At(kSavedGateUp, l), N, I_, a, st))) {
    return false;
  }
  if (run(kSavedResidual3) &&
      !(Ok(StoredMatmulForward(*backend_, scratch, At(kSavedSwiGlu, l), w.down, nullptr, N, I_, C,
                               a, st)) &&
        Lora(LoraModule::kLlamaDown, l, scratch, At(kSavedSwiGlu, l), adapters) &&
        Ok(backend_->ResidualForward(At(kSavedResidual3, l), At(kSavedResidual2, l), scratch,
                                     BT * C, a, st)))) {
    return false;
  }
  return true;
}

float LlamaModel::Forward(const int32_t* inputs, const int32_t* targets, int B, int T,
                          float dloss) {
  HOIST_CHECK(B > 0 && B <= max_B_ && T > 0 && T <= max_T_)
      << "batch (" << B << ", " << T << ") exceeds (" << max_B_ << ", " << max_T_ << ")";
  HOIST_CHECK(dloss == 0.0f || targets != nullptr) << "a backward pass needs targets";
  const int L = config_.n_layer, C = C_;
  const int V = config_.vocab_size, Vp = config_.padded_vocab_size();
  const int64_t BT = int64_t{B} * T;
  const int N = static_cast<int>(BT);
  const int kEmbedding = 0, kFinal = L + 1;
  const int head_unit = layout_.tied ? kEmbedding : kFinal;
  if (backward_ready_) {  // a training forward whose backward never came: hand back the head
    store_->ReleaseParams(head_unit);
    backward_ready_ = false;
  }
  last_B_ = B;
  last_T_ = T;
  const float kFailed = std::numeric_limits<float>::quiet_NaN();
  if (!store_->status().ok() || !status_.ok()) return kFailed;
  const DType a = activation_type_;
  const Stream& st = stream();

  EnterPhase(Phase::kForwardEmbedding, -1);
  if (inputs == nullptr) {
    (void)Ok(InvalidArgumentError("LlamaModel::Forward: inputs is null"));
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
  // The gather of the token rows: the encoder op against a zero position table.
  if (!Ok(backend_->EncoderForward(encoded_, inputs_, Weight(embedding, kLlamaEmbedTokens),
                                   zero_positions_, B, T, C, a, st))) {
    return kFailed;
  }
  store_->ReleaseParams(kEmbedding);
  const void* residual = encoded_;
  for (int l = 0; l < L; ++l) {
    EnterPhase(Phase::kForwardBlock, l);
    const void* weights = store_->AcquireParams(1 + l);
    if (weights == nullptr) return kFailed;
    const void* adapters = nullptr;
    if (lora_ != nullptr && (adapters = store_->AcquireParams(lora_->unit(l))) == nullptr) {
      return kFailed;
    }
    store_->Prefetch(l + 1 < L ? 2 + l : kFinal);
    if (!BlockForward(l, residual, weights, adapters, dresidual_, [](int) { return true; })) {
      return kFailed;
    }
    if (adapters != nullptr) store_->ReleaseParams(lora_->unit(l));
    store_->ReleaseParams(1 + l);
    residual = At(kSavedResidual3, l);
  }
  EnterPhase(Phase::kForwardHead, -1);
  const void* final_unit = store_->AcquireParams(kFinal);
  if (final_unit == nullptr) return kFailed;
  if (layout_.tied) store_->Prefetch(kEmbedding);
  if (!Ok(backend_->RmsNormForward(lnf_, rstdf_, residual, Weight(final_unit, kLlamaFinalNorm), N,
                                   C, config_.rms_norm_eps, a, st))) {
    return kFailed;
  }
  // The head: logits = lnf @ W^T with W the untied lm_head (in the final unit, still held) or the
  // token embedding. A training forward keeps the head's unit until Backward has used it.
  const void* head = final_unit;
  int head_tensor = kLlamaLmHead;
  if (layout_.tied) {
    store_->ReleaseParams(kFinal);
    head = store_->AcquireParams(kEmbedding);
    if (head == nullptr) return kFailed;
    head_tensor = kLlamaEmbedTokens;
  }
  if (!Ok(backend_->MatmulForward(logits_, lnf_, Weight(head, head_tensor), nullptr, N, C, Vp, a,
                                  nullptr, st))) {
    return kFailed;
  }
  if (targets == nullptr || dloss <= 0.0f) store_->ReleaseParams(head_unit);
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

bool LlamaModel::Lora(LoraModule::Site site, int l, void* y, const void* x, const void* adapters) {
  return lora_ == nullptr || Ok(lora_->Forward(site, l, y, x, adapters, last_B_, last_T_));
}

bool LlamaModel::LoraBackward(LoraModule::Site site, int l, void* dx, const void* dy, const void* x,
                              const void* adapters, float* grads) {
  return lora_ == nullptr ||
         Ok(lora_->Backward(site, l, dx, dy, x, adapters, grads, last_B_, last_T_));
}

bool LlamaModel::BlockBackward(int l, const void* residual, const void* weights, float* grads,
                               const void* adapters, float* adapter_grads) {
  const int B = last_B_, T = last_T_, C = C_;
  const int64_t BT = int64_t{B} * T;
  const int N = static_cast<int>(BT), A = NH_ * hd_;
  const DType a = activation_type_;
  const Stream& st = stream();
  const BlockWeights w(*store_, 1 + l, weights, layout_);
  const BlockGrads g(grads, layout_);
  float* lse = lse_ == nullptr ? nullptr : lse_ + int64_t{l} * B * NH_ * T;
  // MLP: residual3 = residual2 + down(swiglu(gate_up(rmsnorm2(residual2)))).
  const bool mlp =
      Zero(dswiglu_, BT * I_) &&
      Ok(StoredMatmulBackward(*backend_, dswiglu_, g.down, nullptr, dresidual_, At(kSavedSwiGlu, l),
                              w.down, N, I_, C, a, st)) &&
      LoraBackward(LoraModule::kLlamaDown, l, dswiglu_, dresidual_, At(kSavedSwiGlu, l), adapters,
                   adapter_grads) &&
      Zero(dgateup_, BT * 2 * I_) &&
      Ok(backend_->SwiGluBackward(dgateup_, At(kSavedGateUp, l), dswiglu_, N, I_, a, st)) &&
      Zero(dln_, BT * C) &&
      Ok(StoredMatmulBackward(*backend_, dln_, g.gate_up, nullptr, dgateup_, At(kSavedLn2, l),
                              w.gate_up, N, C, 2 * I_, a, st)) &&
      LoraBackward(LoraModule::kLlamaGate, l, dln_, dgateup_, At(kSavedLn2, l), adapters,
                   adapter_grads) &&
      LoraBackward(LoraModule::kLlamaUp, l, dln_, dgateup_, At(kSavedLn2, l), adapters,
                   adapter_grads) &&
      Ok(backend_->RmsNormBackward(dresidual_, g.ln2, dln_, At(kSavedResidual2, l), w.ln2,
                                   rstd2_ + l * BT, N, C, a, st));
  if (!mlp) return false;
  // Attention: residual2 = residual + o(attention(rope(qkv(rmsnorm1(residual))))).
  return Zero(datty_, BT * A) &&
         Ok(StoredMatmulBackward(*backend_, datty_, g.o, nullptr, dresidual_, At(kSavedAtty, l),
                                 w.o, N, A, C, a, st)) &&
         LoraBackward(LoraModule::kLlamaO, l, datty_, dresidual_, At(kSavedAtty, l), adapters,
                      adapter_grads) &&
         Zero(dqkv_, BT * QKV_) &&
         Ok(tiled()
                ? backend_->GqaAttentionBackwardTiled(
                      dqkv_, datty_, At(kSavedQkv, l), At(kSavedAtty, l), lse,
                      attention_workspace_.data(), B, T, NH_, NKV_, hd_, a, st)
                : backend_->GqaAttentionBackward(
                      dqkv_, datty_, At(kSavedQkv, l), static_cast<const float*>(At(kSavedAtt, l)),
                      attention_workspace_.data(), B, T, NH_, NKV_, hd_, a, st)) &&
         Ok(backend_->RopeBackward(dqkv_, rope_cos_, rope_sin_, B, T, NH_, NKV_, hd_, a, st)) &&
         Zero(dln_, BT * C) &&
         Ok(StoredMatmulBackward(*backend_, dln_, g.qkv, nullptr, dqkv_, At(kSavedLn1, l), w.qkv, N,
                                 C, QKV_, a, st)) &&
         LoraBackward(LoraModule::kLlamaQ, l, dln_, dqkv_, At(kSavedLn1, l), adapters,
                      adapter_grads) &&
         LoraBackward(LoraModule::kLlamaK, l, dln_, dqkv_, At(kSavedLn1, l), adapters,
                      adapter_grads) &&
         LoraBackward(LoraModule::kLlamaV, l, dln_, dqkv_, At(kSavedLn1, l), adapters,
                      adapter_grads) &&
         Ok(backend_->RmsNormBackward(dresidual_, g.ln1, dln_, residual, w.ln1, rstd1_ + l * BT, N,
                                      C, a, st));
}

void LlamaModel::Backward() {
  if (!store_->status().ok() || !status_.ok()) {
    backward_ready_ = false;
    return;
  }
  HOIST_CHECK(backward_ready_) << "Backward without a Forward that had targets and dloss";
  backward_ready_ = false;
  const int B = last_B_, T = last_T_;
  const int L = config_.n_layer, C = C_;
  const int Vp = config_.padded_vocab_size();
  const int64_t BT = int64_t{B} * T;
  const int N = static_cast<int>(BT);
  const int kEmbedding = 0, kFinal = L + 1;
  const DType a = activation_type_;
  const Stream& st = stream();
  // A frozen base (LoRA) gets no gradients: only the input gradients flow down to the adapters.
  const bool frozen = frozen_base();
  auto grad = [&](float* unit, int tensor) {
    return unit == nullptr ? nullptr : unit + layout_.local_offsets[tensor];
  };

  // logits_ holds dlogits. With a tied head the embedding's gradient buffer stays with us from
  // the head (first) to the token embedding (last); untied, the final unit's serves the head and
  // the final norm.
  EnterPhase(Phase::kBackwardHead, -1);
  float* embedding_grads = nullptr;
  float* final_grads = nullptr;
  const void* final_unit = nullptr;
  if (layout_.tied) {
    embedding_grads = frozen ? nullptr : store_->AcquireGrads(kEmbedding);
    if (!frozen && embedding_grads == nullptr) return;
    const void* embedding = store_->AcquireParams(kEmbedding);  // still held since Forward
    if (embedding == nullptr) return;
    store_->Prefetch(kFinal);
    if (!Zero(dln_, BT * C) || !Ok(backend_->MatmulBackward(
                                   dln_, grad(embedding_grads, kLlamaEmbedTokens), nullptr, logits_,
                                   lnf_, Weight(embedding, kLlamaEmbedTokens), N, C, Vp, a, st))) {
      return;
    }
    store_->ReleaseParams(kEmbedding);
    store_->ReleaseParams(kEmbedding);
    final_unit = store_->AcquireParams(kFinal);
    if (final_unit == nullptr) return;
    final_grads = frozen ? nullptr : store_->AcquireGrads(kFinal);
    if (!frozen && final_grads == nullptr) return;
  } else {
    final_unit = store_->AcquireParams(kFinal);  // still held since Forward
    if (final_unit == nullptr) return;
    final_grads = frozen ? nullptr : store_->AcquireGrads(kFinal);
    if (!frozen && final_grads == nullptr) return;
    if (!Zero(dln_, BT * C) ||
        !Ok(backend_->MatmulBackward(dln_, grad(final_grads, kLlamaLmHead), nullptr, logits_, lnf_,
                                     Weight(final_unit, kLlamaLmHead), N, C, Vp, a, st))) {
      return;
    }
    store_->ReleaseParams(kFinal);
  }
  if (L > 0) store_->Prefetch(L);
  const void* last_residual = L > 0 ? At(kSavedResidual3, L - 1) : encoded_;
  if (!Zero(dresidual_, BT * C) ||
      !Ok(backend_->RmsNormBackward(dresidual_, grad(final_grads, kLlamaFinalNorm), dln_,
                                    last_residual, Weight(final_unit, kLlamaFinalNorm), rstdf_, N,
                                    C, a, st))) {
    return;
  }
  if (!frozen) store_->ReleaseGrads(kFinal);
  store_->ReleaseParams(kFinal);

  for (int l = L - 1; l >= 0; --l) {
    EnterPhase(Phase::kBackwardBlock, l);
    const void* weights = store_->AcquireParams(1 + l);
    if (weights == nullptr) return;
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
    const void* residual = l == 0 ? encoded_ : At(kSavedResidual3, l - 1);
    bool recomputes = false;
    for (int s = 0; s < kNumSaved; ++s) recomputes = recomputes || !Kept(s, l);
    if (recomputes) {
      const auto start = std::chrono::steady_clock::now();
      // dln_ is free until the MLP's backward: it holds the projections' outputs.
      const bool ok =
          BlockForward(l, residual, weights, adapters, dln_, [&](int s) { return !Kept(s, l); });
      ++recomputed_blocks_;
      recompute_s_ +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (!ok) return;
    }
    if (!BlockBackward(l, residual, weights, grads, adapters, adapter_grads)) return;
    if (!frozen) store_->ReleaseGrads(1 + l);
    if (lora_ != nullptr) {
      store_->ReleaseGrads(lora_->unit(l));
      store_->ReleaseParams(lora_->unit(l));
    }
    store_->ReleaseParams(1 + l);
  }
  EnterPhase(Phase::kBackwardEmbedding, -1);
  if (frozen) {
    if (own_store_ != nullptr) (void)Ok(st.Synchronize());
    return;
  }
  if (!layout_.tied) {
    embedding_grads = store_->AcquireGrads(kEmbedding);
    if (embedding_grads == nullptr) return;
  }
  // The encoder's position gradient lands in a scratch table nobody reads.
  if (!Ok(backend_->Zero(dpositions_, int64_t{T} * C * int64_t{sizeof(float)}, st)) ||
      !Ok(backend_->EncoderBackward(grad(embedding_grads, kLlamaEmbedTokens), dpositions_,
                                    dresidual_, inputs_, B, T, C, a, st))) {
    return;
  }
  store_->ReleaseGrads(kEmbedding);
  if (own_store_ != nullptr) (void)Ok(st.Synchronize());
}

}  // namespace hoist::runtime
