// QuantizedStore: a frozen base held in 4 bits (QLoRA's NormalFloat4, kernels/nf4.h), the base
// of a LoRA fine-tune that would not fit in 16 bits. The decayed segments of the quantizable
// units (a transformer block's matmul weights) are kept as NF4 codes, two per byte, with one
// fp32 absmax per 64 elements (about 0.56 bytes per weight); everything else (embeddings, the
// head, norms, biases) in the compute type, as QLoRA keeps them. The weights are quantized as
// they are set (Initialize: on import). Nothing is dequantized ahead of use: the model reads a
// quantized unit's weights through Weight(), which gives a matmul weight as its NF4 matrix and
// the store's workspace, and the 4-bit matmuls (Backend::MatmulForwardNf4) dequantize it a panel
// at a time into that workspace as they multiply (nf4::WorkspaceBytes of the largest quantized
// segment: 16 MiB at most, held from Create on); the unit's other weights (norms, biases) come in
// the compute type from where they are kept. Other units are served in place. Whole on every
// rank: the store does no collectives, so it serves ZeRO stages 0-2 (stage 3 partitions the
// base, which this store does not). Frozen: AcquireGrads fails. Used by one thread.
//
// Double quantization (QLoRA's, `double_quant`): the absmaxes are stored in 8 bits too. A
// segment's B absmaxes less their mean (an fp32 offset the store keeps on the host) are quantized
// blockwise with the signed dynamic map in blocks of 256 (kernels/cpu/blockwise_quant.h: one fp32
// scale per block), so a weight costs 0.5 + 1/64 + 4/(64 x 256) bytes (about 0.516) instead of
// 0.5 + 4/64. The matmuls compute each absmax from its code as they dequantize.
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
// Whether `unit` has a quantized segment (else it is served in place, in the compute type).
bool QuantizedUnit(const UnitSpec& unit);
// The 4-bit matmuls' workspace the store holds: nf4::WorkspaceBytes of the largest quantized
// segment (0 without one).
int64_t Nf4WorkspaceBytes(const std::vector<UnitSpec>& units);

class QuantizedStore final : public ParamStore {
 public:
  // Allocates the units' resident bytes (Category::kParam) and the 4-bit matmuls' workspace
  // (Category::kWorkspace) from `backend`'s device (which must outlive the store).
  static StatusOr<std::unique_ptr<QuantizedStore>> Create(std::vector<UnitSpec> units,
                                                          DType compute_type,
                                                          kernels::Backend* backend,
                                                          bool double_quant = false);
  ~QuantizedStore() override;

  // Sets the weights: `fill(unit, begin, count, out)` writes elements [begin, begin + count) of
  // the unit's fp32 values, which are quantized (or rounded to the compute type) and stored. The
  // store asks for at most kInitChunk elements at a time, so setting a unit stages that much on
  // the host, not the unit. A non-finite weight in a quantized segment is an error naming the
  // unit and the element.
  using RangeFill = std::function<void(int unit, int64_t begin, int64_t count, float* out)>;
  static constexpr int64_t kInitChunk = int64_t{1} << 22;
  Status Initialize(const RangeFill& fill);
  // The same with `fill(unit, out)` writing the whole unit (staged whole).
  Status Initialize(const std::function<void(int unit, float* out)>& fill);

  // A quantized unit's handle is not its values: read it through Weight().
  StatusOr<const void*> AcquireParams(int unit) override;
  StoredWeight Weight(int unit, const void* acquired, int64_t offset) const override;
  DType param_type() const override { return compute_type_; }
  void ReleaseParams(int unit) override;
  void Prefetch(int) override {}
  StatusOr<float*> AcquireGrads(int unit) override;
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
  std::vector<Buffer> resident_;  // per unit
  Buffer workspace_;              // Nf4WorkspaceBytes
  // With double_quant_: each unit's quantized segments' absmax offsets, in segment order.
  std::vector<std::vector<float>> offsets_;
  std::vector<int> acquire_count_;
};

}  // namespace hoist::zero
