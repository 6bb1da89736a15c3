// DecoderModel's declaration to the block model and its embedding, block and final norm
// (runtime/model/decoder.h); its layout, Hugging Face names and initialisation are in
// decoder_params.cc, each family's traits and Hugging Face config in the family's file.
#include "runtime/model/decoder.h"

#include <cmath>
#include <string>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/convert.h"
#include "kernels/device_facts.h"
#include "kernels/rope.h"
#include "runtime/model/model_family.h"

namespace hoist::runtime {

namespace {

// The saved tensors' kinds: recomputed under the selective policy, kept by it, and the attention
// probabilities (fp32, recomputed with the attention's output).
constexpr BlockModel::SavedTensor kRecomputed{false, false}, kSelective{false, true},
    kProbabilities{true, false};

// The dimensions a rotary family needs to fit together, named by their config.json keys.
Status CheckDecoderConfig(const ModelConfig& m) {
  const ModelFamilySpec& spec = FamilyOf(m.family);
  auto invalid = [&](const std::string& what) {
    return InvalidArgumentError(std::string(ModelDisplayName(m.family)) + " model: " + what);
  };
  if (spec.decoder == nullptr) {
    return invalid(std::string("model_type \"") + ModelFamilyName(m.family) +
                   "\" is not a rotary decoder's (llama, qwen2, qwen3, mistral, gemma2)");
  }
  if (m.n_layer < 1 || m.n_head < 1 || m.n_embd < 1 || m.vocab_size < 1) {
    return invalid(
        "num_hidden_layers, num_attention_heads, hidden_size and vocab_size must be "
        ">= 1");
  }
  if (m.head_size < 0 || (m.head_size == 0 && m.n_embd % m.n_head != 0) || m.head_dim() % 2 != 0) {
    return invalid("head_dim " + std::to_string(m.head_dim()) +
                   " must be even (RoPE pairs its elements); without head_dim, hidden_size " +
                   std::to_string(m.n_embd) + " must be num_attention_heads " +
                   std::to_string(m.n_head) + " times it");
  }
  if (m.kv_heads() < 1 || m.n_head % m.kv_heads() != 0) {
    return invalid("num_attention_heads " + std::to_string(m.n_head) +
                   " must be a multiple of num_key_value_heads " + std::to_string(m.kv_heads()));
  }
  if (m.intermediate_size < 1) {
    return invalid("intermediate_size must be >= 1, found " + std::to_string(m.intermediate_size));
  }
  if (!(m.rms_norm_eps > 0.0f)) return invalid("rms_norm_eps must be > 0");
  if (m.sliding_window < 0) return invalid("sliding_window must be >= 0 (0: no window)");
  if (!m.sliding_layers.empty() && m.sliding_layers.size() != static_cast<size_t>(m.n_layer)) {
    return invalid("layer_types has " + std::to_string(m.sliding_layers.size()) +
                   " entries for num_hidden_layers " + std::to_string(m.n_layer));
  }
  if (!(m.query_pre_attn_scalar >= 0) || !(m.attn_logit_softcapping >= 0) ||
      !(m.final_logit_softcapping >= 0) || !std::isfinite(m.query_pre_attn_scalar) ||
      !std::isfinite(m.attn_logit_softcapping) || !std::isfinite(m.final_logit_softcapping)) {
    return invalid(
        "query_pre_attn_scalar, attn_logit_softcapping and final_logit_softcapping must be "
        "finite and >= 0 (0: not set)");
  }
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

// `value` rounded to `type`, as transformers holds a constant in the activations' dtype.
float RoundTo(float value, DType type) {
  if (type == DType::kFloat32) return value;
  uint16_t half = 0;
  kernels::cpu::FromFloat(&value, &half, type, 1);
  kernels::cpu::ToFloat(&half, type, &value, 1);
  return value;
}

// One block's tensors within a unit: the offset of each, or null where the unit is (a frozen
// base's gradients) or the tensor is not (a family without it).
template <typename T>
T* TensorAt(T* unit, const DecoderLayout& layout, int tensor) {
  if (unit == nullptr || layout.unit_sizes[tensor] == 0) return nullptr;
  return unit + layout.local_offsets[tensor];
}

// One block's gradients within its unit's fp32 buffer.
struct BlockGrads {
  float *ln1, *qkv, *qkv_bias, *q_norm, *k_norm, *o, *attn_out_norm, *ln2, *gate_up, *down,
      *mlp_out_norm;

  BlockGrads(float* unit, const DecoderLayout& layout) {
    auto at = [&](int tensor) { return TensorAt(unit, layout, tensor); };
    ln1 = at(kDecoderInputNorm), qkv = at(kDecoderQkv), qkv_bias = at(kDecoderQkvBias);
    q_norm = at(kDecoderQNorm), k_norm = at(kDecoderKNorm), o = at(kDecoderOProj);
    attn_out_norm = at(kDecoderAttnOutNorm), ln2 = at(kDecoderMlpNorm);
    gate_up = at(kDecoderGateUp), down = at(kDecoderDown), mlp_out_norm = at(kDecoderMlpOutNorm);
  }
};

// One block's weights as the store gives them (acquired: what AcquireParams returned): the
// matmuls' as zero::StoredWeight (dense, or 4-bit in a frozen 4-bit base), the norms' and the
// bias in the compute type (null where the family has none).
struct BlockWeights {
  const void *ln1, *qkv_bias, *q_norm, *k_norm, *attn_out_norm, *ln2, *mlp_out_norm;
  zero::StoredWeight qkv, o, gate_up, down;

  BlockWeights(const zero::ParamStore& store, int unit, const void* acquired,
               const DecoderLayout& layout) {
    auto at = [&](int tensor) {
      return store.Weight(unit, acquired, layout.local_offsets[tensor]);
    };
    auto small = [&](int tensor) -> const void* {
      return layout.unit_sizes[tensor] == 0 ? nullptr : at(tensor).dense;
    };
    ln1 = small(kDecoderInputNorm), qkv_bias = small(kDecoderQkvBias);
    q_norm = small(kDecoderQNorm), k_norm = small(kDecoderKNorm);
    attn_out_norm = small(kDecoderAttnOutNorm), ln2 = small(kDecoderMlpNorm);
    mlp_out_norm = small(kDecoderMlpOutNorm);
    qkv = at(kDecoderQkv), o = at(kDecoderOProj), gate_up = at(kDecoderGateUp);
    down = at(kDecoderDown);
  }
};

BlockModel::Declaration Declare(const ModelConfig& config) {
  const DecoderLayout layout = DecoderLayout::For(config);
  const DecoderTraits& traits = TraitsOf(config.family);
  // With qk_norm the projection is the matmul's output the selective policy keeps, and the
  // normalised, rotated qkv is recomputed from it.
  const BlockModel::SavedTensor qkv = traits.qk_norm ? kRecomputed : kSelective;
  return {.name = "DecoderModel",
          .unit_offsets = layout.unit_offsets,
          // ln1, qkv_proj, qkv, atty, att (fp32), attn_out, residual2, ln2, gate_up, act,
          // mlp_out, residual3.
          .saved = {kRecomputed, kSelective, qkv, kRecomputed, kProbabilities, kSelective,
                    kSelective, kRecomputed, kSelective, kRecomputed, kSelective, kRecomputed},
          .tied_head = layout.tied,
          .head_offset = layout.tied ? layout.local_offsets[kDecoderEmbedTokens]
                                     : layout.local_offsets[kDecoderLmHead],
          .initialize_unit = &InitializeDecoderUnit,
          .initialize_range = &InitializeDecoderRange};
}

}  // namespace

const DecoderTraits& TraitsOf(ModelFamily family) {
  const DecoderTraits* traits = FamilyOf(family).decoder;
  HOIST_CHECK(traits != nullptr) << ModelFamilyName(family) << " is not a rotary family";
  return *traits;
}

DecoderModel::DecoderModel(const ModelConfig& config, int max_B, int max_T, DType activation_type,
                           const ActivationCheckpointingConfig& checkpointing)
    : BlockModel(config, max_B, max_T, activation_type, checkpointing, Declare(config)),
      layout_(DecoderLayout::For(config)),
      traits_(TraitsOf(config.family)),
      NH_(config.n_head),
      NKV_(config.kv_heads()),
      hd_(config.head_dim()),
      C_(config.n_embd),
      I_(config.intermediate_size),
      QKV_((config.n_head + 2 * config.kv_heads()) * config.head_dim()) {
  if (traits_.scaled_embedding) {
    embed_scale_ = RoundTo(static_cast<float>(std::sqrt(static_cast<double>(C_))), activation_type);
  }
}

DecoderModel::~DecoderModel() = default;

StatusOr<std::unique_ptr<DecoderModel>> DecoderModel::Create(
    const ModelConfig& config, int max_B, int max_T, Device* device, zero::ParamStore* store,
    DType activation_type, const ActivationCheckpointingConfig& checkpointing) {
  return CreateOnCpu<DecoderModel>(config, max_B, max_T, device, store, activation_type,
                                   checkpointing);
}

StatusOr<std::unique_ptr<DecoderModel>> DecoderModel::Create(
    const ModelConfig& config, int max_B, int max_T, kernels::Backend* backend,
    zero::ParamStore* store, DType activation_type,
    const ActivationCheckpointingConfig& checkpointing) {
  HOIST_RETURN_IF_ERROR(CheckDecoderConfig(config));
  HOIST_RETURN_IF_ERROR(
      CheckModelArguments(config, max_B, max_T, store, activation_type, checkpointing));
  return Attach(std::unique_ptr<DecoderModel>(
                    new DecoderModel(config, max_B, max_T, activation_type, checkpointing)),
                backend, store);
}

Model::ActivationBytes DecoderModel::ActivationFootprint(
    const ModelConfig& config, int max_B, int max_T, DType activation_type,
    const ActivationCheckpointingConfig& checkpointing, DeviceKind device) {
  return DecoderModel(config, max_B, max_T, activation_type, checkpointing)
      .CountActivations(device);
}

void DecoderModel::DeclareArrays(Arrays& activations, Arrays& scratch) {
  const int64_t L = config_.n_layer, T = max_T_, C = C_;
  const int64_t BT = int64_t{max_B_} * max_T_;
  const bool sandwich = traits_.sandwich_norms;
  activations.Fp32(&rope_cos_, T * (hd_ / 2));
  activations.Fp32(&rope_sin_, T * (hd_ / 2));
  activations.Typed(&zero_positions_, T * C);
  activations.Fp32(&dpositions_, T * C);
  activations.Fp32(&rstd1_, L * BT);
  activations.Fp32(&lse_, tiled() ? L * BT * NH_ : 0);
  activations.Fp32(&rstd2_, L * BT);
  activations.Fp32(&rstd_qk_, traits_.qk_norm ? L * BT * (NH_ + NKV_) : 0);
  activations.Fp32(&rstd_attn_out_, sandwich ? L * BT : 0);
  activations.Fp32(&rstd_mlp_out_, sandwich ? L * BT : 0);
  activations.Fp32(&rstdf_, BT);
  scratch.Typed(&datty_, BT * NH_ * hd_);
  scratch.Typed(&dqkv_, BT * QKV_);
  scratch.Typed(&dgateup_, BT * 2 * I_);
  scratch.Typed(&dact_, BT * I_);
  scratch.Typed(&dqkv_proj_, traits_.qk_norm ? BT * QKV_ : 0);
  scratch.Typed(&dproj_, sandwich ? BT * C : 0);
}

int64_t DecoderModel::SavedCount(int s, int B, int T) const {
  const int64_t BT = int64_t{B} * T;
  switch (s) {
    case kSavedQkvProj: return traits_.qk_norm ? BT * QKV_ : 0;
    case kSavedQkv: return BT * QKV_;
    case kSavedAtty: return BT * NH_ * hd_;
    case kSavedAtt: return tiled() ? 0 : int64_t{B} * NH_ * T * T;
    case kSavedAttnOut:
    case kSavedMlpOut: return traits_.sandwich_norms ? BT * C_ : 0;
    case kSavedGateUp: return BT * 2 * I_;
    case kSavedAct: return BT * I_;
    default: return BT * C_;
  }
}

int64_t DecoderModel::AttentionWorkspaceBytes() const {
  const DType a = activation_type_;
  if (backend_ != nullptr) {
    return tiled() ? backend_->GqaTiledAttentionWorkspaceBytes(max_B_, max_T_, NH_)
                   : backend_->GqaAttentionWorkspaceBytes(max_B_, max_T_, NH_, NKV_, hd_, a);
  }
  const kernels::DeviceFacts& facts = kernels::DeviceFactsOf(device_kind());
  return tiled() ? facts.gqa_tiled_attention_workspace_bytes(max_B_, max_T_, NH_)
                 : facts.gqa_attention_workspace_bytes(max_B_, max_T_, NH_, NKV_, hd_, a);
}

Status DecoderModel::Prepare() {
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

float* DecoderModel::lse(int l) const {
  return lse_ == nullptr ? nullptr : lse_ + int64_t{l} * last_B_ * NH_ * last_T_;
}

kernels::AttentionOptions DecoderModel::AttentionOf(int l) const {
  kernels::AttentionOptions options;
  if (config_.query_pre_attn_scalar > 0) {
    options.scale = static_cast<float>(1.0 / std::sqrt(config_.query_pre_attn_scalar));
  }
  options.window = config_.window(l);
  options.softcap = config_.attn_logit_softcapping;
  return options;
}

kernels::RmsNormStyle DecoderModel::norm_style() const {
  return traits_.unit_offset_norm ? kernels::RmsNormStyle::kGemma : kernels::RmsNormStyle::kLlama;
}

kernels::GluActivation DecoderModel::activation() const {
  return traits_.gelu_gate ? kernels::GluActivation::kGeluTanh : kernels::GluActivation::kSilu;
}

Status DecoderModel::EmbedForward(const void* embedding) {
  // The gather of the token rows: the encoder op against a zero position table.
  HOIST_RETURN_IF_ERROR(backend_->EncoderForward(
      encoded_, inputs_, Weight(embedding, layout_.local_offsets[kDecoderEmbedTokens]),
      zero_positions_, last_B_, last_T_, C_, activation_type_, stream()));
  if (!traits_.scaled_embedding) return Status::Ok();
  return backend_->Scale(encoded_, encoded_, int64_t{last_B_} * last_T_ * C_, embed_scale_,
                         activation_type_, stream());
}

Status DecoderModel::BlockForward(int l, const void* residual, const void* weights,
                                  const void* adapters, void* scratch, uint64_t compute) {
  const int B = last_B_, T = last_T_, C = C_;
  const int64_t BT = int64_t{B} * T;
  const int N = static_cast<int>(BT), A = NH_ * hd_;
  const DType a = activation_type_;
  const float eps = config_.rms_norm_eps;
  const kernels::RmsNormStyle style = norm_style();
  const Stream& st = stream();
  const BlockWeights w(*store_, 1 + l, weights, layout_);
  auto runs = [&](int s) { return (compute & Bit(s)) != 0; };
  // A projection of the block's input, its adapters added.
  auto project = [&](void* out, const void* ln1) -> Status {
    HOIST_RETURN_IF_ERROR(
        StoredMatmulForward(*backend_, out, ln1, w.qkv, w.qkv_bias, N, C, QKV_, a, st));
    HOIST_RETURN_IF_ERROR(Lora(LoraModule::kQProj, l, out, ln1, adapters));
    HOIST_RETURN_IF_ERROR(Lora(LoraModule::kKProj, l, out, ln1, adapters));
    return Lora(LoraModule::kVProj, l, out, ln1, adapters);
  };
  if (runs(kSavedLn1)) {
    HOIST_RETURN_IF_ERROR(backend_->RmsNormForward(At(kSavedLn1, l), rstd1_ + l * BT, residual,
                                                   w.ln1, N, C, eps, style, a, st));
  }
  if (traits_.qk_norm && runs(kSavedQkvProj)) {
    HOIST_RETURN_IF_ERROR(project(At(kSavedQkvProj, l), At(kSavedLn1, l)));
  }
  if (runs(kSavedQkv)) {
    void* qkv = At(kSavedQkv, l);
    if (traits_.qk_norm) {
      HOIST_RETURN_IF_ERROR(backend_->HeadRmsNormForward(qkv, rstd_qk_ + l * BT * (NH_ + NKV_),
                                                         At(kSavedQkvProj, l), w.q_norm, w.k_norm,
                                                         N, NH_, NKV_, hd_, eps, style, a, st));
    } else {
      HOIST_RETURN_IF_ERROR(project(qkv, At(kSavedLn1, l)));
    }
    HOIST_RETURN_IF_ERROR(
        backend_->RopeForward(qkv, rope_cos_, rope_sin_, B, T, NH_, NKV_, hd_, a, st));
  }
  if (runs(kSavedAtty)) {  // the output and the probabilities are kept or recomputed together
    const kernels::AttentionOptions options = AttentionOf(l);
    HOIST_RETURN_IF_ERROR(
        tiled() ? backend_->GqaAttentionForwardTiled(At(kSavedAtty, l), lse(l), At(kSavedQkv, l), B,
                                                     T, NH_, NKV_, hd_, options, a, st)
                : backend_->GqaAttentionForward(
                      At(kSavedAtty, l), static_cast<float*>(At(kSavedAtt, l)), At(kSavedQkv, l),
                      attention_workspace_.data(), B, T, NH_, NKV_, hd_, options, a, st));
  }
  // The attention's projection: into scratch, or with sandwich norms into its saved output,
  // whose norm then goes to scratch; residual2 = residual + scratch.
  const bool sandwich = traits_.sandwich_norms;
  void* attn_out = sandwich ? At(kSavedAttnOut, l) : scratch;
  if (sandwich ? runs(kSavedAttnOut) : runs(kSavedResidual2)) {
    HOIST_RETURN_IF_ERROR(
        StoredMatmulForward(*backend_, attn_out, At(kSavedAtty, l), w.o, nullptr, N, A, C, a, st));
    HOIST_RETURN_IF_ERROR(Lora(LoraModule::kOProj, l, attn_out, At(kSavedAtty, l), adapters));
  }
  if (runs(kSavedResidual2)) {
    if (sandwich) {
      HOIST_RETURN_IF_ERROR(backend_->RmsNormForward(scratch, rstd_attn_out_ + l * BT, attn_out,
                                                     w.attn_out_norm, N, C, eps, style, a, st));
    }
    HOIST_RETURN_IF_ERROR(
        backend_->ResidualForward(At(kSavedResidual2, l), residual, scratch, BT * C, a, st));
  }
  if (runs(kSavedLn2)) {
    HOIST_RETURN_IF_ERROR(backend_->RmsNormForward(
        At(kSavedLn2, l), rstd2_ + l * BT, At(kSavedResidual2, l), w.ln2, N, C, eps, style, a, st));
  }
  if (runs(kSavedGateUp)) {
    void* gate_up = At(kSavedGateUp, l);
    const void* ln2 = At(kSavedLn2, l);
    HOIST_RETURN_IF_ERROR(
        StoredMatmulForward(*backend_, gate_up, ln2, w.gate_up, nullptr, N, C, 2 * I_, a, st));
    HOIST_RETURN_IF_ERROR(Lora(LoraModule::kGateProj, l, gate_up, ln2, adapters));
    HOIST_RETURN_IF_ERROR(Lora(LoraModule::kUpProj, l, gate_up, ln2, adapters));
  }
  if (runs(kSavedAct)) {
    HOIST_RETURN_IF_ERROR(
        backend_->GluForward(At(kSavedAct, l), At(kSavedGateUp, l), N, I_, activation(), a, st));
  }
  void* mlp_out = sandwich ? At(kSavedMlpOut, l) : scratch;
  if (sandwich ? runs(kSavedMlpOut) : runs(kSavedResidual3)) {
    HOIST_RETURN_IF_ERROR(StoredMatmulForward(*backend_, mlp_out, At(kSavedAct, l), w.down, nullptr,
                                              N, I_, C, a, st));
    HOIST_RETURN_IF_ERROR(Lora(LoraModule::kDownProj, l, mlp_out, At(kSavedAct, l), adapters));
  }
  if (runs(kSavedResidual3)) {
    if (sandwich) {
      HOIST_RETURN_IF_ERROR(backend_->RmsNormForward(scratch, rstd_mlp_out_ + l * BT, mlp_out,
                                                     w.mlp_out_norm, N, C, eps, style, a, st));
    }
    HOIST_RETURN_IF_ERROR(backend_->ResidualForward(At(kSavedResidual3, l), At(kSavedResidual2, l),
                                                    scratch, BT * C, a, st));
  }
  return Status::Ok();
}

Status DecoderModel::BlockBackward(int l, const void* residual, const void* weights, float* grads,
                                   const void* adapters, float* adapter_grads) {
  const int B = last_B_, T = last_T_, C = C_;
  const int64_t BT = int64_t{B} * T;
  const int N = static_cast<int>(BT), A = NH_ * hd_;
  const DType a = activation_type_;
  const kernels::RmsNormStyle style = norm_style();
  const Stream& st = stream();
  const BlockWeights w(*store_, 1 + l, weights, layout_);
  const BlockGrads g(grads, layout_);
  const void* ln1 = At(kSavedLn1, l);
  const void* qkv = At(kSavedQkv, l);
  const void* atty = At(kSavedAtty, l);
  const void* ln2 = At(kSavedLn2, l);
  const void* act = At(kSavedAct, l);
  const bool sandwich = traits_.sandwich_norms;
  // The gradient of a projection's output: dresidual_ itself, or through its sandwich norm.
  auto through_norm = [&](int saved, const void* weight, float* dweight,
                          const float* rstd) -> StatusOr<const void*> {
    if (!sandwich) return static_cast<const void*>(dresidual_);
    HOIST_RETURN_IF_ERROR(Zero(dproj_, BT * C));
    HOIST_RETURN_IF_ERROR(backend_->RmsNormBackward(dproj_, dweight, dresidual_, At(saved, l),
                                                    weight, rstd, N, C, style, a, st));
    return static_cast<const void*>(dproj_);
  };
  // MLP: residual3 = residual2 + [post norm](down(act(gate_up(norm2(residual2))))).
  HOIST_ASSIGN_OR_RETURN(
      const void* dmlp_out,
      through_norm(kSavedMlpOut, w.mlp_out_norm, g.mlp_out_norm, rstd_mlp_out_ + l * BT));
  HOIST_RETURN_IF_ERROR(Zero(dact_, BT * I_));
  HOIST_RETURN_IF_ERROR(StoredMatmulBackward(*backend_, dact_, g.down, nullptr, dmlp_out, act,
                                             w.down, N, I_, C, a, st));
  HOIST_RETURN_IF_ERROR(
      LoraBackward(LoraModule::kDownProj, l, dact_, dmlp_out, act, adapters, adapter_grads));
  HOIST_RETURN_IF_ERROR(Zero(dgateup_, BT * 2 * I_));
  HOIST_RETURN_IF_ERROR(
      backend_->GluBackward(dgateup_, At(kSavedGateUp, l), dact_, N, I_, activation(), a, st));
  HOIST_RETURN_IF_ERROR(Zero(dln_, BT * C));
  HOIST_RETURN_IF_ERROR(StoredMatmulBackward(*backend_, dln_, g.gate_up, nullptr, dgateup_, ln2,
                                             w.gate_up, N, C, 2 * I_, a, st));
  HOIST_RETURN_IF_ERROR(
      LoraBackward(LoraModule::kGateProj, l, dln_, dgateup_, ln2, adapters, adapter_grads));
  HOIST_RETURN_IF_ERROR(
      LoraBackward(LoraModule::kUpProj, l, dln_, dgateup_, ln2, adapters, adapter_grads));
  HOIST_RETURN_IF_ERROR(backend_->RmsNormBackward(dresidual_, g.ln2, dln_, At(kSavedResidual2, l),
                                                  w.ln2, rstd2_ + l * BT, N, C, style, a, st));
  // Attention: residual2 = residual + [post norm](o(attention(rope(qkv(norm1(residual)))))).
  HOIST_ASSIGN_OR_RETURN(
      const void* dattn_out,
      through_norm(kSavedAttnOut, w.attn_out_norm, g.attn_out_norm, rstd_attn_out_ + l * BT));
  HOIST_RETURN_IF_ERROR(Zero(datty_, BT * A));
  HOIST_RETURN_IF_ERROR(
      StoredMatmulBackward(*backend_, datty_, g.o, nullptr, dattn_out, atty, w.o, N, A, C, a, st));
  HOIST_RETURN_IF_ERROR(
      LoraBackward(LoraModule::kOProj, l, datty_, dattn_out, atty, adapters, adapter_grads));
  HOIST_RETURN_IF_ERROR(Zero(dqkv_, BT * QKV_));
  const kernels::AttentionOptions options = AttentionOf(l);
  HOIST_RETURN_IF_ERROR(
      tiled() ? backend_->GqaAttentionBackwardTiled(dqkv_, datty_, qkv, atty, lse(l),
                                                    attention_workspace_.data(), B, T, NH_, NKV_,
                                                    hd_, options, a, st)
              : backend_->GqaAttentionBackward(
                    dqkv_, datty_, qkv, static_cast<const float*>(At(kSavedAtt, l)),
                    attention_workspace_.data(), B, T, NH_, NKV_, hd_, options, a, st));
  HOIST_RETURN_IF_ERROR(
      backend_->RopeBackward(dqkv_, rope_cos_, rope_sin_, B, T, NH_, NKV_, hd_, a, st));
  void* dproj = dqkv_;
  if (traits_.qk_norm) {
    HOIST_RETURN_IF_ERROR(Zero(dqkv_proj_, BT * QKV_));
    HOIST_RETURN_IF_ERROR(backend_->HeadRmsNormBackward(
        dqkv_proj_, g.q_norm, g.k_norm, dqkv_, At(kSavedQkvProj, l), w.q_norm, w.k_norm,
        rstd_qk_ + l * BT * (NH_ + NKV_), N, NH_, NKV_, hd_, style, a, st));
    dproj = dqkv_proj_;
  }
  HOIST_RETURN_IF_ERROR(Zero(dln_, BT * C));
  HOIST_RETURN_IF_ERROR(StoredMatmulBackward(*backend_, dln_, g.qkv, g.qkv_bias, dproj, ln1, w.qkv,
                                             N, C, QKV_, a, st));
  for (LoraModule::Site site : {LoraModule::kQProj, LoraModule::kKProj, LoraModule::kVProj}) {
    HOIST_RETURN_IF_ERROR(LoraBackward(site, l, dln_, dproj, ln1, adapters, adapter_grads));
  }
  return backend_->RmsNormBackward(dresidual_, g.ln1, dln_, residual, w.ln1, rstd1_ + l * BT, N, C,
                                   style, a, st);
}

Status DecoderModel::FinalNormForward(const void* final_unit, const void* residual) {
  return backend_->RmsNormForward(
      lnf_, rstdf_, residual, Weight(final_unit, layout_.local_offsets[kDecoderFinalNorm]),
      last_B_ * last_T_, C_, config_.rms_norm_eps, norm_style(), activation_type_, stream());
}

Status DecoderModel::FinalNormBackward(const void* final_unit, float* grads, const void* residual) {
  float* norm_grads = grads == nullptr ? nullptr : grads + layout_.local_offsets[kDecoderFinalNorm];
  return backend_->RmsNormBackward(dresidual_, norm_grads, dln_, residual,
                                   Weight(final_unit, layout_.local_offsets[kDecoderFinalNorm]),
                                   rstdf_, last_B_ * last_T_, C_, norm_style(), activation_type_,
                                   stream());
}

Status DecoderModel::EmbedBackward(float* grads) {
  const int64_t n = int64_t{last_B_} * last_T_ * C_;
  if (traits_.scaled_embedding) {  // d(x * s) / dx = s; dresidual_ is not read after this
    HOIST_RETURN_IF_ERROR(
        backend_->Scale(dresidual_, dresidual_, n, embed_scale_, activation_type_, stream()));
  }
  // The encoder's position gradient lands in a scratch table nobody reads.
  HOIST_RETURN_IF_ERROR(
      backend_->Zero(dpositions_, int64_t{last_T_} * C_ * int64_t{sizeof(float)}, stream()));
  return backend_->EncoderBackward(grads + layout_.local_offsets[kDecoderEmbedTokens], dpositions_,
                                   dresidual_, inputs_, last_B_, last_T_, C_, activation_type_,
                                   stream());
}

}  // namespace hoist::runtime
