// ZeroEngine's optimizer step: the reductions finished, the global norm and the overflow check
// agreed by every rank, AdamW on the owned shard wherever its states live (device, host, or NVMe
// sub-group by sub-group), the compute-type copy written back, and the updated weights gathered.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <span>
#include <vector>

#include "comm/sum_over_ranks.h"
#include "zero/zero_engine.h"

namespace hoist::zero {

StatusOr<StepResult> ZeroEngine::Step(float lr, float loss_scale, float max_norm) {
  HOIST_RETURN_IF_ERROR(status_);
  if (options_.frozen) return FailedPreconditionError("an optimizer step on frozen weights");
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  // The weights change: a gather prefetched and not used would hold the old ones.
  HOIST_RETURN_IF_ERROR(DropPrefetchedGathers());
  // The host optimizer's gradients the last backward already sent down: the units whose
  // reductions it finished. Those still in flight (up to reduce_bucket_size with overlap_comm)
  // go down, again if they went before, as they are drained here.
  int64_t came_early = 0;  // elements
  const std::vector<char> reducing = reductions_.Reducing();
  for (size_t u = 0; u < grads_queued_.size(); ++u) {
    if (grads_queued_[u] && !reducing[u]) {
      came_early += state_plan_.unit(static_cast<int>(u)).owned_real;
    }
  }
  offload_stats_.to_host_during_backward_bytes += came_early * static_cast<int64_t>(csize_);
  if (options_.stage >= 2) {
    HOIST_RETURN_IF_ERROR(DrainAndSettle());
  } else {
    HOIST_RETURN_IF_ERROR(ReduceFullGrads());
  }
  // The rest start down now, while the norm is computed and agreed on.
  if (host_update_) HOIST_RETURN_IF_ERROR(QueueGradDownloads());
  // A parameter shard that could not be read during this step's passes was replaced by zeros:
  // the step is void, on every rank.
  HOIST_RETURN_IF_ERROR(AgreeOnDeferredErrors());
  const DType type = options_.compute_type;
  const float inv_scale = 1.0f / loss_scale;

  double* norm = norm_.as<double>();
  HOIST_RETURN_IF_ERROR(backend_->Zero(norm, sizeof(double), stream()));
  for (int u = 0; u < plan_.num_units(); ++u) {
    HOIST_RETURN_IF_ERROR(backend_->SumOfSquares(owned_grads(u), type, inv_scale,
                                                 state_plan_.unit(u).owned_real, norm, stream()));
  }
  double local = 0.0;
  HOIST_RETURN_IF_ERROR(backend_->Copy(&local, norm, sizeof(double),
                                       kernels::CopyDirection::kDeviceToHost, stream()));
  HOIST_RETURN_IF_ERROR(Sync());
  // Each rank's sum of squares over its shard (stage 0: every rank holds the whole gradient),
  // summed in float64 and the same everywhere.
  double total = local;
  if (state_plan_.world_size() > 1) {
    HOIST_ASSIGN_OR_RETURN(total, comm::SumOverRanks(*comm_, local));
  }
  StepResult result;
  result.grad_norm = std::sqrt(total);
  result.overflow = !std::isfinite(total);
  const auto reduced = Clock::now();
  result.reduce_s = std::chrono::duration<double>(reduced - started).count();
  if (result.overflow) return result;

  kernels::AdamWStepScalars h;
  h.lr = lr;
  h.beta1 = options_.adam.beta1;
  h.beta2 = options_.adam.beta2;
  h.eps = options_.adam.eps;
  h.grad_scale = ClipScale(result.grad_norm, max_norm) * inv_scale;
  h.step = ++step_count_;
  Status updated = Status::Ok();
  const auto update_started = Clock::now();
  const double wait_before = swapper() != nullptr ? swapper()->io_wait_seconds() : 0.0;
  const UpdatePath path = update_path();
  if (path == UpdatePath::kPipelined) {
    updated = HostUpdate(h);
  } else if (path == UpdatePath::kByUnit) {
    // (With a host update, in the order the gradients were sent down.)
    for (int u : UnitsBySentDown()) {
      const UnitPartition& owned = state_plan_.unit(u);
      if (owned.owned_real == 0) continue;
      void* compute = BeginOwnedWrite(u, host_writes(u));
      updated = UpdatePiece(u, 0, owned.owned_real, master(u), states_->moments(u), compute, h);
      EndOwnedWrite(u);
      if (!updated.ok()) break;
    }
    if (updated.ok()) updated = Sync();
  } else {
    updated = swapper()->ForEachSubGroupView(
        offload::StateSwapper::Access::kReadWrite,
        [&](int64_t, std::span<const offload::SwapPiece> pieces) {
          HOIST_RETURN_IF_ERROR(UpdateSubGroup(pieces, h));
          return Sync();  // the swapper writes the sub-group back once this returns
        });
    CloseOwnedWrite();
  }
  HOIST_RETURN_IF_ERROR(status_);
  // The other paths waited for each download they read (HostUpdate clears the flags itself).
  if (updated.ok() && path != UpdatePath::kPipelined) {
    std::fill(grads_queued_.begin(), grads_queued_.end(), 0);
  }
  if (param_shards_ != nullptr) {
    Status stored = FinishOwnedWrites();
    if (updated.ok()) updated = stored;
  }
  if (options_.offload_optimizer.place != Placement::kDevice) {
    const double update_s = std::chrono::duration<double>(Clock::now() - update_started).count();
    if (swapper() != nullptr) {
      offload_stats_.nvme_wait_s += swapper()->io_wait_seconds() - wait_before;
      offload_stats_.update_s += update_s - (swapper()->io_wait_seconds() - wait_before);
      offload_stats_.nvme_read_bytes = swapper()->bytes_read();
      offload_stats_.nvme_write_bytes = swapper()->bytes_written();
    } else {
      offload_stats_.update_s += update_s;
    }
    int64_t up = 0;  // of the offloaded part, what goes up to the device
    for (int u = 0; u < plan_.num_units(); ++u) {
      if (host_part(u) && !host_writes(u)) up += state_plan_.unit(u).owned_real;
    }
    offload_stats_.from_host_bytes += up * static_cast<int64_t>(csize_);
  }
  // An update that failed on one rank (an I/O fault, a host or device op) must stop every rank
  // here, not leave the others waiting in the next collective or training on diverged weights.
  HOIST_RETURN_IF_ERROR(AgreeOnFailure(updated));
  HOIST_RETURN_IF_ERROR(GatherUpdatedParams());
  // Persistent units read back for the gather.
  HOIST_RETURN_IF_ERROR(AgreeOnDeferredErrors());
  result.optimizer_s = std::chrono::duration<double>(Clock::now() - reduced).count();
  return result;
}

Status ZeroEngine::HostUpdate(const kernels::AdamWStepScalars& h) {
  const Stream& copy = backend_->copy_stream();
  const Status updated = HostUpdateUnits(h);
  // However it ended: what the compute stream does next comes after the copies queued so far
  // (the uploads it reads, the downloads of gradients it would overwrite), and the host buffers
  // are free once the copy stream is done.
  Status ordered = uploaded_->Record(copy);
  if (ordered.ok()) ordered = stream().WaitEvent(*uploaded_);
  const Status drained = copy.Synchronize();
  if (drained.ok()) std::fill(grads_queued_.begin(), grads_queued_.end(), 0);
  if (!updated.ok()) return updated;
  return ordered.ok() ? drained : ordered;
}

Status ZeroEngine::HostUpdateUnits(const kernels::AdamWStepScalars& h) {
  const DType type = options_.compute_type;
  const Stream& copy = backend_->copy_stream();
  const Stream& host = host_backend_->compute_stream();
  // Partial offload: the device part's update queued on the compute stream, where it runs while
  // the copy stream brings the offloaded part's gradients down and the CPU updates them.
  for (int u = 0; u < plan_.num_units(); ++u) {
    const UnitPartition& owned = state_plan_.unit(u);
    if (owned.owned_real == 0 || host_part(u)) continue;
    HOIST_RETURN_IF_ERROR(
        UpdatePiece(u, 0, owned.owned_real, master(u), states_->moments(u), owned_params(u), h));
  }
  // The offloaded units in the order their gradients were sent down (the backward's, for those
  // it sent), each as soon as they are; the i-th unit's 16-bit copy goes up from slot i % 2,
  // rewritten once the upload that last read it is done.
  int i = 0;
  for (int u : UnitsBySentDown()) {
    if (host_grad_at_[static_cast<size_t>(u)] < 0) continue;
    const UnitPartition& owned = state_plan_.unit(u);
    const int slot = i % 2;
    HOIST_RETURN_IF_ERROR(grads_down_[static_cast<size_t>(u)]->Synchronize());
    if (IsHalf(type) && i >= 2) HOIST_RETURN_IF_ERROR(copied_up_[slot]->Synchronize());
    // The whole owned range, the copy slot holding exactly its 16-bit copy.
    float* master_u = master(u);
    const StateMoments moments = states_->moments(u);
    void* copies = stage_copy_[slot].data();  // null in fp32
    if (options_.adam.eight_bit) {
      HOIST_RETURN_IF_ERROR(Update8bit(host_backend_.get(), host, u, 0, owned.owned_real, master_u,
                                       moments, host_grads(u), copies, 0, h));
    } else {
      const std::vector<kernels::AdamWTensorRef> pieces = AdamWPieces(
          u, 0, owned.owned_real, master_u, moments.m, moments.v, host_grads(u), copies, 0);
      HOIST_RETURN_IF_ERROR(host_backend_->AdamW(pieces, type, type, h, host));
    }
    HOIST_RETURN_IF_ERROR(host.Synchronize());
    // The new weights up: the rounded copy, or in fp32 the master's bits.
    const void* updated = IsHalf(type) ? static_cast<const void*>(copies) : master_u;
    HOIST_RETURN_IF_ERROR(backend_->Copy(owned_params(u), updated,
                                         owned.owned_real * static_cast<int64_t>(csize_),
                                         kernels::CopyDirection::kHostToDevice, copy));
    if (IsHalf(type)) HOIST_RETURN_IF_ERROR(copied_up_[slot]->Record(copy));
    ++i;
  }
  return Status::Ok();
}

std::vector<int> ZeroEngine::UnitsBySentDown() const {
  std::vector<int> order(static_cast<size_t>(plan_.num_units()));
  for (int u = 0; u < plan_.num_units(); ++u) order[static_cast<size_t>(u)] = u;
  if (sent_down_.empty()) return order;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return sent_down_[static_cast<size_t>(a)] < sent_down_[static_cast<size_t>(b)];
  });
  return order;
}

