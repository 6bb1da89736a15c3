// ZeroEngine: one rank's model states under ZeRO stage 0, 1, 2 or 3, in fp32 or mixed precision,
// and the optimizer step over the shard this rank owns. It is the ParamStore the model computes
// through.
//
// What each rank holds (Ψ parameters, N ranks, p = 4 bytes in fp32 and 2 in bf16/fp16; the fp32
// master copy exists only in mixed precision, where it counts as optimizer state):
//   stage 0: params pΨ, grads pΨ, optimizer (master, m, v) whole        (all-reduce)
//   stage 1: params pΨ, grads pΨ, optimizer states 1/N                  (all-reduce, all-gather)
//   stage 2: params pΨ, grads 1/N, optimizer states 1/N                 (reduce-scatter,
//   all-gather) stage 3: params 1/N, grads 1/N, optimizer states 1/N                (all-gather per
//   unit)
// With AdamWParams::eight_bit the moments take 2 + 8/256 bytes per parameter instead of 8 (one
// code byte each, an fp32 absmax per block of 256; zero/moments_8bit.h), the master unchanged;
// plus per-unit padding to a multiple of N (PartitionPlan) and transient buffers: fp32 working
// gradients of a unit while the model adds to them, gathered units in stage 3 and reduction
// buffers in flight (Category::kComm). The model computes in the compute type: it gets the
// weights as the engine stores them for it.
//
// The data path of one optimizer step:
//   ZeroGrads; then per micro-batch the model's forward and backward through the ParamStore calls.
//   Stages 0/1 accumulate full gradients locally and all-reduce them (average over ranks, in
//   comm_type) at the accumulation boundary, bucketed by reduce_bucket_size. Stages 2/3 reduce
//   each unit's gradient into its owners' shards as soon as ReleaseGrads hands it over (a
//   reduce-scatter, or an all-reduce when reduce_scatter is off); with overlap_comm the reduction
//   runs in the background while the backward pass goes on, up to reduce_bucket_size elements in
//   flight. Stage 3 gathers a unit's shards before use (the next unit prefetched within
//   stage3_prefetch_bucket_size and stage3_max_live_parameters) and frees the gathered copy after
//   use; units smaller than stage3_param_persistence_threshold stay whole on every rank.
//   Step: unscale by the loss scale, the global gradient norm and the inf/NaN check (agreed by all
//   ranks, so all skip the same step), clipping, AdamW on the owned shard (weight decay per
//   segment), the compute-type copy written from the fp32 result, and in stages 1/2 the updated
//   weights all-gathered (stage 3 keeps its shards).
//
// Streams. The engine issues its work on the backend's compute stream and orders its collectives
// against that stream rather than by waiting on the host: a collective reads what the stream
// wrote after Communicator::OrderAfter, and a reduced gradient is accumulated after the handle's
// StreamWait, so that on a GPU with NCCL a unit's reduction runs on the comm stream while the
// host goes on issuing the next unit's backward. Buffers that queued work still uses are released
// at once: the device takes them back in the compute stream's order. The host waits for the
// stream only where it reads what the stream wrote (the norm, a checkpoint), before another
// thread takes a buffer (the swapper, the parameter store), and at Settle.
//
// Every rank must make the same calls in the same order (the collectives inside depend on it).
// Not thread-safe; one engine per rank.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "comm/communicator.h"
#include "core/device.h"
#include "core/placement.h"
#include "core/status.h"
#include "core/tunables.h"
#include "kernels/backend.h"
#include "offload/pinned_pool.h"
#include "offload/state_swapper.h"
#include "zero/gather_book.h"
#include "zero/moments_8bit.h"
#include "zero/optimizer_states.h"
#include "zero/param_shards.h"
#include "zero/param_store.h"
#include "zero/partition.h"
#include "zero/reduction_queue.h"
#include "zero/zero_options.h"

