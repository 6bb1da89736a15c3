// LoraPass: the adapters' part of a model's forward and backward passes (runtime/model/lora.h). At
// each targeted linear layer, forward adds scaling * dropout(x) A^T B^T to the base layer's product
// (into its columns [out_begin, out_begin + out) of a row of base_out), and backward adds the
// adapters' gradients and their part of dx. Nothing is kept from forward to backward: backward
// draws dropout(x) again from the same seed and recomputes h = dropout(x) A^T (r columns) from the
// layer's input, which the model keeps (or recomputes) for the base layer's backward anyway, so
// activation checkpointing needs nothing more. Products through the backend's Gemm in the
// model's activation type, the adapters' gradients accumulated in fp32.
#pragma once

#include <cstdint>
#include <memory>

#include "core/device.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "runtime/model/lora.h"

namespace hoist::runtime {

class LoraPass {
 public:
  // Scratch for micro-batches of up to max_N rows (B * T), from `backend`'s device
  // (Category::kActivation).
  static StatusOr<std::unique_ptr<LoraPass>> Create(const LoraLayout& layout, int64_t max_N,
                                                    kernels::Backend* backend, DType type);
  // The scratch bytes Create allocates.
  static int64_t ScratchBytes(const LoraLayout& layout, int64_t max_N, DType type);

  const LoraLayout& layout() const { return layout_; }
  // The store unit of block `layer`'s adapters.
  int unit(int layer) const { return layout_.base_units + layer; }
  // The dropout masks of the next forward and its backward: `seed` is the optimizer step's, and
  // the micro-batch's sequences are the step's first_sequence, first_sequence + 1, ... Each
  // sequence draws its own mask from (seed, its index, the layer), so a sequence gets the same
  // mask however the step's batch is split over ranks and micro-batches.
  void set_seed(uint64_t seed, int64_t first_sequence) {
    seed_ = seed;
    first_sequence_ = first_sequence;
  }

  // Forward at `site` of block `layer` over N = B * T rows (B sequences of T positions):
  // y (N, base_out) += the adapter's output.
  // `adapters` is the block's adapter unit; a site without an adapter is left alone.
  Status Forward(LoraModule::Site site, int layer, void* y, const void* x, const void* adapters,
                 int B, int T);
  // Backward at `site`: `grads` (the adapter unit's fp32 gradient) += dA, dB; dx (N, in) += the
  // adapter's part of the input gradient, from dy (N, base_out), the gradient of y.
  Status Backward(LoraModule::Site site, int layer, void* dx, const void* dy, const void* x,
                  const void* adapters, float* grads, int B, int T);

 private:
  LoraPass(const LoraLayout& layout, kernels::Backend* backend, DType type)
      : layout_(layout), backend_(backend), type_(type) {}
  // The adapter's input: x itself, or dropout(x) drawn into dropped_.
  StatusOr<const void*> Input(int module, int layer, const void* x, int B, int T);
  // out = the dropout of inp (B sequences of T rows of `width`), each sequence its own mask.
  Status ApplyDropout(void* out, const void* inp, int module, int layer, int B, int T,
                      int64_t width);
  uint64_t MaskSeed(int module, int layer, int64_t sequence) const;

  LoraLayout layout_;
  kernels::Backend* backend_;
  DType type_;
  uint64_t seed_ = 0;
  int64_t first_sequence_ = 0;
  Buffer scratch_;
  void* h_ = nullptr;        // (N, r): dropout(x) A^T
  void* dh_ = nullptr;       // (N, r): its gradient
  void* dropped_ = nullptr;  // (N, max in): dropout(x), with dropout only
  void* dx_ = nullptr;       // (N, max in): the masked input gradient, with dropout only
};

}  // namespace hoist::runtime
