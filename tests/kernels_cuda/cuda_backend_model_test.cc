// The CUDA backend's model ops against the CPU backend's, op by op on the same inputs, in fp32,
// bf16 and fp16: forward outputs, and backward gradients added to random starting values (so an
// op that overwrites where it must add fails). GPU outputs start poisoned (NaN), so an element
// the op never writes fails too. Agreement is measured as |gpu - cpu| / |cpu| over each array:
// fp32 to 1e-5 (the order of additions differs), 16-bit within a few roundings of the type.
// Skipped where no GPU is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/cuda_device.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda_backend.h"
#include "kernels/rope.h"
#include "tests/kernels_cuda/cuda_kernel_test_util.h"

namespace hoist::kernels {
namespace {

using cuda::testing::DeviceArray;
using cuda::testing::DeviceInts;

constexpr int B = 2, T = 64, C = 64, NH = 4, OC = 96, V = 101, Vp = 128, N = B * T;

double ToleranceOf(DType type) {
  switch (type) {
    case DType::kFloat32: return 1e-5;
    case DType::kBFloat16: return 1e-2;
    case DType::kFloat16: return 3e-3;
  }
  return 0;
}

// One array on both sides: `type` bytes on the host for the CPU backend, a device array for the
// CUDA backend, holding the same values (or, for an output, the GPU's poisoned).
struct Twin {
  Twin(DType type, std::vector<float> values) : type(type), device(type, values.size()) {
    values = cuda::testing::RoundTo(type, std::move(values));
    host.resize(values.size() * DTypeSize(type));
    if (type == DType::kFloat32) {
      std::memcpy(host.data(), values.data(), host.size());
    } else {
      cpu::FromFloat(values.data(), host.data(), type, static_cast<int64_t>(values.size()));
    }
    device.Upload(values);
  }
  void* cpu() { return host.data(); }
  void* gpu() const { return device.data(); }
  float* cpu_f() { return reinterpret_cast<float*>(host.data()); }
  float* gpu_f() const { return device.as<float>(); }

  // The CPU's values widened to fp32.
  std::vector<float> CpuValues() const {
    std::vector<float> out(device.size());
    if (type == DType::kFloat32) {
      std::memcpy(out.data(), host.data(), host.size());
    } else {
      cpu::ToFloat(host.data(), type, out.data(), static_cast<int64_t>(out.size()));
    }
    return out;
  }

  DType type;
  std::vector<char> host;
  DeviceArray device;
};

std::vector<int32_t> RandomInts(size_t n, int32_t bound, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, bound - 1);
  std::vector<int32_t> out(n);
  for (int32_t& x : out) x = dist(rng);
  return out;
}

class CudaBackendModel : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    HOIST_SKIP_WITHOUT_GPU();
    auto backend = CudaBackend::Create(0, &tracker_);
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    gpu_ = std::move(backend).value();
  }

  const Stream& cs() const { return cpu_.compute_stream(); }
  const Stream& gs() const { return gpu_->compute_stream(); }

  // An input: random values in [lo, hi) of `type`.
  std::unique_ptr<Twin> In(DType type, size_t n, float lo = -1.0f, float hi = 1.0f) {
    return std::make_unique<Twin>(type, cuda::testing::RandomFloats(n, ++seed_, lo, hi));
  }
  // An output the op writes whole: poisoned on the GPU.
  std::unique_ptr<Twin> Out(DType type, size_t n) {
    auto twin = std::make_unique<Twin>(type, std::vector<float>(n, 0.0f));
    twin->device.Poison();
    return twin;
  }

  // Both sides' values of `twin` agree within the type's tolerance, and every GPU value is
  // finite (a poisoned element left unwritten is not).
  void ExpectAgree(const Twin& twin, const std::string& what, DType op_type) {
    const std::vector<float> cpu = twin.CpuValues();
    const std::vector<float> gpu = twin.device.Download();
    double diff = 0, norm = 0;
    size_t nonfinite = 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
      if (!std::isfinite(gpu[i])) ++nonfinite;
      diff += (static_cast<double>(gpu[i]) - cpu[i]) * (static_cast<double>(gpu[i]) - cpu[i]);
      norm += static_cast<double>(cpu[i]) * cpu[i];
    }
    EXPECT_EQ(nonfinite, 0u) << what << ": elements the GPU left unwritten or made inf/NaN";
    ASSERT_GT(norm, 0.0) << what << ": the reference is all zeros";
    EXPECT_LT(std::sqrt(diff / norm), ToleranceOf(op_type))
        << what << " (" << DTypeName(op_type) << ")";
  }

  void Finish() {
    ASSERT_TRUE(cs().Synchronize().ok());
    ASSERT_TRUE(gs().Synchronize().ok());
  }

  MemoryTracker tracker_;
  CpuDevice host_device_{Place::kHost, &tracker_};
  CpuBackend cpu_{&host_device_};
  std::unique_ptr<CudaBackend> gpu_;
  uint32_t seed_ = 100;
};