void* ZeroEngine::host_grads(int unit) const {
  const int64_t at = host_grad_at_[static_cast<size_t>(unit)];
  HOIST_CHECK_GE(at, 0) << "unit " << unit << " is not in the offloaded part";
  return static_cast<char*>(host_grads_.data()) + at;
}

Status ZeroEngine::QueueGradDownload(int unit) {
  const Stream& copy = backend_->copy_stream();
  const auto u = static_cast<size_t>(unit);
  const int64_t bytes = state_plan_.unit(unit).owned_real * static_cast<int64_t>(csize_);
  HOIST_RETURN_IF_ERROR(compute_mark_->Record(stream()));
  HOIST_RETURN_IF_ERROR(copy.WaitEvent(*compute_mark_));
  HOIST_RETURN_IF_ERROR(backend_->Copy(host_grads(unit), owned_grads(unit), bytes,
                                       kernels::CopyDirection::kDeviceToHost, copy));
  if (const Status recorded = grads_down_[u]->Record(copy); !recorded.ok()) {
    // No event to wait on: the copy is waited for here, and nothing reads the gradients after.
    (void)copy.Synchronize();
    return recorded;
  }
  grads_queued_[u] = 1;
  sent_down_[u] = ++downloads_;
  offload_stats_.to_host_bytes += bytes;
  return Status::Ok();
}

