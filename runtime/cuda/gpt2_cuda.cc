#include "runtime/cuda/gpt2_cuda.h"

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "core/cuda/cuda_status.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cast.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/encoder.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/matmul.h"

namespace hoist::runtime {
namespace {

namespace kc = ::hoist::kernels::cuda;

constexpr int64_t kAlign = 256;  // every carved array starts on a 256-byte boundary

int64_t AlignUp(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Hands out consecutive aligned slices of one buffer; with a null base it only counts.
class Carver {
 public:
  explicit Carver(char* base) : base_(base) {}
  char* Take(int64_t bytes) {
    char* p = base_ != nullptr ? base_ + used_ : nullptr;
    used_ += AlignUp(bytes);
    return p;
  }
  float* TakeFloats(int64_t count) { return reinterpret_cast<float*>(Take(count * 4)); }
  int64_t used() const { return used_; }

 private:
  char* base_;
  int64_t used_ = 0;
};

}  // namespace

CudaGpt2Model::CudaGpt2Model(const ModelConfig& config, int max_B, int max_T, DType compute,
                             const CudaStream& stream)
    : config_(config),
      layout_(ParamLayout::For(config)),
      max_B_(max_B),
      max_T_(max_T),
      compute_(compute),
      stream_(stream) {}

CudaGpt2Model::~CudaGpt2Model() = default;

int64_t CudaGpt2Model::ActivationBytes(const ModelConfig& config, int max_B, int max_T,
                                       DType compute) {
  static const CudaStream kNoStream;  // the probe only counts; it never touches the stream
  CudaGpt2Model probe(config, max_B, max_T, compute, kNoStream);
  int64_t activations = 0, scratch = 0;
  probe.Carve(nullptr, nullptr, &activations, &scratch);
  return activations + scratch;
}

StatusOr<std::unique_ptr<CudaGpt2Model>> CudaGpt2Model::Create(
    const ModelConfig& config, int max_B, int max_T, DType compute, Device* device,
    const CudaStream& stream, const ActivationCheckpointingConfig& checkpointing) {
  if (checkpointing.policy != CheckpointPolicy::kNone) {
    return UnimplementedError(
        "activation_checkpointing: the GPU model keeps every activation; set policy \"none\" "
        "(or train with --device cpu, whose model recomputes)");
  }
  if (max_B <= 0 || max_T <= 0 || max_T > config.seq_len) {
    return InvalidArgumentError("GPU model: batch (" + std::to_string(max_B) + ", " +
                                std::to_string(max_T) + ") must be positive with T <= seq_len " +
                                std::to_string(config.seq_len));
  }
  if (config.n_embd % config.n_head != 0) {
    return InvalidArgumentError("model.n_embd must be a multiple of model.n_head");
  }
  std::unique_ptr<CudaGpt2Model> model(new CudaGpt2Model(config, max_B, max_T, compute, stream));
  HOIST_ASSIGN_OR_RETURN(model->blas_, kc::BlasHandle::Create());
  HOIST_RETURN_IF_ERROR(model->Allocate(device));
  return model;
}

void CudaGpt2Model::Carve(char* activations, char* scratch, int64_t* activation_bytes,
                          int64_t* scratch_bytes) {
  const int L = config_.n_layer, C = config_.n_embd, NH = config_.n_head;
  const int Vp = config_.padded_vocab_size();
  const int64_t BT = int64_t{max_B_} * max_T_;
  const int64_t e = static_cast<int64_t>(DTypeSize(compute_));
  Carver a(activations);
  ln1_ = a.Take(L * BT * C * e);
  ln1_mean_ = a.TakeFloats(L * BT);
  ln1_rstd_ = a.TakeFloats(L * BT);
  qkv_ = a.Take(L * BT * 3 * C * e);
  atty_ = a.Take(L * BT * C * e);
  if (tiled()) {
    lse_ = a.TakeFloats(int64_t{L} * max_B_ * NH * max_T_);
  } else {
    att_ = a.TakeFloats(int64_t{L} * max_B_ * NH * max_T_ * max_T_);
  }
  residual2_ = a.Take(L * BT * C * e);
  ln2_ = a.Take(L * BT * C * e);
  ln2_mean_ = a.TakeFloats(L * BT);
  ln2_rstd_ = a.TakeFloats(L * BT);
  fch_ = a.Take(L * BT * 4 * C * e);
  fch_gelu_ = a.Take(L * BT * 4 * C * e);
  residual3_ = a.Take(L * BT * C * e);
  encoded_ = a.Take(BT * C * e);
  lnf_ = a.Take(BT * C * e);
  lnf_mean_ = a.TakeFloats(BT);
  lnf_rstd_ = a.TakeFloats(BT);
  logits_ = a.Take(BT * Vp * e);
  losses_ = a.TakeFloats(BT);
  inputs_ = reinterpret_cast<int32_t*>(a.Take(BT * 4));
  targets_ = reinterpret_cast<int32_t*>(a.Take(BT * 4));
  Carver s(scratch);
  dresidual_ = s.Take(BT * C * e);
  dln_ = s.Take(BT * C * e);
  datty_ = s.Take(BT * C * e);
  dqkv_ = s.Take(BT * 3 * C * e);
  dfch_ = s.Take(BT * 4 * C * e);
  dfch_gelu_ = s.Take(BT * 4 * C * e);
  attention_workspace_ =
      s.Take(tiled() ? kc::TiledAttentionBackwardWorkspaceBytes(max_B_, max_T_, NH)
                     : kc::AttentionWorkspaceBytes(max_B_, max_T_, C, NH, compute_));
  *activation_bytes = a.used();
  *scratch_bytes = s.used();
}

Status CudaGpt2Model::Allocate(Device* device) {
  const int64_t total = layout_.total;
  HOIST_ASSIGN_OR_RETURN(master_, device->Allocate(total * 4, Category::kParam));
  if (compute_ != DType::kFloat32) {
    HOIST_ASSIGN_OR_RETURN(
        copy_,
        device->Allocate(total * static_cast<int64_t>(DTypeSize(compute_)), Category::kParam));
  }
  HOIST_ASSIGN_OR_RETURN(grads_, device->Allocate(total * 4, Category::kGrad));
  // Count first, then carve the same sequence out of the two buffers.
  int64_t activation_bytes = 0, scratch_bytes = 0;
  Carve(nullptr, nullptr, &activation_bytes, &scratch_bytes);
  HOIST_ASSIGN_OR_RETURN(activations_, device->Allocate(activation_bytes, Category::kActivation));
  HOIST_ASSIGN_OR_RETURN(scratch_, device->Allocate(scratch_bytes, Category::kWorkspace));
  Carve(activations_.as<char>(), scratch_.as<char>(), &activation_bytes, &scratch_bytes);
  host_losses_.resize(static_cast<size_t>(int64_t{max_B_} * max_T_));
  return Status::Ok();
}

void* CudaGpt2Model::compute_params() const {
  return compute_ == DType::kFloat32 ? master_.data() : copy_.data();
}

const void* CudaGpt2Model::W(int tensor, int layer) const {
  return static_cast<const char*>(compute_params()) +
         layout_.Offset(tensor, layer) * static_cast<int64_t>(DTypeSize(compute_));
}

float* CudaGpt2Model::G(int tensor, int layer) const {
  return grads() + layout_.Offset(tensor, layer);
}

Status CudaGpt2Model::Zero(void* p, int64_t count) const {
  HOIST_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(p, 0, static_cast<size_t>(count) * DTypeSize(compute_), stream_.get()));
  return Status::Ok();
}

Status CudaGpt2Model::LoadParameters(const float* host) {
  const size_t bytes = static_cast<size_t>(layout_.total) * sizeof(float);
  HOIST_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(master_.data(), host, bytes, cudaMemcpyHostToDevice, stream_.get()));
  if (compute_ != DType::kFloat32) {
    HOIST_RETURN_IF_ERROR(kc::Cast(copy_.data(), compute_, master_.data(), DType::kFloat32,
                                   layout_.total, stream_.get()));
  }
  return stream_.Synchronize();
}

