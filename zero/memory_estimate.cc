#include "zero/memory_estimate.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <string>

#include "core/check.h"
#include "offload/pinned_pool.h"
#include "zero/gather_book.h"
#include "zero/optimizer_states.h"
#include "zero/param_shards.h"
#include "zero/quantized_store.h"

namespace hoist::zero {

int64_t ComputeBytes(const ZeroOptions& options) {
  return static_cast<int64_t>(DTypeSize(options.compute_type));
}

bool IsPersistentUnit(const UnitPartition& part, const ZeroOptions& options) {
  return options.stage == 3 && part.size < options.stage3_param_persistence_threshold;
}

int64_t ParamBufferBytes(const PartitionPlan& plan, const ZeroOptions& options) {
  return (options.stage == 3 ? plan.total_shard() : plan.total_padded()) * ComputeBytes(options);
}

int64_t PersistentBufferBytes(const PartitionPlan& plan, const ZeroOptions& options) {
  int64_t elements = 0;
  for (int u = 0; u < plan.num_units(); ++u) {
    if (IsPersistentUnit(plan.unit(u), options)) elements += plan.unit(u).padded;
  }
  return elements * ComputeBytes(options);
}

int64_t GradBufferBytes(const PartitionPlan& plan, const ZeroOptions& options) {
  return (options.stage >= 2 ? plan.total_shard() : plan.total_padded()) * ComputeBytes(options);
}

int64_t StateArrayBytes(const PartitionPlan& state_plan) {
  return state_plan.total_shard() * int64_t{sizeof(float)};
}

bool HasSeparateMaster(const ZeroOptions& options) {
  return options.compute_type != DType::kFloat32 ||
         options.offload_optimizer.place != Placement::kDevice ||
         options.offload_param.place != Placement::kDevice;
}

int64_t DeviceStateElements(const PartitionPlan& state_plan, const ZeroOptions& options) {
  const OptimizerOffload& offload = options.offload_optimizer;
  if (offload.place != Placement::kHost || !(offload.ratio < 1.0)) return 0;
  const int64_t total = state_plan.total_shard();
  const double target = (1.0 - offload.ratio) * static_cast<double>(total);
  int64_t best = 0;
  for (int u = 0; u < state_plan.num_units(); ++u) {
    const UnitPartition& part = state_plan.unit(u);
    const int64_t boundary = part.shard_offset + part.shard;
    if (std::abs(static_cast<double>(boundary) - target) <=
        std::abs(static_cast<double>(best) - target)) {
      best = boundary;
    }
  }
  return std::min(best, total);
}

bool DevicePartHasSeparateMaster(const ZeroOptions& options) {
  return options.compute_type != DType::kFloat32 ||
         options.offload_param.place != Placement::kDevice;
}

std::vector<int64_t> Moment8bitArrayBytes(const PartitionPlan& state_plan,
                                          const ZeroOptions& options, bool offloaded) {
  const Moments8bitLayout layout = Moments8bitLayoutFor(state_plan, options.adam.min_8bit_size);
  const int64_t split = options.offload_optimizer.place == Placement::kDevice
                            ? state_plan.total_shard()
                            : DeviceStateElements(state_plan, options);
  const Moments8bitIndex before = Moments8bitBefore(state_plan, layout, split);
  Moments8bitIndex part = before;
  if (offloaded) {
    part = {layout.code_elements - before.code, layout.absmax_blocks - before.absmax,
            layout.fp32_elements - before.fp32};
  }
  const int64_t absmax = part.absmax * int64_t{sizeof(float)};
  const int64_t fp32 = part.fp32 * int64_t{sizeof(float)};
  return {part.code, part.code, absmax, absmax, fp32, fp32};
}

offload::StateSwapperOptions OptimizerSwapOptions(const PartitionPlan& state_plan,
                                                  const ZeroOptions& options) {
  offload::StateSwapperOptions swap;
  swap.elements = state_plan.total_shard();
  swap.arrays = 3;  // master, m, v
  swap.sub_group_size = options.offload_optimizer.sub_group_size;
  if (options.adam.eight_bit) {
    swap.layout = Moments8bitSwapArrays(
        state_plan, Moments8bitLayoutFor(state_plan, options.adam.min_8bit_size),
        swap.sub_group_size);
  }
  swap.buffer_count = options.offload_optimizer.buffer_count;
  swap.category = Category::kOptimizer;
  return swap;
}

ModelStateBytes ModelStateBytesFor(const PartitionPlan& plan, const PartitionPlan& state_plan,
                                   const ZeroOptions& options) {
  ModelStateBytes bytes;
  // Under parameter offload ParamShards keeps the same shards the device buffer would.
  bytes.params = ParamBufferBytes(plan, options) + PersistentBufferBytes(plan, options);
  if (options.frozen) return bytes;  // the weights alone
  bytes.grads = GradBufferBytes(plan, options);
  bytes.optimizer = OptimizerStates::Bytes(state_plan, options);
  return bytes;
}

int64_t GatheredUnitBytes(const UnitPartition& part, const ZeroOptions& options) {
  return part.padded * ComputeBytes(options);
}

bool PrefetchGathers(const UnitPartition& part, int64_t live_elements, const ZeroOptions& options) {
  return part.padded <= options.stage3_prefetch_bucket_size &&
         live_elements + part.padded <= options.stage3_max_live_parameters;
}

bool UsesWorkingGrads(const ZeroOptions& options) {
  return options.stage >= 2 || options.compute_type != DType::kFloat32;
}

int64_t WorkingGradBytes(const UnitPartition& part) { return part.padded * int64_t{sizeof(float)}; }

int64_t HostUpdateStagingBytes(const PartitionPlan& state_plan, const ZeroOptions& options) {
  if (options.offload_optimizer.place == Placement::kDevice) return 0;
  // The units of the host part only (all of them without a split).
  const int64_t on_device = DeviceStateElements(state_plan, options);
  int64_t largest = 1;
  for (int u = 0; u < state_plan.num_units(); ++u) {
    if (state_plan.unit(u).shard_offset < on_device) continue;
    largest = std::max(largest, state_plan.unit(u).owned_real);
  }
  return largest * static_cast<int64_t>(DTypeSize(options.compute_type));
}

int64_t ParamStagingBytes(const PartitionPlan& plan, const ZeroOptions& options) {
  if (options.offload_param.place == Placement::kDevice) return 0;
  int64_t largest = 0;
  for (int u = 0; u < plan.num_units(); ++u) largest = std::max(largest, plan.unit(u).shard);
  return largest * ComputeBytes(options);
}

int64_t HostGradBytes(const PartitionPlan& state_plan, const ZeroOptions& options) {
  if (options.offload_optimizer.place == Placement::kDevice) return 0;
  const int64_t on_device = DeviceStateElements(state_plan, options);
  int64_t elements = 0;
  for (int u = 0; u < state_plan.num_units(); ++u) {
    if (state_plan.unit(u).shard_offset >= on_device) elements += state_plan.unit(u).owned_real;
  }
  return std::max<int64_t>(elements, 1) * static_cast<int64_t>(DTypeSize(options.compute_type));
}

int HostUpdateStagingBuffers(const ZeroOptions& options) {
  // fp32's copy is the master itself; with the parameters offloaded the update writes the
  // store's host buffer.
  if (options.offload_optimizer.place == Placement::kDevice || !IsHalf(options.compute_type) ||
      options.offload_param.place != Placement::kDevice) {
    return 0;
  }
  // From NVMe one sub-group at a time through one slot; from host memory two, one going up
  // while the CPU updates the next unit.
  return options.offload_optimizer.place == Placement::kNvme ? 1 : 2;
}

int64_t ReductionSendBytes(const UnitPartition& part, const ZeroOptions& options) {
  if (options.comm_type == DType::kFloat32) return 0;
  return part.padded * static_cast<int64_t>(DTypeSize(options.comm_type));
}

int64_t ReductionRecvBytes(const UnitPartition& part, const ZeroOptions& options) {
  if (!options.reduce_scatter) return 0;
  return part.shard * static_cast<int64_t>(DTypeSize(options.comm_type));
}

int64_t ReductionsKeptElements(const ZeroOptions& options) {
  return options.overlap_comm ? options.reduce_bucket_size : 0;
}

int64_t AllReduceStagingElements(const PartitionPlan& plan, const ZeroOptions& options) {
  if (plan.world_size() == 1 || options.comm_type == options.compute_type) return 0;
  return std::min(options.reduce_bucket_size, plan.total_padded());
}

int64_t ZeroPaperModelStateBytes(int64_t psi, int stage, int world, bool mixed_precision) {
  HOIST_CHECK(psi >= 0 && stage >= 0 && stage <= 3 && world >= 1)
      << "psi " << psi << ", stage " << stage << ", world " << world;
  const int64_t shard = (psi + world - 1) / world;
  const int64_t p = mixed_precision ? 2 : 4;        // compute-type weights, and gradients
  const int64_t k = mixed_precision ? 12 : 8;       // optimizer states per parameter
  const int64_t params = stage == 3 ? shard : psi;  // elements of each kind this rank holds
  const int64_t grads = stage >= 2 ? shard : psi;
  const int64_t states = stage >= 1 ? shard : psi;
  return p * params + p * grads + k * states;
}

ModelPasses LayerwisePasses(int num_units) {
  using Op = StoreCall::Op;
  ModelPasses passes;
  for (int u = 0; u < num_units; ++u) {
    passes.forward.push_back({Op::kAcquireParams, u});
    if (u + 1 < num_units) passes.forward.push_back({Op::kPrefetch, u + 1});
    passes.forward.push_back({Op::kReleaseParams, u});
  }
  for (int u = num_units - 1; u >= 0; --u) {
    passes.backward.push_back({Op::kAcquireParams, u});
    if (u > 0) passes.backward.push_back({Op::kPrefetch, u - 1});
    passes.backward.push_back({Op::kAcquireGrads, u});
    passes.backward.push_back({Op::kReleaseGrads, u});
    passes.backward.push_back({Op::kReleaseParams, u});
  }
  return passes;
}

int64_t EngineMemoryEstimate::ResidentTotal(Place p) const {
  int64_t total = 0;
  for (int64_t bytes : resident[int(p)]) total += bytes;
  return total;
}

int64_t EngineMemoryEstimate::Peak(Place p, Category c) const {
  int64_t most = 0;
  for (const Table& phase : extra) most = std::max(most, phase[int(p)][int(c)]);
  return Resident(p, c) + most;
}

int64_t EngineMemoryEstimate::PeakTotal(Place p) const { return PeakTotalWith(p, PhaseBytes{}); }

EngineMemoryEstimate::Table EngineMemoryEstimate::PeakTable() const {
  Table table{};
  for (int p = 0; p < kNumPlaces; ++p) {
    for (int c = 0; c < kNumCategories; ++c) table[p][c] = Peak(Place(p), Category(c));
  }
  return table;
}

int64_t EngineMemoryEstimate::PeakTotalWith(Place p, const PhaseBytes& added) const {
  int64_t most = 0;
  for (Phase phase : kEstimatePhases) {
    most = std::max(most, extra_total[int(phase)][int(p)] + added[int(phase)]);
  }
  return ResidentTotal(p) + most;
}

namespace {

// The engine's compute device.
constexpr Place kCompute = Place::kDevice;

// What ZeroEngine::Create allocates, reported to `tracker` as its allocators would.
void AddResident(const PartitionPlan& plan, const PartitionPlan& state_plan,
                 const ZeroOptions& options, bool accelerator, MemoryTracker& tracker) {
  using offload::PinnedHostPool;
  const ParamOffload& param_offload = options.offload_param;
  if (param_offload.place == Placement::kDevice) {
    tracker.Add(kCompute, Category::kParam, ParamBufferBytes(plan, options));
  } else {
    const ParamShardFootprint shards =
        ParamShards::Footprint(plan, options.compute_type, param_offload);
    if (shards.resident_bytes > 0) {
      if (param_offload.pin_memory) {
        tracker.Add(Place::kHostPinned, Category::kParam,
                    PinnedHostPool::AllocationBytes(shards.resident_bytes));
      } else {
        tracker.Add(Place::kHost, Category::kParam, shards.resident_bytes);
      }
    }
    tracker.Add(Place::kNvme, Category::kParam, shards.file_bytes);
    tracker.Add(Place::kHostPinned, Category::kParam, shards.staging_bytes);
  }
  tracker.Add(kCompute, Category::kParam, PersistentBufferBytes(plan, options));
  if (accelerator) tracker.Add(kCompute, Category::kParam, ParamStagingBytes(plan, options));
  if (options.frozen) return;  // no gradients, optimizer states or step workspace
  tracker.Add(kCompute, Category::kGrad, GradBufferBytes(plan, options));
  tracker.Add(kCompute, Category::kWorkspace, EngineWorkspaceBytes());

  for (const ResidentBytes& array : OptimizerStates::Footprint(state_plan, options, accelerator)) {
    tracker.Add(array.place, array.category, array.bytes);
  }
}

// A store's transient allocations, replayed call by call on a tracker.
class StoreReplay {
 public:
  virtual ~StoreReplay() = default;
  // The calls of one pass; `backward` allows gradients.
  virtual Status Run(const std::vector<StoreCall>& calls, bool backward) = 0;
  // After a micro-batch's backward: nothing may stay acquired.
  virtual Status CheckBalanced() const = 0;
  virtual void ZeroGrads() = 0;
  virtual void Step() = 0;
};

// A QuantizedStore: nothing comes and goes (its workspace is held from creation on); the replay
// checks that the passes acquire and release its units in balance and ask no gradients of them.
class QuantizedReplay final : public StoreReplay {
 public:
  explicit QuantizedReplay(const std::vector<UnitSpec>& units) : count_(units.size(), 0) {}