Status ZeroEngine::QueueGradDownloads() {
  for (int u = 0; u < plan_.num_units(); ++u) {
    const auto at = static_cast<size_t>(u);
    if (host_grad_at_[at] >= 0 && !grads_queued_[at]) HOIST_RETURN_IF_ERROR(QueueGradDownload(u));
  }
  return Status::Ok();
}

Status ZeroEngine::AwaitGradDownload(int unit) {
  const auto u = static_cast<size_t>(unit);
  if (grads_queued_.empty() || !grads_queued_[u]) return Status::Ok();
  HOIST_RETURN_IF_ERROR(stream().WaitEvent(*grads_down_[u]));
  grads_queued_[u] = 0;
  return Status::Ok();
}

std::vector<kernels::AdamWTensorRef> ZeroEngine::AdamWPieces(int unit, int64_t lo, int64_t hi,
                                                             float* master, float* m, float* v,
                                                             const void* grads, void* copies,
                                                             int64_t origin) const {
  const DType type = options_.compute_type;
  const int64_t base = state_plan_.unit(unit).owned_begin;  // unit coordinates of owned element 0
  std::vector<kernels::AdamWTensorRef> pieces;
  for (const ParamSegment& segment : state_plan_.spec(unit).segments) {
    const int64_t begin = std::max(base + lo, segment.begin);
    const int64_t end = std::min(base + hi, segment.end);
    if (begin >= end) continue;
    const int64_t at = begin - base;  // owned-range coordinates
    kernels::AdamWTensorRef& piece = pieces.emplace_back();
    piece.param = master + (at - lo);
    piece.m = m + (at - lo);
    piece.v = v + (at - lo);
    piece.grad = ElementPtr(grads, type, at - origin);
    piece.n = end - begin;
    if (IsHalf(type)) piece.copy = ElementPtr(copies, type, at - origin);
    piece.weight_decay = segment.decay ? options_.adam.weight_decay : 0.0f;
  }
  return pieces;
}

