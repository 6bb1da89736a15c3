// What a ZeroEngine will hold, computed without creating it: bytes per (place, category) exactly
// as its MemoryTracker counts them, for `hoist estimate` and for checks before a run.
//
// The engine's memory is of two kinds:
//   resident   allocated by Create and held until the engine dies: compute-type weights (whole,
//              shards, persistent units), gradient accumulators, optimizer states wherever they
//              live (device, pinned or pageable host memory, NVMe sub-group slots and the scratch
//              file), the parameter-offload host shards, staging buffers and file;
//   transient  allocated and freed while the model runs through the ParamStore calls and during
//              Step: gathered units (stage 3), fp32 working gradients,
//              gradient reductions in flight, the all-reduce staging buffer.
// The resident bytes are the sum of the parts' footprints (the optimizer states' and the host
// update's, OptimizerStates::Footprint; parameter offload's, ParamShards::Footprint; the buffers
// sized by the rules below). The transients depend on the order in which the model calls the
// ParamStore, so the estimate replays that order (ModelPasses: the calls of one micro-batch's
// forward and backward) through the gatherer's own rules (GatherBook, the object the engine
// decides by) and the reductions' sizing rules (below), and records each phase's largest bytes.
// LayerwisePasses is the plain layer-by-layer order; a model with another order (GPT-2's tied
// embedding, held from the head's forward to the end of backward) describes its own. Given the
// calls the model really makes, the estimate equals the tracker's numbers; Create and Initialize
// allocate nothing transient.
//
// Place kDevice is the engine's compute device (the CPU on a CPU run). The estimate covers the
// engine alone: the model's activations and whatever the trainer allocates are added by the
// caller, to the phase in which they are held (PeakTotalWith).
//
// Pure functions of their arguments; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/memory_tracker.h"
#include "core/phase.h"
#include "core/status.h"
#include "offload/state_swapper.h"
#include "zero/partition.h"
#include "zero/zero_engine.h"