#define BOTH(call_cpu, call_gpu)     \
  do {                               \
    HOIST_ASSERT_OK(cpu_.call_cpu);  \
    HOIST_ASSERT_OK(gpu_->call_gpu); \
  } while (0)

TEST_P(CudaBackendModel, Encoder) {
  const DType t = GetParam();
  const std::vector<int32_t> tokens = RandomInts(N, V, 1);
  DeviceInts d_tokens(tokens);
  auto wte = In(t, size_t{Vp} * C), wpe = In(t, size_t{T} * C), out = Out(t, size_t{N} * C);
  BOTH(EncoderForward(out->cpu(), tokens.data(), wte->cpu(), wpe->cpu(), B, T, C, t, cs()),
       EncoderForward(out->gpu(), d_tokens.data(), wte->gpu(), wpe->gpu(), B, T, C, t, gs()));
  auto dout = In(t, size_t{N} * C), dwte = In(DType::kFloat32, size_t{Vp} * C),
       dwpe = In(DType::kFloat32, size_t{T} * C);
  BOTH(EncoderBackward(dwte->cpu_f(), dwpe->cpu_f(), dout->cpu(), tokens.data(), B, T, C, t, cs()),
       EncoderBackward(dwte->gpu_f(), dwpe->gpu_f(), dout->gpu(), d_tokens.data(), B, T, C, t,
                       gs()));
  Finish();
  ExpectAgree(*out, "encoder out", t);
  ExpectAgree(*dwte, "dwte", t);
  ExpectAgree(*dwpe, "dwpe", t);
}

TEST_P(CudaBackendModel, LayerNorm) {
  const DType t = GetParam();
  auto inp = In(t, size_t{N} * C, -2.0f, 2.0f), weight = In(t, C, 0.5f, 1.5f), bias = In(t, C);
  auto out = Out(t, size_t{N} * C), mean = Out(DType::kFloat32, N), rstd = Out(DType::kFloat32, N);
  BOTH(LayerNormForward(out->cpu(), mean->cpu_f(), rstd->cpu_f(), inp->cpu(), weight->cpu(),
                        bias->cpu(), N, C, t, cs()),
       LayerNormForward(out->gpu(), mean->gpu_f(), rstd->gpu_f(), inp->gpu(), weight->gpu(),
                        bias->gpu(), N, C, t, gs()));
  auto dout = In(t, size_t{N} * C), dinp = In(t, size_t{N} * C);
  auto dweight = In(DType::kFloat32, C), dbias = In(DType::kFloat32, C);
  // Each side's backward reads its own forward's mean and rstd.
  BOTH(LayerNormBackward(dinp->cpu(), dweight->cpu_f(), dbias->cpu_f(), dout->cpu(), inp->cpu(),
                         weight->cpu(), mean->cpu_f(), rstd->cpu_f(), N, C, t, cs()),
       LayerNormBackward(dinp->gpu(), dweight->gpu_f(), dbias->gpu_f(), dout->gpu(), inp->gpu(),
                         weight->gpu(), mean->gpu_f(), rstd->gpu_f(), N, C, t, gs()));
  Finish();
  ExpectAgree(*out, "layernorm out", t);
  ExpectAgree(*mean, "mean", t);
  ExpectAgree(*rstd, "rstd", t);
  ExpectAgree(*dinp, "layernorm dinp", t);
  ExpectAgree(*dweight, "layernorm dweight", t);
  ExpectAgree(*dbias, "layernorm dbias", t);
}

