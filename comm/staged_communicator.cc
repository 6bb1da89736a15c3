#include "comm/staged_communicator.h"

#include <algorithm>
#include <functional>
#include <utility>

namespace hoist::comm {

// One staged collective: the inner collective's handle and the staging buffers it owns until the
// result is back on the device.
class StagedCommunicator::StagedWork final : public CommWork {
 public:
  StagedWork(StagedCommunicator* owner, Status failed) : owner_(owner), status_(failed) {
    done_ = true;
  }
  StagedWork(StagedCommunicator* owner, CommHandle inner, Buffer in, Buffer out, void* result,
             int64_t result_bytes)
      : owner_(owner),
        inner_(std::move(inner)),
        in_(std::move(in)),
        out_(std::move(out)),
        result_(result),
        result_bytes_(result_bytes) {}
  ~StagedWork() override { (void)Wait(); }

  Status Wait() override {
    if (done_) return status_;
    done_ = true;
    status_ = inner_->Wait();
    const Buffer& staged = out_.empty() ? in_ : out_;
    if (status_.ok() && result_bytes_ > 0) {
      status_ = owner_->Upload(result_, staged.data(), result_bytes_);
    }
    owner_->ReturnStaging(std::move(in_));
    if (!out_.empty()) owner_->ReturnStaging(std::move(out_));
    return status_;
  }
  bool Done() override { return done_ || inner_->Done(); }

 private:
  StagedCommunicator* owner_;
  CommHandle inner_;
  Buffer in_, out_;
  void* result_ = nullptr;
  int64_t result_bytes_ = 0;
  bool done_ = false;
  Status status_;
};

StagedCommunicator::StagedCommunicator(Communicator* inner, kernels::Backend* backend,
                                       Device* staging)
    : inner_(inner), backend_(backend), staging_(staging) {}

StagedCommunicator::~StagedCommunicator() {
  // The compute stream may still hold a wait on one of our events.
  (void)backend_->compute_stream().Synchronize();
}

Status StagedCommunicator::OrderAfter(const Stream& producer) {
  if (&producer == &backend_->compute_stream()) return Status::Ok();
  return producer.Synchronize();
}

Status StagedCommunicator::Events() {
  if (compute_mark_ != nullptr) return Status::Ok();
  HOIST_ASSIGN_OR_RETURN(compute_mark_, backend_->CreateEvent());
  HOIST_ASSIGN_OR_RETURN(copy_mark_, backend_->CreateEvent());
  return Status::Ok();
}

int64_t StagedCommunicator::staging_bytes() const {
  int64_t bytes = 0;
  for (const Buffer& b : free_) bytes += b.bytes();
  return bytes;
}

StatusOr<Buffer> StagedCommunicator::TakeStaging(int64_t bytes) {
  // The smallest kept buffer that is large enough.
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->bytes() >= bytes && (best == free_.end() || it->bytes() < best->bytes())) best = it;
  }
  if (best != free_.end()) {
    Buffer buffer = std::move(*best);
    free_.erase(best);
    return buffer;
  }
  return staging_->Allocate(bytes, Category::kComm);
}

void StagedCommunicator::ReturnStaging(Buffer buffer) {
  if (!buffer.empty()) free_.push_back(std::move(buffer));
}

Status StagedCommunicator::Download(void* dst, const void* src, int64_t bytes) {
  const Stream& copy = backend_->copy_stream();
  HOIST_RETURN_IF_ERROR(Events());
  HOIST_RETURN_IF_ERROR(compute_mark_->Record(backend_->compute_stream()));
  HOIST_RETURN_IF_ERROR(copy.WaitEvent(*compute_mark_));
  HOIST_RETURN_IF_ERROR(
      backend_->Copy(dst, src, bytes, kernels::CopyDirection::kDeviceToHost, copy));
  return copy.Synchronize();
}

Status StagedCommunicator::Upload(void* dst, const void* src, int64_t bytes) {
  const Stream& copy = backend_->copy_stream();
  // The destination may still be read by compute-stream work enqueued before the collective.
  HOIST_RETURN_IF_ERROR(Events());
  HOIST_RETURN_IF_ERROR(compute_mark_->Record(backend_->compute_stream()));
  HOIST_RETURN_IF_ERROR(copy.WaitEvent(*compute_mark_));
  HOIST_RETURN_IF_ERROR(
      backend_->Copy(dst, src, bytes, kernels::CopyDirection::kHostToDevice, copy));
  // The compute stream's later work waits for the copy. The event outlives that wait: it is ours,
  // and a later Record moves its mark without releasing an earlier waiter early.
  HOIST_RETURN_IF_ERROR(copy_mark_->Record(copy));
  HOIST_RETURN_IF_ERROR(backend_->compute_stream().WaitEvent(*copy_mark_));
  return copy.Synchronize();  // the staging buffer is free once this returns
}