  Status Run(const std::vector<StoreCall>& calls, bool) override {
    for (const StoreCall& call : calls) {
      const auto u = static_cast<size_t>(call.unit);
      switch (call.op) {
        case StoreCall::Op::kAcquireParams: ++count_[u]; break;
        case StoreCall::Op::kReleaseParams:
          if (count_[u] == 0) {
            return InvalidArgumentError("the model's passes release unit " +
                                        std::to_string(call.unit) + " without acquiring it");
          }
          --count_[u];
          break;
        case StoreCall::Op::kPrefetch: break;
        case StoreCall::Op::kAcquireGrads:
        case StoreCall::Op::kReleaseGrads:
          return InvalidArgumentError("the model's passes acquire the gradients of unit " +
                                      std::to_string(call.unit) + ", which is frozen");
      }
    }
    return Status::Ok();
  }
  Status CheckBalanced() const override {
    for (size_t u = 0; u < count_.size(); ++u) {
      if (count_[u] > 0) {
        return InvalidArgumentError("the model's passes leave unit " + std::to_string(u) +
                                    " acquired at the end of the backward pass");
      }
    }
    return Status::Ok();
  }
  void ZeroGrads() override {}
  void Step() override {}

 private:
  std::vector<int> count_;
};

// ZeroEngine's transient allocations, replayed call by call: the same decisions on the same
// bookkeeping (acquire counts, gathers alive, reductions in flight), with bytes reported to a
// tracker instead of buffers allocated.
class Replay final : public StoreReplay {
 public:
  Replay(const PartitionPlan& plan, const ZeroOptions& options, MemoryTracker& tracker,
         bool accelerator)
      : plan_(plan),
        options_(options),
        tracker_(tracker),
        book_(plan, options,
              options.offload_param.place == Placement::kDevice
                  ? std::vector<bool>()
                  : ParamShards::UnitsOnNvme(plan, options.offload_param)),
        staged_(options.offload_param.place != Placement::kDevice && accelerator),
        reductions_(plan) {
    const auto n = static_cast<size_t>(plan.num_units());
    gathered_bytes_.assign(n, 0);
    grads_acquired_.assign(n, false);
    work_grads_.assign(n, 0);
  }