namespace hoist::zero {

// ---- Sizing rules: ZeroEngine allocates by these, the estimate adds them up. ----

// Bytes of one compute-type element.
int64_t ComputeBytes(const ZeroOptions& options);
// Stage 3 keeps units below stage3_param_persistence_threshold whole on every rank.
bool IsPersistentUnit(const UnitPartition& part, const ZeroOptions& options);
// The compute-type weights the engine keeps on the device: the whole padded model (stages 0-2)
// or this rank's shards (stage 3; ParamShards holds them instead under parameter offload).
int64_t ParamBufferBytes(const PartitionPlan& plan, const ZeroOptions& options);
// Stage 3: the whole compute-type copies of the persistent units (0 if none).
int64_t PersistentBufferBytes(const PartitionPlan& plan, const ZeroOptions& options);
// Compute-type gradient accumulators: whole padded model (stages 0/1) or shards (2/3).
int64_t GradBufferBytes(const PartitionPlan& plan, const ZeroOptions& options);
// The engine's device workspace: the step's sum of squares (one double), where the backend
// writes it before the host reads it back.
constexpr int64_t EngineWorkspaceBytes() { return sizeof(double); }
// One fp32 optimizer array (master, m or v) over this rank's shard of the state plan.
int64_t StateArrayBytes(const PartitionPlan& state_plan);
// Whether the fp32 master weights are an array of their own: in mixed precision, and whenever
// the model's copy is not the optimizer's (either offload). Otherwise the fp32 compute copy is it.
bool HasSeparateMaster(const ZeroOptions& options);
// Partial optimizer offload (offload_optimizer kHost with ratio < 1): how many leading elements
// of the flat owned shard (state plan order) keep their optimizer states on the device, updated
// there as without offload; the rest are offloaded as with ratio 1. The split falls on the unit
// boundary nearest to (1 - ratio) of the shard (ties to the device side), so a unit's states are
// all in one place: 0 at ratio 1 (full offload), the whole shard where ratio is small enough
// (no offload in effect). 0 for every other placement.
int64_t DeviceStateElements(const PartitionPlan& state_plan, const ZeroOptions& options);
// Whether the device part of a split keeps a master array of its own (as HasSeparateMaster with
// the states on the device).
bool DevicePartHasSeparateMaster(const ZeroOptions& options);
// The 8-bit AdamW's moment arrays (options.adam.eight_bit; zero/moments_8bit.h) of one part of
// the shard, in the order ZeroEngine allocates them: codes of m and of v (1 byte per element of
// the 8-bit units' shards), absmaxes of m and of v (4 bytes per block of 256), fp32 m and v of
// the units below min_8bit_size. `offloaded`: the part offload_optimizer cpu holds (the units
// past DeviceStateElements; none without offload; under nvme, all of them, in the swapper's
// file), else the part on the device. An array of 0
// bytes is not allocated. Per parameter of an 8-bit unit: 2 + 8/256 bytes, plus the 4-byte
// master where HasSeparateMaster.
std::vector<int64_t> Moment8bitArrayBytes(const PartitionPlan& state_plan,
                                          const ZeroOptions& options, bool offloaded);
// The optimizer swapper of Placement::kNvme (its path left empty): master, m and v in fp32, or
// with 8-bit moments the layout of Moments8bitSwapArrays.
offload::StateSwapperOptions OptimizerSwapOptions(const PartitionPlan& state_plan,
                                                  const ZeroOptions& options);
// This rank's model states by the ZeRO formula's terms (what ZeroEngine::model_state_bytes
// returns), wherever they live.
ModelStateBytes ModelStateBytesFor(const PartitionPlan& plan, const PartitionPlan& state_plan,
                                   const ZeroOptions& options);

// Stage 3: a sharded unit gathered whole, in the compute type (Category::kParam).
int64_t GatheredUnitBytes(const UnitPartition& part, const ZeroOptions& options);
// Whether Prefetch starts gathering a unit while `live_elements` gathered elements are alive.
bool PrefetchGathers(const UnitPartition& part, int64_t live_elements, const ZeroOptions& options);
// AcquireGrads hands out an fp32 working gradient (kGrad) of the padded unit, except in fp32
// stages 0/1, which accumulate in place.
bool UsesWorkingGrads(const ZeroOptions& options);
int64_t WorkingGradBytes(const UnitPartition& part);
// Stages 2/3, a unit's reduction in flight: the padded gradient in comm_type (kComm; 0 when
// comm_type is fp32, which sends the working gradient itself) and the reduced shard (kComm; 0
// without reduce_scatter, which all-reduces in place).
int64_t ReductionSendBytes(const UnitPartition& part, const ZeroOptions& options);
int64_t ReductionRecvBytes(const UnitPartition& part, const ZeroOptions& options);
// Elements of reductions left in flight after each ReleaseGrads (overlap_comm) or 0.
int64_t ReductionsKeptElements(const ZeroOptions& options);
// Stages 0/1 on more than one rank with comm_type unlike the compute type: the gradient
// all-reduce goes through a staging buffer (kComm, during Step) of this many elements; 0 when
// it reduces in place.
int64_t AllReduceStagingElements(const PartitionPlan& plan, const ZeroOptions& options);

// ZeRO-Offload on an accelerator (the engine's host update, where the optimizer states are in
// host memory the backend cannot reach), its pinned buffers, held from Create on:
//   HostGradBytes: the offloaded part's owned gradients in the compute type, every unit's at
//     once (Category::kGrad): they come down on the copy stream as the last micro-batch's
//     backward finishes each unit, and the CPU's AdamW reads them there;
//   HostUpdateStagingBytes: each of HostUpdateStagingBuffers slots (Category::kOptimizer) of the
//     updated 16-bit copy on its way up, one unit's owned range (in bf16/fp16 two slots from host
//     memory, one from NVMe; none in fp32, whose copy is the master itself, nor with the
//     parameters offloaded, where the update writes the store's host buffer).
// All 0 without offload.
int64_t HostGradBytes(const PartitionPlan& state_plan, const ZeroOptions& options);
int64_t HostUpdateStagingBytes(const PartitionPlan& state_plan, const ZeroOptions& options);
int HostUpdateStagingBuffers(const ZeroOptions& options);
// Parameter offload on an accelerator: the device buffer (Category::kParam, held from Create on)
// through which an offloaded shard goes up for its gather and the updated shard comes down, the
// largest shard of `plan` in the compute type; 0 without parameter offload.
int64_t ParamStagingBytes(const PartitionPlan& plan, const ZeroOptions& options);

// ---- The ZeRO paper's model states, for display beside the estimate. ----

// Bytes of model states per rank for Ψ = `psi` parameters on `world` ranks, Adam, no padding and
// no offload (Ψ/N rounded up to whole elements); stage 0..3 and world >= 1 (checked):
//   mixed precision (K = 12: fp32 master, m, v; 2-byte weights and gradients), 16Ψ in all:
//     stage 0 16Ψ, stage 1 4Ψ + 12Ψ/N, stage 2 2Ψ + 14Ψ/N, stage 3 16Ψ/N;
//   fp32 (K = 8: m and v; the 4-byte weights are the master), 16Ψ in all too:
//     stage 0 16Ψ, stage 1 8Ψ + 8Ψ/N, stage 2 4Ψ + 12Ψ/N, stage 3 16Ψ/N.
// The engine adds padding to a multiple of N per unit, keeps persistent units whole in stage 3,
// and in fp32 with either offload keeps a separate fp32 master (K = 12).
int64_t ZeroPaperModelStateBytes(int64_t psi, int stage, int world, bool mixed_precision);

// ---- The estimate. ----

// The estimate counts the parts of one optimizer step, Phase::kForward, kBackward and kOptimizer
// (core/phase.h), each with its own transient buffers.
inline constexpr Phase kEstimatePhases[] = {Phase::kForward, Phase::kBackward, Phase::kOptimizer};

// One ParamStore call of the model.
struct StoreCall {
  enum class Op { kAcquireParams, kReleaseParams, kPrefetch, kAcquireGrads, kReleaseGrads };
  Op op;
  int unit;
};

// The calls of one micro-batch, in order. Every acquire must be released by the end of
// `backward` (a forward may hold units the backward releases); gradients are acquired only in
// `backward`, each unit's at most once.
struct ModelPasses {
  std::vector<StoreCall> forward;
  std::vector<StoreCall> backward;
};

// Forward: each unit acquired in order, the next one prefetched, then released. Backward, in
// reverse: the unit's weights acquired, the previous unit prefetched, its gradient acquired and
// released, its weights released.
ModelPasses LayerwisePasses(int num_units);

struct EngineMemoryEstimate {
  using Table = MemorySnapshot::Table;  // [place][category] bytes
  using PhaseBytes = std::array<int64_t, kNumPhases>;

