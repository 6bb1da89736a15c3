#include "zero/quantized_store.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/check.h"
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

}  // namespace

bool QuantizedSegment(const UnitSpec& unit, const ParamSegment& segment) {
  return unit.quantizable && segment.decay;
}

bool QuantizedUnit(const UnitSpec& unit) {
  for (const ParamSegment& segment : unit.segments) {
    if (QuantizedSegment(unit, segment)) return true;
  }
  return false;
}

int64_t QuantizedUnitBytes(const UnitSpec& unit, DType compute_type, bool double_quant) {
  // A unit without quantized segments is its compute-type values back to back, served in place.
  if (!QuantizedUnit(unit)) {
    return RoundUp4(unit.size * static_cast<int64_t>(DTypeSize(compute_type)));
  }
  int64_t bytes = 0;
  for (const ParamSegment& segment : unit.segments) {
    bytes += SegmentBytes(unit, segment, compute_type, double_quant);
  }
  return bytes;
}

int64_t Nf4WorkspaceBytes(const std::vector<UnitSpec>& units) {
  int64_t largest = 0;
  for (const UnitSpec& unit : units) {
    for (const ParamSegment& segment : unit.segments) {
      if (QuantizedSegment(unit, segment)) largest = std::max(largest, segment.end - segment.begin);
    }
  }
  return kernels::nf4::WorkspaceBytes(largest);
}