namespace hoist::zero {

// The refusals Create gives for `options` alone (a stage or bucket size out of range, an offload
// the stage cannot take), before anything is allocated; Ok otherwise.
Status ValidateZeroOptions(const ZeroOptions& options);

// The factor that brings a gradient of norm `norm` to at most `max_norm` (torch's
// clip_grad_norm_: max_norm / (norm + 1e-6), capped at 1); 1 when max_norm is 0 (disabled).
float ClipScale(double norm, float max_norm);

// The outcome of one optimizer step.
struct StepResult {
  double grad_norm = 0;    // of the unscaled gradient, before clipping; inf/NaN on overflow
  bool overflow = false;   // some gradient was inf or NaN: the update was skipped on every rank
  double reduce_s = 0;     // finishing the gradient reduction and the global norm
  double optimizer_s = 0;  // AdamW on the owned shard and gathering the updated parameters
};

// Bytes of this rank's model states, by what they are (the ZeRO formula's terms).
struct ModelStateBytes {
  int64_t params = 0;     // compute-type weights (whole or shard, persistent units included)
  int64_t grads = 0;      // compute-type gradient accumulators
  int64_t optimizer = 0;  // fp32 master (mixed precision only) and the two Adam moments (8-bit:
                          // their codes and absmaxes, and the small units' fp32 moments)
};

// What the optimizer offload moved and how long the step waited for it, since the engine was
// created. Host offload counts the bytes its CPU step reads from and writes to device-place
// memory (the owned gradients in, the updated compute-type weights out): the transfers an
// accelerator's step makes over the host link.
struct OffloadStats {
  // device -> host: the owned gradients, each time they are sent down (once per step, steps
  // that overflowed included; once per boundary pass too, see SetAccumulationBoundary), and
  // with offload_param every shard the device wrote (Initialize, a device-side update)
  int64_t to_host_bytes = 0;
  // Of to_host_bytes, the gradients a step found already sent down by its last backward pass
  // (ZeroEngine::SetAccumulationBoundary): the units whose reductions that pass finished,
  // not those still in flight when it ended (with overlap_comm, up to reduce_bucket_size
  // elements of them), which go down as Step drains them.
  int64_t to_host_during_backward_bytes = 0;
  int64_t from_host_bytes = 0;  // host -> device (the updated compute-type weights)
  int64_t nvme_read_bytes = 0;
  int64_t nvme_write_bytes = 0;
  double nvme_wait_s = 0;  // the step blocked on NVMe I/O
  double update_s = 0;     // the CPU step itself (AdamW and the compute-type copy)
};

class ZeroEngine final : public ParamStore {
 public:
  // `comm` (the data-parallel group) and `backend` must outlive the engine. The engine allocates
  // the model states from the backend's device (and from host pools where offloaded) and touches
  // the device's bytes only through the backend's ops, on its compute stream.
  static StatusOr<std::unique_ptr<ZeroEngine>> Create(std::vector<UnitSpec> units,
                                                      const ZeroOptions& options,
                                                      comm::Communicator* comm,
                                                      kernels::Backend* backend);
  ~ZeroEngine() override;

  // Sets the weights: `fill(unit, out)` writes the unit's fp32 values into `out` (unit size).
  // Each rank keeps what it owns (every rank must produce the same values).
  Status Initialize(const std::function<void(int unit, float* out)>& fill);
  // The same from `fill(unit, begin, count, out)`, which writes elements [begin, begin + count)
  // of the unit's fp32 values into `out` (0 past the unit's end: a partition's padding). The
  // engine asks only for what this rank keeps: the whole unit where it keeps a whole copy
  // (stages 0-2, persistent units), else its shard of the weights and of the master weights, so
  // a rank that loads a checkpoint at stage 3 reads its shard of every unit and no more.
  using RangeFill = std::function<void(int unit, int64_t begin, int64_t count, float* out)>;
  Status Initialize(const RangeFill& fill);

  // ParamStore.
  // The weights in the compute type (ZeroOptions::compute_type): the engine's own 16-bit copy,
  // or a gathered unit in stage 3.
  StatusOr<const void*> AcquireParams(int unit) override;
  DType param_type() const override { return options_.compute_type; }
  void ReleaseParams(int unit) override;
  void Prefetch(int unit) override;
  StatusOr<float*> AcquireGrads(int unit) override;
  void ReleaseGrads(int unit) override;
  Status status() const override { return status_; }

  // Waits on the host, each within the communicator's timeout, for the gradient reductions the
  // compute stream was only made to wait on (they run in the background during the backward
  // pass): a stream wait has no deadline, so a caller about to wait for the compute stream
  // outside the engine (reading a loss) calls this first, lest a collective that never completes
  // hold it for ever. The trainer does after each backward pass; the engine's own waits do it.
  // Returns the first failure among them.
  Status Settle() const;
  // Another engine on the same compute stream (a LoRA fine-tune's adapters beside this frozen
  // base) whose reductions that stream may wait on: this engine's host waits settle them first.
  // It must outlive this engine's calls; null: none.
  void SettleFirst(const ZeroEngine* other) { settle_first_ = other; }