TEST_P(CudaBackendModel, MatmulWithBiasAndGelu) {
  const DType t = GetParam();
  auto inp = In(t, size_t{N} * C), weight = In(t, size_t{OC} * C, -0.2f, 0.2f), bias = In(t, OC);
  auto out = Out(t, size_t{N} * OC), gelu = Out(t, size_t{N} * OC), plain = Out(t, size_t{N} * OC);
  BOTH(MatmulForward(out->cpu(), inp->cpu(), weight->cpu(), bias->cpu(), N, C, OC, t, gelu->cpu(),
                     cs()),
       MatmulForward(out->gpu(), inp->gpu(), weight->gpu(), bias->gpu(), N, C, OC, t, gelu->gpu(),
                     gs()));
  BOTH(MatmulForward(plain->cpu(), inp->cpu(), weight->cpu(), nullptr, N, C, OC, t, nullptr, cs()),
       MatmulForward(plain->gpu(), inp->gpu(), weight->gpu(), nullptr, N, C, OC, t, nullptr, gs()));
  auto dout = In(t, size_t{N} * OC), dinp = In(t, size_t{N} * C);
  auto dweight = In(DType::kFloat32, size_t{OC} * C), dbias = In(DType::kFloat32, OC);
  BOTH(MatmulBackward(dinp->cpu(), dweight->cpu_f(), dbias->cpu_f(), dout->cpu(), inp->cpu(),
                      weight->cpu(), N, C, OC, t, cs()),
       MatmulBackward(dinp->gpu(), dweight->gpu_f(), dbias->gpu_f(), dout->gpu(), inp->gpu(),
                      weight->gpu(), N, C, OC, t, gs()));
  Finish();
  ExpectAgree(*out, "matmul out", t);
  ExpectAgree(*gelu, "matmul gelu_out", t);
  ExpectAgree(*plain, "matmul out without bias", t);
  ExpectAgree(*dinp, "matmul dinp", t);
  ExpectAgree(*dweight, "matmul dweight", t);
  ExpectAgree(*dbias, "matmul dbias", t);
}

TEST_P(CudaBackendModel, DirectAttention) {
  const DType t = GetParam();
  auto qkv = In(t, size_t{N} * 3 * C), out = Out(t, size_t{N} * C);
  auto att = Out(DType::kFloat32, size_t{B} * NH * T * T);
  const int64_t workspace_bytes = gpu_->AttentionWorkspaceBytes(B, T, C, NH, t);
  DeviceArray workspace(DType::kFloat32, static_cast<size_t>(workspace_bytes / 4 + 1));
  BOTH(AttentionForward(out->cpu(), att->cpu_f(), qkv->cpu(), nullptr, B, T, C, NH, t, cs()),
       AttentionForward(out->gpu(), att->gpu_f(), qkv->gpu(), workspace.data(), B, T, C, NH, t,
                        gs()));
  auto dout = In(t, size_t{N} * C), dqkv = In(t, size_t{N} * 3 * C);
  BOTH(AttentionBackward(dqkv->cpu(), dout->cpu(), qkv->cpu(), att->cpu_f(), nullptr, B, T, C, NH,
                         t, cs()),
       AttentionBackward(dqkv->gpu(), dout->gpu(), qkv->gpu(), att->gpu_f(), workspace.data(), B, T,
                         C, NH, t, gs()));
  Finish();
  ExpectAgree(*out, "attention out", t);
  ExpectAgree(*att, "attention probabilities", t);
  ExpectAgree(*dqkv, "attention dqkv", t);
}

