#include "zero/quantized_store.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cpu/blockwise_quant.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/nf4.h"
#include "kernels/nf4.h"

namespace hoist::zero {
namespace {

int64_t RoundUp4(int64_t bytes) { return (bytes + 3) / 4 * 4; }

// Bytes of a quantized segment's absmaxes: fp32 each, or with double quantization the 8-bit
// scales (fp32, one per 256 absmaxes) then the absmaxes' 8-bit codes, padded to 4 bytes.
int64_t AbsmaxBytes(int64_t n, bool double_quant) {
  const int64_t blocks = kernels::nf4::Blocks(n);
  if (!double_quant) return blocks * int64_t{sizeof(float)};
  return kernels::cpu::QuantBlocks(blocks) * int64_t{sizeof(float)} + RoundUp4(blocks);
}

// Bytes of one segment in the store: absmaxes then codes, or the compute-type values.
int64_t SegmentBytes(const UnitSpec& unit, const ParamSegment& segment, DType compute_type,
                     bool double_quant) {
  const int64_t n = segment.end - segment.begin;
  if (QuantizedSegment(unit, segment)) {
    return RoundUp4(AbsmaxBytes(n, double_quant) + kernels::nf4::CodeBytes(n));
  }
  return RoundUp4(n * static_cast<int64_t>(DTypeSize(compute_type)));
}

// The most absmaxes of any quantized segment of `units`.
int64_t MostAbsmaxes(const std::vector<UnitSpec>& units) {
  int64_t most = 0;
  for (const UnitSpec& unit : units) {
    for (const ParamSegment& segment : unit.segments) {
      if (QuantizedSegment(unit, segment)) {
        most = std::max(most, kernels::nf4::Blocks(segment.end - segment.begin));
      }
    }
  }
  return most;
}

}  // namespace

bool QuantizedSegment(const UnitSpec& unit, const ParamSegment& segment) {
  return unit.quantizable && segment.decay;
}

int64_t QuantizedUnitBytes(const UnitSpec& unit, DType compute_type, bool double_quant) {
  // A unit without quantized segments is its compute-type values back to back, served in place.
  if (DequantizedUnitBytes(unit, compute_type) == 0) {
    return RoundUp4(unit.size * static_cast<int64_t>(DTypeSize(compute_type)));
  }
  int64_t bytes = 0;
  for (const ParamSegment& segment : unit.segments) {
    bytes += SegmentBytes(unit, segment, compute_type, double_quant);
  }
  return bytes;
}

int64_t DequantizedUnitBytes(const UnitSpec& unit, DType compute_type) {
  for (const ParamSegment& segment : unit.segments) {
    if (QuantizedSegment(unit, segment)) {
      return unit.size * static_cast<int64_t>(DTypeSize(compute_type));
    }
  }
  return 0;
}

int64_t DequantizationBufferBytes(const std::vector<UnitSpec>& units, DType compute_type,
                                  bool double_quant) {
  int64_t most = 0;
  for (const UnitSpec& unit : units)
    most = std::max(most, DequantizedUnitBytes(unit, compute_type));
  // The absmax scratch after the values, on a 4-byte boundary.
  if (double_quant) most = RoundUp4(most) + MostAbsmaxes(units) * int64_t{sizeof(float)};
  return most;
}

StatusOr<std::unique_ptr<QuantizedStore>> QuantizedStore::Create(std::vector<UnitSpec> units,
                                                                 DType compute_type,
                                                                 kernels::Backend* backend,
                                                                 bool double_quant) {
  std::unique_ptr<QuantizedStore> store(
      new QuantizedStore(std::move(units), compute_type, backend, double_quant));
  const size_t n = store->units_.size();
  store->resident_.resize(n);
  store->dequantized_.resize(n);
  store->acquire_count_.assign(n, 0);
  store->served_.assign(n, nullptr);
  store->offsets_.resize(n);
  const int64_t buffer = DequantizationBufferBytes(store->units_, compute_type, double_quant);
  if (buffer > 0) {
    HOIST_ASSIGN_OR_RETURN(store->buffer_, backend->device().Allocate(buffer, Category::kParam));
  }
  if (double_quant && MostAbsmaxes(store->units_) > 0) {
    const int64_t scratch = MostAbsmaxes(store->units_) * int64_t{sizeof(float)};
    store->absmax_scratch_ =
        reinterpret_cast<float*>(static_cast<char*>(store->buffer_.data()) + buffer - scratch);
  }
  for (size_t u = 0; u < n; ++u) {
    HOIST_ASSIGN_OR_RETURN(
        store->resident_[u],
        backend->device().Allocate(QuantizedUnitBytes(store->units_[u], compute_type, double_quant),
                                   Category::kParam));
  }
  return store;
}

QuantizedStore::~QuantizedStore() {
  (void)backend_->compute_stream().Synchronize();  // queued dequantizations use our buffers
}

int64_t QuantizedStore::resident_bytes() const {
  int64_t bytes = 0;
  for (const Buffer& b : resident_) bytes += b.bytes();
  return bytes;
}

Status QuantizedStore::Initialize(const std::function<void(int unit, float* out)>& fill) {
  const Stream& stream = backend_->compute_stream();
  std::vector<float> values, absmax;
  std::vector<uint8_t> bytes;
  for (size_t u = 0; u < units_.size(); ++u) {
    offsets_[u].clear();
    const UnitSpec& unit = units_[u];
    values.assign(static_cast<size_t>(unit.size), 0.0f);
    fill(static_cast<int>(u), values.data());
    // The unit's resident bytes assembled on the host, then copied up at once.
    bytes.assign(static_cast<size_t>(resident_[u].bytes()), 0);
    const bool quantized_unit = DequantizedUnitBytes(unit, compute_type_) > 0;
    if (!quantized_unit) {
      kernels::cpu::FromFloat(values.data(), bytes.data(), compute_type_, unit.size);
    }
    int64_t at = 0;
    for (const ParamSegment& segment : unit.segments) {
      if (!quantized_unit) break;
      const int64_t n = segment.end - segment.begin;
      const float* src = values.data() + segment.begin;
      if (QuantizedSegment(unit, segment)) {
        const int64_t blocks = kernels::nf4::Blocks(n);
        absmax.resize(static_cast<size_t>(blocks));
        uint8_t* codes = bytes.data() + at + AbsmaxBytes(n, double_quant_);
        const Status quantized = kernels::cpu::QuantizeNf4(src, n, codes, absmax.data());
        if (!quantized.ok()) {
          return InvalidArgumentError("quantizing " + unit.name + " to NF4 (elements " +
                                      std::to_string(segment.begin) +
                                      " on): " + quantized.message());
        }
        if (double_quant_) {
          // The absmaxes less their mean, in 8 bits: scales first, then the codes.
          double sum = 0;
          for (float a : absmax) sum += a;
          const auto offset = static_cast<float>(sum / double(blocks));
          for (float& a : absmax) a -= offset;
          auto* scales = reinterpret_cast<float*>(bytes.data() + at);
          uint8_t* absmax_codes =
              bytes.data() + at + kernels::cpu::QuantBlocks(blocks) * int64_t{sizeof(float)};
          kernels::cpu::QuantizeBlockwise(kernels::cpu::SignedDynamicMap(), absmax.data(), blocks,
                                          absmax_codes, scales);
          offsets_[u].push_back(offset);
        } else {
          std::copy(absmax.begin(), absmax.end(), reinterpret_cast<float*>(bytes.data() + at));
        }
      } else {
        kernels::cpu::FromFloat(src, bytes.data() + at, compute_type_, n);
      }
      at += SegmentBytes(unit, segment, compute_type_, double_quant_);
    }
    HOIST_RETURN_IF_ERROR(backend_->Copy(resident_[u].data(), bytes.data(), resident_[u].bytes(),
                                         kernels::CopyDirection::kHostToDevice, stream));
    HOIST_RETURN_IF_ERROR(stream.Synchronize());  // `bytes` is refilled for the next unit
  }
  return Status::Ok();
}

const void* QuantizedStore::AcquireParams(int unit) {
  if (!status_.ok()) return nullptr;
  const auto u = static_cast<size_t>(unit);
  const UnitSpec& spec = units_[u];
  const int64_t transient = DequantizedUnitBytes(spec, compute_type_);
  if (transient == 0) {
    ++acquire_count_[u];
    return resident_[u].data();  // the compute-type values, back to back
  }
  if (acquire_count_[u]++ > 0) return served_[u];
  if (buffer_unit_ < 0) {
    buffer_unit_ = unit;
    served_[u] = buffer_.data();
  } else {
    StatusOr<Buffer> buffer = backend_->device().Allocate(transient, Category::kParam);
    if (!buffer.ok()) {
      Fail(ResourceExhaustedError("dequantizing the 4-bit unit " + spec.name + ": " +
                                  buffer.status().message() +
                                  "; a smaller train_micro_batch_size_per_gpu or "
                                  "activation_checkpointing frees memory"));
      --acquire_count_[u];
      return nullptr;
    }
    dequantized_[u] = std::move(buffer).value();
    served_[u] = dequantized_[u].data();
  }
  const Stream& stream = backend_->compute_stream();
  int64_t at = 0;
  size_t quantized_segment = 0;
  for (const ParamSegment& segment : spec.segments) {
    const int64_t n = segment.end - segment.begin;
    void* out = ElementPtr(served_[u], compute_type_, segment.begin);
    const auto* base = static_cast<const uint8_t*>(resident_[u].data()) + at;
    Status done;
    if (QuantizedSegment(spec, segment)) {
      const auto* absmax = reinterpret_cast<const float*>(base);
      if (double_quant_) {
        // The absmaxes into the scratch first; stream order keeps the next segment's from
        // overwriting them before this segment's codes are read.
        const int64_t blocks = kernels::nf4::Blocks(n);
        done = backend_->DequantizeNf4Absmax(
            absmax_scratch_, base + kernels::cpu::QuantBlocks(blocks) * int64_t{sizeof(float)},
            reinterpret_cast<const float*>(base), offsets_[u][quantized_segment++], blocks, stream);
        absmax = absmax_scratch_;
      }
      if (done.ok()) {
        done = backend_->DequantizeNf4(out, compute_type_, base + AbsmaxBytes(n, double_quant_),
                                       absmax, n, stream);
      }
    } else {
      done = backend_->Copy(out, base, n * static_cast<int64_t>(DTypeSize(compute_type_)),
                            kernels::CopyDirection::kDeviceToDevice, stream);
    }
    if (!done.ok()) {
      Fail(done);
      return nullptr;
    }
    at += SegmentBytes(spec, segment, compute_type_, double_quant_);
  }
  return served_[u];
}

void QuantizedStore::ReleaseParams(int unit) {
  const auto u = static_cast<size_t>(unit);
  if (acquire_count_[u] == 0 || --acquire_count_[u] > 0) return;
  served_[u] = nullptr;
  if (buffer_unit_ == unit) {
    // The next unit's dequantization is queued behind the ops that read this one.
    buffer_unit_ = -1;
    return;
  }
  if (dequantized_[u].empty()) return;
  // The ops that read it are queued on the compute stream.
  if (Status synced = backend_->compute_stream().Synchronize(); !synced.ok()) Fail(synced);
  dequantized_[u] = Buffer();
}

float* QuantizedStore::AcquireGrads(int unit) {
  Fail(FailedPreconditionError("the gradient of unit " + units_[static_cast<size_t>(unit)].name +
                               " was asked of a frozen 4-bit base (it gets no gradients)"));
  return nullptr;
}

}  // namespace hoist::zero
