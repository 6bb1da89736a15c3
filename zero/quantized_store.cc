#include "zero/quantized_store.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/nf4.h"
#include "kernels/nf4.h"

namespace hoist::zero {
namespace {

int64_t RoundUp4(int64_t bytes) { return (bytes + 3) / 4 * 4; }

// Bytes of one segment in the store: absmaxes then codes, or the compute-type values.
int64_t SegmentBytes(const UnitSpec& unit, const ParamSegment& segment, DType compute_type) {
  const int64_t n = segment.end - segment.begin;
  if (QuantizedSegment(unit, segment)) {
    return RoundUp4(kernels::nf4::Blocks(n) * int64_t{sizeof(float)} + kernels::nf4::CodeBytes(n));
  }
  return RoundUp4(n * static_cast<int64_t>(DTypeSize(compute_type)));
}

}  // namespace

bool QuantizedSegment(const UnitSpec& unit, const ParamSegment& segment) {
  return unit.quantizable && segment.decay;
}

int64_t QuantizedUnitBytes(const UnitSpec& unit, DType compute_type) {
  // A unit without quantized segments is its compute-type values back to back, served in place.
  if (DequantizedUnitBytes(unit, compute_type) == 0) {
    return RoundUp4(unit.size * static_cast<int64_t>(DTypeSize(compute_type)));
  }
  int64_t bytes = 0;
  for (const ParamSegment& segment : unit.segments) {
    bytes += SegmentBytes(unit, segment, compute_type);
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

int64_t DequantizationBufferBytes(const std::vector<UnitSpec>& units, DType compute_type) {
  int64_t most = 0;
  for (const UnitSpec& unit : units)
    most = std::max(most, DequantizedUnitBytes(unit, compute_type));
  return most;
}

StatusOr<std::unique_ptr<QuantizedStore>> QuantizedStore::Create(std::vector<UnitSpec> units,
                                                                 DType compute_type,
                                                                 kernels::Backend* backend) {
  std::unique_ptr<QuantizedStore> store(
      new QuantizedStore(std::move(units), compute_type, backend));
  const size_t n = store->units_.size();
  store->resident_.resize(n);
  store->dequantized_.resize(n);
  store->acquire_count_.assign(n, 0);
  store->served_.assign(n, nullptr);
  const int64_t buffer = DequantizationBufferBytes(store->units_, compute_type);
  if (buffer > 0) {
    HOIST_ASSIGN_OR_RETURN(store->buffer_, backend->device().Allocate(buffer, Category::kParam));
  }
  for (size_t u = 0; u < n; ++u) {
    HOIST_ASSIGN_OR_RETURN(
        store->resident_[u],
        backend->device().Allocate(QuantizedUnitBytes(store->units_[u], compute_type),
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
  std::vector<float> values;
  std::vector<uint8_t> bytes;
  for (size_t u = 0; u < units_.size(); ++u) {
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
        auto* absmax = reinterpret_cast<float*>(bytes.data() + at);
        uint8_t* codes = bytes.data() + at + kernels::nf4::Blocks(n) * int64_t{sizeof(float)};
        const Status quantized = kernels::cpu::QuantizeNf4(src, n, codes, absmax);
        if (!quantized.ok()) {
          return InvalidArgumentError("quantizing " + unit.name + " to NF4 (elements " +
                                      std::to_string(segment.begin) +
                                      " on): " + quantized.message());
        }
      } else {
        kernels::cpu::FromFloat(src, bytes.data() + at, compute_type_, n);
      }
      at += SegmentBytes(unit, segment, compute_type_);
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
  for (const ParamSegment& segment : spec.segments) {
    const int64_t n = segment.end - segment.begin;
    void* out = ElementPtr(served_[u], compute_type_, segment.begin);
    const auto* base = static_cast<const uint8_t*>(resident_[u].data()) + at;
    Status done;
    if (QuantizedSegment(spec, segment)) {
      done = backend_->DequantizeNf4(out, compute_type_,
                                     base + kernels::nf4::Blocks(n) * int64_t{sizeof(float)},
                                     reinterpret_cast<const float*>(base), n, stream);
    } else {
      done = backend_->Copy(out, base, n * static_cast<int64_t>(DTypeSize(compute_type_)),
                            kernels::CopyDirection::kDeviceToDevice, stream);
    }
    if (!done.ok()) {
      Fail(done);
      return nullptr;
    }
    at += SegmentBytes(spec, segment, compute_type_);
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