Status CudaGpt2Model::ReadParameters(float* host) const {
  HOIST_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host, master_.data(),
                                             static_cast<size_t>(layout_.total) * sizeof(float),
                                             cudaMemcpyDeviceToHost, stream_.get()));
  return stream_.Synchronize();
}

Status CudaGpt2Model::ReadGradients(float* host) const {
  HOIST_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host, grads_.data(),
                                             static_cast<size_t>(layout_.total) * sizeof(float),
                                             cudaMemcpyDeviceToHost, stream_.get()));
  return stream_.Synchronize();
}

Status CudaGpt2Model::InitializeWeights(uint64_t seed) {
  std::vector<float> host(static_cast<size_t>(layout_.total));
  for (int u = 0; u < layout_.num_units(); ++u) {
    InitializeGpt2Unit(config_, u, seed, host.data() + layout_.unit_offsets[u]);
  }
  return LoadParameters(host.data());
}

Status CudaGpt2Model::ZeroGradients() {
  HOIST_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
      grads_.data(), 0, static_cast<size_t>(layout_.total) * sizeof(float), stream_.get()));
  return Status::Ok();
}

StatusOr<float> CudaGpt2Model::Forward(const int32_t* inputs, const int32_t* targets, int B, int T,
                                       float dloss) {
  if (B <= 0 || B > max_B_ || T <= 0 || T > max_T_) {
    return InvalidArgumentError("GPU model: batch (" + std::to_string(B) + ", " +
                                std::to_string(T) + ") exceeds the allocation (" +
                                std::to_string(max_B_) + ", " + std::to_string(max_T_) + ")");
  }
  if (dloss > 0.0f && targets == nullptr) {
    return InvalidArgumentError("GPU model: a forward for backward (dloss > 0) needs targets");
  }
  const int L = config_.n_layer, C = config_.n_embd, NH = config_.n_head;
  const int V = config_.vocab_size, Vp = config_.padded_vocab_size();
  const int64_t BT = int64_t{B} * T;
  const int N = static_cast<int>(BT);
  const int64_t e = static_cast<int64_t>(DTypeSize(compute_));
  const int64_t maxBT = int64_t{max_B_} * max_T_;
  const DType t = compute_;
  cudaStream_t s = stream_.get();
  kc::BlasHandle& blas = *blas_;
  backward_ready_ = false;
  last_B_ = B;
  last_T_ = T;

  HOIST_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(inputs_, inputs, static_cast<size_t>(BT) * 4, cudaMemcpyHostToDevice, s));
  if (targets != nullptr) {
    HOIST_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(targets_, targets, static_cast<size_t>(BT) * 4, cudaMemcpyHostToDevice, s));
  }
  HOIST_RETURN_IF_ERROR(kc::EncoderForward(encoded_, inputs_, W(kWte), W(kWpe), B, T, C, t, s));
  const char* residual = encoded_;
  for (int l = 0; l < L; ++l) {
    // Layer l's slices of the stacks, laid out for the allocation's (max_B, max_T).
    char* ln1 = ln1_ + l * maxBT * C * e;
    float* ln1_mean = ln1_mean_ + l * maxBT;
    float* ln1_rstd = ln1_rstd_ + l * maxBT;
    char* qkv = qkv_ + l * maxBT * 3 * C * e;
    char* atty = atty_ + l * maxBT * C * e;
    char* residual2 = residual2_ + l * maxBT * C * e;
    char* ln2 = ln2_ + l * maxBT * C * e;
    float* ln2_mean = ln2_mean_ + l * maxBT;
    float* ln2_rstd = ln2_rstd_ + l * maxBT;
    char* fch = fch_ + l * maxBT * 4 * C * e;
    char* fch_gelu = fch_gelu_ + l * maxBT * 4 * C * e;
    char* residual3 = residual3_ + l * maxBT * C * e;
    char* projected = dresidual_;  // free during forward

    HOIST_RETURN_IF_ERROR(kc::LayerNormForward(ln1, ln1_mean, ln1_rstd, residual, W(kLn1W, l),
                                               W(kLn1B, l), N, C, t, s));
    HOIST_RETURN_IF_ERROR(
        kc::MatmulForward(blas, qkv, ln1, W(kQkvW, l), W(kQkvB, l), N, C, 3 * C, t, s));
    if (tiled()) {
      HOIST_RETURN_IF_ERROR(kc::AttentionForwardTiled(
          atty, lse_ + int64_t{l} * max_B_ * NH * max_T_, qkv, B, T, C, NH, t, s));
    } else {
      HOIST_RETURN_IF_ERROR(kc::AttentionForward(blas, atty,
                                                 att_ + int64_t{l} * max_B_ * NH * max_T_ * max_T_,
                                                 qkv, attention_workspace_, B, T, C, NH, t, s));
    }
    HOIST_RETURN_IF_ERROR(
        kc::MatmulForward(blas, projected, atty, W(kAttProjW, l), W(kAttProjB, l), N, C, C, t, s));
    HOIST_RETURN_IF_ERROR(kc::ResidualForward(residual2, residual, projected, BT * C, t, s));
    HOIST_RETURN_IF_ERROR(kc::LayerNormForward(ln2, ln2_mean, ln2_rstd, residual2, W(kLn2W, l),
                                               W(kLn2B, l), N, C, t, s));
    // The fc matmul's GELU epilogue writes both the pre-activation and its GELU.
    HOIST_RETURN_IF_ERROR(
        kc::MatmulForward(blas, fch, ln2, W(kFcW, l), W(kFcB, l), N, C, 4 * C, t, s, fch_gelu));
    HOIST_RETURN_IF_ERROR(kc::MatmulForward(blas, projected, fch_gelu, W(kFcProjW, l),
                                            W(kFcProjB, l), N, 4 * C, C, t, s));
    HOIST_RETURN_IF_ERROR(kc::ResidualForward(residual3, residual2, projected, BT * C, t, s));
    residual = residual3;
  }
  HOIST_RETURN_IF_ERROR(
      kc::LayerNormForward(lnf_, lnf_mean_, lnf_rstd_, residual, W(kLnfW), W(kLnfB), N, C, t, s));
  // The LM head is tied to the token embedding: logits = lnf @ wte^T.
  HOIST_RETURN_IF_ERROR(kc::MatmulForward(blas, logits_, lnf_, W(kWte), nullptr, N, C, Vp, t, s));
  if (targets == nullptr) return 0.0f;
  HOIST_RETURN_IF_ERROR(kc::SoftmaxCrossEntropy(losses_, dloss > 0.0f ? logits_ : nullptr, logits_,
                                                targets_, dloss / static_cast<float>(BT), N, V, Vp,
                                                t, s));
  // The mean is taken on the host in double, in the CPU model's order.
  HOIST_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_losses_.data(), losses_,
                                             static_cast<size_t>(BT) * sizeof(float),
                                             cudaMemcpyDeviceToHost, s));
  HOIST_RETURN_IF_ERROR(stream_.Synchronize());
  double sum = 0.0;
  for (int64_t i = 0; i < BT; ++i) sum += host_losses_[static_cast<size_t>(i)];
  backward_ready_ = dloss > 0.0f;
  return static_cast<float>(sum / static_cast<double>(BT));
}