TEST_P(CudaBackendModel, TiledAttention) {
  const DType t = GetParam();
  auto qkv = In(t, size_t{N} * 3 * C), out = Out(t, size_t{N} * C);
  auto lse = Out(DType::kFloat32, size_t{B} * NH * T);
  BOTH(AttentionForwardTiled(out->cpu(), lse->cpu_f(), qkv->cpu(), B, T, C, NH, t, cs()),
       AttentionForwardTiled(out->gpu(), lse->gpu_f(), qkv->gpu(), B, T, C, NH, t, gs()));
  const int64_t workspace_bytes = gpu_->TiledAttentionWorkspaceBytes(B, T, NH);
  DeviceArray workspace(DType::kFloat32, static_cast<size_t>(workspace_bytes / 4 + 1));
  auto dout = In(t, size_t{N} * C), dqkv = In(t, size_t{N} * 3 * C);
  BOTH(AttentionBackwardTiled(dqkv->cpu(), dout->cpu(), qkv->cpu(), out->cpu(), lse->cpu_f(),
                              nullptr, B, T, C, NH, t, cs()),
       AttentionBackwardTiled(dqkv->gpu(), dout->gpu(), qkv->gpu(), out->gpu(), lse->gpu_f(),
                              workspace.data(), B, T, C, NH, t, gs()));
  Finish();
  ExpectAgree(*out, "tiled attention out", t);
  ExpectAgree(*lse, "tiled attention lse", t);
  ExpectAgree(*dqkv, "tiled attention dqkv", t);
}

TEST_P(CudaBackendModel, GeluAndResidual) {
  const DType t = GetParam();
  const int64_t n = int64_t{N} * C + 3;  // an odd tail for the vectorized kernels
  auto x = In(t, static_cast<size_t>(n), -3.0f, 3.0f), y = In(t, static_cast<size_t>(n));
  auto gelu = Out(t, static_cast<size_t>(n)), sum = Out(t, static_cast<size_t>(n));
  BOTH(GeluForward(gelu->cpu(), x->cpu(), n, t, cs()),
       GeluForward(gelu->gpu(), x->gpu(), n, t, gs()));
  BOTH(ResidualForward(sum->cpu(), x->cpu(), y->cpu(), n, t, cs()),
       ResidualForward(sum->gpu(), x->gpu(), y->gpu(), n, t, gs()));
  auto dout = In(t, static_cast<size_t>(n)), dx = In(t, static_cast<size_t>(n));
  auto da = In(t, static_cast<size_t>(n)), db = In(t, static_cast<size_t>(n));
  BOTH(GeluBackward(dx->cpu(), x->cpu(), dout->cpu(), n, t, cs()),
       GeluBackward(dx->gpu(), x->gpu(), dout->gpu(), n, t, gs()));
  BOTH(ResidualBackward(da->cpu(), db->cpu(), dout->cpu(), n, t, cs()),
       ResidualBackward(da->gpu(), db->gpu(), dout->gpu(), n, t, gs()));
  Finish();
  ExpectAgree(*gelu, "gelu", t);
  ExpectAgree(*sum, "residual", t);
  ExpectAgree(*dx, "gelu dinp", t);
  ExpectAgree(*da, "residual da", t);
  ExpectAgree(*db, "residual db", t);
}

TEST_P(CudaBackendModel, SoftmaxCrossEntropy) {
  const DType t = GetParam();
  const std::vector<int32_t> targets = RandomInts(N, V, 2);
  DeviceInts d_targets(targets);
  auto logits = In(t, size_t{N} * Vp, -4.0f, 4.0f);
  auto losses = Out(DType::kFloat32, N), dlogits = Out(t, size_t{N} * Vp);
  const float dloss = 1.0f / N;
  BOTH(SoftmaxCrossEntropy(losses->cpu_f(), dlogits->cpu(), logits->cpu(), targets.data(), dloss, N,
                           V, Vp, 0.0f, t, cs()),
       SoftmaxCrossEntropy(losses->gpu_f(), dlogits->gpu(), logits->gpu(), d_targets.data(), dloss,
                           N, V, Vp, 0.0f, t, gs()));
  Finish();
  ExpectAgree(*losses, "losses", t);
  ExpectAgree(*dlogits, "dlogits", t);
}