  // Clears the gradient accumulators; call before the first micro-batch of each step.
  Status ZeroGrads();
  // Whether the coming backward pass is the step's last micro-batch's (DeepSpeed's gradient
  // accumulation boundary). With the optimizer offloaded on an accelerator (ZeRO-Offload), a
  // unit's owned gradients are final once that pass has reduced them (stages 2 and 3): they then
  // come down to pinned host memory on the copy stream while the backward goes on, and Step
  // finds them there. Without it, in stage 1 (which reduces at Step), with pin_memory false,
  // and for the reductions still in flight when the pass ends (overlap_comm keeps up to
  // reduce_bucket_size elements of them) they come down at Step. More backward passes after it
  // stay correct: a unit's gradients come down again after each accumulation. ZeroGrads clears
  // it.
  void SetAccumulationBoundary(bool last) { boundary_ = last; }
  bool frozen() const { return options_.frozen; }
  // Finishes the reductions and updates this rank's shard. Gradients hold loss_scale times the
  // true gradient; max_norm 0 disables clipping. Increments the step count unless skipped.
  StatusOr<StepResult> Step(float lr, float loss_scale, float max_norm);

  // The fp32 value of every weight (gathered from all ranks), in unit order, unpadded; for tests
  // and export. Collective: every rank must call it.
  StatusOr<std::vector<float>> GatherFullParams();

  // Checkpoint state: this rank's shard of the fp32 weights and the two moments (stage 0: the
  // whole model, identical on every rank). Restore writes them back and rebuilds the compute
  // copies (collective in stages 1 and 2).
  int64_t state_elements() const { return options_.frozen ? 0 : state_plan_.total_shard(); }
  Status ReadState(float* master, float* m, float* v) const;
  Status RestoreState(const float* master, const float* m, const float* v, int64_t step_count);

  // With parameters on NVMe, a shard that could not be read is served as zeros and its error
  // kept; this agrees on such errors across ranks (every rank returns the first one) and is to be
  // called after passes that Step does not follow, such as an evaluation. Collective when
  // parameters are offloaded; Ok at once otherwise.
  Status AgreeOnDeferredErrors();

  // Whether the optimizer states are in an NVMe file, too large perhaps to copy whole.
  bool states_on_nvme() const { return swapper() != nullptr; }
  // ReadState and RestoreState in pieces, wherever the states live: `visit` sees elements
  // [begin, begin + count) of the flat master, m and v shards in order; `fill` must write them.
  // From NVMe a sub-group at a time (collective, as the whole forms on NVMe are); otherwise the
  // shard in one piece, read out as ReadState does (not collective) and restored as
  // RestoreState does after the ranks agree on whether every fill succeeded (collective).
  using StatePiece =
      std::function<Status(int64_t begin, int64_t count, float* master, float* m, float* v)>;
  Status ReadStateInPieces(const StatePiece& visit) const;
  Status RestoreStateInPieces(const StatePiece& fill, int64_t step_count);

  int64_t step_count() const { return step_count_; }
  const PartitionPlan& plan() const { return plan_; }
  // The plan the optimizer states follow: the real one in stages 1-3, a one-rank plan in stage 0.
  const PartitionPlan& state_plan() const { return state_plan_; }
  const ZeroOptions& options() const { return options_; }
  ModelStateBytes model_state_bytes() const;
  OffloadStats offload_stats() const;