  Status Run(const std::vector<StoreCall>& calls, bool backward) override {
    for (const StoreCall& call : calls) HOIST_RETURN_IF_ERROR(Call(call, backward));
    return Status::Ok();
  }

  Status CheckBalanced() const override {
    for (int u = 0; u < plan_.num_units(); ++u) {
      if (book_.holds(u) > 0 || grads_acquired_[static_cast<size_t>(u)]) {
        return InvalidArgumentError("the model's passes leave unit " + std::to_string(u) +
                                    " acquired at the end of the backward pass");
      }
    }
    return Status::Ok();
  }

  void ZeroGrads() override { Drain(0); }

  void Step() override {
    if (options_.frozen) return;
    // Gathers prefetched and not acquired are dropped (their weights are about to change).
    for (int u : book_.PrefetchedNotHeld()) {
      DropGather(u);
      book_.Unstaged(u);
    }
    if (options_.stage >= 2) {
      Drain(0);
      return;
    }
    const int64_t staging = AllReduceStagingElements(plan_, options_) *
                            static_cast<int64_t>(DTypeSize(options_.comm_type));
    tracker_.Add(kCompute, Category::kComm, staging);
    tracker_.Remove(kCompute, Category::kComm, staging);
  }

 private:
  struct Reduction {
    Category send_category = Category::kComm;
    int64_t send_bytes = 0, recv_bytes = 0;
  };

