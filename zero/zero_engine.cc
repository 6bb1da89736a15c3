#include "zero/zero_engine.h"

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "comm/agree.h"
#include "core/check.h"
#include "core/logging.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu_backend.h"
#include "zero/memory_estimate.h"
#include "zero/zero_engine_pending.h"

namespace hoist::zero {

namespace {

// What frees device memory for any of the engine's transient buffers.
constexpr const char* kMakeRoom =
    "a smaller train_micro_batch_size_per_gpu, activation_checkpointing, a higher "
    "zero_optimization.stage, or offload_optimizer / offload_param (hoist plan --memory BYTES "
    "lists the settings that fit)";

}  // namespace

Status ValidateZeroOptions(const ZeroOptions& options) {
  if (options.stage < 0 || options.stage > 3) {
    return InvalidArgumentError("zero_optimization.stage must be 0, 1, 2 or 3, not " +
                                std::to_string(options.stage));
  }
  if (options.reduce_bucket_size <= 0 || options.allgather_bucket_size <= 0) {
    return InvalidArgumentError("ZeRO bucket sizes must be positive");
  }
  if (options.offload_param.place != Placement::kDevice && options.stage != 3) {
    return InvalidArgumentError("offloading parameters needs ZeRO stage 3, not " +
                                std::to_string(options.stage));
  }
  if (options.frozen && options.offload_optimizer.place != Placement::kDevice) {
    return InvalidArgumentError(
        "frozen weights have no optimizer states to offload: keep offload_optimizer off for them");
  }
  if (options.offload_optimizer.place != Placement::kDevice && options.stage == 0) {
    return InvalidArgumentError(
        "offloading the optimizer needs ZeRO stage 1, 2 or 3 (stage 0 keeps whole optimizer "
        "states on every rank)");
  }
  const double ratio = options.offload_optimizer.ratio;
  if (!(ratio > 0.0 && ratio <= 1.0)) {
    return InvalidArgumentError(
        "zero_optimization.offload_optimizer.ratio must be in (0, 1] (the share of the optimizer "
        "offloaded), not " +
        std::to_string(ratio));
  }
  if (ratio < 1.0 && options.offload_optimizer.place == Placement::kNvme) {
    return InvalidArgumentError(
        "zero_optimization.offload_optimizer.ratio below 1 needs offload_optimizer.device \"cpu\" "
        "(a partial offload to nvme is not supported): set ratio to 1 or use device \"cpu\"");
  }
  if (options.adam.eight_bit && options.adam.min_8bit_size < 0) {
    return InvalidArgumentError("optimizer.params.min_8bit_size must be >= 0, not " +
                                std::to_string(options.adam.min_8bit_size));
  }
  return Status::Ok();
}

float ClipScale(double norm, float max_norm) {
  if (max_norm <= 0.0f) return 1.0f;
  return static_cast<float>(std::min(1.0, max_norm / (norm + 1e-6)));
}

ZeroEngine::ZeroEngine(const ZeroOptions& options, comm::Communicator* comm,
                       kernels::Backend* backend, PartitionPlan plan, PartitionPlan state_plan)
    : options_(options),
      comm_(comm),
      backend_(backend),
      device_(&backend->device()),
      plan_(std::move(plan)),
      state_plan_(std::move(state_plan)),
      csize_(DTypeSize(options.compute_type)),
      book_(plan_, options_,
            options.offload_param.place == Placement::kDevice
                ? std::vector<bool>()
                : ParamShards::UnitsOnNvme(plan_, options.offload_param)),
      reductions_(plan_) {}

ZeroEngine::~ZeroEngine() {
  // Collectives in flight, and work still queued on the streams, use buffers of ours: let them
  // finish before the buffers go.
  for (auto& reduction : reductions_) {
    if (reduction.payload->handle) (void)reduction.payload->handle->Wait();
  }
  for (auto& pending : gathers_) {
    if (pending && pending->handle) (void)pending->handle->Wait();
  }
  (void)Sync();
  if (host_update_ || param_stage_.data() != nullptr) {
    (void)backend_->copy_stream().Synchronize();
  }
}

StatusOr<std::unique_ptr<ZeroEngine>> ZeroEngine::Create(std::vector<UnitSpec> units,
                                                         const ZeroOptions& options,
                                                         comm::Communicator* comm,
                                                         kernels::Backend* backend) {
  HOIST_RETURN_IF_ERROR(ValidateZeroOptions(options));
  HOIST_ASSIGN_OR_RETURN(PartitionPlan plan,
                         PartitionPlan::Build(units, comm->world_size(), comm->rank()));
  HOIST_ASSIGN_OR_RETURN(
      PartitionPlan state_plan,
      options.stage == 0
          ? PartitionPlan::Build(std::move(units), 1, 0)
          : PartitionPlan::Build(std::move(units), comm->world_size(), comm->rank()));
  std::unique_ptr<ZeroEngine> engine(
      new ZeroEngine(options, comm, backend, std::move(plan), std::move(state_plan)));
  HOIST_RETURN_IF_ERROR(engine->Allocate());
  return engine;
}

Status ZeroEngine::Allocate() {
  const int n = plan_.num_units();
  const ParamOffload& param_offload = options_.offload_param;
  if (param_offload.place != Placement::kDevice) {
    offload::PinnedHostPoolOptions pool_options;
    pool_options.lock_pages = param_offload.pin_memory;
    param_pool_ = std::make_unique<offload::PinnedHostPool>(*device_->tracker(), pool_options);
    HOIST_ASSIGN_OR_RETURN(param_shards_,
                           ParamShards::Create(plan_, options_.compute_type, param_offload,
                                               *param_pool_, *device_->tracker()));
  } else {
    HOIST_ASSIGN_OR_RETURN(params_,
                           device_->Allocate(ParamBufferBytes(plan_, options_), Category::kParam));
  }
  persistent_offset_.assign(static_cast<size_t>(n), -1);
  int64_t persistent = 0;
  for (int u = 0; u < n; ++u) {
    if (IsPersistentUnit(plan_.unit(u), options_)) {
      persistent_offset_[static_cast<size_t>(u)] = persistent;
      persistent += plan_.unit(u).padded;
    }
  }
  if (persistent > 0) {
    HOIST_ASSIGN_OR_RETURN(
        persistent_, device_->Allocate(PersistentBufferBytes(plan_, options_), Category::kParam));
  }
  for (int u = 0; u < n && param_shards_ != nullptr; ++u) {
    HOIST_CHECK_EQ(param_shards_->on_nvme(u), book_.on_nvme(u)) << "unit " << u;
  }
  if (param_shards_ != nullptr && !backend_->OperatesOnHostMemory()) {
    // The shards are host memory the device's ops and collectives cannot take: each goes up
    // through this buffer for its gather, and comes down through it after an update.
    HOIST_ASSIGN_OR_RETURN(param_stage_,
                           device_->Allocate(ParamStagingBytes(plan_, options_), Category::kParam));
    HOIST_ASSIGN_OR_RETURN(param_uploaded_, backend_->CreateEvent());
  }
  if (param_stage_.data() != nullptr ||
      (!options_.frozen && options_.offload_optimizer.place != Placement::kDevice &&
       !backend_->OperatesOnHostMemory())) {
    HOIST_ASSIGN_OR_RETURN(compute_mark_, backend_->CreateEvent());
  }
  shard_held_.assign(static_cast<size_t>(n), 0);
  work_grads_.resize(static_cast<size_t>(n));
  acquired_params_.assign(static_cast<size_t>(n), nullptr);
  gathers_.resize(static_cast<size_t>(n));
  if (options_.frozen) return Status::Ok();  // the weights alone
  HOIST_ASSIGN_OR_RETURN(grads_,
                         device_->Allocate(GradBufferBytes(plan_, options_), Category::kGrad));
  const OptimizerOffload& offload = options_.offload_optimizer;
  if (offload.place != Placement::kDevice) {
    offload::PinnedHostPoolOptions pool_options;
    pool_options.lock_pages = offload.pin_memory;
    pool_ = std::make_unique<offload::PinnedHostPool>(*device_->tracker(), pool_options);
  }
  // Optimizer states in host memory the backend cannot reach (a GPU's) are updated by the CPU.
  host_update_ = offload.place != Placement::kDevice && !backend_->OperatesOnHostMemory();
  if (host_update_) {
    host_ops_device_ = std::make_unique<CpuDevice>(Place::kHost, device_->tracker());
    host_backend_ = std::make_unique<kernels::CpuBackend>(host_ops_device_.get());
  }
  HOIST_ASSIGN_OR_RETURN(
      states_, OptimizerStates::Create(state_plan_, options_, *device_, pool_.get(), *backend_,
                                       host_backend_.get()));
  HOIST_ASSIGN_OR_RETURN(norm_, device_->Allocate(EngineWorkspaceBytes(), Category::kWorkspace));
  if (host_update_) {
    // The host update's buffers: the offloaded part's owned gradients, and two slots of the
    // largest owned range for the updated 16-bit copy.
    HOIST_ASSIGN_OR_RETURN(host_grads_,
                           pool_->Allocate(HostGradBytes(state_plan_, options_), Category::kGrad));
    host_grad_at_.assign(static_cast<size_t>(n), -1);
    grads_down_.resize(static_cast<size_t>(n));
    grads_queued_.assign(static_cast<size_t>(n), 0);
    sent_down_.assign(static_cast<size_t>(n), 0);
    int64_t at = 0;
    for (int u = 0; u < n; ++u) {
      if (!host_part(u) || state_plan_.unit(u).owned_real == 0) continue;
      host_grad_at_[static_cast<size_t>(u)] = at;
      at += state_plan_.unit(u).owned_real * static_cast<int64_t>(csize_);
      HOIST_ASSIGN_OR_RETURN(grads_down_[static_cast<size_t>(u)], backend_->CreateEvent());
    }
    HOIST_CHECK_LE(at, host_grads_.size_bytes());
    // A copy from device memory into pageable memory (for the driver, mlock'd pages are) would
    // hold the host until it is done, the backward with it: the gradients then come down at
    // Step. Without a driver that pins (the CPU standing for an accelerator) the setting decides.
    early_downloads_ = offload::PinnedHostPool::DriverPins()
                           ? host_grads_.driver_pinned()
                           : options_.offload_optimizer.pin_memory;
    const int64_t bytes = HostUpdateStagingBytes(state_plan_, options_);
    for (int slot = 0; slot < HostUpdateStagingBuffers(options_); ++slot) {
      HOIST_ASSIGN_OR_RETURN(stage_copy_[slot], pool_->Allocate(bytes, Category::kOptimizer));
      HOIST_ASSIGN_OR_RETURN(copied_up_[slot], backend_->CreateEvent());
    }
    HOIST_ASSIGN_OR_RETURN(uploaded_, backend_->CreateEvent());
  }
  return Status::Ok();
}

void ZeroEngine::Fail(const Status& status) {
  if (status_.ok() && !status.ok()) status_ = status;
}

void* ZeroEngine::whole_params(int unit) const {
  if (options_.stage < 3) {
    return ElementPtr(params_.data(), options_.compute_type, plan_.unit(unit).full_offset);
  }
  const int64_t offset = persistent_offset_[static_cast<size_t>(unit)];
  return offset < 0 ? nullptr : ElementPtr(persistent_.data(), options_.compute_type, offset);
}

void* ZeroEngine::whole_grads(int unit) {
  if (options_.stage >= 2) return nullptr;
  return ElementPtr(grads_.data(), options_.compute_type, plan_.unit(unit).full_offset);
}

float* ZeroEngine::master(int unit) const {
  if (float* separate = states_->master(unit); separate != nullptr) return separate;
  // fp32 on the device: the compute copy is the master copy.
  if (options_.stage == 3) return params_.as<float>() + plan_.unit(unit).shard_offset;
  return params_.as<float>() + plan_.unit(unit).full_offset + state_plan_.unit(unit).owned_begin;
}

Status ZeroEngine::StoreFromHost(void* dst, DType type, const float* src, int64_t n) {
  if (n == 0) return Status::Ok();
  // The same path on every backend, the CPU's included, so that the CPU tests run what a GPU
  // runs (kernels::cpu::FromFloat rounds as every backend's Cast does).
  const int64_t bytes = n * static_cast<int64_t>(DTypeSize(type));
  std::vector<char> rounded;
  const void* host = src;
  if (type != DType::kFloat32) {
    rounded.resize(static_cast<size_t>(bytes));
    kernels::cpu::FromFloat(src, rounded.data(), type, n);
    host = rounded.data();
  }
  HOIST_RETURN_IF_ERROR(
      backend_->Copy(dst, host, bytes, kernels::CopyDirection::kHostToDevice, stream()));
  return Sync();  // `rounded` and the caller's `src` go after this
}

Status ZeroEngine::Initialize(const std::function<void(int unit, float* out)>& fill) {
  // The whole unit, of which the engine takes the ranges it keeps.
  std::vector<float> whole;
  return Initialize([&](int unit, int64_t begin, int64_t count, float* out) {
    whole.assign(static_cast<size_t>(plan_.unit(unit).padded), 0.0f);
    fill(unit, whole.data());
    std::copy(whole.begin() + begin, whole.begin() + begin + count, out);
  });
}

Status ZeroEngine::Initialize(const RangeFill& fill) {
  const DType type = options_.compute_type;
  // The weights change: a gather prefetched and not used would hold the old ones (and its
  // upload would read a shard being rewritten).
  HOIST_RETURN_IF_ERROR(DropPrefetchedGathers());
  // The part of the current unit this rank keeps, [first, first + values.size()) in the unit's
  // coordinates: the whole unit where it keeps a whole copy, else its shard of the weights
  // (stage 3) and of the master weights. `values` is host memory that the next unit refills:
  // the copies are waited for before that.
  std::vector<float> values;
  int64_t first = 0;
  auto at = [&](int64_t x) { return values.data() + (x - first); };
  auto init_unit = [&](int u, bool to_master) -> Status {
    const UnitPartition& part = plan_.unit(u);
    const UnitPartition& owned = state_plan_.unit(u);
    void* whole = whole_params(u);
    int64_t end = part.padded;
    first = 0;
    if (whole == nullptr) {
      first = owned.owned_begin;
      end = owned.owned_begin + owned.owned_real;
      if (options_.stage == 3) {
        first = std::min(first, part.owned_begin);
        end = std::max(end, part.owned_begin + part.shard);
      }
    }
    values.assign(static_cast<size_t>(end - first), 0.0f);
    fill(u, first, end - first, values.data());
    if (whole != nullptr) {
      HOIST_RETURN_IF_ERROR(StoreFromHost(whole, type, values.data(), part.padded));
    }
    // The master weights, where they are an array of their own (not the compute copy).
    if (to_master && states_ != nullptr && states_->master(u) != nullptr) {
      HOIST_RETURN_IF_ERROR(StateCopy(master(u), at(owned.owned_begin),
                                      owned.owned_real * static_cast<int64_t>(sizeof(float)),
                                      /*to_host=*/false, u));
    }
    if (options_.stage == 3) {
      // Ended whatever the store returned: a write left open would hold the staging.
      const Status stored =
          StoreFromHost(BeginOwnedWrite(u), type, at(part.owned_begin), part.shard);
      EndOwnedWrite(u);  // waits for the stream: the shard's store may hand it to another thread
      HOIST_RETURN_IF_ERROR(stored);
    }
    return Sync();
  };
  step_count_ = 0;
  if (swapper() == nullptr) {
    for (int u = 0; u < plan_.num_units(); ++u) HOIST_RETURN_IF_ERROR(init_unit(u, true));
    if (options_.frozen)
      return param_shards_ == nullptr ? Status::Ok() : AgreeOnFailure(FinishOwnedWrites());
    HOIST_RETURN_IF_ERROR(states_->ZeroMoments([this] { return Sync(); }));
    if (param_shards_ == nullptr) return Status::Ok();
    return AgreeOnFailure(FinishOwnedWrites());
  }
  // NVMe: the master weights go straight to the file, a sub-group at a time. Units are visited
  // in order (the shard keeps unit order), each filled once even when it spans sub-groups.
  int filled = -1;
  Status written = swapper()->ForEachSubGroupView(
      offload::StateSwapper::Access::kWrite,
      [&](int64_t, std::span<const offload::SwapPiece> pieces) {
        const int64_t begin = pieces[0].first, count = pieces[0].count;
        float* master = pieces[0].floats();
        std::memset(master, 0, static_cast<size_t>(pieces[0].bytes()));
        states_->ZeroSwappedMoments(pieces);
        for (int u = 0; u < plan_.num_units(); ++u) {
          const UnitPartition& owned = state_plan_.unit(u);
          const int64_t lo = std::max(begin, owned.shard_offset);
          const int64_t hi = std::min(begin + count, owned.shard_offset + owned.shard);
          if (lo >= hi) continue;
          if (u != filled) {
            HOIST_RETURN_IF_ERROR(init_unit(u, false));
            filled = u;
          }
          const int64_t real_hi = std::min(hi, owned.shard_offset + owned.owned_real);
          if (real_hi > lo) {
            std::memcpy(master + (lo - begin), at(owned.owned_begin + (lo - owned.shard_offset)),
                        static_cast<size_t>(real_hi - lo) * sizeof(float));
          }
        }
        return Status::Ok();
      });
  Status stored = FinishOwnedWrites();
  return AgreeOnFailure(written.ok() ? stored : written);
}

Status ZeroEngine::AgreeOnDeferredErrors() {
  if (param_shards_ == nullptr) return Status::Ok();
  return AgreeOnFailure(param_shards_->TakeDeferredError());
}

StatusOr<Buffer> ZeroEngine::AllocateTransient(int64_t bytes, Category category,
                                               const std::string& what, const std::string& advice) {
  StatusOr<Buffer> buffer = device_->Allocate(bytes, category);
  if (buffer.ok()) return buffer;
  return Status(buffer.status().code(),
                "ZeRO stage " + std::to_string(options_.stage) + ", " + what + ": " +
                    buffer.status().message() +
                    ". To make room: " + (advice.empty() ? "" : advice + " ") + kMakeRoom);
}

Status ZeroEngine::Sync() const {
  // The stream may wait on collectives: those are waited for first, with their deadline.
  const Status settled = Settle();
  const Status synced = backend_->compute_stream().Synchronize();
  return settled.ok() ? synced : settled;
}

kernels::CopyDirection ZeroEngine::StateToModel() const {
  return options_.offload_optimizer.place == Placement::kDevice
             ? kernels::CopyDirection::kDeviceToDevice
             : kernels::CopyDirection::kHostToDevice;
}

Status ZeroEngine::AgreeOnFailure(const Status& local) const {
  // The agreement is a host collective, which waits for the compute stream on the host: the
  // collectives the stream waits on are waited for first, within their timeout.
  const Status settled = Settle();
  return comm::AgreeOnStatus(*comm_, local.ok() ? settled : local);
}

ModelStateBytes ZeroEngine::model_state_bytes() const {
  return ModelStateBytesFor(plan_, state_plan_, options_);
}

OffloadStats ZeroEngine::offload_stats() const {
  OffloadStats stats = offload_stats_;
  if (param_shards_ != nullptr) {
    stats.nvme_read_bytes += param_shards_->stats().nvme_read_bytes;
    stats.nvme_write_bytes += param_shards_->stats().nvme_write_bytes;
  }
  return stats;
}

}  // namespace hoist::zero