 private:
  struct Pending;  // a reduction or gather in flight
  ZeroEngine(const ZeroOptions& options, comm::Communicator* comm, kernels::Backend* backend,
             PartitionPlan plan, PartitionPlan state_plan);
  const Stream& stream() const { return backend_->compute_stream(); }
  // Waits for the work enqueued on the compute stream (after Settle): before the host or another
  // thread reads what it wrote. Collectives are ordered against the stream instead
  // (Communicator::OrderAfter, CommWork::StreamWait), and buffers the stream's work uses go back
  // to the device in its order (the CUDA caching device serves the compute stream; the threaded
  // test backend's device frees the same way).
  Status Sync() const;
  // Waits for the settling reductions that are complete and drops them; the first failure.
  Status SettleDone();
  // Every reduction in flight accumulated, and all of them waited for on the host (at the end of
  // the passes: whatever follows, an error return included, may wait for the stream).
  Status DrainAndSettle();
  // A transient buffer of a pass or a step from the device, or kResourceExhausted naming `what`
  // it was for, the bytes asked and held (the device's message) and what frees memory: `advice`
  // (ending in "or", may be empty) and the settings that free memory for any buffer.
  StatusOr<Buffer> AllocateTransient(int64_t bytes, Category category, const std::string& what,
                                     const std::string& advice);
  // How bytes move between the optimizer states' place and the model's (device) memory, and
  // between the states' place and the host.
  kernels::CopyDirection StateToModel() const;
  bool states_on_device() const { return options_.offload_optimizer.place == Placement::kDevice; }
  // Whether the unit's optimizer states are offloaded: all units under kHost/kNvme, except the
  // leading ones a partial offload (ratio < 1) keeps on the device.
  bool host_part(int unit) const { return states_ != nullptr && states_->offloaded(unit); }
  offload::StateSwapper* swapper() const {
    return states_ != nullptr ? states_->swapper() : nullptr;
  }
  // Copies to or from optimizer-state memory of the unit's part (OptimizerStates::Copy).
  Status StateCopy(void* dst, const void* src, int64_t bytes, bool to_host, int unit) const {
    const bool off = host_part(unit);
    return states_->Copy(dst, src, bytes,
                         to_host ? OptimizerStates::ToHost(off) : OptimizerStates::FromHost(off),
                         off);
  }
  // dst (n elements of `type`: device memory, or the page-locked home of offloaded parameters)
  // = the fp32 values at `src`, pageable host memory (the initial weights, a checkpoint's), which
  // no backend op may read: they are rounded here on the host and copied up, with the same bits
  // as the backend's Cast. Returns once `src` may be reused.
  Status StoreFromHost(void* dst, DType type, const float* src, int64_t n);
  Status Allocate();
  void Fail(const Status& status);
  // Where the compute-type copy of the unit lives when it is whole on this rank (stages 0-2, and
  // persistent units in stage 3); nullptr otherwise.
  void* whole_params(int unit) const;
  void* whole_grads(int unit);
  // The fp32 weights this rank's optimizer updates, for the unit's owned range (state plan).
  float* master(int unit) const;
  Status StartGather(int unit);
  // The offloaded shard of `unit` (host memory, acquired from the store: shard_held_) where a
  // collective can take it: itself, or on an accelerator its copy in param_stage_, queued on the
  // copy stream (param_uploaded_ after it) once the staging's last gather is done. A collective
  // that reads it must be ordered after the copy stream.
  StatusOr<const void*> UploadShard(int unit, const void* shard);
  // Gives the unit's offloaded shard back to the store once nothing reads it any more: its
  // gather waited for, and its upload (the host waits for the copy stream's event: done already
  // where the gather, ordered after the copy stream, completed; not so when the gather never
  // started). No-op when not held.
  Status EndShardUse(int unit);
  // Waits for the gather that reads param_stage_, if any, and gives its shard back: the staging
  // is then free for another upload or an updated shard.
  Status FreeParamStage();
  // Drops the gathers prefetched and not acquired (waited for first): before the weights change,
  // lest the next pass use a gathered copy of the old ones.
  Status DropPrefetchedGathers();
  Status FinishPending(Pending& pending);
  Status DrainReductions(int64_t keep_elements);
  Status ReduceFullGrads();
  Status GatherUpdatedParams();
  // This rank's owned gradients of `unit` (state plan coordinates), in the compute type.
  const void* owned_grads(int unit);
  // Where the compute-type copy of the unit's owned range is written after an update.
  void* owned_params(int unit);
  // AdamW over elements [lo, hi) of the unit's owned range, whose fp32 master, m and v are at
  // master, m, v (pointing at element lo); writes the compute-type copy.
  // `compute` is the unit's owned-range compute-type copy (from BeginOwnedWrite).
  // Step's update with host_update_, the states in host memory and the parameters on the device:
  // unit by unit as the gradients arrive, the updated 16-bit copies going up through the two
  // staging slots.
  Status HostUpdate(const kernels::AdamWStepScalars& h);
  // How Step updates the owned shard, from where the states and the weights live:
  //   kPipelined  the host update's pipeline (HostUpdate): states in host memory the backend
  //               cannot reach, weights on the device; the CPU updates each unit as its
  //               gradients come down, its 16-bit copy going up through the copy slots;
  //   kByUnit     unit by unit where the states are (device, host, split), through UpdatePiece;
  //   kBySubGroup the states on NVMe, a swapped-in sub-group at a time (UpdateSubGroup).
  enum class UpdatePath { kPipelined, kByUnit, kBySubGroup };
  UpdatePath update_path() const {
    if (swapper() != nullptr) return UpdatePath::kBySubGroup;
    return host_update_ && param_shards_ == nullptr ? UpdatePath::kPipelined : UpdatePath::kByUnit;
  }
  // The host update's gradients (host_update_): the unit's owned range in host_grads_.
  void* host_grads(int unit) const;
  // Queues the copy of the unit's owned gradients into host_grads() on the copy stream, after
  // the compute stream's work so far, and records grads_down_ after it.
  Status QueueGradDownload(int unit);
  // The same for every unit of the offloaded part not yet queued: at Step.
  Status QueueGradDownloads();
  // Makes the compute stream's later writes to the unit's gradients wait for a queued download
  // that reads them, and forgets it.
  Status AwaitGradDownload(int unit);
  // Whether the step's CPU update writes the unit's updated 16-bit shard straight into the
  // parameter store's host buffer (parameters and optimizer both offloaded): nothing goes up to
  // the device and back.
  bool host_writes(int unit) const {
    return param_shards_ != nullptr && host_update_ && host_part(unit);
  }
  // Every unit, those whose gradients were sent down to the host in the order they were (units
  // never sent down first, then in unit order where the host update does not run).
  std::vector<int> UnitsBySentDown() const;
  // Its loop over the units; HostUpdate orders and drains the copy stream after it, whatever it
  // returned.
  Status HostUpdateUnits(const kernels::AdamWStepScalars& h);
  // AdamW's tensors for owned elements [lo, hi) of `unit`, one per weight-decay segment: master,
  // m and v start at owned element lo; grads and copies (the 16-bit copy) at owned element
  // `origin`.
  std::vector<kernels::AdamWTensorRef> AdamWPieces(int unit, int64_t lo, int64_t hi, float* master,
                                                   float* m, float* v, const void* grads,
                                                   void* copies, int64_t origin) const;
  // The 8-bit step's update of owned elements [lo, hi) of the unit with `ops` on `ops_stream`:
  // the master and `moments` at lo, grads and copies at owned element `origin`; a unit below
  // min_8bit_size takes the 32-bit AdamW over its fp32 moments.
  Status Update8bit(kernels::Backend* ops, const Stream& ops_stream, int unit, int64_t lo,
                    int64_t hi, float* master, const StateMoments& moments, const void* grads,
                    void* copies, int64_t origin, const kernels::AdamWStepScalars& h);
  Status UpdatePiece(int unit, int64_t lo, int64_t hi, float* master, const StateMoments& moments,
                     void* compute, const kernels::AdamWStepScalars& h);
  // The step's update of a swapped-in sub-group (kNvme): its pieces of the swapper's arrays.
  Status UpdateSubGroup(std::span<const offload::SwapPiece> pieces,
                        const kernels::AdamWStepScalars& h);
  // The compute-type copy of the unit's owned range, to be rewritten: in place, or (parameter
  // offload) a zero-filled buffer that EndOwnedWrite stores; FinishOwnedWrites waits for the
  // stores and returns the first error. `by_host`: the host writes it (host_writes), not the
  // backend: the store's host buffer itself, even on an accelerator.
  void* BeginOwnedWrite(int unit, bool by_host = false);
  void EndOwnedWrite(int unit);
  // For walks over sub-groups, in which a unit spans one or more pieces: the unit's copy, begun
  // when the walk reaches it and ended (CloseOwnedWrite, or reaching the next unit) after.
  void* OpenOwnedWrite(int unit, bool by_host = false);
  void CloseOwnedWrite();
  Status FinishOwnedWrites();
  // Agrees across ranks on whether any rank's local part of a step failed; every rank then
  // returns the first failing rank's error. Collective.
  Status AgreeOnFailure(const Status& local) const;