// Negative targets are ignored positions (a masked loss): a 0 loss and a zero gradient row on the
// GPU as on the CPU, with and without the soft cap.
TEST_P(CudaBackendModel, SoftmaxCrossEntropyIgnoresNegativeTargets) {
  const DType t = GetParam();
  std::vector<int32_t> targets = RandomInts(N, V, 5);
  for (int i = 0; i < N; i += 3) targets[static_cast<size_t>(i)] = i % 2 == 0 ? -1 : -100;
  DeviceInts d_targets(targets);
  for (const float cap : {0.0f, 30.0f}) {
    auto logits = In(t, size_t{N} * Vp, -4.0f, 4.0f);
    auto losses = Out(DType::kFloat32, N), dlogits = Out(t, size_t{N} * Vp);
    BOTH(SoftmaxCrossEntropy(losses->cpu_f(), dlogits->cpu(), logits->cpu(), targets.data(),
                             1.0f / N, N, V, Vp, cap, t, cs()),
         SoftmaxCrossEntropy(losses->gpu_f(), dlogits->gpu(), logits->gpu(), d_targets.data(),
                             1.0f / N, N, V, Vp, cap, t, gs()));
    Finish();
    ExpectAgree(*losses, "losses", t);
    ExpectAgree(*dlogits, "dlogits", t);
  }
}

// The Llama family's ops: grouped-query heads (3 query heads per key/value head), RMSNorm, the
// rotary embedding with Llama 3 scaling, SwiGLU.
constexpr int kNH = 6, kNKV = 2, kHd = 16, kW = (kNH + 2 * kNKV) * kHd, kI = 80;

TEST_P(CudaBackendModel, GqaDirectAttention) {
  const DType t = GetParam();
  auto qkv = In(t, size_t{N} * kW), out = Out(t, size_t{N} * kNH * kHd);
  auto att = Out(DType::kFloat32, size_t{B} * kNH * T * T);
  const int64_t workspace_bytes = gpu_->GqaAttentionWorkspaceBytes(B, T, kNH, kNKV, kHd, t);
  DeviceArray workspace(DType::kFloat32, static_cast<size_t>(workspace_bytes / 4 + 1));
  BOTH(GqaAttentionForward(out->cpu(), att->cpu_f(), qkv->cpu(), nullptr, B, T, kNH, kNKV, kHd, {},
                           t, cs()),
       GqaAttentionForward(out->gpu(), att->gpu_f(), qkv->gpu(), workspace.data(), B, T, kNH, kNKV,
                           kHd, {}, t, gs()));
  auto dout = In(t, size_t{N} * kNH * kHd), dqkv = In(t, size_t{N} * kW);
  BOTH(GqaAttentionBackward(dqkv->cpu(), dout->cpu(), qkv->cpu(), att->cpu_f(), nullptr, B, T, kNH,
                            kNKV, kHd, {}, t, cs()),
       GqaAttentionBackward(dqkv->gpu(), dout->gpu(), qkv->gpu(), att->gpu_f(), workspace.data(), B,
                            T, kNH, kNKV, kHd, {}, t, gs()));
  Finish();
  ExpectAgree(*out, "gqa attention out", t);
  ExpectAgree(*att, "gqa attention probabilities", t);
  ExpectAgree(*dqkv, "gqa attention dqkv", t);
}

