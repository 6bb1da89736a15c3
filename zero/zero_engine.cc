#include "zero/zero_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/logging.h"
#include "kernels/cpu/ops.h"
#include "zero/precision.h"

namespace hoist::zero {

// A collective in flight and the buffers it owns until it completes.
struct ZeroEngine::Pending {
  int unit = 0;
  comm::CommHandle handle;
  Buffer send;                   // stage 2/3 reductions: the unit's gradient in comm_type, padded
  Buffer recv;                   // reductions: this rank's reduced shard (reduce-scatter)
  const void* result = nullptr;  // where the reduced shard is (recv, or inside send)
  Buffer gathered;               // stage 3 gathers: the whole unit in compute type, padded
  bool done = false;
};

namespace {

Buffer MustAllocate(Device* device, int64_t bytes, Category category, const char* what) {
  StatusOr<Buffer> buffer = device->Allocate(bytes, category);
  HOIST_CHECK(buffer.ok()) << "cannot allocate " << bytes << " bytes for " << what << ": "
                           << buffer.status().ToString();
  return std::move(buffer).value();
}

}  // namespace

float ClipScale(double norm, float max_norm) {
  if (max_norm <= 0.0f) return 1.0f;
  return static_cast<float>(std::min(1.0, max_norm / (norm + 1e-6)));
}

ZeroEngine::ZeroEngine(const ZeroOptions& options, comm::Communicator* comm, Device* device,
                       PartitionPlan plan, PartitionPlan state_plan)
    : options_(options),
      comm_(comm),
      device_(device),
      plan_(std::move(plan)),
      state_plan_(std::move(state_plan)),
      csize_(comm::DataTypeSize(options.compute_type)) {}

ZeroEngine::~ZeroEngine() {
  // Collectives still in flight own buffers of ours: let them finish before the buffers go.
  for (auto& pending : reductions_) {
    if (pending->handle) (void)pending->handle->Wait();
  }
  for (auto& pending : gathers_) {
    if (pending && pending->handle) (void)pending->handle->Wait();
  }
}

StatusOr<std::unique_ptr<ZeroEngine>> ZeroEngine::Create(std::vector<UnitSpec> units,
                                                         const ZeroOptions& options,
                                                         comm::Communicator* comm, Device* device) {
  if (options.stage < 0 || options.stage > 3) {
    return InvalidArgumentError("zero_optimization.stage must be 0, 1, 2 or 3, not " +
                                std::to_string(options.stage));
  }
  if (options.reduce_bucket_size <= 0 || options.allgather_bucket_size <= 0) {
    return InvalidArgumentError("ZeRO bucket sizes must be positive");
  }
  HOIST_ASSIGN_OR_RETURN(PartitionPlan plan,
                         PartitionPlan::Build(units, comm->world_size(), comm->rank()));
  HOIST_ASSIGN_OR_RETURN(
      PartitionPlan state_plan,
      options.stage == 0
          ? PartitionPlan::Build(std::move(units), 1, 0)
          : PartitionPlan::Build(std::move(units), comm->world_size(), comm->rank()));
  std::unique_ptr<ZeroEngine> engine(
      new ZeroEngine(options, comm, device, std::move(plan), std::move(state_plan)));
  HOIST_RETURN_IF_ERROR(engine->Allocate());
  return engine;
}

Status ZeroEngine::Allocate() {
  const int n = plan_.num_units();
  const int stage = options_.stage;
  const bool mixed = options_.compute_type != DataType::kFloat32;
  const int64_t whole = plan_.total_padded(), shard = plan_.total_shard();
  const auto csize = static_cast<int64_t>(csize_);

  HOIST_ASSIGN_OR_RETURN(params_,
                         device_->Allocate((stage == 3 ? shard : whole) * csize, Category::kParam));
  persistent_offset_.assign(static_cast<size_t>(n), -1);
  if (stage == 3) {
    int64_t persistent = 0;
    for (int u = 0; u < n; ++u) {
      if (plan_.unit(u).size < options_.stage3_param_persistence_threshold) {
        persistent_offset_[static_cast<size_t>(u)] = persistent;
        persistent += plan_.unit(u).padded;
      }
    }
    if (persistent > 0) {
      HOIST_ASSIGN_OR_RETURN(persistent_, device_->Allocate(persistent * csize, Category::kParam));
    }
  }
  HOIST_ASSIGN_OR_RETURN(grads_,
                         device_->Allocate((stage >= 2 ? shard : whole) * csize, Category::kGrad));
  const int64_t state_bytes = state_plan_.total_shard() * int64_t{sizeof(float)};
  if (mixed) {
    HOIST_ASSIGN_OR_RETURN(master_, device_->Allocate(state_bytes, Category::kOptimizer));
  }
  HOIST_ASSIGN_OR_RETURN(m_, device_->Allocate(state_bytes, Category::kOptimizer));
  HOIST_ASSIGN_OR_RETURN(v_, device_->Allocate(state_bytes, Category::kOptimizer));

  work_params_.resize(static_cast<size_t>(n));
  work_grads_.resize(static_cast<size_t>(n));
  acquired_params_.assign(static_cast<size_t>(n), nullptr);
  acquire_count_.assign(static_cast<size_t>(n), 0);
  gathers_.resize(static_cast<size_t>(n));
  return Status::Ok();
}

void ZeroEngine::Fail(const Status& status) {
  if (status_.ok() && !status.ok()) status_ = status;
}

bool ZeroEngine::stage3_sharded(int unit) const {
  return options_.stage == 3 && persistent_offset_[static_cast<size_t>(unit)] < 0;
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
  const UnitPartition& owned = state_plan_.unit(unit);
  if (options_.compute_type != DataType::kFloat32) {
    return master_.as<float>() + owned.shard_offset;
  }
  // fp32: the compute copy is the master copy.
  if (options_.stage == 3) return params_.as<float>() + plan_.unit(unit).shard_offset;
  return params_.as<float>() + plan_.unit(unit).full_offset + owned.owned_begin;
}

Status ZeroEngine::Initialize(const std::function<void(int unit, float* out)>& fill) {
  const DataType type = options_.compute_type;
  const bool mixed = type != DataType::kFloat32;
  std::vector<float> values;
  for (int u = 0; u < plan_.num_units(); ++u) {
    const UnitPartition& part = plan_.unit(u);
    const UnitPartition& owned = state_plan_.unit(u);
    values.assign(static_cast<size_t>(part.padded), 0.0f);
    fill(u, values.data());
    if (mixed) {
      std::memcpy(master(u), values.data() + owned.owned_begin,
                  static_cast<size_t>(owned.owned_real) * sizeof(float));
    }
    if (void* whole = whole_params(u)) FromFloat(values.data(), whole, type, part.padded);
    if (options_.stage == 3) {
      FromFloat(values.data() + part.owned_begin,
                ElementPtr(params_.data(), type, part.shard_offset), type, part.shard);
    }
  }
  std::memset(m_.data(), 0, static_cast<size_t>(m_.bytes()));
  std::memset(v_.data(), 0, static_cast<size_t>(v_.bytes()));
  step_count_ = 0;
  return Status::Ok();
}

Status ZeroEngine::StartGather(int unit) {
  const UnitPartition& part = plan_.unit(unit);
  auto pending = std::make_unique<Pending>();
  pending->unit = unit;
  pending->gathered = MustAllocate(device_, part.padded * static_cast<int64_t>(csize_),
                                   Category::kParam, "a gathered parameter unit");
  pending->handle =
      comm_->AllGatherAsync(ElementPtr(params_.data(), options_.compute_type, part.shard_offset),
                            pending->gathered.data(), part.shard, options_.compute_type);
  live_gathered_ += part.padded;
  gathers_[static_cast<size_t>(unit)] = std::move(pending);
  return Status::Ok();
}

Status ZeroEngine::FinishPending(Pending& pending) {
  if (pending.done) return Status::Ok();
  pending.done = true;
  Status status = pending.handle->Wait();
  pending.handle.reset();
  return status;
}

const float* ZeroEngine::AcquireParams(int unit) {
  const auto u = static_cast<size_t>(unit);
  if (acquire_count_[u]++ > 0) return acquired_params_[u];
  const DataType type = options_.compute_type;
  const UnitPartition& part = plan_.unit(unit);
  const void* source = whole_params(unit);
  if (source == nullptr) {  // stage 3, sharded: gather it (unless a prefetch already started)
    if (gathers_[u] == nullptr) Fail(StartGather(unit));
    Fail(FinishPending(*gathers_[u]));
    source = gathers_[u]->gathered.data();
  }
  if (type == DataType::kFloat32) {
    acquired_params_[u] = static_cast<const float*>(source);
  } else {
    work_params_[u] = MustAllocate(device_, part.size * int64_t{sizeof(float)}, Category::kParam,
                                   "a unit's fp32 working weights");
    ToFloat(source, type, work_params_[u].as<float>(), part.size);
    acquired_params_[u] = work_params_[u].as<float>();
    if (gathers_[u] != nullptr) {  // the fp32 copy is all the model needs now
      gathers_[u]->gathered = Buffer();
    }
  }
  return acquired_params_[u];
}

void ZeroEngine::ReleaseParams(int unit) {
  const auto u = static_cast<size_t>(unit);
  HOIST_CHECK_GT(acquire_count_[u], 0) << "unit " << unit << " released but not acquired";
  if (--acquire_count_[u] > 0) return;
  acquired_params_[u] = nullptr;
  work_params_[u] = Buffer();
  if (gathers_[u] != nullptr) {
    live_gathered_ -= plan_.unit(unit).padded;
    gathers_[u].reset();
  }
}

void ZeroEngine::Prefetch(int unit) {
  if (!stage3_sharded(unit)) return;
  const auto u = static_cast<size_t>(unit);
  if (gathers_[u] != nullptr || acquire_count_[u] > 0) return;
  const int64_t padded = plan_.unit(unit).padded;
  if (padded > options_.stage3_prefetch_bucket_size) return;
  if (live_gathered_ + padded > options_.stage3_max_live_parameters) return;
  Fail(StartGather(unit));
}

float* ZeroEngine::AcquireGrads(int unit) {
  const auto u = static_cast<size_t>(unit);
  HOIST_CHECK(work_grads_[u].data() == nullptr)
      << "gradients of unit " << unit << " acquired twice in one micro-batch";
  if (options_.stage < 2 && options_.compute_type == DataType::kFloat32) {
    return static_cast<float*>(whole_grads(unit));  // accumulates in place across micro-batches
  }
  work_grads_[u] = MustAllocate(device_, plan_.unit(unit).padded * int64_t{sizeof(float)},
                                Category::kGrad, "a unit's fp32 working gradient");
  return work_grads_[u].as<float>();
}

void ZeroEngine::ReleaseGrads(int unit) {
  const auto u = static_cast<size_t>(unit);
  const UnitPartition& part = plan_.unit(unit);
  const DataType type = options_.compute_type;
  if (options_.stage < 2) {
    if (type != DataType::kFloat32) {
      AccumulateFloat(whole_grads(unit), type, work_grads_[u].as<float>(), part.size);
      work_grads_[u] = Buffer();
    }
    return;
  }
  // Stages 2/3: reduce the unit's gradient into its owners' shards now.
  auto pending = std::make_unique<Pending>();
  pending->unit = unit;
  const DataType wire = options_.comm_type;
  const auto wire_size = static_cast<int64_t>(comm::DataTypeSize(wire));
  if (wire == DataType::kFloat32) {
    pending->send = std::move(work_grads_[u]);
  } else {
    pending->send = MustAllocate(device_, part.padded * wire_size, Category::kComm,
                                 "a gradient reduction buffer");
    FromFloat(work_grads_[u].as<float>(), pending->send.data(), wire, part.padded);
    work_grads_[u] = Buffer();
  }
  if (options_.reduce_scatter) {
    pending->recv =
        MustAllocate(device_, part.shard * wire_size, Category::kComm, "a reduced gradient shard");
    pending->handle = comm_->ReduceScatterAsync(pending->send.data(), pending->recv.data(),
                                                part.shard, wire, comm::ReduceOp::kAvg);
    pending->result = pending->recv.data();
  } else {
    pending->handle =
        comm_->AllReduceAsync(pending->send.data(), part.padded, wire, comm::ReduceOp::kAvg);
    pending->result = ElementPtr(pending->send.data(), wire, part.owned_begin);
  }
  reductions_in_flight_ += part.padded;
  reductions_.push_back(std::move(pending));
  Fail(DrainReductions(options_.overlap_comm ? options_.reduce_bucket_size : 0));
}

Status ZeroEngine::DrainReductions(int64_t keep_elements) {
  Status first = Status::Ok();
  while (!reductions_.empty() && reductions_in_flight_ > keep_elements) {
    std::unique_ptr<Pending> pending = std::move(reductions_.front());
    reductions_.pop_front();
    const UnitPartition& part = plan_.unit(pending->unit);
    reductions_in_flight_ -= part.padded;
    Status status = FinishPending(*pending);
    if (!status.ok()) {
      if (first.ok()) first = status;
      continue;
    }
    void* shard = ElementPtr(grads_.data(), options_.compute_type, part.shard_offset);
    if (options_.comm_type == options_.compute_type) {
      Accumulate(shard, pending->result, options_.compute_type, 1.0f, part.shard);
    } else {
      std::vector<float> widened(static_cast<size_t>(part.shard));
      ToFloat(pending->result, options_.comm_type, widened.data(), part.shard);
      AccumulateFloat(shard, options_.compute_type, widened.data(), part.shard);
    }
  }
  return first;
}

Status ZeroEngine::ZeroGrads() {
  HOIST_RETURN_IF_ERROR(DrainReductions(0));
  std::memset(grads_.data(), 0, static_cast<size_t>(grads_.bytes()));
  return status_;
}

Status ZeroEngine::ReduceFullGrads() {
  if (comm_->world_size() == 1) return Status::Ok();
  const DataType type = options_.compute_type, wire = options_.comm_type;
  const int64_t total = plan_.total_padded();
  const int64_t bucket = options_.reduce_bucket_size;
  if (wire == type) {
    std::vector<comm::CommHandle> handles;
    for (int64_t begin = 0; begin < total; begin += bucket) {
      handles.push_back(comm_->AllReduceAsync(ElementPtr(grads_.data(), type, begin),
                                              std::min(bucket, total - begin), type,
                                              comm::ReduceOp::kAvg));
    }
    Status first = Status::Ok();
    for (auto& handle : handles) {
      Status status = handle->Wait();
      if (first.ok()) first = status;
    }
    return first;
  }
  // A different wire type: through a staging buffer, one bucket at a time.
  const int64_t chunk = std::min(bucket, total);
  Buffer staging = MustAllocate(device_, chunk * static_cast<int64_t>(comm::DataTypeSize(wire)),
                                Category::kComm, "a gradient all-reduce buffer");
  std::vector<float> wide(static_cast<size_t>(chunk));
  for (int64_t begin = 0; begin < total; begin += chunk) {
    const int64_t count = std::min(chunk, total - begin);
    void* grads = ElementPtr(grads_.data(), type, begin);
    ToFloat(grads, type, wide.data(), count);
    FromFloat(wide.data(), staging.data(), wire, count);
    HOIST_RETURN_IF_ERROR(comm_->AllReduce(staging.data(), count, wire, comm::ReduceOp::kAvg));
    ToFloat(staging.data(), wire, wide.data(), count);
    FromFloat(wide.data(), grads, type, count);
  }
  return Status::Ok();
}

Status ZeroEngine::GatherUpdatedParams() {
  // Stages 1/2 with one rank updated the whole copy in place; stage 3's persistent units are
  // refreshed from their shards even then.
  if (comm_->world_size() == 1 && options_.stage < 3) return Status::Ok();
  const DataType type = options_.compute_type;
  std::vector<comm::CommHandle> handles;
  int64_t in_flight = 0;
  Status first = Status::Ok();
  auto wait_all = [&] {
    for (auto& handle : handles) {
      Status status = handle->Wait();
      if (first.ok()) first = status;
    }
    handles.clear();
    in_flight = 0;
  };
  for (int u = 0; u < plan_.num_units(); ++u) {
    const UnitPartition& part = plan_.unit(u);
    void* whole = whole_params(u);
    if (whole == nullptr) continue;  // stage 3: sharded units stay sharded
    const void* send = options_.stage == 3 ? ElementPtr(params_.data(), type, part.shard_offset)
                                           : ElementPtr(whole, type, part.owned_begin);
    if (options_.stage == 0) continue;  // every rank updated everything
    if (in_flight > 0 && in_flight + part.padded > options_.allgather_bucket_size) wait_all();
    handles.push_back(comm_->AllGatherAsync(send, whole, part.shard, type));
    in_flight += part.padded;
  }
  wait_all();
  return first;
}

StatusOr<StepResult> ZeroEngine::Step(float lr, float loss_scale, float max_norm) {
  HOIST_RETURN_IF_ERROR(status_);
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  if (options_.stage >= 2) {
    HOIST_RETURN_IF_ERROR(DrainReductions(0));
  } else {
    HOIST_RETURN_IF_ERROR(ReduceFullGrads());
  }
  const DataType type = options_.compute_type;
  const float inv_scale = 1.0f / loss_scale;
  // This rank's owned gradients, in the compute type.
  auto owned_grads = [&](int u) -> const void* {
    if (options_.stage >= 2) return ElementPtr(grads_.data(), type, plan_.unit(u).shard_offset);
    return ElementPtr(whole_grads(u), type, state_plan_.unit(u).owned_begin);
  };

  double local = 0.0;
  for (int u = 0; u < plan_.num_units(); ++u) {
    local += ScaledSumOfSquares(owned_grads(u), type, inv_scale, state_plan_.unit(u).owned_real);
  }
  double total = local;
  if (state_plan_.world_size() > 1) {
    // Two fp32 words, the sum and its rounding error, keep the double's precision on the wire.
    float words[2] = {static_cast<float>(local), 0.0f};
    words[1] = static_cast<float>(local - static_cast<double>(words[0]));
    HOIST_RETURN_IF_ERROR(comm_->AllReduce(words, 2, DataType::kFloat32, comm::ReduceOp::kSum));
    total = static_cast<double>(words[0]) + static_cast<double>(words[1]);
  }
  StepResult result;
  result.grad_norm = std::sqrt(total);
  result.overflow = !std::isfinite(total);
  const auto reduced = Clock::now();
  result.reduce_s = std::chrono::duration<double>(reduced - started).count();
  if (result.overflow) return result;

  const float grad_scale = ClipScale(result.grad_norm, max_norm) * inv_scale;
  ++step_count_;
  const AdamWParams& adam = options_.adam;
  std::vector<float> widened;
  for (int u = 0; u < plan_.num_units(); ++u) {
    const UnitPartition& owned = state_plan_.unit(u);
    if (owned.owned_real == 0) continue;
    const float* grads;
    if (type == DataType::kFloat32) {
      grads = static_cast<const float*>(owned_grads(u));
    } else {
      widened.resize(static_cast<size_t>(owned.owned_real));
      ToFloat(owned_grads(u), type, widened.data(), owned.owned_real);
      grads = widened.data();
    }
    float* weights = master(u);
    float* m = m_.as<float>() + owned.shard_offset;
    float* v = v_.as<float>() + owned.shard_offset;
    const int64_t lo = owned.owned_begin, hi = owned.owned_begin + owned.owned_real;
    for (const ParamSegment& segment : state_plan_.spec(u).segments) {
      const int64_t begin = std::max(lo, segment.begin), end = std::min(hi, segment.end);
      if (begin >= end) continue;
      const int64_t at = begin - lo;
      kernels::cpu::AdamW(weights + at, grads + at, m + at, v + at,
                          static_cast<size_t>(end - begin), lr, adam.beta1, adam.beta2, adam.eps,
                          segment.decay ? adam.weight_decay : 0.0f, step_count_, grad_scale);
    }
    if (type != DataType::kFloat32) {
      void* compute = options_.stage == 3
                          ? ElementPtr(params_.data(), type, plan_.unit(u).shard_offset)
                          : ElementPtr(whole_params(u), type, owned.owned_begin);
      FromFloat(weights, compute, type, owned.owned_real);
    }
  }
  HOIST_RETURN_IF_ERROR(GatherUpdatedParams());
  result.optimizer_s = std::chrono::duration<double>(Clock::now() - reduced).count();
  return result;
}

StatusOr<std::vector<float>> ZeroEngine::GatherFullParams() {
  HOIST_RETURN_IF_ERROR(status_);
  std::vector<float> out;
  out.reserve(static_cast<size_t>(plan_.total_real()));
  std::vector<float> unit;
  for (int u = 0; u < plan_.num_units(); ++u) {
    const UnitPartition& owned = state_plan_.unit(u);
    unit.assign(static_cast<size_t>(owned.padded), 0.0f);
    if (state_plan_.world_size() == 1) {
      std::memcpy(unit.data(), master(u), static_cast<size_t>(owned.size) * sizeof(float));
    } else {
      std::vector<float> shard(static_cast<size_t>(owned.shard), 0.0f);
      std::memcpy(shard.data(), master(u), static_cast<size_t>(owned.owned_real) * sizeof(float));
      HOIST_RETURN_IF_ERROR(
          comm_->AllGather(shard.data(), unit.data(), owned.shard, DataType::kFloat32));
    }
    out.insert(out.end(), unit.begin(), unit.begin() + owned.size);
  }
  return out;
}

Status ZeroEngine::ReadState(float* master_out, float* m_out, float* v_out) const {
  for (int u = 0; u < plan_.num_units(); ++u) {
    const UnitPartition& owned = state_plan_.unit(u);
    float* dst = master_out + owned.shard_offset;
    std::memset(dst, 0, static_cast<size_t>(owned.shard) * sizeof(float));
    std::memcpy(dst, master(u), static_cast<size_t>(owned.owned_real) * sizeof(float));
  }
  std::memcpy(m_out, m_.data(), static_cast<size_t>(m_.bytes()));
  std::memcpy(v_out, v_.data(), static_cast<size_t>(v_.bytes()));
  return Status::Ok();
}

Status ZeroEngine::RestoreState(const float* master_in, const float* m_in, const float* v_in,
                                int64_t step_count) {
  const DataType type = options_.compute_type;
  for (int u = 0; u < plan_.num_units(); ++u) {
    const UnitPartition& owned = state_plan_.unit(u);
    float* weights = master(u);
    std::memcpy(weights, master_in + owned.shard_offset,
                static_cast<size_t>(owned.owned_real) * sizeof(float));
    if (type != DataType::kFloat32) {
      void* compute = options_.stage == 3
                          ? ElementPtr(params_.data(), type, plan_.unit(u).shard_offset)
                          : ElementPtr(whole_params(u), type, owned.owned_begin);
      FromFloat(weights, compute, type, owned.owned_real);
    }
  }
  std::memcpy(m_.data(), m_in, static_cast<size_t>(m_.bytes()));
  std::memcpy(v_.data(), v_in, static_cast<size_t>(v_.bytes()));
  step_count_ = step_count;
  return GatherUpdatedParams();
}

ModelStateBytes ZeroEngine::model_state_bytes() const {
  ModelStateBytes bytes;
  bytes.params = params_.bytes() + persistent_.bytes();
  bytes.grads = grads_.bytes();
  bytes.optimizer = master_.bytes() + m_.bytes() + v_.bytes();
  return bytes;
}

}  // namespace hoist::zero