  Status Call(const StoreCall& call, bool backward) {
    using Op = StoreCall::Op;
    if (call.unit < 0 || call.unit >= plan_.num_units()) {
      return InvalidArgumentError("the model's passes name unit " + std::to_string(call.unit) +
                                  " of " + std::to_string(plan_.num_units()));
    }
    const bool grads = call.op == Op::kAcquireGrads || call.op == Op::kReleaseGrads;
    if (grads && !backward) {
      return InvalidArgumentError("the model's forward pass touches gradients (unit " +
                                  std::to_string(call.unit) + ")");
    }
    const auto u = static_cast<size_t>(call.unit);
    switch (call.op) {
      case Op::kAcquireParams: AcquireParams(call.unit); break;
      case Op::kReleaseParams:
        if (book_.holds(call.unit) == 0) {
          return InvalidArgumentError("the model's passes release unit " +
                                      std::to_string(call.unit) + " without acquiring it");
        }
        ReleaseParams(call.unit);
        break;
      case Op::kPrefetch: Prefetch(call.unit); break;
      case Op::kAcquireGrads:
        if (options_.frozen) {
          return InvalidArgumentError("the model's passes acquire the gradients of unit " +
                                      std::to_string(call.unit) + ", which is frozen");
        }
        if (grads_acquired_[u]) {
          return InvalidArgumentError("the model's passes acquire the gradients of unit " +
                                      std::to_string(call.unit) + " twice");
        }
        AcquireGrads(call.unit);
        break;
      case Op::kReleaseGrads:
        if (!grads_acquired_[u]) {
          return InvalidArgumentError("the model's passes release the gradients of unit " +
                                      std::to_string(call.unit) + " without acquiring them");
        }
        ReleaseGrads(call.unit);
        break;
    }
    return Status::Ok();
  }