  ZeroOptions options_;
  comm::Communicator* comm_;
  kernels::Backend* backend_;
  Device* device_;  // the backend's
  PartitionPlan plan_, state_plan_;
  size_t csize_;  // bytes of one compute-type element
  Status status_;
  int64_t step_count_ = 0;

  // The pinned home of offloaded optimizer states and of the host update's buffers; declared
  // before what it holds, so that it outlives it.
  std::unique_ptr<offload::PinnedHostPool> pool_;
  // Optimizer states in host memory (offloaded to the host or NVMe) that the backend cannot
  // reach (a GPU's): the owned gradients come down into host_grads_ (during the last backward,
  // or at Step), the CPU's AdamW runs on the states (host_backend_), and the updated
  // compute-type copy (stage_copy_; fp32: the master itself) goes up to the model's weights.
  // DeepSpeed's ZeRO-Offload. Two copy slots, so that one unit's copy goes up on the copy stream
  // while the CPU updates the next.
  bool host_update_ = false;
  std::unique_ptr<Device> host_ops_device_;
  std::unique_ptr<kernels::Backend> host_backend_;
  offload::PinnedBuffer host_grads_, stage_copy_[2];
  std::vector<int64_t> host_grad_at_;  // per unit, bytes into host_grads_ (-1: not offloaded)
  // Per unit of the offloaded part: recorded on the copy stream after the download of its
  // gradients, and whether one is queued since the compute stream last wrote them.
  std::vector<std::unique_ptr<Event>> grads_down_;
  std::vector<char> grads_queued_;
  // When each unit's gradients were last sent down (the count of downloads then): the host
  // update takes the units in that order (UnitsBySentDown).
  std::vector<int64_t> sent_down_;
  int64_t downloads_ = 0;
  bool boundary_ = false;  // SetAccumulationBoundary
  // host_grads_ is pinned for the device (by its driver where one pins; else pin_memory): the
  // downloads may go during the backward without holding the host.
  bool early_downloads_ = false;
  // Marks on the streams: the compute stream's work so far (for the copy stream to wait on
  // before a download or a shard's upload), each copy slot's last upload, and the step's last
  // upload.
  std::unique_ptr<Event> compute_mark_, copied_up_[2], uploaded_;
  std::unique_ptr<offload::PinnedHostPool> param_pool_;
  // Stage 3 with offload_param: this rank's compute-type shards, instead of params_.
  std::unique_ptr<ParamShards> param_shards_;
  int open_write_unit_ = -1;  // the unit OpenOwnedWrite has begun (-1: none)
  void* open_write_ = nullptr;
  int host_write_unit_ = -1;  // the unit BeginOwnedWrite handed to the host (-1: none)
  // Parameter offload on an accelerator (ParamStagingBytes): the device buffer a shard goes up
  // through for its gather and an updated shard comes down through (BeginOwnedWrite writes it,
  // EndOwnedWrite copies it into the shard's host buffer, param_write_, of unit
  // param_write_unit_). Empty where the backend operates on host memory.
  Buffer param_stage_;
  int param_write_unit_ = -1;
  void* param_write_ = nullptr;
  // The event after the upload of the staged unit's shard (GatherBook::staged_unit) on the copy
  // stream; per unit, whether its offloaded shard is held (acquired from the store for a
  // gather).
  std::unique_ptr<Event> param_uploaded_;
  std::vector<char> shard_held_;