  Table resident{};  // held from Create on
  // Per phase, on top of `resident`: the most bytes of each (place, category) at any moment,
  // and the largest simultaneous sum over categories per place (which may be less than the sum
  // of the per-category maxima, reached at different moments).
  std::array<Table, kNumPhases> extra{};
  std::array<std::array<int64_t, kNumPlaces>, kNumPhases> extra_total{};
  ModelStateBytes model_states;  // ZeroEngine::model_state_bytes()

  int64_t Resident(Place p, Category c) const { return resident[int(p)][int(c)]; }
  int64_t ResidentTotal(Place p) const;
  int64_t Extra(Phase phase, Place p, Category c) const {
    return extra[int(phase)][int(p)][int(c)];
  }
  int64_t ExtraTotal(Phase phase, Place p) const { return extra_total[int(phase)][int(p)]; }
  // What the tracker's peak[p][c] and peak_total[p] hold after the engine has run.
  int64_t Peak(Place p, Category c) const;
  int64_t PeakTotal(Place p) const;
  Table PeakTable() const;
  // peak_total[p] with `added[phase]` more bytes of place p held throughout each phase (the
  // model's activations, say): the resident bytes plus the largest phase. An upper bound where
  // the added bytes peak at another moment of the phase than the engine's.
  int64_t PeakTotalWith(Place p, const PhaseBytes& added) const;
};

// The memory of the engine that ZeroEngine::Create(units, options, comm, device) builds on rank
// `rank` of `world_size` (comm's group), for a model that makes the calls of `passes` in each of
// `micro_batches` micro-batches per step (a gradient-accumulation step). Two steps are replayed,
// so what one step leaves behind counts in the next. Errors: the refusals Create gives for these
// options (but not for a missing scratch file path, which the estimate does not need), and
// InvalidArgument for passes that break the ParamStore protocol. `accelerator`: the engine's
// backend cannot operate on host memory (a GPU's), which adds the host update's staging.
StatusOr<EngineMemoryEstimate> EstimateEngineMemory(const std::vector<UnitSpec>& units,
                                                    const ZeroOptions& options, int world_size,
                                                    int rank, const ModelPasses& passes,
                                                    int micro_batches = 1,
                                                    bool accelerator = false);
// The same for engines side by side on one rank (a LoRA fine-tune's frozen base and its
// adapters): the passes number the units of all of them in order (the first engine's, then the
// second's), and each call is replayed on the engine that holds its unit, so the peaks are those
// of the engines together, moment by moment.
struct EngineUnits {
  std::vector<UnitSpec> units;
  ZeroOptions options;
  // A QuantizedStore (zero/quantized_store.h) instead of an engine: a frozen 4-bit base, whole,
  // in options.compute_type.
  bool quantized = false;
  bool double_quant = false;  // with quantized: the store's double_quant
};
StatusOr<EngineMemoryEstimate> EstimateEngineMemory(const std::vector<EngineUnits>& engines,
                                                    int world_size, int rank,
                                                    const ModelPasses& passes,
                                                    int micro_batches = 1,
                                                    bool accelerator = false);
// The same for LayerwisePasses over the units, one micro-batch per step.
StatusOr<EngineMemoryEstimate> EstimateEngineMemory(const std::vector<UnitSpec>& units,
                                                    const ZeroOptions& options, int world_size,
                                                    int rank);

}  // namespace hoist::zero
