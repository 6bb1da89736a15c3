#include "runtime/lora_pass.h"

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

uint64_t LoraPass::MaskSeed(int module, int layer) const {
  // Each (block, layer site) draws its own mask within a forward.
  uint64_t x = seed_ + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(layer * 16 + module + 1);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

StatusOr<const void*> LoraPass::Input(int module, int layer, const void* x, int N) {
  if (layout_.dropout <= 0.0f) return x;
  const LoraModule& m = layout_.modules[static_cast<size_t>(module)];
  HOIST_RETURN_IF_ERROR(backend_->Dropout(dropped_, x, int64_t{N} * m.in, layout_.dropout,
                                          MaskSeed(module, layer), type_,
                                          backend_->compute_stream()));
  return static_cast<const void*>(dropped_);
}

Status LoraPass::Forward(LoraModule::Site site, int layer, void* y, const void* x,
                         const void* adapters, int N) {
  const int module = layout_.Find(site);
  if (module < 0) return Status::Ok();
  const LoraModule& m = layout_.modules[static_cast<size_t>(module)];
  const int r = layout_.r;
  const int in = static_cast<int>(m.in), out = static_cast<int>(m.out);
  const void* A = ElementPtr(adapters, type_, layout_.a_offset[static_cast<size_t>(module)]);
  const void* B = ElementPtr(adapters, type_, layout_.b_offset[static_cast<size_t>(module)]);
  const Stream& st = backend_->compute_stream();
  HOIST_ASSIGN_OR_RETURN(const void* input, Input(module, layer, x, N));
  // h (N, r) = input A^T; y[:, out_begin:] += scaling * h B^T.
  HOIST_RETURN_IF_ERROR(
      backend_->Gemm(false, true, N, r, in, 1.0f, input, in, A, in, 0.0f, h_, r, type_, type_, st));
  return backend_->Gemm(false, true, N, out, r, layout_.scaling, h_, r, B, r, 1.0f,
                        ElementPtr(y, type_, m.out_begin), m.base_out, type_, type_, st);
}

Status LoraPass::Backward(LoraModule::Site site, int layer, void* dx, const void* dy, const void* x,
                          const void* adapters, float* grads, int N) {
  const int module = layout_.Find(site);
  if (module < 0) return Status::Ok();
  const auto mi = static_cast<size_t>(module);
  const LoraModule& m = layout_.modules[mi];
  const int r = layout_.r;
  const int in = static_cast<int>(m.in), out = static_cast<int>(m.out);
  const void* A = ElementPtr(adapters, type_, layout_.a_offset[mi]);
  const void* B = ElementPtr(adapters, type_, layout_.b_offset[mi]);
  float* dA = grads + layout_.a_offset[mi];
  float* dB = grads + layout_.b_offset[mi];
  const void* dy_slice = ElementPtr(dy, type_, m.out_begin);
  const float s = layout_.scaling;
  const Stream& st = backend_->compute_stream();
  const DType f32 = DType::kFloat32;
  HOIST_ASSIGN_OR_RETURN(const void* input, Input(module, layer, x, N));
  // h = input A^T again; dB += s dy^T h; dh = s dy B; dA += dh^T input; dx += mask(dh A).
  HOIST_RETURN_IF_ERROR(
      backend_->Gemm(false, true, N, r, in, 1.0f, input, in, A, in, 0.0f, h_, r, type_, type_, st));
  HOIST_RETURN_IF_ERROR(backend_->Gemm(true, false, out, r, N, s, dy_slice, m.base_out, h_, r, 1.0f,
                                       dB, r, type_, f32, st));
  HOIST_RETURN_IF_ERROR(backend_->Gemm(false, false, N, r, out, s, dy_slice, m.base_out, B, r, 0.0f,
                                       dh_, r, type_, type_, st));
  HOIST_RETURN_IF_ERROR(
      backend_->Gemm(true, false, r, in, N, 1.0f, dh_, r, input, in, 1.0f, dA, in, type_, f32, st));
  if (layout_.dropout <= 0.0f) {
    return backend_->Gemm(false, false, N, in, r, 1.0f, dh_, r, A, in, 1.0f, dx, in, type_, type_,
                          st);
  }
  const int64_t n = int64_t{N} * in;
  HOIST_RETURN_IF_ERROR(
      backend_->Gemm(false, false, N, in, r, 1.0f, dh_, r, A, in, 0.0f, dx_, in, type_, type_, st));
  HOIST_RETURN_IF_ERROR(
      backend_->Dropout(dx_, dx_, n, layout_.dropout, MaskSeed(module, layer), type_, st));
  return backend_->Accumulate(dx, type_, dx_, type_, 1.0f, n, st);
}

}  // namespace hoist::runtime