Status CudaGpt2Model::Backward() {
  if (!backward_ready_) {
    return FailedPreconditionError(
        "GPU model: Backward needs a Forward with targets and dloss > 0 just before it");
  }
  backward_ready_ = false;
  const int B = last_B_, T = last_T_;
  const int L = config_.n_layer, C = config_.n_embd, NH = config_.n_head;
  const int Vp = config_.padded_vocab_size();
  const int64_t BT = int64_t{B} * T;
  const int N = static_cast<int>(BT);
  const int64_t e = static_cast<int64_t>(DTypeSize(compute_));
  const int64_t maxBT = int64_t{max_B_} * max_T_;
  const DType t = compute_;
  cudaStream_t s = stream_.get();
  kc::BlasHandle& blas = *blas_;

  // logits_ holds dlogits; dresidual_ carries the residual stream's gradient down the layers.
  HOIST_RETURN_IF_ERROR(Zero(dln_, BT * C));
  HOIST_RETURN_IF_ERROR(
      kc::MatmulBackward(blas, dln_, G(kWte), nullptr, logits_, lnf_, W(kWte), N, C, Vp, t, s));
  HOIST_RETURN_IF_ERROR(Zero(dresidual_, BT * C));
  const char* last_residual = L > 0 ? residual3_ + (L - 1) * maxBT * C * e : encoded_;
  HOIST_RETURN_IF_ERROR(kc::LayerNormBackward(dresidual_, G(kLnfW), G(kLnfB), dln_, last_residual,
                                              W(kLnfW), lnf_mean_, lnf_rstd_, N, C, t, s));
  for (int l = L - 1; l >= 0; --l) {
    const char* residual = l == 0 ? encoded_ : residual3_ + (l - 1) * maxBT * C * e;
    const char* ln1 = ln1_ + l * maxBT * C * e;
    const float* ln1_mean = ln1_mean_ + l * maxBT;
    const float* ln1_rstd = ln1_rstd_ + l * maxBT;
    const char* qkv = qkv_ + l * maxBT * 3 * C * e;
    const char* atty = atty_ + l * maxBT * C * e;
    const char* residual2 = residual2_ + l * maxBT * C * e;
    const char* ln2 = ln2_ + l * maxBT * C * e;
    const float* ln2_mean = ln2_mean_ + l * maxBT;
    const float* ln2_rstd = ln2_rstd_ + l * maxBT;
    const char* fch = fch_ + l * maxBT * 4 * C * e;
    const char* fch_gelu = fch_gelu_ + l * maxBT * 4 * C * e;

    // MLP: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))).
    HOIST_RETURN_IF_ERROR(Zero(dfch_gelu_, BT * 4 * C));
    HOIST_RETURN_IF_ERROR(kc::MatmulBackward(blas, dfch_gelu_, G(kFcProjW, l), G(kFcProjB, l),
                                             dresidual_, fch_gelu, W(kFcProjW, l), N, 4 * C, C, t,
                                             s));
    HOIST_RETURN_IF_ERROR(Zero(dfch_, BT * 4 * C));
    HOIST_RETURN_IF_ERROR(kc::GeluBackward(dfch_, fch, dfch_gelu_, BT * 4 * C, t, s));
    HOIST_RETURN_IF_ERROR(Zero(dln_, BT * C));
    HOIST_RETURN_IF_ERROR(kc::MatmulBackward(blas, dln_, G(kFcW, l), G(kFcB, l), dfch_, ln2,
                                             W(kFcW, l), N, C, 4 * C, t, s));
    HOIST_RETURN_IF_ERROR(kc::LayerNormBackward(dresidual_, G(kLn2W, l), G(kLn2B, l), dln_,
                                                residual2, W(kLn2W, l), ln2_mean, ln2_rstd, N, C, t,
                                                s));
    // Attention: residual2 = residual + attproj(attention(qkv(ln1(residual)))).
    HOIST_RETURN_IF_ERROR(Zero(datty_, BT * C));
    HOIST_RETURN_IF_ERROR(kc::MatmulBackward(blas, datty_, G(kAttProjW, l), G(kAttProjB, l),
                                             dresidual_, atty, W(kAttProjW, l), N, C, C, t, s));
    HOIST_RETURN_IF_ERROR(Zero(dqkv_, BT * 3 * C));
    if (tiled()) {
      HOIST_RETURN_IF_ERROR(kc::AttentionBackwardTiled(dqkv_, datty_, qkv, atty,
                                                       lse_ + int64_t{l} * max_B_ * NH * max_T_,
                                                       attention_workspace_, B, T, C, NH, t, s));
    } else {
      HOIST_RETURN_IF_ERROR(kc::AttentionBackward(blas, dqkv_, datty_, qkv,
                                                  att_ + int64_t{l} * max_B_ * NH * max_T_ * max_T_,
                                                  attention_workspace_, B, T, C, NH, t, s));
    }
    HOIST_RETURN_IF_ERROR(Zero(dln_, BT * C));
    HOIST_RETURN_IF_ERROR(kc::MatmulBackward(blas, dln_, G(kQkvW, l), G(kQkvB, l), dqkv_, ln1,
                                             W(kQkvW, l), N, C, 3 * C, t, s));
    HOIST_RETURN_IF_ERROR(kc::LayerNormBackward(dresidual_, G(kLn1W, l), G(kLn1B, l), dln_,
                                                residual, W(kLn1W, l), ln1_mean, ln1_rstd, N, C, t,
                                                s));
  }
  return kc::EncoderBackward(G(kWte), G(kWpe), dresidual_, inputs_, B, T, C, t, s);
}

}  // namespace hoist::runtime
