#include "runtime/model/lora_pass.h"

#include <algorithm>

namespace hoist::runtime {
namespace {

int64_t MaxIn(const LoraLayout& layout) {
  int64_t most = 0;
  for (const LoraModule& m : layout.modules) most = std::max(most, m.in);
  return most;
}

}  // namespace

int64_t LoraPass::ScratchBytes(const LoraLayout& layout, int64_t max_N, DType type) {
  const auto size = static_cast<int64_t>(DTypeSize(type));
  int64_t elements = 2 * max_N * layout.r;
  if (layout.dropout > 0.0f) elements += 2 * max_N * MaxIn(layout);
  return elements * size;
}

StatusOr<std::unique_ptr<LoraPass>> LoraPass::Create(const LoraLayout& layout, int64_t max_N,
                                                     kernels::Backend* backend, DType type) {
  std::unique_ptr<LoraPass> pass(new LoraPass(layout, backend, type));
  HOIST_ASSIGN_OR_RETURN(
      pass->scratch_,
      backend->device().Allocate(ScratchBytes(layout, max_N, type), Category::kActivation));
  void* at = pass->scratch_.data();
  auto carve = [&](int64_t elements) {
    void* p = at;
    at = ElementPtr(at, type, elements);
    return p;
  };
  pass->h_ = carve(max_N * layout.r);
  pass->dh_ = carve(max_N * layout.r);
  if (layout.dropout > 0.0f) {
    pass->dropped_ = carve(max_N * MaxIn(layout));
    pass->dx_ = carve(max_N * MaxIn(layout));
  }
  return pass;
}

uint64_t LoraPass::MaskSeed(int module, int layer, int64_t sequence) const {
  // Each (sequence, block, layer site) draws its own mask.
  auto mix = [](uint64_t x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  };
  const uint64_t site = static_cast<uint64_t>(layer) * 16 + static_cast<uint64_t>(module) + 1;
  return mix(mix(seed_ + 0x9E3779B97F4A7C15ull * site) + static_cast<uint64_t>(sequence));
}

Status LoraPass::ApplyDropout(void* out, const void* inp, int module, int layer, int B, int T,
                              int64_t width) {
  const int64_t n = int64_t{T} * width;
  for (int b = 0; b < B; ++b) {
    HOIST_RETURN_IF_ERROR(backend_->Dropout(
        ElementPtr(out, type_, b * n), ElementPtr(inp, type_, b * n), n, layout_.dropout,
        MaskSeed(module, layer, first_sequence_ + b), type_, backend_->compute_stream()));
  }
  return Status::Ok();
}

StatusOr<const void*> LoraPass::Input(int module, int layer, const void* x, int B, int T) {
  if (layout_.dropout <= 0.0f) return x;
  const LoraModule& m = layout_.modules[static_cast<size_t>(module)];
  HOIST_RETURN_IF_ERROR(ApplyDropout(dropped_, x, module, layer, B, T, m.in));
  return static_cast<const void*>(dropped_);
}

Status LoraPass::Forward(LoraModule::Site site, int layer, void* y, const void* x,
                         const void* adapters, int B, int T) {
  const int N = B * T;
  const int module = layout_.Find(site);
  if (module < 0) return Status::Ok();
  const LoraModule& m = layout_.modules[static_cast<size_t>(module)];
  const int r = layout_.r;
  const int in = static_cast<int>(m.in), out = static_cast<int>(m.out);
  const void* a_matrix = ElementPtr(adapters, type_, layout_.a_offset[static_cast<size_t>(module)]);
  const void* b_matrix = ElementPtr(adapters, type_, layout_.b_offset[static_cast<size_t>(module)]);
  const Stream& st = backend_->compute_stream();
  HOIST_ASSIGN_OR_RETURN(const void* input, Input(module, layer, x, B, T));
  // h (N, r) = input A^T; y[:, out_begin:] += scaling * h B^T.
  HOIST_RETURN_IF_ERROR(backend_->Gemm(false, true, N, r, in, 1.0f, input, in, a_matrix, in, 0.0f,
                                       h_, r, type_, type_, st));
  return backend_->Gemm(false, true, N, out, r, layout_.scaling, h_, r, b_matrix, r, 1.0f,
                        ElementPtr(y, type_, m.out_begin), m.base_out, type_, type_, st);
}

Status LoraPass::Backward(LoraModule::Site site, int layer, void* dx, const void* dy, const void* x,
                          const void* adapters, float* grads, int B, int T) {
  const int N = B * T;
  const int module = layout_.Find(site);
  if (module < 0) return Status::Ok();
  const auto mi = static_cast<size_t>(module);
  const LoraModule& m = layout_.modules[mi];
  const int r = layout_.r;
  const int in = static_cast<int>(m.in), out = static_cast<int>(m.out);
  const void* a_matrix = ElementPtr(adapters, type_, layout_.a_offset[mi]);
  const void* b_matrix = ElementPtr(adapters, type_, layout_.b_offset[mi]);
  float* dA = grads + layout_.a_offset[mi];
  float* dB = grads + layout_.b_offset[mi];
  const void* dy_slice = ElementPtr(dy, type_, m.out_begin);
  const float s = layout_.scaling;
  const Stream& st = backend_->compute_stream();
  const DType f32 = DType::kFloat32;
  HOIST_ASSIGN_OR_RETURN(const void* input, Input(module, layer, x, B, T));
  // h = input A^T again; dB += s dy^T h; dh = s dy B; dA += dh^T input; dx += mask(dh A).
  HOIST_RETURN_IF_ERROR(backend_->Gemm(false, true, N, r, in, 1.0f, input, in, a_matrix, in, 0.0f,
                                       h_, r, type_, type_, st));
  HOIST_RETURN_IF_ERROR(backend_->Gemm(true, false, out, r, N, s, dy_slice, m.base_out, h_, r, 1.0f,
                                       dB, r, type_, f32, st));
  HOIST_RETURN_IF_ERROR(backend_->Gemm(false, false, N, r, out, s, dy_slice, m.base_out, b_matrix,
                                       r, 0.0f, dh_, r, type_, type_, st));
  HOIST_RETURN_IF_ERROR(
      backend_->Gemm(true, false, r, in, N, 1.0f, dh_, r, input, in, 1.0f, dA, in, type_, f32, st));
  if (layout_.dropout <= 0.0f) {
    return backend_->Gemm(false, false, N, in, r, 1.0f, dh_, r, a_matrix, in, 1.0f, dx, in, type_,
                          type_, st);
  }
  const int64_t n = int64_t{N} * in;
  HOIST_RETURN_IF_ERROR(backend_->Gemm(false, false, N, in, r, 1.0f, dh_, r, a_matrix, in, 0.0f,
                                       dx_, in, type_, type_, st));
  HOIST_RETURN_IF_ERROR(ApplyDropout(dx_, dx_, module, layer, B, T, in));
  return backend_->Accumulate(dx, type_, dx_, type_, 1.0f, n, st);
}

}  // namespace hoist::runtime