StatusOr<std::unique_ptr<QuantizedStore>> QuantizedStore::Create(std::vector<UnitSpec> units,
                                                                 DType compute_type,
                                                                 kernels::Backend* backend,
                                                                 bool double_quant) {
  std::unique_ptr<QuantizedStore> store(
      new QuantizedStore(std::move(units), compute_type, backend, double_quant));
  const size_t n = store->units_.size();
  store->resident_.resize(n);
  store->acquire_count_.assign(n, 0);
  store->offsets_.resize(n);
  if (const int64_t workspace = Nf4WorkspaceBytes(store->units_); workspace > 0) {
    HOIST_ASSIGN_OR_RETURN(store->workspace_,
                           backend->device().Allocate(workspace, Category::kWorkspace));
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
  (void)backend_->compute_stream().Synchronize();  // queued matmuls read our buffers
}

int64_t QuantizedStore::resident_bytes() const {
  int64_t bytes = 0;
  for (const Buffer& b : resident_) bytes += b.bytes();
  return bytes;
}

Status QuantizedStore::Initialize(const std::function<void(int unit, float* out)>& fill) {
  std::vector<float> whole;
  int filled = -1;
  return Initialize([&](int unit, int64_t begin, int64_t count, float* out) {
    if (filled != unit) {
      whole.assign(static_cast<size_t>(units_[static_cast<size_t>(unit)].size), 0.0f);
      fill(unit, whole.data());
      filled = unit;
    }
    std::copy_n(whole.begin() + begin, count, out);
  });
}

Status QuantizedStore::Initialize(const RangeFill& fill) {
  static_assert(kInitChunk % (2 * kernels::nf4::kBlock) == 0, "chunks of whole blocks and bytes");
  const Stream& stream = backend_->compute_stream();
  const auto element = static_cast<int64_t>(DTypeSize(compute_type_));
  std::vector<float> values, absmax;
  std::vector<uint8_t> bytes;
  // Host bytes up to `dst`, waited for before `bytes` is refilled.
  const auto store = [&](void* dst, const void* src, int64_t count) -> Status {
    HOIST_RETURN_IF_ERROR(
        backend_->Copy(dst, src, count, kernels::CopyDirection::kHostToDevice, stream));
    return stream.Synchronize();
  };
  // Elements [begin, begin + n) of the unit rounded to the compute type, to `dst`.
  const auto store_rounded = [&](int u, int64_t begin, int64_t n, uint8_t* dst) -> Status {
    for (int64_t c = 0; c < n; c += kInitChunk) {
      const int64_t m = std::min(kInitChunk, n - c);
      values.resize(static_cast<size_t>(m));
      fill(u, begin + c, m, values.data());
      bytes.resize(static_cast<size_t>(m * element));
      kernels::cpu::FromFloat(values.data(), bytes.data(), compute_type_, m);
      HOIST_RETURN_IF_ERROR(store(dst + c * element, bytes.data(), m * element));
    }
    return Status::Ok();
  };
  for (size_t u = 0; u < units_.size(); ++u) {
    offsets_[u].clear();
    const UnitSpec& unit = units_[u];
    const int unit_index = static_cast<int>(u);
    auto* base = static_cast<uint8_t*>(resident_[u].data());
    // The padding between segments is zero.
    HOIST_RETURN_IF_ERROR(backend_->Zero(base, resident_[u].bytes(), stream));
    if (!QuantizedUnit(unit)) {
      HOIST_RETURN_IF_ERROR(store_rounded(unit_index, 0, unit.size, base));
      continue;
    }
    int64_t at = 0;
    for (const ParamSegment& segment : unit.segments) {
      const int64_t n = segment.end - segment.begin;
      if (!QuantizedSegment(unit, segment)) {
        HOIST_RETURN_IF_ERROR(store_rounded(unit_index, segment.begin, n, base + at));
        at += SegmentBytes(unit, segment, compute_type_, double_quant_);
        continue;
      }
      // The codes a chunk at a time; the segment's absmaxes (1/64 of its elements) kept for last.
      const int64_t blocks = kernels::nf4::Blocks(n);
      absmax.resize(static_cast<size_t>(blocks));
      uint8_t* codes = base + at + AbsmaxBytes(n, double_quant_);
      for (int64_t c = 0; c < n; c += kInitChunk) {
        const int64_t m = std::min(kInitChunk, n - c);
        values.resize(static_cast<size_t>(m));
        fill(unit_index, segment.begin + c, m, values.data());
        bytes.resize(static_cast<size_t>(kernels::nf4::CodeBytes(m)));
        const Status quantized = kernels::cpu::QuantizeNf4(
            values.data(), m, bytes.data(), absmax.data() + c / kernels::nf4::kBlock);
        if (!quantized.ok()) {
          return InvalidArgumentError("quantizing " + unit.name + " to NF4 (elements " +
                                      std::to_string(segment.begin + c) +
                                      " on): " + quantized.message());
        }
        HOIST_RETURN_IF_ERROR(store(codes + c / 2, bytes.data(), kernels::nf4::CodeBytes(m)));
      }
      if (double_quant_) {
        // The absmaxes less their mean, in 8 bits: scales first, then the codes.
        double sum = 0;
        for (float a : absmax) sum += a;
        const auto offset = static_cast<float>(sum / double(blocks));
        for (float& a : absmax) a -= offset;
        const int64_t scale_bytes = kernels::cpu::QuantBlocks(blocks) * int64_t{sizeof(float)};
        bytes.assign(static_cast<size_t>(scale_bytes + blocks), 0);
        kernels::cpu::QuantizeBlockwise(kernels::cpu::SignedDynamicMap(), absmax.data(), blocks,
                                        bytes.data() + scale_bytes,
                                        reinterpret_cast<float*>(bytes.data()));
        offsets_[u].push_back(offset);
        HOIST_RETURN_IF_ERROR(store(base + at, bytes.data(), scale_bytes + blocks));
      } else {
        HOIST_RETURN_IF_ERROR(store(base + at, absmax.data(), blocks * int64_t{sizeof(float)}));
      }
      at += SegmentBytes(unit, segment, compute_type_, double_quant_);
    }
  }
  return Status::Ok();
}

StatusOr<const void*> QuantizedStore::AcquireParams(int unit) {
  if (!status_.ok()) return status_;
  ++acquire_count_[static_cast<size_t>(unit)];
  return static_cast<const void*>(resident_[static_cast<size_t>(unit)].data());
}

StoredWeight QuantizedStore::Weight(int unit, const void* acquired, int64_t offset) const {
  const auto u = static_cast<size_t>(unit);
  const UnitSpec& spec = units_[u];
  HOIST_CHECK(acquired == resident_[u].data() && acquire_count_[u] > 0)
      << "a weight of " << spec.name << " asked for without the unit acquired";
  if (!QuantizedUnit(spec)) return StoredWeight::Dense(ElementPtr(acquired, compute_type_, offset));
  const auto* bytes = static_cast<const uint8_t*>(acquired);
  int64_t at = 0;
  size_t quantized_segment = 0;
  for (const ParamSegment& segment : spec.segments) {
    const int64_t n = segment.end - segment.begin;
    if (offset >= segment.end) {
      at += SegmentBytes(spec, segment, compute_type_, double_quant_);
      if (QuantizedSegment(spec, segment)) ++quantized_segment;
      continue;
    }
    HOIST_CHECK(offset >= segment.begin) << "offset " << offset << " of " << spec.name;
    const uint8_t* base = bytes + at;
    if (!QuantizedSegment(spec, segment)) {
      return StoredWeight::Dense(ElementPtr(base, compute_type_, offset - segment.begin));
    }
    StoredWeight weight;
    weight.nf4.codes = base + AbsmaxBytes(n, double_quant_);
    weight.nf4.first = offset - segment.begin;
    if (double_quant_) {
      const int64_t blocks = kernels::nf4::Blocks(n);
      weight.nf4.absmax_scales = reinterpret_cast<const float*>(base);
      weight.nf4.absmax_codes = base + kernels::cpu::QuantBlocks(blocks) * int64_t{sizeof(float)};
      weight.nf4.absmax_offset = offsets_[u][quantized_segment];
    } else {
      weight.nf4.absmax = reinterpret_cast<const float*>(base);
    }
    weight.workspace = workspace_.data();
    weight.workspace_bytes = workspace_.bytes();
    return weight;
  }
  HOIST_CHECK(false) << "offset " << offset << " is past " << spec.name;
  return {};
}

void QuantizedStore::ReleaseParams(int unit) {
  int& count = acquire_count_[static_cast<size_t>(unit)];
  if (count > 0) --count;
}

StatusOr<float*> QuantizedStore::AcquireGrads(int unit) {
  Fail(FailedPreconditionError("the gradient of unit " + units_[static_cast<size_t>(unit)].name +
                               " was asked of a frozen 4-bit base (it gets no gradients)"));
  return status_;
}

}  // namespace hoist::zero
