// OptimizerStates: where a ZeroEngine keeps this rank's optimizer states (the fp32 master weights
// of its shard and AdamW's two moments) and how it encodes the moments. The placement is one of
//   the device                       ZeroOptions::offload_optimizer.place kDevice;
//   host memory, pinned or pageable  kHost, all of the shard or (ratio < 1) the units past a split;
//   an NVMe file                     kNvme, a sub-group at a time through the state swapper;
// and the moments are fp32, or with AdamWParams::eight_bit block-wise 8-bit codes with fp32
// absmaxes (zero/moments_8bit.h: the units below min_8bit_size keep fp32 moments).
//
// The shard splits at flat element split() (state plan order, a unit boundary): part 0, the
// units before it, keeps its states on the device; part 1, the rest, is offloaded. Without
// offload split() is the whole shard; offloaded wholly (ratio 1, or NVMe) it is 0.
//
// The object allocates the arrays, says where each unit's states are, copies them (on the
// engine's backend, or on the CPU's for host memory the backend cannot reach), and converts the
// moments to and from the flat fp32 layout a checkpoint holds, whatever the encoding (8-bit
// moments are dequantized for it, so either optimizer resumes from either, and requantized on
// restore with absmaxes that reproduce them bit for bit: kernels/cpu/blockwise_quant.h). Its
// footprint (Footprint, Bytes) is computed from the plan and the options alone, for the memory
// estimate: the arrays Create allocates, the host update's buffers the placement brings on an
// accelerator, as the MemoryTracker counts them.
//
// The engine's optimizer step (AdamW over the pieces) stays with the engine, which reads the
// arrays through master() and moments(). Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/device.h"
#include "core/memory_tracker.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "offload/pinned_pool.h"
#include "offload/state_swapper.h"
#include "zero/moments_8bit.h"
#include "zero/partition.h"
#include "zero/zero_options.h"

namespace hoist::zero {

// Where one unit's moments are, from some owned element lo on: fp32 m and v, or (8-bit units)
// codes from lo and absmaxes from lo's block, lo not cutting a block.
struct StateMoments {
  float* m = nullptr;
  float* v = nullptr;
  uint8_t* qm = nullptr;
  uint8_t* qv = nullptr;
  float* absmax_m = nullptr;
  float* absmax_v = nullptr;
};

// Bytes held from creation on in one (place, category) of the tracker.
struct ResidentBytes {
  Place place;
  Category category;
  int64_t bytes;
};

class OptimizerStates {
 public:
  // What Create allocates for `options` (and, `accelerator`: the engine's backend cannot
  // operate on host memory, the host update's pinned buffers beside offloaded states: the
  // offloaded gradients, HostGradBytes, and the copy slots, HostUpdateStagingBytes), in the
  // tracker's terms: pinned allocations rounded as the pool rounds them. Empty when frozen.
  static std::vector<ResidentBytes> Footprint(const PartitionPlan& state_plan,
                                              const ZeroOptions& options, bool accelerator);
  // The states' own bytes wherever they live (ModelStateBytes::optimizer): the master where it
  // is an array of its own, and the moments as encoded. 0 when frozen.
  static int64_t Bytes(const PartitionPlan& state_plan, const ZeroOptions& options);

  // The arrays for `state_plan` on `device` (part 0) and in host memory (part 1: from `pool`,
  // page-locked where pin_memory says so, or pageable; under kNvme the swapper's slots). `ops`
  // copies device memory on its compute stream; `host_ops`, where not null, is the CPU's
  // backend that copies the offloaded part instead (the host memory `ops` cannot reach). `pool`
  // is needed unless the states are on the device. All must outlive the object.
  static StatusOr<std::unique_ptr<OptimizerStates>> Create(
      const PartitionPlan& state_plan, const ZeroOptions& options, Device& device,
      offload::PinnedHostPool* pool, kernels::Backend& ops, kernels::Backend* host_ops);
  ~OptimizerStates();

  int64_t split() const { return split_; }
  // Whether the unit's states are in part 1 (offloaded).
  bool offloaded(int unit) const {
    return place_ != Placement::kDevice && state_plan_.unit(unit).shard_offset >= split_;
  }
  // The swapper of kNvme (null otherwise): the states are then read and written a sub-group at
  // a time, and master() and moments() are not to be asked.
  offload::StateSwapper* swapper() const { return swapper_.get(); }
  // The 8-bit layout (empty without eight_bit).
  const Moments8bitLayout& moments8() const { return moments8_; }
  // Whether the unit's moments are 8-bit codes (false: fp32 moments).
  bool eight_bit(int unit) const {
    return eight_bit_ && moments8_.code_offset[static_cast<size_t>(unit)] >= 0;
  }

