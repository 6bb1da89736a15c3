// ZeroEngine's passes: what the model's forward and backward calls (ParamStore) gather,
// prefetch, hold and reduce when, the reductions drained and settled, and the weights gathered
// again after a step.
#include <algorithm>
#include <memory>
#include <vector>

#include "core/check.h"
#include "zero/memory_estimate.h"
#include "zero/zero_engine.h"
#include "zero/zero_engine_pending.h"

namespace hoist::zero {

namespace {

// What frees device memory for the gradient reduction's buffers.
constexpr const char* kReduceAdvice =
    "lower zero_optimization.reduce_bucket_size or turn overlap_comm off, or";

}  // namespace

Status ZeroEngine::StartGather(int unit) {
  const UnitPartition& part = plan_.unit(unit);
  auto pending = std::make_unique<Pending>();
  pending->unit = unit;
  HOIST_ASSIGN_OR_RETURN(
      pending->gathered,
      AllocateTransient(GatheredUnitBytes(part, options_), Category::kParam,
                        "gathering parameter unit " + plan_.spec(unit).name + " (stage 3)",
                        "lower zero_optimization.stage3_max_live_parameters or "
                        "stage3_prefetch_bucket_size, or"));
  const void* shard;
  if (param_shards_ != nullptr) {
    shard = param_shards_->Acquire(unit);  // given back by EndShardUse
    shard_held_[static_cast<size_t>(unit)] = 1;
    offload_stats_.from_host_bytes += part.shard * static_cast<int64_t>(csize_);
    StatusOr<const void*> uploaded = UploadShard(unit, shard);
    if (!uploaded.ok()) {
      (void)EndShardUse(unit);
      return uploaded.status();
    }
    shard = *uploaded;
  } else {
    shard = ElementPtr(params_.data(), options_.compute_type, part.shard_offset);
  }
  // The collective writes the gathered buffer after its allocation's fill, and reads a shard the
  // step wrote or the upload copied, on the compute and copy streams: ordered there, not by the
  // host.
  Status ordered = comm_->OrderAfter(stream());
  if (ordered.ok() && param_stage_.data() != nullptr) {
    ordered = comm_->OrderAfter(backend_->copy_stream());
  }
  if (!ordered.ok()) {
    if (param_shards_ != nullptr) (void)EndShardUse(unit);
    return ordered;
  }
  pending->handle =
      comm_->AllGatherAsync(shard, pending->gathered.data(), part.shard, options_.compute_type);
  book_.Started(unit);
  gathers_[static_cast<size_t>(unit)] = std::move(pending);
  return Status::Ok();
}

StatusOr<const void*> ZeroEngine::UploadShard(int unit, const void* shard) {
  if (param_stage_.data() == nullptr) return shard;
  HOIST_CHECK(open_write_unit_ < 0 && param_write_unit_ < 0)
      << "a gather while an updated shard is being written";
  HOIST_RETURN_IF_ERROR(FreeParamStage());
  // On the copy stream, after the compute stream's work so far (a host-staged gather's copy
  // out of the staging runs there).
  const Stream& copy = backend_->copy_stream();
  HOIST_RETURN_IF_ERROR(compute_mark_->Record(stream()));
  HOIST_RETURN_IF_ERROR(copy.WaitEvent(*compute_mark_));
  HOIST_RETURN_IF_ERROR(backend_->Copy(param_stage_.data(), shard,
                                       plan_.unit(unit).shard * static_cast<int64_t>(csize_),
                                       kernels::CopyDirection::kHostToDevice, copy));
  if (const Status recorded = param_uploaded_->Record(copy); !recorded.ok()) {
    // No event to wait on: the copy is waited for here, and the shard is free after.
    (void)copy.Synchronize();
    return recorded;
  }
  book_.Staged(unit);
  return static_cast<const void*>(param_stage_.data());
}

Status ZeroEngine::EndShardUse(int unit) {
  const auto u = static_cast<size_t>(unit);
  if (!shard_held_[u]) return Status::Ok();
  Status uploaded = Status::Ok();
  if (book_.staged_unit() == unit) {
    uploaded = param_uploaded_->Synchronize();
    book_.Unstaged(unit);
  }
  shard_held_[u] = 0;
  param_shards_->Release(unit);
  return uploaded;
}

Status ZeroEngine::FreeParamStage() {
  const int unit = book_.staged_unit();
  if (unit < 0) return Status::Ok();
  Pending* gather = gathers_[static_cast<size_t>(unit)].get();
  const Status gathered = gather != nullptr ? FinishPending(*gather) : Status::Ok();
  const Status ended = EndShardUse(unit);
  return gathered.ok() ? ended : gathered;
}

Status ZeroEngine::DropPrefetchedGathers() {
  Status first = Status::Ok();
  for (int u : book_.PrefetchedNotHeld()) {
    const auto at = static_cast<size_t>(u);
    Status status = FinishPending(*gathers_[at]);
    if (param_shards_ != nullptr) {
      const Status ended = EndShardUse(u);
      if (status.ok()) status = ended;
    }
    if (first.ok()) first = status;
    book_.Dropped(u);
    gathers_[at].reset();  // back to the device in the stream's order
  }
  return first;
}

Status ZeroEngine::FinishPending(Pending& pending) {
  if (pending.done) return Status::Ok();
  pending.done = true;
  Status status = pending.handle->Wait();
  pending.handle.reset();
  return status;
}

// The ParamStore calls below gather, prefetch, hold and free by GatherBook's rules, which the
// memory estimate (class Replay in zero/memory_estimate.cc) replays to predict the bytes; its
// tests compare it with the tracker to the byte. The reductions' buffers follow ReleaseGrads and
// DrainReductions, which Replay mirrors.
StatusOr<const void*> ZeroEngine::AcquireParams(int unit) {
  const auto u = static_cast<size_t>(unit);
  if (!book_.Hold(unit)) return acquired_params_[u];
  const void* source = whole_params(unit);
  if (!status_.ok()) return status_;
  if (source == nullptr) {  // stage 3, sharded: gather it (unless a prefetch already started)
    if (gathers_[u] == nullptr) Fail(StartGather(unit));
    if (!status_.ok()) return status_;
    Fail(FinishPending(*gathers_[u]));
    if (param_shards_ != nullptr) Fail(EndShardUse(unit));
    source = gathers_[u]->gathered.data();
  }
  acquired_params_[u] = source;
  if (!status_.ok()) return status_;
  return acquired_params_[u];
}

void ZeroEngine::ReleaseParams(int unit) {
  const auto u = static_cast<size_t>(unit);
  if (!book_.Unhold(unit)) return;
  acquired_params_[u] = nullptr;
  // The model's ops on the stream may still read the gathered unit: the device takes its memory
  // back in the stream's order (Device), and the gather was waited for at AcquireParams (unless
  // the engine had failed by then: its shard is given back after it here).
  if (gathers_[u] != nullptr) {
    if (param_shards_ != nullptr && shard_held_[u]) {
      (void)FinishPending(*gathers_[u]);
      (void)EndShardUse(unit);
    }
    book_.Dropped(unit);
    gathers_[u].reset();
  }
}

void ZeroEngine::Prefetch(int unit) {
  if (!status_.ok()) return;
  switch (book_.PrefetchAction(unit)) {
    case GatherBook::Prefetch::kNothing: return;
    case GatherBook::Prefetch::kReadAhead:
      // Bring the shard in from NVMe in the background; the gather starts at AcquireParams.
      param_shards_->Prefetch(unit);
      return;
    case GatherBook::Prefetch::kGather: Fail(StartGather(unit)); return;
  }
}

StatusOr<float*> ZeroEngine::AcquireGrads(int unit) {
  const auto u = static_cast<size_t>(unit);
  if (options_.frozen) {
    Fail(FailedPreconditionError("the gradient of unit " + plan_.spec(unit).name +
                                 " was asked of frozen weights (they get no gradients)"));
    return status_;
  }
  HOIST_CHECK(work_grads_[u].data() == nullptr)
      << "gradients of unit " << unit << " acquired twice in one micro-batch";
  if (!status_.ok()) return status_;
  if (!UsesWorkingGrads(options_)) {
    // Accumulates in place across micro-batches: the host writes it, after a download of the
    // last step's value is done.
    if (host_update_ && grads_queued_[u]) {
      Fail(AwaitGradDownload(unit));
      Fail(Sync());
      if (!status_.ok()) return status_;
    }
    return static_cast<float*>(whole_grads(unit));
  }
  StatusOr<Buffer> work =
      AllocateTransient(WorkingGradBytes(plan_.unit(unit)), Category::kGrad,
                        "the fp32 working gradient of unit " + plan_.spec(unit).name, "");
  if (!work.ok()) {
    Fail(work.status());
    return status_;
  }
  work_grads_[u] = std::move(work).value();
  return work_grads_[u].as<float>();
}

void ZeroEngine::ReleaseGrads(int unit) {
  const auto u = static_cast<size_t>(unit);
  const UnitPartition& part = plan_.unit(unit);
  const DType type = options_.compute_type;
  if (!status_.ok()) {
    (void)Sync();  // queued ops may still write the working gradient
    work_grads_[u] = Buffer();
    return;
  }
  if (options_.stage < 2) {
    if (type != DType::kFloat32) {
      Fail(AwaitGradDownload(unit));
      Fail(backend_->Accumulate(whole_grads(unit), type, work_grads_[u].data(), DType::kFloat32,
                                1.0f, part.size, stream()));
      work_grads_[u] = Buffer();  // back in the stream's order, after the accumulation
    }
    return;
  }
  // Stages 2/3: reduce the unit's gradient into its owners' shards now.
  auto pending = std::make_unique<Pending>();
  pending->unit = unit;
  pending->last = boundary_;
  const DType wire = options_.comm_type;
  const int64_t send_bytes = ReductionSendBytes(part, options_);
  if (send_bytes == 0) {  // fp32 on the wire: the working gradient itself, once it is written
    pending->send = std::move(work_grads_[u]);
  } else {
    StatusOr<Buffer> send =
        AllocateTransient(send_bytes, Category::kComm,
                          "reducing the gradient of unit " + plan_.spec(unit).name, kReduceAdvice);
    if (!send.ok()) {
      Fail(send.status());
      work_grads_[u] = Buffer();
      return;
    }
    pending->send = std::move(send).value();
    Fail(backend_->Cast(pending->send.data(), wire, work_grads_[u].data(), DType::kFloat32,
                        part.padded, stream()));
    work_grads_[u] = Buffer();  // back in the stream's order, after the cast
  }
  if (options_.reduce_scatter) {
    StatusOr<Buffer> recv = AllocateTransient(
        ReductionRecvBytes(part, options_), Category::kComm,
        "the reduced gradient shard of unit " + plan_.spec(unit).name, kReduceAdvice);
    if (!recv.ok()) {
      Fail(recv.status());
      return;
    }
    pending->recv = std::move(recv).value();
  }
  // The collective reads the gradient the stream wrote and writes a buffer the stream filled:
  // ordered there, so that the host goes on to the next unit's backward while this unit's
  // reduction waits for its gradient (overlap_comm).
  Fail(comm_->OrderAfter(stream()));
  if (options_.reduce_scatter) {
    pending->handle = comm_->ReduceScatterAsync(pending->send.data(), pending->recv.data(),
                                                part.shard, wire, comm::ReduceOp::kAvg);
    pending->result = pending->recv.data();
  } else {
    pending->handle =
        comm_->AllReduceAsync(pending->send.data(), part.padded, wire, comm::ReduceOp::kAvg);
    pending->result = ElementPtr(pending->send.data(), wire, part.owned_begin);
  }
  reductions_.Push(unit, std::move(pending));
  Fail(DrainReductions(ReductionsKeptElements(options_)));
}

Status ZeroEngine::DrainReductions(int64_t keep_elements) {
  Status first = SettleDone();
  while (auto due = reductions_.PopDue(keep_elements)) {
    const int u = due->unit;
    std::unique_ptr<Pending> pending = std::move(due->payload);
    const UnitPartition& part = plan_.unit(u);
    // The accumulation waits for the reduction on the stream, not on the host (and for a
    // download that still reads the shard's last value).
    Status status = pending->handle->StreamWait(stream());
    // (Only a unit reduced again after the boundary's pass has a download still queued.)
    if (status.ok()) status = AwaitGradDownload(u);
    if (status.ok()) {
      void* shard = ElementPtr(grads_.data(), options_.compute_type, part.shard_offset);
      status = backend_->Accumulate(shard, options_.compute_type, pending->result,
                                    options_.comm_type, 1.0f, part.shard, stream());
    }
    // The step's last backward: the unit's owned gradients are final, and go down to the host
    // optimizer on the copy stream while the backward goes on.
    if (status.ok() && pending->last && boundary_ && early_downloads_ &&
        host_grad_at_[static_cast<size_t>(u)] >= 0) {
      status = QueueGradDownload(u);
    }
    if (!status.ok()) {
      if (first.ok()) first = status;
      // The stream may not wait for the collective: the host does, before its buffers go.
      (void)pending->handle->Wait();
    }
    // Waited for on the host by the next Sync (a stream wait has no deadline). The reduction's
    // buffers go back in the stream's order: after the accumulation, which is after the
    // collective.
    settling_.push_back(std::move(pending->handle));
  }
  return first;
}

Status ZeroEngine::DrainAndSettle() {
  const Status drained = DrainReductions(0);
  const Status settled = Settle();
  return drained.ok() ? settled : drained;
}

Status ZeroEngine::SettleDone() {
  Status first = Status::Ok();
  std::erase_if(settling_, [&](comm::CommHandle& handle) {
    if (!handle->Done()) return false;
    const Status status = handle->Wait();
    if (!status.ok() && first.ok()) first = status;
    return true;
  });
  return first;
}

Status ZeroEngine::Settle() const {
  Status first = settle_first_ != nullptr ? settle_first_->Settle() : Status::Ok();
  for (comm::CommHandle& handle : settling_) {
    const Status status = handle->Wait();
    if (!status.ok() && first.ok()) first = status;
  }
  settling_.clear();
  return first;
}

Status ZeroEngine::ZeroGrads() {
  if (options_.frozen) return FailedPreconditionError("ZeroGrads on frozen weights");
  boundary_ = false;
  HOIST_RETURN_IF_ERROR(DrainAndSettle());
  // After the downloads of the last step's gradients (queued, perhaps, for a step that
  // overflowed and did not wait for them).
  for (int u = 0; u < plan_.num_units(); ++u) HOIST_RETURN_IF_ERROR(AwaitGradDownload(u));
  HOIST_RETURN_IF_ERROR(backend_->Zero(grads_.data(), grads_.bytes(), stream()));
  HOIST_RETURN_IF_ERROR(Sync());  // the model adds to them from the host
  return status_;
}

Status ZeroEngine::ReduceFullGrads() {
  if (comm_->world_size() == 1) return Status::Ok();
  const DType type = options_.compute_type, wire = options_.comm_type;
  const int64_t total = plan_.total_padded();
  const int64_t bucket = options_.reduce_bucket_size;
  HOIST_RETURN_IF_ERROR(comm_->OrderAfter(stream()));  // the backward wrote them
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
  const int64_t chunk = AllReduceStagingElements(plan_, options_);
  HOIST_ASSIGN_OR_RETURN(
      Buffer staging, AllocateTransient(chunk * static_cast<int64_t>(DTypeSize(wire)),
                                        Category::kComm, "the gradient all-reduce's staging buffer",
                                        "lower zero_optimization.reduce_bucket_size, or"));
  for (int64_t begin = 0; begin < total; begin += chunk) {
    const int64_t count = std::min(chunk, total - begin);
    void* grads = ElementPtr(grads_.data(), type, begin);
    HOIST_RETURN_IF_ERROR(backend_->Cast(staging.data(), wire, grads, type, count, stream()));
    HOIST_RETURN_IF_ERROR(comm_->OrderAfter(stream()));
    HOIST_RETURN_IF_ERROR(comm_->AllReduce(staging.data(), count, wire, comm::ReduceOp::kAvg));
    HOIST_RETURN_IF_ERROR(backend_->Cast(grads, type, staging.data(), wire, count, stream()));
  }
  return Sync();
}

Status ZeroEngine::GatherUpdatedParams() {
  // Stages 1/2 with one rank updated the whole copy in place; stage 3's persistent units are
  // refreshed from their shards even then.
  if (comm_->world_size() == 1 && options_.stage < 3) return Status::Ok();
  HOIST_RETURN_IF_ERROR(comm_->OrderAfter(stream()));  // the collectives read what the step wrote
  const DType type = options_.compute_type;
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
    if (param_shards_ != nullptr) {
      // The persistent unit's shard, read back where it is kept, gathered at once.
      shard_held_[static_cast<size_t>(u)] = 1;
      StatusOr<const void*> shard = UploadShard(u, param_shards_->Acquire(u));
      Status status = shard.status();
      if (status.ok()) status = comm_->OrderAfter(backend_->copy_stream());
      if (status.ok()) status = comm_->AllGather(*shard, whole, part.shard, type);
      const Status ended = EndShardUse(u);
      if (status.ok()) status = ended;
      if (first.ok()) first = status;
      continue;
    }
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

}  // namespace hoist::zero