  Buffer params_;      // compute type: whole padded model (stages 0-2) or this rank's shards (3)
  Buffer persistent_;  // stage 3: compute-type copies of the persistent units
  std::vector<int64_t> persistent_offset_;  // per unit, in persistent_ (-1: not persistent)
  Buffer grads_;  // compute type: whole padded model (stages 0/1) or shards (2/3)
  Buffer norm_;   // one double: the step's sum of squares (EngineWorkspaceBytes)
  // The optimizer states' placement and encoding (null when frozen).
  std::unique_ptr<OptimizerStates> states_;
  OffloadStats offload_stats_;

  // Per unit: the fp32 working gradient handed to the model, if any, and the weights it holds.
  std::vector<Buffer> work_grads_;
  std::vector<const void*> acquired_params_;
  // Stage 3: gathered compute-type copies, ready or in flight, and the gatherer's bookkeeping
  // (holds, gathers started, elements alive, the staged unit) by whose rules they come and go.
  std::vector<std::unique_ptr<Pending>> gathers_;
  GatherBook book_;
  // Stages 2/3: the gradient reductions in flight, oldest first.
  ReductionQueue<std::unique_ptr<Pending>> reductions_;
  // Reductions the compute stream waits on (DrainReductions) that the host has not yet waited
  // for (Settle). Mutable: the const waits settle them.
  mutable std::vector<comm::CommHandle> settling_;
  const ZeroEngine* settle_first_ = nullptr;  // SettleFirst
};

}  // namespace hoist::zero