  void Add(Category category, int64_t bytes) { tracker_.Add(kCompute, category, bytes); }
  void Remove(Category category, int64_t bytes) { tracker_.Remove(kCompute, category, bytes); }

  void StartGather(int unit) {
    const auto u = static_cast<size_t>(unit);
    gathered_bytes_[u] = GatheredUnitBytes(plan_.unit(unit), options_);
    Add(Category::kParam, gathered_bytes_[u]);
    if (staged_) book_.Staged(unit);  // its shard in the device staging until waited for
    book_.Started(unit);
  }

  void DropGather(int unit) {
    const auto u = static_cast<size_t>(unit);
    Remove(Category::kParam, gathered_bytes_[u]);
    gathered_bytes_[u] = 0;
    book_.Dropped(unit);
  }

  void AcquireParams(int unit) {
    if (!book_.Hold(unit)) return;
    if (book_.sharded(unit) && !book_.gathering(unit)) StartGather(unit);
    book_.Unstaged(unit);  // the gather is waited for here
  }

  void ReleaseParams(int unit) {
    if (!book_.Unhold(unit)) return;
    if (book_.gathering(unit)) DropGather(unit);
  }

  void Prefetch(int unit) {
    if (book_.PrefetchAction(unit) == GatherBook::Prefetch::kGather) StartGather(unit);
  }