  // The unit's fp32 master weights from owned element 0; null where there is no array of its own
  // (fp32 on the device: the model's copy is the master). Not under kNvme.
  float* master(int unit) const;
  // The unit's moments from owned element 0. Not under kNvme.
  StateMoments moments(int unit) const;

  // Copies `bytes` to or from state memory of one part (`offloaded`: part 1): on `ops`'s compute
  // stream, or on the CPU, done when it returns, where host_ops copies the offloaded part.
  Status Copy(void* dst, const void* src, int64_t bytes, kernels::CopyDirection direction,
              bool offloaded) const;
  // The direction of a copy from or to host memory for a part.
  static kernels::CopyDirection ToHost(bool offloaded) {
    return offloaded ? kernels::CopyDirection::kHostToHost : kernels::CopyDirection::kDeviceToHost;
  }
  static kernels::CopyDirection FromHost(bool offloaded) {
    return offloaded ? kernels::CopyDirection::kHostToHost : kernels::CopyDirection::kHostToDevice;
  }

  // The moments of a fresh start (fp32 zeros; 8-bit: the zero codes). Resident placements; the
  // copies are queued, and `sync` (which waits for ops's stream) is called where the host must
  // wait for them.
  Status ZeroMoments(const std::function<Status()>& sync);
  // m and v as flat fp32 arrays over the shard (state plan order, zeros in the padding), read
  // out (8-bit: dequantized) or written in (8-bit: requantized, the same bits where they came
  // from 8-bit moments). Resident placements; done when it returns.
  Status ReadMoments(float* m, float* v, const std::function<Status()>& sync) const;
  Status WriteMoments(const float* m, const float* v, const std::function<Status()>& sync);

  // kNvme: the swapped-in sub-group's pieces (master, m and v, or the 8-bit layout's seven).
  // visit(unit, lo, hi, moments) for each unit whose shard overlaps the sub-group: [lo, hi) the
  // overlap in the unit's owned coordinates (its padding included), `moments` from lo on.
  using UnitInSubGroup =
      std::function<Status(int unit, int64_t lo, int64_t hi, const StateMoments& moments)>;
  Status ForEachUnitInSubGroup(std::span<const offload::SwapPiece> pieces,
                               const UnitInSubGroup& visit) const;
  // The sub-group's moments of a fresh start.
  void ZeroSwappedMoments(std::span<const offload::SwapPiece> pieces) const;
  // The sub-group's m and v as fp32 (its elements of the flat shard; zeros in the padding), and
  // back.
  Status SwappedMomentsToFloat(std::span<const offload::SwapPiece> pieces, float* m,
                               float* v) const;
  Status SwappedMomentsFromFloat(std::span<const offload::SwapPiece> pieces, const float* m,
                                 const float* v) const;

 private:
  // One part's arrays (null where it has none); `first`: the part's element 0 in the 8-bit
  // layout's coordinates.
  struct Part {
    float* master = nullptr;
    float* m = nullptr;  // fp32 moments: the whole part's, or (8-bit) the small units'
    float* v = nullptr;
    uint8_t* qm = nullptr;
    uint8_t* qv = nullptr;
    float* absmax_m = nullptr;
    float* absmax_v = nullptr;
    Moments8bitIndex first;
  };
  // The 8-bit moments whole, in host memory, in moments8_'s coordinates.
  struct Moments8bitCopy {
    explicit Moments8bitCopy(const Moments8bitLayout& layout);
    std::vector<uint8_t> qm, qv;
    std::vector<float> absmax_m, absmax_v, m, v;
  };

  OptimizerStates(const PartitionPlan& state_plan, const ZeroOptions& options,
                  kernels::Backend& ops, kernels::Backend* host_ops);
  Status Allocate(Device& device, offload::PinnedHostPool* pool);
  const Part& part_of(int unit) const { return parts_[offloaded(unit) ? 1 : 0]; }
  // Copies `copy` into both parts' 8-bit arrays, or (down) the arrays into it.
  Status TransferMoments8bit(Moments8bitCopy& copy, bool down,
                             const std::function<Status()>& sync) const;

  const PartitionPlan& state_plan_;  // the engine's
  Placement place_;
  bool eight_bit_;
  kernels::Backend& ops_;
  kernels::Backend* host_ops_;
  int64_t split_ = 0;
  Part parts_[2];
  Moments8bitLayout moments8_;
  // The allocations behind the parts' arrays.
  std::unique_ptr<Device> host_device_;  // pageable host memory (pin_memory false)
  std::vector<Buffer> buffers_;
  std::vector<offload::PinnedBuffer> pinned_;
  std::unique_ptr<offload::StateSwapper> swapper_;
};

}  // namespace hoist::zero