const void* ZeroEngine::owned_grads(int unit) {
  const DType type = options_.compute_type;
  if (options_.stage >= 2) return ElementPtr(grads_.data(), type, plan_.unit(unit).shard_offset);
  return ElementPtr(whole_grads(unit), type, state_plan_.unit(unit).owned_begin);
}

void* ZeroEngine::owned_params(int unit) {
  const DType type = options_.compute_type;
  if (options_.stage == 3) return ElementPtr(params_.data(), type, plan_.unit(unit).shard_offset);
  return ElementPtr(whole_params(unit), type, state_plan_.unit(unit).owned_begin);
}

Status ZeroEngine::Update8bit(kernels::Backend* ops, const Stream& ops_stream, int unit, int64_t lo,
                              int64_t hi, float* master, const StateMoments& moments,
                              const void* grads, void* copies, int64_t origin,
                              const kernels::AdamWStepScalars& h) {
  const DType type = options_.compute_type;
  if (!states_->eight_bit(unit)) {
    return ops->AdamW(
        AdamWPieces(unit, lo, hi, master, moments.m, moments.v, grads, copies, origin), type, type,
        h, ops_stream);
  }
  std::vector<kernels::AdamW8bitTensorRef> refs;
  for (const OwnedPieceFrom& piece : OwnedPiecesFrom(state_plan_, unit, lo, hi)) {
    kernels::AdamW8bitTensorRef& ref = refs.emplace_back();
    ref.param = master + (piece.begin - lo);
    ref.m = moments.qm + (piece.begin - lo);
    ref.v = moments.qv + (piece.begin - lo);
    ref.absmax_m = moments.absmax_m + piece.block;
    ref.absmax_v = moments.absmax_v + piece.block;
    ref.grad = ElementPtr(grads, type, piece.begin - origin);
    if (IsHalf(type)) ref.copy = ElementPtr(copies, type, piece.begin - origin);
    ref.n = piece.end - piece.begin;
    ref.weight_decay = piece.decay ? options_.adam.weight_decay : 0.0f;
  }
  return ops->AdamW8bit(refs, type, type, h, ops_stream);
}

Status ZeroEngine::UpdatePiece(int unit, int64_t lo, int64_t hi, float* master,
                               const StateMoments& moments, void* compute,
                               const kernels::AdamWStepScalars& h) {
  const DType type = options_.compute_type;
  const int64_t bytes = (hi - lo) * static_cast<int64_t>(csize_);
  // Owned element i's gradient and compute-type copy: in place; or for the host update, the
  // gradient in host_grads_ and the copy in the store's host buffer (host_writes) or the staging
  // slot 0 (which starts at owned element lo).
  const void* grads = owned_grads(unit);
  void* copies = compute;
  int64_t origin = 0;
  kernels::Backend* ops = backend_;
  const Stream* ops_stream = &stream();
  const bool host_update = host_update_ && host_part(unit);
  const bool by_host = host_writes(unit);  // `compute` is then the store's host buffer
  if (host_update) {
    // The gradients, queued down at the start of the step (or during the backward).
    HOIST_RETURN_IF_ERROR(grads_down_[static_cast<size_t>(unit)]->Synchronize());
    grads = ElementPtr(host_grads(unit), type, lo);
    copies = by_host ? ElementPtr(compute, type, lo) : stage_copy_[0].data();
    origin = lo;
    ops = host_backend_.get();
    ops_stream = &host_backend_->compute_stream();
  }
  if (options_.adam.eight_bit) {
    HOIST_RETURN_IF_ERROR(
        Update8bit(ops, *ops_stream, unit, lo, hi, master, moments, grads, copies, origin, h));
  } else {
    HOIST_RETURN_IF_ERROR(
        ops->AdamW(AdamWPieces(unit, lo, hi, master, moments.m, moments.v, grads, copies, origin),
                   type, type, h, *ops_stream));
  }
  if (by_host) {
    // Written in place but for fp32, whose copy is the master's bits; done when this returns.
    if (type == DType::kFloat32) {
      HOIST_RETURN_IF_ERROR(host_backend_->Copy(static_cast<float*>(compute) + lo, master,
                                                (hi - lo) * static_cast<int64_t>(sizeof(float)),
                                                kernels::CopyDirection::kHostToHost, *ops_stream));
    }
    return ops_stream->Synchronize();
  }
  if (host_update) {
    // The updated weights up: the rounded copy, or in fp32 the master's bits. The staging is the
    // next piece's once the copy is done.
    HOIST_RETURN_IF_ERROR(ops_stream->Synchronize());
    const void* updated = IsHalf(type) ? static_cast<const void*>(stage_copy_[0].data()) : master;
    HOIST_RETURN_IF_ERROR(backend_->Copy(ElementPtr(compute, type, lo), updated, bytes,
                                         kernels::CopyDirection::kHostToDevice, stream()));
    return Sync();
  }
  // fp32 with the master copy away from the model: the model's copy is the master's bits.
  float* model = static_cast<float*>(compute) + lo;
  if (type == DType::kFloat32 && model != master) {
    HOIST_RETURN_IF_ERROR(backend_->Copy(
        model, master, (hi - lo) * static_cast<int64_t>(sizeof(float)),
        host_part(unit) ? StateToModel() : kernels::CopyDirection::kDeviceToDevice, stream()));
  }
  return Status::Ok();
}

