// Gpt2Model's declaration to the block model and its embedding, block and final norm
// (runtime/model/gpt2.h); its layout and initialisation are in gpt2_params.cc.
#include "runtime/model/gpt2.h"

#include <algorithm>

#include "core/check.h"
#include "kernels/device_facts.h"
#include "runtime/model/gpt2_weights.h"
#include "runtime/model/model_family.h"

namespace hoist::runtime {

namespace {

// The saved tensors' kinds: recomputed under the selective policy, kept by it, and the attention
// probabilities (fp32, recomputed with the attention's output).
constexpr BlockModel::SavedTensor kRecomputed{false, false}, kSelective{false, true},
    kProbabilities{true, false};

// One transformer block's gradients within its unit's fp32 buffer; a null unit (a frozen base's
// gradients) gives null tensors.
struct BlockGrads {
  float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw,
      *fcprojb;

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

Gpt2Model::Gpt2Model(const ModelConfig& config, int max_B, int max_T, DType activation_type,
                     const ActivationCheckpointingConfig& checkpointing)
    : BlockModel(config, max_B, max_T, activation_type, checkpointing,
                 {.name = "Gpt2Model",
                  .unit_offsets = ParamLayout::For(config).unit_offsets,
                  // ln1, qkv, atty, att (fp32), residual2, ln2, fch, fch_gelu, residual3.
                  .saved = {kRecomputed, kSelective, kRecomputed, kProbabilities, kSelective,
                            kRecomputed, kSelective, kRecomputed, kRecomputed},
                  .tied_head = true,
                  .head_offset = ParamLayout::For(config).local_offsets[kWte],
                  .initialize_unit = &InitializeGpt2Unit,
                  .initialize_range = &InitializeGpt2Range}),
      layout_(ParamLayout::For(config)) {}

Gpt2Model::~Gpt2Model() = default;

StatusOr<std::unique_ptr<Gpt2Model>> Gpt2Model::Create(
    const ModelConfig& config, int max_B, int max_T, Device* device, zero::ParamStore* store,
    DType activation_type, const ActivationCheckpointingConfig& checkpointing) {
  return CreateOnCpu<Gpt2Model>(config, max_B, max_T, device, store, activation_type,
                                checkpointing);
}

StatusOr<std::unique_ptr<Gpt2Model>> Gpt2Model::Create(
    const ModelConfig& config, int max_B, int max_T, kernels::Backend* backend,
    zero::ParamStore* store, DType activation_type,
    const ActivationCheckpointingConfig& checkpointing) {
  HOIST_RETURN_IF_ERROR(
      CheckModelArguments(config, max_B, max_T, store, activation_type, checkpointing));
  return Attach(std::unique_ptr<Gpt2Model>(
                    new Gpt2Model(config, max_B, max_T, activation_type, checkpointing)),
                backend, store);
}

Model::ActivationBytes Gpt2Model::ActivationFootprint(
    const ModelConfig& config, int max_B, int max_T, DType activation_type,
    const ActivationCheckpointingConfig& checkpointing, DeviceKind device) {
  return Gpt2Model(config, max_B, max_T, activation_type, checkpointing).CountActivations(device);
}

void Gpt2Model::DeclareArrays(Arrays& activations, Arrays& scratch) {
  const int64_t L = config_.n_layer, C = config_.n_embd, NH = config_.n_head;
  const int64_t BT = int64_t{max_B_} * max_T_;
  activations.Fp32(&ln1_mean_, L * BT);
  activations.Fp32(&ln1_rstd_, L * BT);
  activations.Fp32(&lse_, tiled() ? L * BT * NH : 0);
  activations.Fp32(&ln2_mean_, L * BT);
  activations.Fp32(&ln2_rstd_, L * BT);
  activations.Fp32(&lnf_mean_, BT);
  activations.Fp32(&lnf_rstd_, BT);
  scratch.Typed(&datty_, BT * C);
  scratch.Typed(&dqkv_, BT * 3 * C);
  scratch.Typed(&dfch_, BT * 4 * C);
  scratch.Typed(&dfch_gelu_, BT * 4 * C);
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

int64_t Gpt2Model::AttentionWorkspaceBytes() const {
  const int C = config_.n_embd, NH = config_.n_head;
  if (backend_ != nullptr) {
    return tiled() ? backend_->TiledAttentionWorkspaceBytes(max_B_, max_T_, NH)
                   : backend_->AttentionWorkspaceBytes(max_B_, max_T_, C, NH, activation_type_);
  }
  const kernels::DeviceFacts& facts = kernels::DeviceFactsOf(device_kind());
  return tiled() ? facts.tiled_attention_workspace_bytes(max_B_, max_T_, NH)
                 : facts.attention_workspace_bytes(max_B_, max_T_, C, NH, activation_type_);
}

float* Gpt2Model::lse(int l) const {
  return lse_ == nullptr ? nullptr : lse_ + int64_t{l} * last_B_ * config_.n_head * last_T_;
}

Status Gpt2Model::EmbedForward(const void* embedding) {
  return backend_->EncoderForward(encoded_, inputs_, Weight(embedding, layout_.local_offsets[kWte]),
                                  Weight(embedding, layout_.local_offsets[kWpe]), last_B_, last_T_,
                                  config_.n_embd, activation_type_, stream());
}

Status Gpt2Model::BlockForward(int l, const void* residual, const void* weights,
                               const void* adapters, void* scratch, uint64_t compute) {
  const int B = last_B_, T = last_T_, C = config_.n_embd, NH = config_.n_head;
  const int64_t BT = int64_t{B} * T;
  const int N = static_cast<int>(BT);
  const DType a = activation_type_;
  const Stream& st = stream();
  const BlockWeights w(*store_, 1 + l, weights, layout_);
  float* ln1_mean = ln1_mean_ + l * BT;
  float* ln1_rstd = ln1_rstd_ + l * BT;
  float* ln2_mean = ln2_mean_ + l * BT;
  float* ln2_rstd = ln2_rstd_ + l * BT;
  auto runs = [&](int s) { return (compute & Bit(s)) != 0; };
  if (runs(kSavedLn1)) {
    HOIST_RETURN_IF_ERROR(backend_->LayerNormForward(At(kSavedLn1, l), ln1_mean, ln1_rstd, residual,
                                                     w.ln1w, w.ln1b, N, C, a, st));
  }
  if (runs(kSavedQkv)) {
    HOIST_RETURN_IF_ERROR(StoredMatmulForward(*backend_, At(kSavedQkv, l), At(kSavedLn1, l), w.qkvw,
                                              w.qkvb, N, C, 3 * C, a, st));
    HOIST_RETURN_IF_ERROR(
        Lora(LoraModule::kGpt2Attn, l, At(kSavedQkv, l), At(kSavedLn1, l), adapters));
  }
  if (runs(kSavedAtty)) {  // the output and the probabilities are kept or recomputed together
    HOIST_RETURN_IF_ERROR(
        tiled() ? backend_->AttentionForwardTiled(At(kSavedAtty, l), lse(l), At(kSavedQkv, l), B, T,
                                                  C, NH, a, st)
                : backend_->AttentionForward(
                      At(kSavedAtty, l), static_cast<float*>(At(kSavedAtt, l)), At(kSavedQkv, l),
                      attention_workspace_.data(), B, T, C, NH, a, st));
  }
  if (runs(kSavedResidual2)) {
    HOIST_RETURN_IF_ERROR(StoredMatmulForward(*backend_, scratch, At(kSavedAtty, l), w.attprojw,
                                              w.attprojb, N, C, C, a, st));
    HOIST_RETURN_IF_ERROR(Lora(LoraModule::kGpt2AttnProj, l, scratch, At(kSavedAtty, l), adapters));
    HOIST_RETURN_IF_ERROR(
        backend_->ResidualForward(At(kSavedResidual2, l), residual, scratch, BT * C, a, st));
  }
  if (runs(kSavedLn2)) {
    HOIST_RETURN_IF_ERROR(backend_->LayerNormForward(
        At(kSavedLn2, l), ln2_mean, ln2_rstd, At(kSavedResidual2, l), w.ln2w, w.ln2b, N, C, a, st));
  }
  if (runs(kSavedFch)) {
    HOIST_RETURN_IF_ERROR(StoredMatmulForward(*backend_, At(kSavedFch, l), At(kSavedLn2, l), w.fcw,
                                              w.fcb, N, C, 4 * C, a, st));
    HOIST_RETURN_IF_ERROR(
        Lora(LoraModule::kGpt2Fc, l, At(kSavedFch, l), At(kSavedLn2, l), adapters));
  }
  if (runs(kSavedFchGelu)) {
    HOIST_RETURN_IF_ERROR(
        backend_->GeluForward(At(kSavedFchGelu, l), At(kSavedFch, l), BT * 4 * C, a, st));
  }
  if (runs(kSavedResidual3)) {
    HOIST_RETURN_IF_ERROR(StoredMatmulForward(*backend_, scratch, At(kSavedFchGelu, l), w.fcprojw,
                                              w.fcprojb, N, 4 * C, C, a, st));
    HOIST_RETURN_IF_ERROR(
        Lora(LoraModule::kGpt2MlpProj, l, scratch, At(kSavedFchGelu, l), adapters));
    HOIST_RETURN_IF_ERROR(backend_->ResidualForward(At(kSavedResidual3, l), At(kSavedResidual2, l),
                                                    scratch, BT * C, a, st));
  }
  return Status::Ok();
}

Status Gpt2Model::BlockBackward(int l, const void* residual, const void* weights, float* grads,
                                const void* adapters, float* adapter_grads) {
  const int B = last_B_, T = last_T_, C = config_.n_embd, NH = config_.n_head;
  const int64_t BT = int64_t{B} * T;
  const int N = static_cast<int>(BT);
  const DType a = activation_type_;
  const Stream& st = stream();
  const BlockWeights w(*store_, 1 + l, weights, layout_);
  const BlockGrads g(grads, layout_);
  const void* ln1 = At(kSavedLn1, l);
  const void* qkv = At(kSavedQkv, l);
  const void* atty = At(kSavedAtty, l);
  const void* residual2 = At(kSavedResidual2, l);
  const void* ln2 = At(kSavedLn2, l);
  const void* fch = At(kSavedFch, l);
  const void* fch_gelu = At(kSavedFchGelu, l);

  // MLP: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))).
  HOIST_RETURN_IF_ERROR(Zero(dfch_gelu_, BT * 4 * C));
  HOIST_RETURN_IF_ERROR(StoredMatmulBackward(*backend_, dfch_gelu_, g.fcprojw, g.fcprojb,
                                             dresidual_, fch_gelu, w.fcprojw, N, 4 * C, C, a, st));
  HOIST_RETURN_IF_ERROR(LoraBackward(LoraModule::kGpt2MlpProj, l, dfch_gelu_, dresidual_, fch_gelu,
                                     adapters, adapter_grads));
  HOIST_RETURN_IF_ERROR(Zero(dfch_, BT * 4 * C));
  HOIST_RETURN_IF_ERROR(backend_->GeluBackward(dfch_, fch, dfch_gelu_, BT * 4 * C, a, st));
  HOIST_RETURN_IF_ERROR(Zero(dln_, BT * C));
  HOIST_RETURN_IF_ERROR(
      StoredMatmulBackward(*backend_, dln_, g.fcw, g.fcb, dfch_, ln2, w.fcw, N, C, 4 * C, a, st));
  HOIST_RETURN_IF_ERROR(
      LoraBackward(LoraModule::kGpt2Fc, l, dln_, dfch_, ln2, adapters, adapter_grads));
  HOIST_RETURN_IF_ERROR(backend_->LayerNormBackward(dresidual_, g.ln2w, g.ln2b, dln_, residual2,
                                                    w.ln2w, ln2_mean_ + l * BT, ln2_rstd_ + l * BT,
                                                    N, C, a, st));

  // Attention: residual2 = residual + attproj(attention(qkv(ln1(residual)))).
  HOIST_RETURN_IF_ERROR(Zero(datty_, BT * C));
  HOIST_RETURN_IF_ERROR(StoredMatmulBackward(*backend_, datty_, g.attprojw, g.attprojb, dresidual_,
                                             atty, w.attprojw, N, C, C, a, st));
  HOIST_RETURN_IF_ERROR(LoraBackward(LoraModule::kGpt2AttnProj, l, datty_, dresidual_, atty,
                                     adapters, adapter_grads));
  HOIST_RETURN_IF_ERROR(Zero(dqkv_, BT * 3 * C));
  HOIST_RETURN_IF_ERROR(
      tiled() ? backend_->AttentionBackwardTiled(dqkv_, datty_, qkv, atty, lse(l),
                                                 attention_workspace_.data(), B, T, C, NH, a, st)
              : backend_->AttentionBackward(dqkv_, datty_, qkv,
                                            static_cast<const float*>(At(kSavedAtt, l)),
                                            attention_workspace_.data(), B, T, C, NH, a, st));
  HOIST_RETURN_IF_ERROR(Zero(dln_, BT * C));
  HOIST_RETURN_IF_ERROR(StoredMatmulBackward(*backend_, dln_, g.qkvw, g.qkvb, dqkv_, ln1, w.qkvw, N,
                                             C, 3 * C, a, st));
  HOIST_RETURN_IF_ERROR(
      LoraBackward(LoraModule::kGpt2Attn, l, dln_, dqkv_, ln1, adapters, adapter_grads));
  return backend_->LayerNormBackward(dresidual_, g.ln1w, g.ln1b, dln_, residual, w.ln1w,
                                     ln1_mean_ + l * BT, ln1_rstd_ + l * BT, N, C, a, st);
}

Status Gpt2Model::FinalNormForward(const void* final_unit, const void* residual) {
  return backend_->LayerNormForward(lnf_, lnf_mean_, lnf_rstd_, residual,
                                    Weight(final_unit, layout_.local_offsets[kLnfW]),
                                    Weight(final_unit, layout_.local_offsets[kLnfB]),
                                    last_B_ * last_T_, config_.n_embd, activation_type_, stream());
}

Status Gpt2Model::FinalNormBackward(const void* final_unit, float* grads, const void* residual) {
  auto grad = [&](int tensor) {
    return grads == nullptr ? nullptr : grads + layout_.local_offsets[tensor];
  };
  return backend_->LayerNormBackward(dresidual_, grad(kLnfW), grad(kLnfB), dln_, residual,
                                     Weight(final_unit, layout_.local_offsets[kLnfW]), lnf_mean_,
                                     lnf_rstd_, last_B_ * last_T_, config_.n_embd, activation_type_,
                                     stream());
}

Status Gpt2Model::EmbedBackward(float* grads) {
  return backend_->EncoderBackward(grads + layout_.local_offsets[kWte],
                                   grads + layout_.local_offsets[kWpe], dresidual_, inputs_,
                                   last_B_, last_T_, config_.n_embd, activation_type_, stream());
}

const ModelFamilySpec& Gpt2Family() {
  using M = LoraModule;
  static const ModelFamilySpec spec{
      .family = ModelFamily::kGpt2,
      .architectures = {"GPT2LMHeadModel", "GPT2Model"},
      .from_hf = &Gpt2FromHf,
      .to_hf = &Gpt2HfConfig,
      .hf_tensors = &Gpt2HfTensorPlaces,
      .create = &CreateAs<Gpt2Model>,
      .activation_footprint = &Gpt2Model::ActivationFootprint,
      .units = [](const ModelConfig& config) { return ParamLayout::For(config).Units(); },
      .parameter_bound =
          [](const ModelConfig& m) {
            const long double C = m.n_embd, L = m.n_layer, Vp = m.padded_vocab_size(),
                              P = m.positions();
            return Vp * C + P * C + L * (12 * C * C + 13 * C) + 2 * C;
          },
      .lora_candidates = [](const ModelConfig& m) -> std::vector<LoraModule> {
        const int64_t C = m.n_embd;
        return {{M::kGpt2Attn, "attn.c_attn", C, 3 * C, 0, 3 * C},
                {M::kGpt2AttnProj, "attn.c_proj", C, C, 0, C},
                {M::kGpt2Fc, "mlp.c_fc", C, 4 * C, 0, 4 * C},
                {M::kGpt2MlpProj, "mlp.c_proj", 4 * C, C, 0, C}};
      },
      .block_path = "transformer.h.",
      .outside_layers = {"lm_head", "transformer.wte", "transformer.wpe"},
      .default_lora_targets = {"c_attn"},
      // GPT-2's layers are Conv1D, whose weight is stored (in, out).
      .fan_in_fan_out = true,
      // qkv 3C^2, projection C^2, MLP 8C^2.
      .block_matmul_weights = [](const ModelConfig& m) { return 12.0 * m.n_embd * m.n_embd; },
      .last_projection_weights = [](const ModelConfig& m) { return 4.0 * m.n_embd * m.n_embd; },
  };
  return spec;
}

}  // namespace hoist::runtime