TEST_P(CudaBackendModel, GqaTiledAttention) {
  const DType t = GetParam();
  auto qkv = In(t, size_t{N} * kW), out = Out(t, size_t{N} * kNH * kHd);
  auto lse = Out(DType::kFloat32, size_t{B} * kNH * T);
  BOTH(GqaAttentionForwardTiled(out->cpu(), lse->cpu_f(), qkv->cpu(), B, T, kNH, kNKV, kHd, {}, t,
                                cs()),
       GqaAttentionForwardTiled(out->gpu(), lse->gpu_f(), qkv->gpu(), B, T, kNH, kNKV, kHd, {}, t,
                                gs()));
  const int64_t workspace_bytes = gpu_->GqaTiledAttentionWorkspaceBytes(B, T, kNH);
  DeviceArray workspace(DType::kFloat32, static_cast<size_t>(workspace_bytes / 4 + 1));
  auto dout = In(t, size_t{N} * kNH * kHd), dqkv = In(t, size_t{N} * kW);
  BOTH(GqaAttentionBackwardTiled(dqkv->cpu(), dout->cpu(), qkv->cpu(), out->cpu(), lse->cpu_f(),
                                 nullptr, B, T, kNH, kNKV, kHd, {}, t, cs()),
       GqaAttentionBackwardTiled(dqkv->gpu(), dout->gpu(), qkv->gpu(), out->gpu(), lse->gpu_f(),
                                 workspace.data(), B, T, kNH, kNKV, kHd, {}, t, gs()));
  Finish();
  ExpectAgree(*out, "gqa tiled attention out", t);
  ExpectAgree(*lse, "gqa tiled attention lse", t);
  ExpectAgree(*dqkv, "gqa tiled attention dqkv", t);
}

TEST_P(CudaBackendModel, RmsNormRopeAndSwiGlu) {
  const DType t = GetParam();
  auto inp = In(t, size_t{N} * C, -2.0f, 2.0f), weight = In(t, C, 0.5f, 1.5f);
  auto out = Out(t, size_t{N} * C), rstd = Out(DType::kFloat32, N);
  BOTH(RmsNormForward(out->cpu(), rstd->cpu_f(), inp->cpu(), weight->cpu(), N, C, 1e-5f,
                      RmsNormStyle::kLlama, t, cs()),
       RmsNormForward(out->gpu(), rstd->gpu_f(), inp->gpu(), weight->gpu(), N, C, 1e-5f,
                      RmsNormStyle::kLlama, t, gs()));
  auto dout = In(t, size_t{N} * C), dinp = In(t, size_t{N} * C), dweight = In(DType::kFloat32, C);
  BOTH(RmsNormBackward(dinp->cpu(), dweight->cpu_f(), dout->cpu(), inp->cpu(), weight->cpu(),
                       rstd->cpu_f(), N, C, RmsNormStyle::kLlama, t, cs()),
       RmsNormBackward(dinp->gpu(), dweight->gpu_f(), dout->gpu(), inp->gpu(), weight->gpu(),
                       rstd->gpu_f(), N, C, RmsNormStyle::kLlama, t, gs()));

  RopeScaling llama3;
  llama3.llama3 = true;
  llama3.original_max_position_embeddings = 32.0;
  const RopeTable table = MakeRopeTable(RopeInvFreq(kHd, 500000.0, llama3).value(), T);
  Twin cos(DType::kFloat32, table.cos), sin(DType::kFloat32, table.sin);
  auto qkv = In(t, size_t{N} * kW), dqkv = In(t, size_t{N} * kW);
  BOTH(RopeForward(qkv->cpu(), cos.cpu_f(), sin.cpu_f(), B, T, kNH, kNKV, kHd, t, cs()),
       RopeForward(qkv->gpu(), cos.gpu_f(), sin.gpu_f(), B, T, kNH, kNKV, kHd, t, gs()));
  BOTH(RopeBackward(dqkv->cpu(), cos.cpu_f(), sin.cpu_f(), B, T, kNH, kNKV, kHd, t, cs()),
       RopeBackward(dqkv->gpu(), cos.gpu_f(), sin.gpu_f(), B, T, kNH, kNKV, kHd, t, gs()));

  auto gu = In(t, size_t{N} * 2 * kI, -4.0f, 4.0f), act = Out(t, size_t{N} * kI);
  BOTH(GluForward(act->cpu(), gu->cpu(), N, kI, GluActivation::kSilu, t, cs()),
       GluForward(act->gpu(), gu->gpu(), N, kI, GluActivation::kSilu, t, gs()));
  auto dact = In(t, size_t{N} * kI), dgu = In(t, size_t{N} * 2 * kI);
  BOTH(GluBackward(dgu->cpu(), gu->cpu(), dact->cpu(), N, kI, GluActivation::kSilu, t, cs()),
       GluBackward(dgu->gpu(), gu->gpu(), dact->gpu(), N, kI, GluActivation::kSilu, t, gs()));
  Finish();
  ExpectAgree(*out, "rmsnorm out", t);
  ExpectAgree(*rstd, "rmsnorm rstd", t);
  ExpectAgree(*dinp, "rmsnorm dinp", t);
  ExpectAgree(*dweight, "rmsnorm dweight", t);
  ExpectAgree(*qkv, "rope qkv", t);
  ExpectAgree(*dqkv, "rope dqkv", t);
  ExpectAgree(*act, "swiglu out", t);
  ExpectAgree(*dgu, "swiglu dinp", t);
}