  void AcquireGrads(int unit) {
    const auto u = static_cast<size_t>(unit);
    grads_acquired_[u] = true;
    if (!UsesWorkingGrads(options_)) return;
    work_grads_[u] = WorkingGradBytes(plan_.unit(unit));
    Add(Category::kGrad, work_grads_[u]);
  }

  void ReleaseGrads(int unit) {
    const auto u = static_cast<size_t>(unit);
    const UnitPartition& part = plan_.unit(unit);
    grads_acquired_[u] = false;
    if (options_.stage < 2) {
      Remove(Category::kGrad, work_grads_[u]);
      work_grads_[u] = 0;
      return;
    }
    Reduction reduction;
    const int64_t send = ReductionSendBytes(part, options_);
    if (send == 0) {  // the working gradient goes on the wire as it is
      reduction.send_category = Category::kGrad;
      reduction.send_bytes = work_grads_[u];
    } else {
      reduction.send_bytes = send;
      Add(Category::kComm, send);
      Remove(Category::kGrad, work_grads_[u]);
    }
    work_grads_[u] = 0;
    reduction.recv_bytes = ReductionRecvBytes(part, options_);
    Add(Category::kComm, reduction.recv_bytes);
    reductions_.Push(unit, reduction);
    Drain(ReductionsKeptElements(options_));
  }

  void Drain(int64_t keep_elements) {
    while (auto due = reductions_.PopDue(keep_elements)) {
      const Reduction& reduction = due->payload;
      Remove(reduction.send_category, reduction.send_bytes);
      Remove(Category::kComm, reduction.recv_bytes);
    }
  }

