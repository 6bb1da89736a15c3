#include "zero/optimizer_states.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "kernels/cpu/blockwise_quant.h"
#include "zero/memory_estimate.h"

namespace hoist::zero {

namespace {

using kernels::cpu::QuantBlocks;
using kernels::cpu::QuantizeNearest;
using kernels::cpu::SignedDynamicMap;
using kernels::cpu::UnsignedDynamicMap;

// What each array of a resident placement holds, in the order Create allocates them.
enum class Role { kMaster, kM, kV, kCodesM, kCodesV, kAbsmaxM, kAbsmaxV, kM32, kV32 };

struct ArraySpec {
  int part;  // 0: on the device; 1: offloaded
  Role role;
  int64_t bytes;
};

// The arrays of the states in device or host memory (not kNvme), none of 0 bytes: per part its
// master where separate, then m and v in fp32, or the 8-bit layout's six arrays.
std::vector<ArraySpec> ResidentArrays(const PartitionPlan& state_plan, const ZeroOptions& options) {
  const bool on_device = options.offload_optimizer.place == Placement::kDevice;
  const int64_t total = state_plan.total_shard();
  const int64_t split = on_device ? total : DeviceStateElements(state_plan, options);
  const int64_t elements[2] = {split, total - split};
  // Offloaded, the master is always an array of its own: the model's copy stays on the device.
  const bool separate_master[2] = {
      on_device ? HasSeparateMaster(options) : DevicePartHasSeparateMaster(options), true};
  std::vector<ArraySpec> arrays;
  for (int part = 0; part < 2; ++part) {
    if (elements[part] == 0) continue;
    const int64_t floats = elements[part] * int64_t{sizeof(float)};
    if (separate_master[part]) arrays.push_back({part, Role::kMaster, floats});
    if (!options.adam.eight_bit) {
      arrays.push_back({part, Role::kM, floats});
      arrays.push_back({part, Role::kV, floats});
      continue;
    }
    const std::vector<int64_t> bytes = Moment8bitArrayBytes(state_plan, options, part == 1);
    const Role roles[] = {Role::kCodesM,  Role::kCodesV, Role::kAbsmaxM,
                          Role::kAbsmaxV, Role::kM32,    Role::kV32};
    for (size_t a = 0; a < bytes.size(); ++a) {
      if (bytes[a] > 0) arrays.push_back({part, roles[a], bytes[a]});
    }
  }
  return arrays;
}

}  // namespace

std::vector<ResidentBytes> OptimizerStates::Footprint(const PartitionPlan& state_plan,
                                                      const ZeroOptions& options,
                                                      bool accelerator) {
  using offload::PinnedHostPool;
  std::vector<ResidentBytes> footprint;
  if (options.frozen) return footprint;
  const OptimizerOffload& offload = options.offload_optimizer;
  if (offload.place == Placement::kNvme) {
    const offload::StateSwapper::Layout layout =
        offload::StateSwapper::LayoutFor(OptimizerSwapOptions(state_plan, options));
    footprint.push_back({Place::kNvme, Category::kOptimizer, layout.file_bytes});
    footprint.push_back({Place::kHostPinned, Category::kOptimizer, layout.slot_bytes});
  } else {
    for (const ArraySpec& array : ResidentArrays(state_plan, options)) {
      if (array.part == 0) {
        footprint.push_back({Place::kDevice, Category::kOptimizer, array.bytes});
      } else if (offload.pin_memory) {
        footprint.push_back({Place::kHostPinned, Category::kOptimizer,
                             PinnedHostPool::AllocationBytes(array.bytes)});
      } else {
        footprint.push_back({Place::kHost, Category::kOptimizer, array.bytes});
      }
    }
  }
  if (accelerator && offload.place != Placement::kDevice) {
    footprint.push_back({Place::kHostPinned, Category::kGrad,
                         PinnedHostPool::AllocationBytes(HostGradBytes(state_plan, options))});
    const int64_t slot =
        PinnedHostPool::AllocationBytes(HostUpdateStagingBytes(state_plan, options));
    for (int i = 0; i < HostUpdateStagingBuffers(options); ++i) {
      footprint.push_back({Place::kHostPinned, Category::kOptimizer, slot});
    }
  }
  return footprint;
}

int64_t OptimizerStates::Bytes(const PartitionPlan& state_plan, const ZeroOptions& options) {
  if (options.frozen) return 0;
  int64_t bytes = 0;
  if (options.offload_optimizer.place == Placement::kNvme) {
    // The swapper's arrays: the master, and m and v as encoded.
    bytes = StateArrayBytes(state_plan);
    if (!options.adam.eight_bit) return bytes + 2 * StateArrayBytes(state_plan);
    for (int64_t array : Moment8bitArrayBytes(state_plan, options, /*offloaded=*/true)) {
      bytes += array;
    }
    return bytes;
  }
  for (const ArraySpec& array : ResidentArrays(state_plan, options)) bytes += array.bytes;
  return bytes;
}

OptimizerStates::OptimizerStates(const PartitionPlan& state_plan, const ZeroOptions& options,
                                 kernels::Backend& ops, kernels::Backend* host_ops)
    : state_plan_(state_plan),
      place_(options.offload_optimizer.place),
      eight_bit_(options.adam.eight_bit),
      ops_(ops),
      host_ops_(host_ops) {}

OptimizerStates::~OptimizerStates() = default;

StatusOr<std::unique_ptr<OptimizerStates>> OptimizerStates::Create(
    const PartitionPlan& state_plan, const ZeroOptions& options, Device& device,
    offload::PinnedHostPool* pool, kernels::Backend& ops, kernels::Backend* host_ops) {
  HOIST_CHECK(!options.frozen) << "frozen weights have no optimizer states";
  HOIST_CHECK(pool != nullptr || options.offload_optimizer.place == Placement::kDevice)
      << "offloaded optimizer states without a host pool";
  std::unique_ptr<OptimizerStates> states(new OptimizerStates(state_plan, options, ops, host_ops));
  if (options.adam.eight_bit) {
    states->moments8_ = Moments8bitLayoutFor(state_plan, options.adam.min_8bit_size);
  }
  if (options.offload_optimizer.place == Placement::kNvme) {
    if (options.offload_optimizer.nvme_file.empty()) {
      return InvalidArgumentError("offloading the optimizer to nvme needs a scratch file path");
    }
    offload::StateSwapperOptions swap = OptimizerSwapOptions(state_plan, options);
    swap.path = options.offload_optimizer.nvme_file;
    HOIST_ASSIGN_OR_RETURN(states->swapper_, offload::StateSwapper::Create(
                                                 swap, options.offload_optimizer.open_storage,
                                                 *pool, *device.tracker()));
    return states;
  }
  const bool on_device = options.offload_optimizer.place == Placement::kDevice;
  states->split_ = on_device ? state_plan.total_shard() : DeviceStateElements(state_plan, options);
  if (options.adam.eight_bit) {
    states->parts_[1].first = Moments8bitBefore(state_plan, states->moments8_, states->split_);
  }
  if (!on_device && !options.offload_optimizer.pin_memory) {
    states->host_device_ = std::make_unique<CpuDevice>(Place::kHost, device.tracker());
  }
  for (const ArraySpec& array : ResidentArrays(state_plan, options)) {
    void* data = nullptr;
    if (array.part == 0) {
      HOIST_ASSIGN_OR_RETURN(Buffer buffer, device.Allocate(array.bytes, Category::kOptimizer));
      data = buffer.data();
      states->buffers_.push_back(std::move(buffer));
    } else if (states->host_device_ == nullptr) {
      HOIST_ASSIGN_OR_RETURN(offload::PinnedBuffer buffer,
                             pool->Allocate(array.bytes, Category::kOptimizer));
      data = buffer.data();
      states->pinned_.push_back(std::move(buffer));
    } else {
      HOIST_ASSIGN_OR_RETURN(Buffer buffer,
                             states->host_device_->Allocate(array.bytes, Category::kOptimizer));
      data = buffer.data();
      states->buffers_.push_back(std::move(buffer));
    }
    Part& part = states->parts_[array.part];
    switch (array.role) {
      case Role::kMaster: part.master = static_cast<float*>(data); break;
      case Role::kM:
      case Role::kM32: part.m = static_cast<float*>(data); break;
      case Role::kV:
      case Role::kV32: part.v = static_cast<float*>(data); break;
      case Role::kCodesM: part.qm = static_cast<uint8_t*>(data); break;
      case Role::kCodesV: part.qv = static_cast<uint8_t*>(data); break;
      case Role::kAbsmaxM: part.absmax_m = static_cast<float*>(data); break;
      case Role::kAbsmaxV: part.absmax_v = static_cast<float*>(data); break;
    }
  }
  return states;
}

float* OptimizerStates::master(int unit) const {
  HOIST_CHECK(swapper_ == nullptr) << "the master weights are on NVMe";
  const bool off = offloaded(unit);
  const Part& part = parts_[off ? 1 : 0];
  if (part.master == nullptr) return nullptr;
  return part.master + (state_plan_.unit(unit).shard_offset - (off ? split_ : 0));
}

StateMoments OptimizerStates::moments(int unit) const {
  HOIST_CHECK(swapper_ == nullptr) << "the moments are on NVMe";
  const bool off = offloaded(unit);
  const Part& part = parts_[off ? 1 : 0];
  StateMoments at;
  if (!eight_bit_) {
    const int64_t x = state_plan_.unit(unit).shard_offset - (off ? split_ : 0);
    at.m = part.m + x;
    at.v = part.v + x;
    return at;
  }
  const auto u = static_cast<size_t>(unit);
  if (moments8_.code_offset[u] < 0) {
    at.m = part.m + (moments8_.fp32_offset[u] - part.first.fp32);
    at.v = part.v + (moments8_.fp32_offset[u] - part.first.fp32);
    return at;
  }
  at.qm = part.qm + (moments8_.code_offset[u] - part.first.code);
  at.qv = part.qv + (moments8_.code_offset[u] - part.first.code);
  at.absmax_m = part.absmax_m + (moments8_.absmax_offset[u] - part.first.absmax);
  at.absmax_v = part.absmax_v + (moments8_.absmax_offset[u] - part.first.absmax);
  return at;
}

Status OptimizerStates::Copy(void* dst, const void* src, int64_t bytes,
                             kernels::CopyDirection direction, bool offloaded) const {
  if (host_ops_ == nullptr || !offloaded) {
    return ops_.Copy(dst, src, bytes, direction, ops_.compute_stream());
  }
  // Host memory on both sides: the CPU's copy, done when it returns.
  return host_ops_->Copy(dst, src, bytes, kernels::CopyDirection::kHostToHost,
                         host_ops_->compute_stream());
}

OptimizerStates::Moments8bitCopy::Moments8bitCopy(const Moments8bitLayout& layout)
    : qm(static_cast<size_t>(layout.code_elements)),
      qv(qm.size()),
      absmax_m(static_cast<size_t>(layout.absmax_blocks)),
      absmax_v(absmax_m.size()),
      m(static_cast<size_t>(layout.fp32_elements)),
      v(m.size()) {}

Status OptimizerStates::TransferMoments8bit(Moments8bitCopy& copy, bool down,
                                            const std::function<Status()>& sync) const {
  const Moments8bitIndex ends[2] = {
      parts_[1].first, {moments8_.code_elements, moments8_.absmax_blocks, moments8_.fp32_elements}};
  for (int part = 0; part < 2; ++part) {
    const bool offloaded = part == 1;
    const Part& arrays = parts_[part];
    const Moments8bitIndex& first = arrays.first;
    const kernels::CopyDirection direction = down ? ToHost(offloaded) : FromHost(offloaded);
    auto move = [&](void* state, void* host, int64_t bytes) -> Status {
      if (bytes == 0) return Status::Ok();
      return down ? Copy(host, state, bytes, direction, offloaded)
                  : Copy(state, host, bytes, direction, offloaded);
    };
    const int64_t codes = ends[part].code - first.code;
    const int64_t absmax = (ends[part].absmax - first.absmax) * int64_t{sizeof(float)};
    const int64_t fp32 = (ends[part].fp32 - first.fp32) * int64_t{sizeof(float)};
    HOIST_RETURN_IF_ERROR(move(arrays.qm, copy.qm.data() + first.code, codes));
    HOIST_RETURN_IF_ERROR(move(arrays.qv, copy.qv.data() + first.code, codes));
    HOIST_RETURN_IF_ERROR(move(arrays.absmax_m, copy.absmax_m.data() + first.absmax, absmax));
    HOIST_RETURN_IF_ERROR(move(arrays.absmax_v, copy.absmax_v.data() + first.absmax, absmax));
    HOIST_RETURN_IF_ERROR(move(arrays.m, copy.m.data() + first.fp32, fp32));
    HOIST_RETURN_IF_ERROR(move(arrays.v, copy.v.data() + first.fp32, fp32));
  }
  return sync();
}

Status OptimizerStates::ZeroMoments(const std::function<Status()>& sync) {
  HOIST_CHECK(swapper_ == nullptr) << "the moments are on NVMe";
  if (eight_bit_) {
    Moments8bitCopy zeros(moments8_);
    // m's zero is the signed map's middle code; v's is code 0.
    std::fill(zeros.qm.begin(), zeros.qm.end(), QuantizeNearest(SignedDynamicMap(), 0.0f));
    std::fill(zeros.qv.begin(), zeros.qv.end(), QuantizeNearest(UnsignedDynamicMap(), 0.0f));
    return TransferMoments8bit(zeros, /*down=*/false, sync);
  }
  const int64_t total = state_plan_.total_shard();
  const int64_t bytes[2] = {split_ * int64_t{sizeof(float)},
                            (total - split_) * int64_t{sizeof(float)}};
  for (int part = 0; part < 2; ++part) {
    if (bytes[part] == 0) continue;
    const bool cpu = part == 1 && host_ops_ != nullptr;
    kernels::Backend& zeroing = cpu ? *host_ops_ : ops_;
    HOIST_RETURN_IF_ERROR(zeroing.Zero(parts_[part].m, bytes[part], zeroing.compute_stream()));
    HOIST_RETURN_IF_ERROR(zeroing.Zero(parts_[part].v, bytes[part], zeroing.compute_stream()));
  }
  return sync();
}

Status OptimizerStates::ReadMoments(float* m_out, float* v_out,
                                    const std::function<Status()>& sync) const {
  HOIST_CHECK(swapper_ == nullptr) << "the moments are on NVMe";
  const int64_t total = state_plan_.total_shard();
  if (!eight_bit_) {
    // The same flat layout whatever the split (a checkpoint resumes at any ratio).
    const int64_t first[2] = {0, split_};
    const int64_t count[2] = {split_, total - split_};
    for (int part = 0; part < 2; ++part) {
      const int64_t bytes = count[part] * int64_t{sizeof(float)};
      if (bytes == 0) continue;
      HOIST_RETURN_IF_ERROR(
          Copy(m_out + first[part], parts_[part].m, bytes, ToHost(part == 1), part == 1));
      HOIST_RETURN_IF_ERROR(
          Copy(v_out + first[part], parts_[part].v, bytes, ToHost(part == 1), part == 1));
    }
    return sync();
  }
  Moments8bitCopy copy(moments8_);
  HOIST_RETURN_IF_ERROR(TransferMoments8bit(copy, /*down=*/true, sync));
  std::memset(m_out, 0, static_cast<size_t>(total) * sizeof(float));
  std::memset(v_out, 0, static_cast<size_t>(total) * sizeof(float));
  for (int unit = 0; unit < state_plan_.num_units(); ++unit) {
    const auto u = static_cast<size_t>(unit);
    const UnitPartition& owned = state_plan_.unit(unit);
    float* m = m_out + owned.shard_offset;
    float* v = v_out + owned.shard_offset;
    if (moments8_.code_offset[u] < 0) {
      const auto at = static_cast<size_t>(moments8_.fp32_offset[u]);
      std::memcpy(m, copy.m.data() + at, static_cast<size_t>(owned.owned_real) * sizeof(float));
      std::memcpy(v, copy.v.data() + at, static_cast<size_t>(owned.owned_real) * sizeof(float));
      continue;
    }
    const auto codes = static_cast<size_t>(moments8_.code_offset[u]);
    auto block = static_cast<size_t>(moments8_.absmax_offset[u]);
    for (const OwnedPiece& piece : OwnedPieces(state_plan_, unit)) {
      const int64_t n = piece.end - piece.begin;
      const auto at = codes + static_cast<size_t>(piece.begin);
      kernels::cpu::DequantizeBlockwise(SignedDynamicMap(), copy.qm.data() + at,
                                        copy.absmax_m.data() + block, n, m + piece.begin);
      kernels::cpu::DequantizeBlockwise(UnsignedDynamicMap(), copy.qv.data() + at,
                                        copy.absmax_v.data() + block, n, v + piece.begin);
      block += static_cast<size_t>(QuantBlocks(n));
    }
  }
  return Status::Ok();
}

Status OptimizerStates::WriteMoments(const float* m_in, const float* v_in,
                                     const std::function<Status()>& sync) {
  HOIST_CHECK(swapper_ == nullptr) << "the moments are on NVMe";
  if (!eight_bit_) {
    const int64_t first[2] = {0, split_};
    const int64_t count[2] = {split_, state_plan_.total_shard() - split_};
    for (int part = 0; part < 2; ++part) {
      const int64_t bytes = count[part] * int64_t{sizeof(float)};
      if (bytes == 0) continue;
      HOIST_RETURN_IF_ERROR(
          Copy(parts_[part].m, m_in + first[part], bytes, FromHost(part == 1), part == 1));
      HOIST_RETURN_IF_ERROR(
          Copy(parts_[part].v, v_in + first[part], bytes, FromHost(part == 1), part == 1));
    }
    return sync();
  }
  Moments8bitCopy copy(moments8_);  // v's zero code is 0: the padding's codes stay zero
  for (int unit = 0; unit < state_plan_.num_units(); ++unit) {
    const auto u = static_cast<size_t>(unit);
    const UnitPartition& owned = state_plan_.unit(unit);
    const float* m = m_in + owned.shard_offset;
    const float* v = v_in + owned.shard_offset;
    if (moments8_.code_offset[u] < 0) {
      const auto at = static_cast<size_t>(moments8_.fp32_offset[u]);
      std::memcpy(copy.m.data() + at, m, static_cast<size_t>(owned.owned_real) * sizeof(float));
      std::memcpy(copy.v.data() + at, v, static_cast<size_t>(owned.owned_real) * sizeof(float));
      continue;
    }
    const auto codes = static_cast<size_t>(moments8_.code_offset[u]);
    auto block = static_cast<size_t>(moments8_.absmax_offset[u]);
    // The codes of the padding stay the zero codes (never read).
    std::fill(
        copy.qm.begin() + static_cast<std::ptrdiff_t>(codes),
        copy.qm.begin() + static_cast<std::ptrdiff_t>(codes + static_cast<size_t>(owned.shard)),
        QuantizeNearest(SignedDynamicMap(), 0.0f));
    for (const OwnedPiece& piece : OwnedPieces(state_plan_, unit)) {
      const int64_t n = piece.end - piece.begin;
      const auto at = codes + static_cast<size_t>(piece.begin);
      kernels::cpu::RequantizeBlockwise(SignedDynamicMap(), m + piece.begin, n, copy.qm.data() + at,
                                        copy.absmax_m.data() + block);
      kernels::cpu::RequantizeBlockwise(UnsignedDynamicMap(), v + piece.begin, n,
                                        copy.qv.data() + at, copy.absmax_v.data() + block);
      block += static_cast<size_t>(QuantBlocks(n));
    }
  }
  return TransferMoments8bit(copy, /*down=*/false, sync);
}

Status OptimizerStates::ForEachUnitInSubGroup(std::span<const offload::SwapPiece> pieces,
                                              const UnitInSubGroup& visit) const {
  const int64_t begin = pieces[0].first;
  const int64_t end = begin + pieces[0].count;
  for (int u = 0; u < state_plan_.num_units(); ++u) {
    const UnitPartition& owned = state_plan_.unit(u);
    const int64_t lo = std::max(begin, owned.shard_offset) - owned.shard_offset;
    const int64_t hi = std::min(end, owned.shard_offset + owned.shard) - owned.shard_offset;
    if (lo >= hi) continue;
    StateMoments at;
    if (!eight_bit_) {
      const int64_t x = owned.shard_offset + lo - begin;  // in the sub-group
      at.m = pieces[1].floats() + x;
      at.v = pieces[2].floats() + x;
    } else {
      const Moments8bitIndex index = Moments8bitIndexAt(state_plan_, moments8_, u, lo);
      auto in = [&](int array, int64_t first) {
        const offload::SwapPiece& piece = pieces[static_cast<size_t>(array)];
        return piece.data + (first - piece.first) * piece.element_bytes;
      };
      if (moments8_.code_offset[static_cast<size_t>(u)] < 0) {
        at.m = reinterpret_cast<float*>(in(kSwapM32, index.fp32));
        at.v = reinterpret_cast<float*>(in(kSwapV32, index.fp32));
      } else {
        at.qm = reinterpret_cast<uint8_t*>(in(kSwapCodesM, index.code));
        at.qv = reinterpret_cast<uint8_t*>(in(kSwapCodesV, index.code));
        at.absmax_m = reinterpret_cast<float*>(in(kSwapAbsmaxM, index.absmax));
        at.absmax_v = reinterpret_cast<float*>(in(kSwapAbsmaxV, index.absmax));
      }
    }
    HOIST_RETURN_IF_ERROR(visit(u, lo, hi, at));
  }
  return Status::Ok();
}

void OptimizerStates::ZeroSwappedMoments(std::span<const offload::SwapPiece> pieces) const {
  for (size_t a = 1; a < pieces.size(); ++a) {
    int fill = 0;
    // The zero of m's signed map is its middle code; v's is code 0.
    if (eight_bit_ && a == kSwapCodesM) {
      fill = QuantizeNearest(SignedDynamicMap(), 0.0f);
    } else if (eight_bit_ && a == kSwapCodesV) {
      fill = QuantizeNearest(UnsignedDynamicMap(), 0.0f);
    }
    std::memset(pieces[a].data, fill, static_cast<size_t>(pieces[a].bytes()));
  }
}

Status OptimizerStates::SwappedMomentsToFloat(std::span<const offload::SwapPiece> pieces, float* m,
                                              float* v) const {
  const int64_t begin = pieces[0].first;
  if (!eight_bit_) {
    std::memcpy(m, pieces[1].data, static_cast<size_t>(pieces[1].bytes()));
    std::memcpy(v, pieces[2].data, static_cast<size_t>(pieces[2].bytes()));
    return Status::Ok();
  }
  std::memset(m, 0, static_cast<size_t>(pieces[0].bytes()));
  std::memset(v, 0, static_cast<size_t>(pieces[0].bytes()));
  return ForEachUnitInSubGroup(
      pieces, [&](int u, int64_t lo, int64_t hi, const StateMoments& at) -> Status {
        const int64_t x = state_plan_.unit(u).shard_offset + lo - begin;  // lo in the sub-group
        if (at.m != nullptr) {                                            // fp32 moments
          std::memcpy(m + x, at.m, static_cast<size_t>(hi - lo) * sizeof(float));
          std::memcpy(v + x, at.v, static_cast<size_t>(hi - lo) * sizeof(float));
          return Status::Ok();
        }
        for (const OwnedPieceFrom& piece : OwnedPiecesFrom(state_plan_, u, lo, hi)) {
          const int64_t at_piece = piece.begin - lo, n = piece.end - piece.begin;
          kernels::cpu::DequantizeBlockwise(SignedDynamicMap(), at.qm + at_piece,
                                            at.absmax_m + piece.block, n, m + x + at_piece);
          kernels::cpu::DequantizeBlockwise(UnsignedDynamicMap(), at.qv + at_piece,
                                            at.absmax_v + piece.block, n, v + x + at_piece);
        }
        return Status::Ok();
      });
}

Status OptimizerStates::SwappedMomentsFromFloat(std::span<const offload::SwapPiece> pieces,
                                                const float* m, const float* v) const {
  const int64_t begin = pieces[0].first;
  if (!eight_bit_) {
    std::memcpy(pieces[1].data, m, static_cast<size_t>(pieces[1].bytes()));
    std::memcpy(pieces[2].data, v, static_cast<size_t>(pieces[2].bytes()));
    return Status::Ok();
  }
  // Zero codes and absmaxes first: the padding's stay so (never read).
  ZeroSwappedMoments(pieces);
  return ForEachUnitInSubGroup(
      pieces, [&](int u, int64_t lo, int64_t hi, const StateMoments& at) -> Status {
        const int64_t x = state_plan_.unit(u).shard_offset + lo - begin;
        if (at.m != nullptr) {
          std::memcpy(at.m, m + x, static_cast<size_t>(hi - lo) * sizeof(float));
          std::memcpy(at.v, v + x, static_cast<size_t>(hi - lo) * sizeof(float));
          return Status::Ok();
        }
        for (const OwnedPieceFrom& piece : OwnedPiecesFrom(state_plan_, u, lo, hi)) {
          const int64_t at_piece = piece.begin - lo, n = piece.end - piece.begin;
          kernels::cpu::RequantizeBlockwise(SignedDynamicMap(), m + x + at_piece, n,
                                            at.qm + at_piece, at.absmax_m + piece.block);
          kernels::cpu::RequantizeBlockwise(UnsignedDynamicMap(), v + x + at_piece, n,
                                            at.qv + at_piece, at.absmax_v + piece.block);
        }
        return Status::Ok();
      });
}

}  // namespace hoist::zero