CommHandle StagedCommunicator::Run(
    const void* in, int64_t in_bytes, void* out, int64_t out_bytes,
    const std::function<CommHandle(void* staged_in, void* staged_out)>& start) {
  auto fail = [this](const Status& status) {
    return CommHandle(std::make_unique<StagedWork>(this, status));
  };
  StatusOr<Buffer> staged_in = TakeStaging(std::max<int64_t>(in_bytes, 1));
  if (!staged_in.ok()) return fail(staged_in.status());
  if (in != nullptr && in_bytes > 0) {
    Status read = Download(staged_in->data(), in, in_bytes);
    if (!read.ok()) {
      ReturnStaging(std::move(staged_in).value());
      return fail(read);
    }
  }
  Buffer staged_out;
  if (out_bytes > 0) {
    StatusOr<Buffer> taken = TakeStaging(out_bytes);
    if (!taken.ok()) {
      ReturnStaging(std::move(staged_in).value());
      return fail(taken.status());
    }
    staged_out = std::move(taken).value();
  }
  CommHandle inner = start(staged_in->data(), staged_out.empty() ? nullptr : staged_out.data());
  const int64_t result_bytes = out_bytes > 0 ? out_bytes : in_bytes;
  return std::make_unique<StagedWork>(this, std::move(inner), std::move(staged_in).value(),
                                      std::move(staged_out), out, result_bytes);
}

bool StagedCommunicator::OnHost(const void* a, const void* b) const {
  const bool host = (a == nullptr || !backend_->IsDeviceMemory(a)) &&
                    (b == nullptr || !backend_->IsDeviceMemory(b));
  // Host memory that the compute stream writes (page-locked, say) is read once that work is done.
  if (host) (void)backend_->compute_stream().Synchronize();
  return host;
}

CommHandle StagedCommunicator::Alone(void* dst, const void* src, int64_t bytes) {
  // One rank: the result is the input. A copy between device buffers, ordered on the compute
  // stream, is all that moves.
  Status status = Status::Ok();
  if (dst != src && bytes > 0) {
    status = backend_->Copy(dst, src, bytes, kernels::CopyDirection::kDeviceToDevice,
                            backend_->compute_stream());
  }
  return CommHandle(std::make_unique<StagedWork>(this, status));
}

CommHandle StagedCommunicator::AllReduceAsync(void* buf, int64_t count, DType type, ReduceOp op) {
  if (OnHost(buf, nullptr)) return inner_->AllReduceAsync(buf, count, type, op);
  if (world_size() == 1) return Alone(buf, buf, 0);
  const int64_t bytes = count * static_cast<int64_t>(DTypeSize(type));
  return Run(buf, bytes, buf, 0,
             [&](void* in, void*) { return inner_->AllReduceAsync(in, count, type, op); });
}

CommHandle StagedCommunicator::ReduceScatterAsync(const void* send, void* recv, int64_t recv_count,
                                                  DType type, ReduceOp op) {
  if (OnHost(send, recv)) return inner_->ReduceScatterAsync(send, recv, recv_count, type, op);
  const int64_t element = static_cast<int64_t>(DTypeSize(type));
  if (world_size() == 1) return Alone(recv, send, recv_count * element);
  return Run(send, world_size() * recv_count * element, recv, recv_count * element,
             [&](void* in, void* out) {
               return inner_->ReduceScatterAsync(in, out, recv_count, type, op);
             });
}

CommHandle StagedCommunicator::AllGatherAsync(const void* send, void* recv, int64_t send_count,
                                              DType type) {
  if (OnHost(send, recv)) return inner_->AllGatherAsync(send, recv, send_count, type);
  const int64_t element = static_cast<int64_t>(DTypeSize(type));
  if (world_size() == 1) return Alone(recv, send, send_count * element);
  return Run(
      send, send_count * element, recv, world_size() * send_count * element,
      [&](void* in, void* out) { return inner_->AllGatherAsync(in, out, send_count, type); });
}

CommHandle StagedCommunicator::BroadcastAsync(void* buf, int64_t count, DType type, int root) {
  if (OnHost(buf, nullptr)) return inner_->BroadcastAsync(buf, count, type, root);
  if (world_size() == 1) return Alone(buf, buf, 0);
  const int64_t bytes = count * static_cast<int64_t>(DTypeSize(type));
  // Only the root's bytes matter, but every rank stages its buffer: the copy back is uniform.
  return Run(buf, bytes, buf, 0,
             [&](void* in, void*) { return inner_->BroadcastAsync(in, count, type, root); });
}

Status StagedCommunicator::AllReduce(void* buf, int64_t count, DType type, ReduceOp op) {
  return AllReduceAsync(buf, count, type, op)->Wait();
}

Status StagedCommunicator::ReduceScatter(const void* send, void* recv, int64_t recv_count,
                                         DType type, ReduceOp op) {
  return ReduceScatterAsync(send, recv, recv_count, type, op)->Wait();
}

Status StagedCommunicator::AllGather(const void* send, void* recv, int64_t send_count, DType type) {
  return AllGatherAsync(send, recv, send_count, type)->Wait();
}

Status StagedCommunicator::Broadcast(void* buf, int64_t count, DType type, int root) {
  return BroadcastAsync(buf, count, type, root)->Wait();
}

}  // namespace hoist::comm