Status ZeroEngine::UpdateSubGroup(std::span<const offload::SwapPiece> pieces,
                                  const kernels::AdamWStepScalars& h) {
  float* master = pieces[0].floats();
  const int64_t begin = pieces[0].first;
  return states_->ForEachUnitInSubGroup(
      pieces, [&](int u, int64_t lo, int64_t hi, const StateMoments& moments) -> Status {
        const UnitPartition& owned = state_plan_.unit(u);
        hi = std::min(hi, owned.owned_real);
        if (lo >= hi) return Status::Ok();  // padding only
        // Units come in order, each over one or more sub-groups: its copy stays open until the
        // next.
        return UpdatePiece(u, lo, hi, master + (owned.shard_offset + lo - begin), moments,
                           OpenOwnedWrite(u, host_writes(u)), h);
      });
}

void* ZeroEngine::OpenOwnedWrite(int unit, bool by_host) {
  if (unit != open_write_unit_) {
    CloseOwnedWrite();
    open_write_ = BeginOwnedWrite(unit, by_host);
    open_write_unit_ = unit;
  }
  return open_write_;
}

void ZeroEngine::CloseOwnedWrite() {
  if (open_write_unit_ >= 0) EndOwnedWrite(open_write_unit_);
  open_write_unit_ = -1;
}

void* ZeroEngine::BeginOwnedWrite(int unit, bool by_host) {
  if (param_shards_ == nullptr) return owned_params(unit);
  // Before the store hands out the shard to rewrite: no queued upload still reads it.
  if (param_stage_.data() != nullptr) Fail(FreeParamStage());
  void* shard = param_shards_->BeginWrite(unit);
  if (by_host) {
    host_write_unit_ = unit;
    return shard;
  }
  offload_stats_.to_host_bytes += plan_.unit(unit).shard * static_cast<int64_t>(csize_);
  if (param_stage_.data() == nullptr) return shard;
  // On an accelerator the update writes the device's staging (free since above), brought down
  // at EndOwnedWrite.
  HOIST_CHECK(param_write_unit_ < 0)
      << "unit " << unit << " written while unit " << param_write_unit_ << " still is";
  param_write_unit_ = unit;
  param_write_ = shard;
  Fail(backend_->Zero(param_stage_.data(), plan_.unit(unit).shard * static_cast<int64_t>(csize_),
                      stream()));
  return param_stage_.data();
}

void ZeroEngine::EndOwnedWrite(int unit) {
  if (param_shards_ == nullptr) return;
  if (host_write_unit_ == unit) {
    host_write_unit_ = -1;  // written by the host, which is done with it
  } else {
    if (param_stage_.data() != nullptr) {
      HOIST_CHECK_EQ(param_write_unit_, unit);
      Fail(backend_->Copy(param_write_, param_stage_.data(),
                          plan_.unit(unit).shard * static_cast<int64_t>(csize_),
                          kernels::CopyDirection::kDeviceToHost, stream()));
      param_write_unit_ = -1;
      param_write_ = nullptr;
    }
    Fail(Sync());  // the store's writer thread takes the copy from here
  }
  param_shards_->CommitWrite(unit);
}

Status ZeroEngine::FinishOwnedWrites() {
  if (param_shards_ == nullptr) return Status::Ok();
  Status stored = param_shards_->FinishWrites();
  Status deferred = param_shards_->TakeDeferredError();
  return stored.ok() ? deferred : stored;
}

}  // namespace hoist::zero
