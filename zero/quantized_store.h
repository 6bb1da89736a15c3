// QuantizedStore: a frozen base held in 4 bits (QLoRA's NormalFloat4, kernels/nf4.h), the base
// of a LoRA fine-tune that would not fit in 16 bits. The decayed segments of the quantizable
// units (a transformer block's matmul weights) are kept as NF4 codes, two per byte, with one
// fp32 absmax per 64 elements (about 0.56 bytes per weight); everything else (embeddings, the
// head, norms, biases) in the compute type, as QLoRA keeps them. The weights are quantized as
// they are set (Initialize: on import). AcquireParams dequantizes a quantized unit into a
// compute-type buffer that the model's matmuls then read: the store's own buffer, sized for the
// largest quantized unit and held from Create on (a model acquires one block at a time), or, for
// a second quantized unit acquired while the first is held, a transient one (Category::kParam,
// freed at the unit's last ReleaseParams). Other units are served in place. Whole on every rank:
// the store does no collectives, so it serves ZeRO stages 0-2 (stage 3 partitions the base, which
// this store does not). Frozen: AcquireGrads fails. Used by one thread.
//
// Double quantization (QLoRA's, `double_quant`): the absmaxes are stored in 8 bits too. A
// segment's B absmaxes less their mean (an fp32 offset the store keeps on the host) are quantized
// blockwise with the signed dynamic map in blocks of 256 (kernels/cpu/blockwise_quant.h: one fp32
// scale per block), so a weight costs 0.5 + 1/64 + 4/(64 x 256) bytes (about 0.516) instead of
// 0.5 + 4/64. AcquireParams first dequantizes the absmaxes into a scratch of the largest
// segment's B floats (held from Create on, part of DequantizationBufferBytes), then the codes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "zero/param_store.h"
#include "zero/partition.h"

namespace hoist::zero {

// Whether the store keeps segment `segment` of `unit` in 4 bits.
bool QuantizedSegment(const UnitSpec& unit, const ParamSegment& segment);
// The resident bytes of `unit` in the store: NF4 codes and absmaxes (with `double_quant`, their
// 8-bit codes and scales) of its quantized segments, the rest in `compute_type`, each segment's
// bytes rounded up to a multiple of 4.
int64_t QuantizedUnitBytes(const UnitSpec& unit, DType compute_type, bool double_quant = false);
// The bytes of `unit` dequantized (0: served in place).
int64_t DequantizedUnitBytes(const UnitSpec& unit, DType compute_type);
// The store's own dequantization buffer: the largest DequantizedUnitBytes of `units`, and with
// `double_quant` the absmax scratch (fp32, the most absmaxes of any quantized segment).
int64_t DequantizationBufferBytes(const std::vector<UnitSpec>& units, DType compute_type,
                                  bool double_quant = false);

class QuantizedStore final : public ParamStore {
 public:
  // Allocates the units' resident bytes from `backend`'s device (which must outlive the store).
  static StatusOr<std::unique_ptr<QuantizedStore>> Create(std::vector<UnitSpec> units,
                                                          DType compute_type,
                                                          kernels::Backend* backend,
                                                          bool double_quant = false);
  ~QuantizedStore() override;

  // Sets the weights: `fill(unit, out)` writes the unit's fp32 values (unit size), which are
  // quantized (or rounded to the compute type) and stored. A non-finite weight in a quantized
  // segment is an error naming the unit and the element.
  Status Initialize(const std::function<void(int unit, float* out)>& fill);

  const void* AcquireParams(int unit) override;
  DType param_type() const override { return compute_type_; }
  void ReleaseParams(int unit) override;
  void Prefetch(int) override {}
  float* AcquireGrads(int unit) override;
  void ReleaseGrads(int) override {}
  Status status() const override { return status_; }

  // The resident bytes (what the memory table counts as the base's params).
  int64_t resident_bytes() const;

 private:
  QuantizedStore(std::vector<UnitSpec> units, DType compute_type, kernels::Backend* backend,
                 bool double_quant)
      : units_(std::move(units)),
        compute_type_(compute_type),
        backend_(backend),
        double_quant_(double_quant) {}
  void Fail(const Status& status) {
    if (status_.ok() && !status.ok()) status_ = status;
  }

  std::vector<UnitSpec> units_;
  DType compute_type_;
  kernels::Backend* backend_;
  bool double_quant_;
  Status status_;
  std::vector<Buffer> resident_;     // per unit
  Buffer buffer_;                    // DequantizationBufferBytes (the absmax scratch last)
  float* absmax_scratch_ = nullptr;  // with double_quant_: inside buffer_
  // With double_quant_: each unit's quantized segments' absmax offsets, in segment order.
  std::vector<std::vector<float>> offsets_;
  int buffer_unit_ = -1;             // the unit dequantized into buffer_ while acquired
  std::vector<Buffer> dequantized_;  // per unit, while acquired beside buffer_'s
  std::vector<void*> served_;        // per unit, while acquired: where it was dequantized
  std::vector<int> acquire_count_;
};

}  // namespace hoist::zero
