// LlamaModel's declaration to the block model and its embedding, block and final norm
// (runtime/llama.h); its layout, Hugging Face names and initialisation are in llama_params.cc.
#include "runtime/llama.h"

#include <string>
#include <vector>

#include "core/check.h"
#include "kernels/cuda/workspace.h"
#include "kernels/rope.h"
#include "runtime/model_family.h"

namespace hoist::runtime {

namespace {

// The saved tensors' kinds: recomputed under the selective policy, kept by it, and the attention
// probabilities (fp32, recomputed with the attention's output).
constexpr BlockModel::SavedTensor kRecomputed{false, false}, kSelective{false, true},
    kProbabilities{true, false};

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

// One block's gradients within its unit's fp32 buffer; a null unit (a frozen base's gradients)
// gives null tensors.
struct BlockGrads {
  float *ln1, *qkv, *o, *ln2, *gate_up, *down;

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

BlockModel::Declaration Declare(const ModelConfig& config) {
  const LlamaLayout layout = LlamaLayout::For(config);
  return {.name = "LlamaModel",
          .unit_offsets = layout.unit_offsets,
          // ln1, qkv, atty, att (fp32), residual2, ln2, gate_up, swiglu, residual3.
          .saved = {kRecomputed, kSelective, kRecomputed, kProbabilities, kSelective, kRecomputed,
                    kSelective, kRecomputed, kRecomputed},
          .tied_head = layout.tied,
          .head_offset = layout.tied ? layout.local_offsets[kLlamaEmbedTokens]
                                     : layout.local_offsets[kLlamaLmHead],
          .initialize_unit = &InitializeLlamaUnit,
          .initialize_range = &InitializeLlamaRange};
}

}  // namespace

LlamaModel::LlamaModel(const ModelConfig& config, int max_B, int max_T, DType activation_type,
                       const ActivationCheckpointingConfig& checkpointing)
    : BlockModel(config, max_B, max_T, activation_type, checkpointing, Declare(config)),
      layout_(LlamaLayout::For(config)),
      NH_(config.n_head),
      NKV_(config.kv_heads()),
      hd_(config.head_dim()),
      C_(config.n_embd),
      I_(config.intermediate_size),
      QKV_((config.n_head + 2 * config.kv_heads()) * config.head_dim()) {}

LlamaModel::~LlamaModel() = default;

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Create(
    const ModelConfig& config, int max_B, int max_T, Device* device, zero::ParamStore* store,
    DType activation_type, const ActivationCheckpointingConfig& checkpointing) {
  return CreateOnCpu<LlamaModel>(config, max_B, max_T, device, store, activation_type,
                                 checkpointing);
}

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Create(
    const ModelConfig& config, int max_B, int max_T, kernels::Backend* backend,
    zero::ParamStore* store, DType activation_type,
    const ActivationCheckpointingConfig& checkpointing) {
  HOIST_RETURN_IF_ERROR(CheckLlamaConfig(config));
  HOIST_RETURN_IF_ERROR(
      CheckModelArguments(config, max_B, max_T, store, activation_type, checkpointing));
  return Attach(std::unique_ptr<LlamaModel>(
                    new LlamaModel(config, max_B, max_T, activation_type, checkpointing)),
                backend, store);
}

Model::ActivationBytes LlamaModel::ActivationFootprint(
    const ModelConfig& config, int max_B, int max_T, DType activation_type,
    const ActivationCheckpointingConfig& checkpointing, DeviceKind device) {
  return LlamaModel(config, max_B, max_T, activation_type, checkpointing).CountActivations(device);
}

void LlamaModel::DeclareArrays(Arrays& activations, Arrays& scratch) {
  const int64_t L = config_.n_layer, T = max_T_, C = C_;
  const int64_t BT = int64_t{max_B_} * max_T_;
  activations.Fp32(&rope_cos_, T * (hd_ / 2));
  activations.Fp32(&rope_sin_, T * (hd_ / 2));
  activations.Typed(&zero_positions_, T * C);
  activations.Fp32(&dpositions_, T * C);
  activations.Fp32(&rstd1_, L * BT);
  activations.Fp32(&lse_, tiled() ? L * BT * NH_ : 0);
  activations.Fp32(&rstd2_, L * BT);
  activations.Fp32(&rstdf_, BT);
  scratch.Typed(&datty_, BT * NH_ * hd_);
  scratch.Typed(&dqkv_, BT * QKV_);
  scratch.Typed(&dgateup_, BT * 2 * I_);
  scratch.Typed(&dswiglu_, BT * I_);
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

int64_t LlamaModel::AttentionWorkspaceBytes() const {
  const DType a = activation_type_;
  if (backend_ != nullptr) {
    return tiled() ? backend_->GqaTiledAttentionWorkspaceBytes(max_B_, max_T_, NH_)
                   : backend_->GqaAttentionWorkspaceBytes(max_B_, max_T_, NH_, NKV_, hd_, a);
  }
  if (device_kind() != DeviceKind::kCuda) return 0;
  return tiled() ? kernels::cuda::TiledAttentionBackwardWorkspaceBytes(max_B_, max_T_, NH_)
                 : kernels::cuda::GqaAttentionWorkspaceBytes(max_B_, max_T_, NH_, NKV_, hd_, a);
}

Status LlamaModel::Prepare() {
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
  return stream().Synchronize();  // the copies read the host table, which goes with this call
}

float* LlamaModel::lse(int l) const {
  return lse_ == nullptr ? nullptr : lse_ + int64_t{l} * last_B_ * NH_ * last_T_;
}

Status LlamaModel::EmbedForward(const void* embedding) {
  // The gather of the token rows: the encoder op against a zero position table.
  return backend_->EncoderForward(
      encoded_, inputs_, Weight(embedding, layout_.local_offsets[kLlamaEmbedTokens]),
      zero_positions_, last_B_, last_T_, C_, activation_type_, stream());
}

Status LlamaModel::BlockForward(int l, const void* residual, const void* weights,
                                const void* adapters, void* scratch, uint64_t compute) {
  const int B = last_B_, T = last_T_, C = C_;
  const int64_t BT = int64_t{B} * T;
  const int N = static_cast<int>(BT), A = NH_ * hd_;
  const DType a = activation_type_;
  const float eps = config_.rms_norm_eps;
  const Stream& st = stream();
  const BlockWeights w(*store_, 1 + l, weights, layout_);
  auto runs = [&](int s) { return (compute & Bit(s)) != 0; };
  if (runs(kSavedLn1)) {
    HOIST_RETURN_IF_ERROR(backend_->RmsNormForward(At(kSavedLn1, l), rstd1_ + l * BT, residual,
                                                   w.ln1, N, C, eps, a, st));
  }
  if (runs(kSavedQkv)) {
    void* qkv = At(kSavedQkv, l);
    const void* ln1 = At(kSavedLn1, l);
    HOIST_RETURN_IF_ERROR(
        StoredMatmulForward(*backend_, qkv, ln1, w.qkv, nullptr, N, C, QKV_, a, st));
    HOIST_RETURN_IF_ERROR(Lora(LoraModule::kLlamaQ, l, qkv, ln1, adapters));
    HOIST_RETURN_IF_ERROR(Lora(LoraModule::kLlamaK, l, qkv, ln1, adapters));
    HOIST_RETURN_IF_ERROR(Lora(LoraModule::kLlamaV, l, qkv, ln1, adapters));
    HOIST_RETURN_IF_ERROR(
        backend_->RopeForward(qkv, rope_cos_, rope_sin_, B, T, NH_, NKV_, hd_, a, st));
  }
  if (runs(kSavedAtty)) {  // the output and the probabilities are kept or recomputed together
    HOIST_RETURN_IF_ERROR(
        tiled() ? backend_->GqaAttentionForwardTiled(At(kSavedAtty, l), lse(l), At(kSavedQkv, l), B,
                                                     T, NH_, NKV_, hd_, a, st)
                : backend_->GqaAttentionForward(
                      At(kSavedAtty, l), static_cast<float*>(At(kSavedAtt, l)), At(kSavedQkv, l),
                      attention_workspace_.data(), B, T, NH_, NKV_, hd_, a, st));
  }
  if (runs(kSavedResidual2)) {
    HOIST_RETURN_IF_ERROR(
        StoredMatmulForward(*backend_, scratch, At(kSavedAtty, l), w.o, nullptr, N, A, C, a, st));
    HOIST_RETURN_IF_ERROR(Lora(LoraModule::kLlamaO, l, scratch, At(kSavedAtty, l), adapters));
    HOIST_RETURN_IF_ERROR(
        backend_->ResidualForward(At(kSavedResidual2, l), residual, scratch, BT * C, a, st));
  }
  if (runs(kSavedLn2)) {
    HOIST_RETURN_IF_ERROR(backend_->RmsNormForward(
        At(kSavedLn2, l), rstd2_ + l * BT, At(kSavedResidual2, l), w.ln2, N, C, eps, a, st));
  }
  if (runs(kSavedGateUp)) {
    void* gate_up = At(kSavedGateUp, l);
    const void* ln2 = At(kSavedLn2, l);
    HOIST_RETURN_IF_ERROR(
        StoredMatmulForward(*backend_, gate_up, ln2, w.gate_up, nullptr, N, C, 2 * I_, a, st));
    HOIST_RETURN_IF_ERROR(Lora(LoraModule::kLlamaGate, l, gate_up, ln2, adapters));
    HOIST_RETURN_IF_ERROR(Lora(LoraModule::kLlamaUp, l, gate_up, ln2, adapters));
  }
  if (runs(kSavedSwiGlu)) {
    HOIST_RETURN_IF_ERROR(
        backend_->SwiGluForward(At(kSavedSwiGlu, l), At(kSavedGateUp, l), N, I_, a, st));
  }
  if (runs(kSavedResidual3)) {
    HOIST_RETURN_IF_ERROR(StoredMatmulForward(*backend_, scratch, At(kSavedSwiGlu, l), w.down,
                                              nullptr, N, I_, C, a, st));
    HOIST_RETURN_IF_ERROR(Lora(LoraModule::kLlamaDown, l, scratch, At(kSavedSwiGlu, l), adapters));
    HOIST_RETURN_IF_ERROR(backend_->ResidualForward(At(kSavedResidual3, l), At(kSavedResidual2, l),
                                                    scratch, BT * C, a, st));
  }
  return Status::Ok();
}

Status LlamaModel::BlockBackward(int l, const void* residual, const void* weights, float* grads,
                                 const void* adapters, float* adapter_grads) {
  const int B = last_B_, T = last_T_, C = C_;
  const int64_t BT = int64_t{B} * T;
  const int N = static_cast<int>(BT), A = NH_ * hd_;
  const DType a = activation_type_;
  const Stream& st = stream();
  const BlockWeights w(*store_, 1 + l, weights, layout_);
  const BlockGrads g(grads, layout_);
  const void* ln1 = At(kSavedLn1, l);
  const void* qkv = At(kSavedQkv, l);
  const void* atty = At(kSavedAtty, l);
  const void* ln2 = At(kSavedLn2, l);
  const void* swiglu = At(kSavedSwiGlu, l);
  // MLP: residual3 = residual2 + down(swiglu(gate_up(rmsnorm2(residual2)))).
  HOIST_RETURN_IF_ERROR(Zero(dswiglu_, BT * I_));
  HOIST_RETURN_IF_ERROR(StoredMatmulBackward(*backend_, dswiglu_, g.down, nullptr, dresidual_,
                                             swiglu, w.down, N, I_, C, a, st));
  HOIST_RETURN_IF_ERROR(LoraBackward(LoraModule::kLlamaDown, l, dswiglu_, dresidual_, swiglu,
                                     adapters, adapter_grads));
  HOIST_RETURN_IF_ERROR(Zero(dgateup_, BT * 2 * I_));
  HOIST_RETURN_IF_ERROR(
      backend_->SwiGluBackward(dgateup_, At(kSavedGateUp, l), dswiglu_, N, I_, a, st));
  HOIST_RETURN_IF_ERROR(Zero(dln_, BT * C));
  HOIST_RETURN_IF_ERROR(StoredMatmulBackward(*backend_, dln_, g.gate_up, nullptr, dgateup_, ln2,
                                             w.gate_up, N, C, 2 * I_, a, st));
  HOIST_RETURN_IF_ERROR(
      LoraBackward(LoraModule::kLlamaGate, l, dln_, dgateup_, ln2, adapters, adapter_grads));
  HOIST_RETURN_IF_ERROR(
      LoraBackward(LoraModule::kLlamaUp, l, dln_, dgateup_, ln2, adapters, adapter_grads));
  HOIST_RETURN_IF_ERROR(backend_->RmsNormBackward(dresidual_, g.ln2, dln_, At(kSavedResidual2, l),
                                                  w.ln2, rstd2_ + l * BT, N, C, a, st));
  // Attention: residual2 = residual + o(attention(rope(qkv(rmsnorm1(residual))))).
  HOIST_RETURN_IF_ERROR(Zero(datty_, BT * A));
  HOIST_RETURN_IF_ERROR(
      StoredMatmulBackward(*backend_, datty_, g.o, nullptr, dresidual_, atty, w.o, N, A, C, a, st));
  HOIST_RETURN_IF_ERROR(
      LoraBackward(LoraModule::kLlamaO, l, datty_, dresidual_, atty, adapters, adapter_grads));
  HOIST_RETURN_IF_ERROR(Zero(dqkv_, BT * QKV_));
  HOIST_RETURN_IF_ERROR(tiled()
                            ? backend_->GqaAttentionBackwardTiled(dqkv_, datty_, qkv, atty, lse(l),
                                                                  attention_workspace_.data(), B, T,
                                                                  NH_, NKV_, hd_, a, st)
                            : backend_->GqaAttentionBackward(
                                  dqkv_, datty_, qkv, static_cast<const float*>(At(kSavedAtt, l)),
                                  attention_workspace_.data(), B, T, NH_, NKV_, hd_, a, st));
  HOIST_RETURN_IF_ERROR(
      backend_->RopeBackward(dqkv_, rope_cos_, rope_sin_, B, T, NH_, NKV_, hd_, a, st));
  HOIST_RETURN_IF_ERROR(Zero(dln_, BT * C));
  HOIST_RETURN_IF_ERROR(
      StoredMatmulBackward(*backend_, dln_, g.qkv, nullptr, dqkv_, ln1, w.qkv, N, C, QKV_, a, st));
  for (LoraModule::Site site : {LoraModule::kLlamaQ, LoraModule::kLlamaK, LoraModule::kLlamaV}) {
    HOIST_RETURN_IF_ERROR(LoraBackward(site, l, dln_, dqkv_, ln1, adapters, adapter_grads));
  }
  return backend_->RmsNormBackward(dresidual_, g.ln1, dln_, residual, w.ln1, rstd1_ + l * BT, N, C,
                                   a, st);
}

Status LlamaModel::FinalNormForward(const void* final_unit, const void* residual) {
  return backend_->RmsNormForward(
      lnf_, rstdf_, residual, Weight(final_unit, layout_.local_offsets[kLlamaFinalNorm]),
      last_B_ * last_T_, C_, config_.rms_norm_eps, activation_type_, stream());
}

Status LlamaModel::FinalNormBackward(const void* final_unit, float* grads, const void* residual) {
  float* norm_grads = grads == nullptr ? nullptr : grads + layout_.local_offsets[kLlamaFinalNorm];
  return backend_->RmsNormBackward(dresidual_, norm_grads, dln_, residual,
                                   Weight(final_unit, layout_.local_offsets[kLlamaFinalNorm]),
                                   rstdf_, last_B_ * last_T_, C_, activation_type_, stream());
}

Status LlamaModel::EmbedBackward(float* grads) {
  // The encoder's position gradient lands in a scratch table nobody reads.
  HOIST_RETURN_IF_ERROR(
      backend_->Zero(dpositions_, int64_t{last_T_} * C_ * int64_t{sizeof(float)}, stream()));
  return backend_->EncoderBackward(grads + layout_.local_offsets[kLlamaEmbedTokens], dpositions_,
                                   dresidual_, inputs_, last_B_, last_T_, C_, activation_type_,
                                   stream());
}

const ModelFamilySpec& LlamaFamily() {
  using M = LoraModule;
  static const ModelFamilySpec spec{
      .family = ModelFamily::kLlama,
      .create = &CreateAs<LlamaModel>,
      .activation_footprint = &LlamaModel::ActivationFootprint,
      .units = [](const ModelConfig& config) { return LlamaLayout::For(config).Units(); },
      // An untied head counted either way.
      .parameter_bound =
          [](const ModelConfig& m) {
            const long double C = m.n_embd, L = m.n_layer, Vp = m.padded_vocab_size();
            const long double hd = C / m.n_head, heads = m.n_head + 2.0L * m.kv_heads();
            const long double I = m.intermediate_size;
            return 2 * Vp * C + L * (C * heads * hd + C * C + 3 * C * I + 2 * C) + C;
          },
      .lora_candidates = [](const ModelConfig& m) -> std::vector<LoraModule> {
        const int64_t C = m.n_embd, hd = m.head_dim(), q = int64_t{m.n_head} * hd;
        const int64_t kv = int64_t{m.kv_heads()} * hd, qkv = q + 2 * kv;
        const int64_t I = m.intermediate_size;
        return {{M::kLlamaQ, "self_attn.q_proj", C, q, 0, qkv},
                {M::kLlamaK, "self_attn.k_proj", C, kv, q, qkv},
                {M::kLlamaV, "self_attn.v_proj", C, kv, q + kv, qkv},
                {M::kLlamaO, "self_attn.o_proj", q, C, 0, C},
                {M::kLlamaGate, "mlp.gate_proj", C, I, 0, 2 * I},
                {M::kLlamaUp, "mlp.up_proj", C, I, I, 2 * I},
                {M::kLlamaDown, "mlp.down_proj", I, C, 0, C}};
      },
      .block_path = "model.layers.",
      .outside_layers = {"lm_head", "model.embed_tokens"},
      .default_lora_targets = {"q_proj", "v_proj"},
      .fan_in_fan_out = false,
      // q and o 2C^2, k and v 2 C NKV hd, SwiGLU 3 C I.
      .block_matmul_weights =
          [](const ModelConfig& m) {
            const double C = m.n_embd, kv = static_cast<double>(m.kv_heads()) * m.head_dim();
            return 2 * C * C + 2 * C * kv + 3 * C * m.intermediate_size;
          },
      .last_projection_weights =
          [](const ModelConfig& m) { return static_cast<double>(m.n_embd) * m.intermediate_size; },
  };
  return spec;
}

}  // namespace hoist::runtime