// The variants of Qwen3 and Gemma 2: Gemma's RMSNorm, the per-head norm (both styles), GeGLU,
// the capped loss, the scale and the standalone cap.
TEST_P(CudaBackendModel, QwenAndGemmaOps) {
  const DType t = GetParam();
  auto inp = In(t, size_t{N} * C, -2.0f, 2.0f), weight = In(t, C, -0.5f, 0.5f);
  auto out = Out(t, size_t{N} * C), rstd = Out(DType::kFloat32, N);
  BOTH(RmsNormForward(out->cpu(), rstd->cpu_f(), inp->cpu(), weight->cpu(), N, C, 1e-6f,
                      RmsNormStyle::kGemma, t, cs()),
       RmsNormForward(out->gpu(), rstd->gpu_f(), inp->gpu(), weight->gpu(), N, C, 1e-6f,
                      RmsNormStyle::kGemma, t, gs()));
  auto dout = In(t, size_t{N} * C), dinp = In(t, size_t{N} * C), dweight = In(DType::kFloat32, C);
  BOTH(RmsNormBackward(dinp->cpu(), dweight->cpu_f(), dout->cpu(), inp->cpu(), weight->cpu(),
                       rstd->cpu_f(), N, C, RmsNormStyle::kGemma, t, cs()),
       RmsNormBackward(dinp->gpu(), dweight->gpu_f(), dout->gpu(), inp->gpu(), weight->gpu(),
                       rstd->gpu_f(), N, C, RmsNormStyle::kGemma, t, gs()));

  auto qkv = In(t, size_t{N} * kW, -2.0f, 2.0f), qw = In(t, kHd, 0.5f, 1.5f),
       kw = In(t, kHd, 0.5f, 1.5f);
  auto normed = Out(t, size_t{N} * kW), head_rstd = Out(DType::kFloat32, size_t{N} * (kNH + kNKV));
  BOTH(HeadRmsNormForward(normed->cpu(), head_rstd->cpu_f(), qkv->cpu(), qw->cpu(), kw->cpu(), N,
                          kNH, kNKV, kHd, 1e-6f, RmsNormStyle::kLlama, t, cs()),
       HeadRmsNormForward(normed->gpu(), head_rstd->gpu_f(), qkv->gpu(), qw->gpu(), kw->gpu(), N,
                          kNH, kNKV, kHd, 1e-6f, RmsNormStyle::kLlama, t, gs()));
  auto dnormed = In(t, size_t{N} * kW), dqkv = In(t, size_t{N} * kW);
  auto dqw = In(DType::kFloat32, kHd), dkw = In(DType::kFloat32, kHd);
  BOTH(HeadRmsNormBackward(dqkv->cpu(), dqw->cpu_f(), dkw->cpu_f(), dnormed->cpu(), qkv->cpu(),
                           qw->cpu(), kw->cpu(), head_rstd->cpu_f(), N, kNH, kNKV, kHd,
                           RmsNormStyle::kLlama, t, cs()),
       HeadRmsNormBackward(dqkv->gpu(), dqw->gpu_f(), dkw->gpu_f(), dnormed->gpu(), qkv->gpu(),
                           qw->gpu(), kw->gpu(), head_rstd->gpu_f(), N, kNH, kNKV, kHd,
                           RmsNormStyle::kLlama, t, gs()));

  auto gu = In(t, size_t{N} * 2 * kI, -4.0f, 4.0f), act = Out(t, size_t{N} * kI);
  BOTH(GluForward(act->cpu(), gu->cpu(), N, kI, GluActivation::kGeluTanh, t, cs()),
       GluForward(act->gpu(), gu->gpu(), N, kI, GluActivation::kGeluTanh, t, gs()));
  auto dact = In(t, size_t{N} * kI), dgu = In(t, size_t{N} * 2 * kI);
  BOTH(GluBackward(dgu->cpu(), gu->cpu(), dact->cpu(), N, kI, GluActivation::kGeluTanh, t, cs()),
       GluBackward(dgu->gpu(), gu->gpu(), dact->gpu(), N, kI, GluActivation::kGeluTanh, t, gs()));

  const std::vector<int32_t> targets = RandomInts(N, V, 3);
  DeviceInts d_targets(targets);
  auto logits = In(t, size_t{N} * Vp, -40.0f, 40.0f);
  auto losses = Out(DType::kFloat32, N), dlogits = Out(t, size_t{N} * Vp);
  BOTH(SoftmaxCrossEntropy(losses->cpu_f(), dlogits->cpu(), logits->cpu(), targets.data(), 1.0f / N,
                           N, V, Vp, 30.0f, t, cs()),
       SoftmaxCrossEntropy(losses->gpu_f(), dlogits->gpu(), logits->gpu(), d_targets.data(),
                           1.0f / N, N, V, Vp, 30.0f, t, gs()));
  auto embedded = In(t, size_t{N} * C), scaled = Out(t, size_t{N} * C);
  BOTH(Scale(scaled->cpu(), embedded->cpu(), int64_t{N} * C, 8.0f, t, cs()),
       Scale(scaled->gpu(), embedded->gpu(), int64_t{N} * C, 8.0f, t, gs()));
  auto capped = In(t, size_t{N} * Vp, -60.0f, 60.0f);
  BOTH(SoftcapForward(capped->cpu(), int64_t{N} * Vp, 30.0f, t, cs()),
       SoftcapForward(capped->gpu(), int64_t{N} * Vp, 30.0f, t, gs()));
  Finish();
  ExpectAgree(*out, "gemma rmsnorm out", t);
  ExpectAgree(*rstd, "gemma rmsnorm rstd", t);
  ExpectAgree(*dinp, "gemma rmsnorm dinp", t);
  ExpectAgree(*dweight, "gemma rmsnorm dweight", t);
  ExpectAgree(*normed, "head rmsnorm out", t);
  ExpectAgree(*head_rstd, "head rmsnorm rstd", t);
  ExpectAgree(*dqkv, "head rmsnorm dinp", t);
  ExpectAgree(*dqw, "head rmsnorm dq_weight", t);
  ExpectAgree(*dkw, "head rmsnorm dk_weight", t);
  ExpectAgree(*act, "geglu out", t);
  ExpectAgree(*dgu, "geglu dinp", t);
  ExpectAgree(*losses, "capped losses", t);
  ExpectAgree(*dlogits, "capped dlogits", t);
  ExpectAgree(*scaled, "scaled", t);
  ExpectAgree(*capped, "softcap", t);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaBackendModel,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16),
                         cuda::testing::DTypeParamName);

// Products share one BLAS workspace, so they refuse any stream but the compute stream.
TEST(CudaBackendModelStreams, ProductsRefuseTheCopyStream) {
  HOIST_SKIP_WITHOUT_GPU();
  MemoryTracker tracker;
  auto gpu = CudaBackend::Create(0, &tracker);
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  DeviceArray a(DType::kFloat32, 16), w(DType::kFloat32, 16), out(DType::kFloat32, 16);
  const Status status = (*gpu)->MatmulForward(out.data(), a.data(), w.data(), nullptr, 4, 4, 4,
                                              DType::kFloat32, nullptr, (*gpu)->copy_stream());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("MatmulForward"), std::string::npos) << status.ToString();
}

}  // namespace
}  // namespace hoist::kernels