  const PartitionPlan& plan_;
  const ZeroOptions& options_;
  MemoryTracker& tracker_;
  GatherBook book_;
  // Parameter offload on an accelerator: offloaded shards go up through the device staging.
  bool staged_ = false;
  std::vector<int64_t> gathered_bytes_;  // per unit, its gathered buffer while held
  std::vector<bool> grads_acquired_;
  std::vector<int64_t> work_grads_;  // fp32 working gradients held
  ReductionQueue<Reduction> reductions_;
};

}  // namespace

StatusOr<EngineMemoryEstimate> EstimateEngineMemory(const std::vector<UnitSpec>& units,
                                                    const ZeroOptions& options, int world_size,
                                                    int rank, const ModelPasses& passes,
                                                    int micro_batches, bool accelerator) {
  return EstimateEngineMemory({EngineUnits{units, options}}, world_size, rank, passes,
                              micro_batches, accelerator);
}

StatusOr<EngineMemoryEstimate> EstimateEngineMemory(const std::vector<EngineUnits>& engines,
                                                    int world_size, int rank,
                                                    const ModelPasses& passes, int micro_batches,
                                                    bool accelerator) {
  if (micro_batches < 1) {
    return InvalidArgumentError("a step needs at least one micro-batch, not " +
                                std::to_string(micro_batches));
  }
  EngineMemoryEstimate estimate;
  MemoryTracker tracker;
  // Each engine's plans, kept alive for its replay; the passes number the units of all the
  // engines in order.
  std::vector<PartitionPlan> plans;
  std::vector<int> first_unit;
  plans.reserve(engines.size());
  int units_seen = 0;
  for (const EngineUnits& engine : engines) {
    const ZeroOptions& options = engine.options;
    if (engine.quantized) {
      int64_t bytes = 0;
      for (const UnitSpec& unit : engine.units) {
        bytes += QuantizedUnitBytes(unit, options.compute_type, engine.double_quant);
      }
      tracker.Add(kCompute, Category::kParam, bytes);
      tracker.Add(kCompute, Category::kWorkspace, Nf4WorkspaceBytes(engine.units));
      estimate.model_states.params += bytes;
      HOIST_ASSIGN_OR_RETURN(PartitionPlan plan, PartitionPlan::Build(engine.units, 1, 0));
      plans.push_back(std::move(plan));
      first_unit.push_back(units_seen);
      units_seen += static_cast<int>(engine.units.size());
      continue;
    }
    HOIST_RETURN_IF_ERROR(ValidateZeroOptions(options));
    HOIST_ASSIGN_OR_RETURN(PartitionPlan plan,
                           PartitionPlan::Build(engine.units, world_size, rank));
    HOIST_ASSIGN_OR_RETURN(PartitionPlan state_plan,
                           options.stage == 0
                               ? PartitionPlan::Build(engine.units, 1, 0)
                               : PartitionPlan::Build(engine.units, world_size, rank));
    HOIST_RETURN_IF_ERROR(ParamShards::Validate(plan, options.compute_type, options.offload_param));
    const ModelStateBytes states = ModelStateBytesFor(plan, state_plan, options);
    estimate.model_states.params += states.params;
    estimate.model_states.grads += states.grads;
    estimate.model_states.optimizer += states.optimizer;
    AddResident(plan, state_plan, options, accelerator, tracker);
    plans.push_back(std::move(plan));
    first_unit.push_back(units_seen);
    units_seen += static_cast<int>(engine.units.size());
  }
  estimate.resident = tracker.Snapshot().current;

  std::vector<std::unique_ptr<StoreReplay>> replays;
  for (size_t e = 0; e < engines.size(); ++e) {
    if (engines[e].quantized) {
      replays.push_back(std::make_unique<QuantizedReplay>(engines[e].units));
    } else {
      replays.push_back(
          std::make_unique<Replay>(plans[e], engines[e].options, tracker, accelerator));
    }
  }
  // A pass's calls, each sent to the engine that holds its unit (renumbered within it).
  auto run = [&](const std::vector<StoreCall>& calls, bool backward) -> Status {
    for (StoreCall call : calls) {
      size_t e = engines.size();
      while (e > 0 && call.unit < first_unit[e - 1]) --e;
      if (e == 0 || call.unit >= units_seen) {
        return InvalidArgumentError("the model's passes name unit " + std::to_string(call.unit) +
                                    " of " + std::to_string(units_seen));
      }
      call.unit -= first_unit[e - 1];
      HOIST_RETURN_IF_ERROR(replays[e - 1]->Run({call}, backward));
    }
    return Status::Ok();
  };
  // Each phase's peaks start from what it finds (buffers an earlier phase left, too).
  auto phase = [&](Phase which, const auto& body) -> Status {
    tracker.ResetPeaks();
    HOIST_RETURN_IF_ERROR(body());
    const MemorySnapshot seen = tracker.Snapshot();
    auto& extra = estimate.extra[int(which)];
    auto& extra_total = estimate.extra_total[int(which)];
    for (int p = 0; p < kNumPlaces; ++p) {
      for (int c = 0; c < kNumCategories; ++c) {
        extra[p][c] = std::max(extra[p][c], seen.peak[p][c] - estimate.resident[p][c]);
      }
      extra_total[p] =
          std::max(extra_total[p], seen.peak_total[p] - estimate.ResidentTotal(Place(p)));
    }
    return Status::Ok();
  };
  for (int step = 0; step < 2; ++step) {
    for (int micro = 0; micro < micro_batches; ++micro) {
      HOIST_RETURN_IF_ERROR(phase(Phase::kForward, [&] {
        if (micro == 0) {
          for (auto& replay : replays) replay->ZeroGrads();
        }
        return run(passes.forward, /*backward=*/false);
      }));
      HOIST_RETURN_IF_ERROR(phase(Phase::kBackward, [&] {
        HOIST_RETURN_IF_ERROR(run(passes.backward, /*backward=*/true));
        for (auto& replay : replays) HOIST_RETURN_IF_ERROR(replay->CheckBalanced());
        return Status::Ok();
      }));
    }
    HOIST_RETURN_IF_ERROR(phase(Phase::kOptimizer, [&] {
      for (auto& replay : replays) replay->Step();
      return Status::Ok();
    }));
  }
  return estimate;
}

StatusOr<EngineMemoryEstimate> EstimateEngineMemory(const std::vector<UnitSpec>& units,
                                                    const ZeroOptions& options, int world_size,
                                                    int rank) {
  return EstimateEngineMemory(units, options, world_size, rank,
                              LayerwisePasses(static_cast<int>(units.size())));
}

}  // namespace hoist::zero
