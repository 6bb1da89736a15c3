#include "comm/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "core/check.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/cuda_status.h"
#include "core/logging.h"

namespace hoist::comm {
namespace {

using Clock = std::chrono::steady_clock;

// NCCL's result codes are classed by whose fault they are: a bad argument is the caller's, a
// system or remote error is the world's (a peer or the network), the rest are NCCL's or CUDA's.
StatusCode NcclErrorCode(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return StatusCode::kOk;
    case ncclInvalidArgument:
    case ncclInvalidUsage: return StatusCode::kInvalidArgument;
    case ncclSystemError:
    case ncclRemoteError: return StatusCode::kUnavailable;
    default: return StatusCode::kInternal;
  }
}

// The one place an NCCL result becomes a Status: the statement, NCCL's text, NCCL's last
// detailed message (it often names the cause, e.g. a duplicate GPU), and where.
Status NcclError(ncclResult_t result, ncclComm_t comm, const char* what, const char* file,
                 int line) {
  std::string message = std::string(what) + " failed: " + ncclGetErrorString(result);
  const char* detail = ncclGetLastError(comm);
  if (detail != nullptr && detail[0] != '\0') message += std::string(" (") + detail + ")";
  message += std::string(" at ") + file + ":" + std::to_string(line);
  return Status(NcclErrorCode(result), std::move(message));
}

ncclDataType_t ToNccl(DType type) {
  switch (type) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kBFloat16: return ncclBfloat16;
    case DType::kFloat16: return ncclFloat16;
  }
  HOIST_CHECK(false) << "unknown DType " << static_cast<int>(type);
  return ncclFloat32;
}

ncclRedOp_t ToNccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
  }
  HOIST_CHECK(false) << "unknown ReduceOp " << static_cast<int>(op);
  return ncclSum;
}

enum class Op { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kBarrier };

const char* OpName(Op op) {
  switch (op) {
    case Op::kAllReduce: return "AllReduce";
    case Op::kReduceScatter: return "ReduceScatter";
    case Op::kAllGather: return "AllGather";
    case Op::kBroadcast: return "Broadcast";
    case Op::kBarrier: return "Barrier";
  }
  return "unknown";
}

// One collective as this rank issued it.
struct Call {
  Op op = Op::kBarrier;
  const void* send = nullptr;
  void* recv = nullptr;
  int64_t count = 0;  // per-rank block: count, recv_count or send_count
  DType type = DType::kFloat32;
  ReduceOp reduce = ReduceOp::kSum;
  int root = 0;
};

// "ReduceScatter(avg, 1024 x bf16, 8192 bytes)": the bytes of the larger buffer passed.
std::string Describe(const Call& call, int world_size) {
  std::ostringstream out;
  out << OpName(call.op) << "(";
  if (call.op == Op::kAllReduce || call.op == Op::kReduceScatter) {
    out << ReduceOpName(call.reduce) << ", ";
  }
  if (call.op == Op::kBroadcast) out << "root " << call.root << ", ";
  int64_t elements = call.count;
  if (call.op == Op::kReduceScatter || call.op == Op::kAllGather) elements *= world_size;
  out << call.count << " x " << DTypeName(call.type) << ", "
      << elements * static_cast<int64_t>(DTypeSize(call.type)) << " bytes)";
  return out.str();
}

// Polling without burning a core for long waits and without adding much latency to short ones:
// a few yields first, then sleeps that grow to a millisecond.
class Backoff {
 public:
  void Pause() {
    if (yields_ < 64) {
      ++yields_;
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(delay_);
    delay_ = std::min(delay_ * 2, std::chrono::microseconds(1000));
  }

 private:
  int yields_ = 0;
  std::chrono::microseconds delay_{10};
};

Clock::time_point DeadlineAfter(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

class NcclCommunicator::State {
 public:
  State(Communicator* host, double timeout_s)
      : host_(host), rank_(host->rank()), world_size_(host->world_size()), timeout_s_(timeout_s) {}

  ~State() {
    if (comm_ != nullptr && !aborted_) {
      (void)cudaSetDevice(device_);
      // Finalize flushes what was issued; a peer that never joins would hold it forever, so it
      // gets the same deadline as a collective, then the communicator is aborted instead.
      Status flushed = Settle(ncclCommFinalize(comm_), "ncclCommFinalize(comm_)",
                              DeadlineAfter(timeout_s_), __FILE__, __LINE__);
      if (flushed.ok()) {
        ncclResult_t result = ncclCommDestroy(comm_);
        if (result != ncclSuccess) {
          HOIST_LOG(WARN)
              << NcclError(result, comm_, "ncclCommDestroy(comm_)", __FILE__, __LINE__).ToString();
        }
      } else {
        HOIST_LOG(WARN) << "NCCL rank " << rank_ << ": " << flushed.ToString()
                        << "; aborting the communicator";
        (void)ncclCommAbort(comm_);
      }
      comm_ = nullptr;
    }
    if (scratch_ != nullptr) {
      cudaError_t error = cudaFree(scratch_);
      if (error != cudaSuccess) {
        HOIST_LOG(WARN) << CudaError(error, "cudaFree(scratch_)", __FILE__, __LINE__).ToString();
      }
    }
  }

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int device() const { return device_; }
  double timeout_s() const { return timeout_s_; }
  Communicator* host() const { return host_; }
  const CudaStream& stream() const { return stream_; }
  void* scratch() const { return scratch_; }

  // Picks the GPU (local_rank % visible), creates the comm stream and the barrier's scratch word.
  Status Prepare(int local_rank) {
    const int count = CudaDeviceCount();
    if (count == 0) {
      return UnavailableError("NCCL rank " + std::to_string(rank_) +
                              " has no usable CUDA GPU (driver " + CudaDriverVersionString() +
                              "); run on GPU machines or use a host communicator");
    }
    device_ = local_rank % count;
    HOIST_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    HOIST_ASSIGN_OR_RETURN(stream_, CudaStream::Create());
    HOIST_CUDA_RETURN_IF_ERROR(cudaMalloc(&scratch_, sizeof(float)));
    HOIST_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(scratch_, 0, sizeof(float), stream_.get()));
    return Status::Ok();
  }

  Status Connect(const ncclUniqueId& id) {
    HOIST_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    // Nonblocking: every NCCL call returns at once, so creation, enqueueing and the final flush
    // can all be given a deadline instead of hanging on a peer that never comes.
    config.blocking = 0;
    const auto deadline = DeadlineAfter(timeout_s_);
    ncclResult_t result = ncclCommInitRankConfig(&comm_, world_size_, id, rank_, &config);
    Status status = comm_ == nullptr && result != ncclSuccess
                        ? NcclError(result, nullptr, "ncclCommInitRankConfig", __FILE__, __LINE__)
                        : Settle(result, "ncclCommInitRankConfig", deadline, __FILE__, __LINE__);
    if (status.ok()) return status;
    AbortComm();
    return status.WithContext("creating the NCCL communicator on rank " + std::to_string(rank_) +
                              " of " + std::to_string(world_size_) + " (GPU " +
                              std::to_string(device_) + ")");
  }

  // The error every call returns once the communicator has failed.
  Status CheckUsable() const {
    if (failure_.ok()) return failure_;
    return Status(failure_.code(),
                  "NCCL communicator unusable after an earlier failure: " + failure_.message());
  }

  // Records the first failure and aborts the communicator: peers may be half-way through the
  // failed op, so nothing issued after it could complete anyway.
  Status Fail(Status status) {
    if (failure_.ok()) failure_ = status;
    AbortComm();
    return status;
  }

  // Issues `call` on the comm stream and returns the event recorded after it.
  StatusOr<CudaEvent> Enqueue(const Call& call) {
    HOIST_RETURN_IF_ERROR(CheckUsable());
    HOIST_RETURN_IF_ERROR(Validate(call));
    HOIST_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    HOIST_ASSIGN_OR_RETURN(CudaEvent done, CudaEvent::Create());
    const size_t count = static_cast<size_t>(call.count);
    const ncclDataType_t type = ToNccl(call.type);
    cudaStream_t stream = stream_.get();
    ncclResult_t result = ncclSuccess;
    switch (call.op) {
      case Op::kAllReduce:
      case Op::kBarrier:
        result =
            ncclAllReduce(call.send, call.recv, count, type, ToNccl(call.reduce), comm_, stream);
        break;
      case Op::kReduceScatter:
        result = ncclReduceScatter(call.send, call.recv, count, type, ToNccl(call.reduce), comm_,
                                   stream);
        break;
      case Op::kAllGather:
        result = ncclAllGather(call.send, call.recv, count, type, comm_, stream);
        break;
      case Op::kBroadcast:
        result = ncclBroadcast(call.send, call.recv, count, type, call.root, comm_, stream);
        break;
    }
    // Until the communicator's state is ncclSuccess NCCL may still be enqueueing, and nothing
    // else may be issued to its stream, the event included.
    Status issued = Settle(result, OpName(call.op), DeadlineAfter(timeout_s_), __FILE__, __LINE__);
    if (!issued.ok()) return Fail(issued.WithContext(Where(call)));
    HOIST_RETURN_IF_ERROR(done.Record(stream_));
    return done;
  }

  // Blocks until `done` completes, an asynchronous NCCL error shows up, or `deadline` passes;
  // the latter two abort the communicator.
  Status Await(const CudaEvent& done, Clock::time_point deadline, const std::string& what) {
    Backoff backoff;
    while (true) {
      StatusOr<bool> complete = done.IsComplete();
      if (!complete.ok()) return Fail(complete.status().WithContext(what));
      if (*complete) return AsyncError(what);
      if (!failure_.ok()) return CheckUsable();
      HOIST_RETURN_IF_ERROR(AsyncError(what));
      if (Clock::now() >= deadline) {
        std::ostringstream message;
        message << what << " did not complete within " << timeout_s_
                << " s; NCCL communicator aborted (a peer may have died or issued a different "
                   "collective)";
        return Fail(Status(StatusCode::kDeadlineExceeded, message.str()));
      }
      backoff.Pause();
    }
  }

  // The communicator's asynchronous error, if any, as a failure of `what`.
  Status AsyncError(const std::string& what) {
    if (!failure_.ok()) return CheckUsable();
    ncclResult_t state = ncclSuccess;
    ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
    if (result != ncclSuccess) {
      return Fail(
          NcclError(result, comm_, "ncclCommGetAsyncError", __FILE__, __LINE__).WithContext(what));
    }
    if (state != ncclSuccess && state != ncclInProgress) {
      return Fail(
          NcclError(state, comm_, "an issued collective", __FILE__, __LINE__).WithContext(what));
    }
    return Status::Ok();
  }

  // "AllReduce(sum, 4 x fp32, 16 bytes) on rank 0 of 1 (GPU 0)".
  std::string Where(const Call& call) const {
    return Describe(call, world_size_) + " on rank " + std::to_string(rank_) + " of " +
           std::to_string(world_size_) + " (GPU " + std::to_string(device_) + ")";
  }

  void AbortComm() {
    if (comm_ == nullptr || aborted_) return;
    (void)cudaSetDevice(device_);
    ncclResult_t result = ncclCommAbort(comm_);
    if (result != ncclSuccess) {
      HOIST_LOG(WARN)
          << NcclError(result, nullptr, "ncclCommAbort(comm_)", __FILE__, __LINE__).ToString();
    }
    aborted_ = true;
  }

 private:
  // After a call on a nonblocking communicator: ncclInProgress means "still working"; the
  // communicator's state says when it is done and whether it failed.
  Status Settle(ncclResult_t result, const char* what, Clock::time_point deadline, const char* file,
                int line) {
    if (result == ncclSuccess) return Status::Ok();
    if (result != ncclInProgress) return NcclError(result, comm_, what, file, line);
    Backoff backoff;
    while (true) {
      ncclResult_t state = ncclInProgress;
      ncclResult_t query = ncclCommGetAsyncError(comm_, &state);
      if (query != ncclSuccess) return NcclError(query, comm_, "ncclCommGetAsyncError", file, line);
      if (state == ncclSuccess) return Status::Ok();
      if (state != ncclInProgress) return NcclError(state, comm_, what, file, line);
      if (Clock::now() >= deadline) {
        std::ostringstream message;
        message << what << " on rank " << rank_ << " of " << world_size_
                << " did not finish within " << timeout_s_
                << " s (check that every rank reached it)";
        return Status(StatusCode::kDeadlineExceeded, message.str());
      }
      backoff.Pause();
    }
  }

  // What NCCL cannot tell us cleanly: negative counts, a root outside the group, and buffers
  // that are not device memory of this rank's GPU (NCCL would fault or misread them).
  Status Validate(const Call& call) const {
    if (call.count < 0) {
      return InvalidArgumentError(Where(call) + ": negative count " + std::to_string(call.count));
    }
    if (call.op == Op::kBroadcast && (call.root < 0 || call.root >= world_size_)) {
      return InvalidArgumentError(Where(call) + ": root " + std::to_string(call.root) +
                                  " is outside a group of " + std::to_string(world_size_));
    }
    if (call.count == 0) return Status::Ok();
    HOIST_RETURN_IF_ERROR(CheckDeviceBuffer(call, call.send, "send"));
    return CheckDeviceBuffer(call, call.recv, "recv");
  }

  Status CheckDeviceBuffer(const Call& call, const void* data, const char* name) const {
    if (data == nullptr) return InvalidArgumentError(Where(call) + ": null " + name + " buffer");
    cudaPointerAttributes attributes{};
    cudaError_t error = cudaPointerGetAttributes(&attributes, data);
    if (error != cudaSuccess) {
      return CudaError(error, "cudaPointerGetAttributes(&attributes, data)", __FILE__, __LINE__)
          .WithContext(Where(call));
    }
    const bool on_device =
        (attributes.type == cudaMemoryTypeDevice && attributes.device == device_) ||
        attributes.type == cudaMemoryTypeManaged;
    if (on_device) return Status::Ok();
    std::ostringstream message;
    message << Where(call) << ": the " << name << " buffer " << data
            << " is not device memory of GPU " << device_ << " (CUDA memory type "
            << static_cast<int>(attributes.type) << ", device " << attributes.device
            << "); NCCL moves device buffers, use a host communicator for host memory";
    return InvalidArgumentError(message.str());
  }

  Communicator* host_;
  const int rank_;
  const int world_size_;
  const double timeout_s_;
  int device_ = -1;
  ncclComm_t comm_ = nullptr;
  bool aborted_ = false;
  Status failure_;  // the first failure; every later call returns it
  CudaStream stream_;
  void* scratch_ = nullptr;  // one float on the GPU, the payload of Barrier
};

class NcclWork::Impl {
 public:
  using State = NcclCommunicator::State;

  // A collective that was issued and completes when `done` does.
  Impl(std::shared_ptr<State> state, std::string what, CudaEvent done, Clock::time_point deadline)
      : state_(std::move(state)),
        what_(std::move(what)),
        done_(std::move(done)),
        deadline_(deadline) {}
  // A collective that could not be issued: Wait reports why.
  Impl(std::shared_ptr<State> state, std::string what, Status failed)
      : state_(std::move(state)), what_(std::move(what)), result_(std::move(failed)) {}

  Status Wait() {
    if (!result_) result_ = state_->Await(done_, deadline_, what_);
    return *result_;
  }

  bool Done() {
    if (result_) return true;
    StatusOr<bool> complete = done_.IsComplete();
    return !complete.ok() || *complete || !state_->CheckUsable().ok() || Clock::now() >= deadline_;
  }

  Status StreamWait(const Stream& consumer) {
    if (result_ && !result_->ok()) return *result_;
    if (done_.empty()) return FailedPreconditionError(what_ + " was never issued");
    const auto* cuda = dynamic_cast<const CudaStream*>(&consumer);
    if (cuda == nullptr) return Wait();
    HOIST_CUDA_RETURN_IF_ERROR(cudaSetDevice(state_->device()));
    return done_.StreamWait(*cuda);
  }

  bool Waited() const { return result_.has_value(); }
  const std::string& what() const { return what_; }

 private:
  std::shared_ptr<State> state_;
  std::string what_;
  CudaEvent done_;
  Clock::time_point deadline_{};
  std::optional<Status> result_;
};

NcclWork::NcclWork(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

NcclWork::~NcclWork() {
  if (impl_->Waited()) return;
  Status status = impl_->Wait();
  if (!status.ok()) HOIST_LOG(ERROR) << "unwaited " << status.ToString();
}

Status NcclWork::Wait() { return impl_->Wait(); }
bool NcclWork::Done() { return impl_->Done(); }
Status NcclWork::StreamWait(const Stream& consumer) { return impl_->StreamWait(consumer); }

namespace {

CommHandle Issue(const std::shared_ptr<NcclCommunicator::State>& state, const Call& call) {
  std::string what = state->Where(call);
  const Clock::time_point deadline = DeadlineAfter(state->timeout_s());
  StatusOr<CudaEvent> done = state->Enqueue(call);
  if (!done.ok()) {
    return std::make_unique<NcclWork>(
        std::make_unique<NcclWork::Impl>(state, std::move(what), done.status()));
  }
  return std::make_unique<NcclWork>(
      std::make_unique<NcclWork::Impl>(state, std::move(what), std::move(done).value(), deadline));
}

}  // namespace

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(Communicator* host,
                                                                     const NcclOptions& options) {
  HOIST_CHECK(host != nullptr);
  HOIST_CHECK_GE(options.local_rank, 0);
  HOIST_CHECK_GT(options.timeout_s, 0.0);
  auto state = std::make_shared<State>(host, options.timeout_s);
  Status local = state->Prepare(options.local_rank);
  ncclUniqueId id{};
  if (local.ok() && host->rank() == 0) {
    ncclResult_t result = ncclGetUniqueId(&id);
    if (result != ncclSuccess)
      local = NcclError(result, nullptr, "ncclGetUniqueId", __FILE__, __LINE__);
  }
  // Every rank learns whether all are ready, so that none waits for a peer that already gave up.
  float failed_ranks = local.ok() ? 0.0f : 1.0f;
  HOIST_RETURN_IF_ERROR(host->AllReduce(&failed_ranks, 1, DType::kFloat32, ReduceOp::kSum)
                            .WithContext("agreeing on NCCL readiness over the host communicator"));
  if (!local.ok()) return local;
  if (failed_ranks > 0.0f) {
    return UnavailableError(std::to_string(static_cast<int>(failed_ranks)) + " of " +
                            std::to_string(host->world_size()) +
                            " ranks could not set up NCCL (their own errors say why); rank " +
                            std::to_string(host->rank()) + " was ready");
  }
  // The id is opaque bytes; float32 elements only size the message (a broadcast copies bits).
  static_assert(sizeof(ncclUniqueId) % sizeof(float) == 0);
  HOIST_RETURN_IF_ERROR(host->Broadcast(&id, sizeof(id) / sizeof(float), DType::kFloat32, 0)
                            .WithContext("broadcasting the NCCL unique id"));
  HOIST_RETURN_IF_ERROR(state->Connect(id));
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(std::move(state)));
}

NcclCommunicator::NcclCommunicator(std::shared_ptr<State> state) : state_(std::move(state)) {}

NcclCommunicator::~NcclCommunicator() = default;

int NcclCommunicator::rank() const { return state_->rank(); }
int NcclCommunicator::world_size() const { return state_->world_size(); }
int NcclCommunicator::device() const { return state_->device(); }
const CudaStream& NcclCommunicator::stream() const { return state_->stream(); }

Status NcclCommunicator::WaitFor(const CudaEvent& ready) {
  HOIST_RETURN_IF_ERROR(state_->CheckUsable());
  HOIST_CUDA_RETURN_IF_ERROR(cudaSetDevice(state_->device()));
  return ready.StreamWait(state_->stream());
}

Status NcclCommunicator::OrderAfter(const Stream& producer) {
  const auto* cuda = dynamic_cast<const CudaStream*>(&producer);
  if (cuda == nullptr) return producer.Synchronize();
  // A communicator that already failed: the collective itself returns that failure, as without
  // the ordering (a failure here would read as the producer's).
  if (!state_->CheckUsable().ok()) return Status::Ok();
  HOIST_CUDA_RETURN_IF_ERROR(cudaSetDevice(state_->device()));
  if (ready_.empty()) {
    HOIST_ASSIGN_OR_RETURN(ready_, CudaEvent::Create());
  }
  HOIST_RETURN_IF_ERROR(ready_.Record(*cuda));
  return WaitFor(ready_);
}

Status NcclCommunicator::AllReduce(void* buf, int64_t count, DType type, ReduceOp op) {
  return AllReduceAsync(buf, count, type, op)->Wait();
}

Status NcclCommunicator::ReduceScatter(const void* send, void* recv, int64_t recv_count, DType type,
                                       ReduceOp op) {
  return ReduceScatterAsync(send, recv, recv_count, type, op)->Wait();
}

Status NcclCommunicator::AllGather(const void* send, void* recv, int64_t send_count, DType type) {
  return AllGatherAsync(send, recv, send_count, type)->Wait();
}

Status NcclCommunicator::Broadcast(void* buf, int64_t count, DType type, int root) {
  return BroadcastAsync(buf, count, type, root)->Wait();
}

Status NcclCommunicator::Barrier() {
  Call call{.op = Op::kBarrier,
            .send = state_->scratch(),
            .recv = state_->scratch(),
            .count = 1,
            .type = DType::kFloat32,
            .reduce = ReduceOp::kSum};
  return Issue(state_, call)->Wait();
}

CommHandle NcclCommunicator::AllReduceAsync(void* buf, int64_t count, DType type, ReduceOp op) {
  return Issue(state_, Call{.op = Op::kAllReduce,
                            .send = buf,
                            .recv = buf,
                            .count = count,
                            .type = type,
                            .reduce = op});
}

CommHandle NcclCommunicator::ReduceScatterAsync(const void* send, void* recv, int64_t recv_count,
                                                DType type, ReduceOp op) {
  return Issue(state_, Call{.op = Op::kReduceScatter,
                            .send = send,
                            .recv = recv,
                            .count = recv_count,
                            .type = type,
                            .reduce = op});
}

CommHandle NcclCommunicator::AllGatherAsync(const void* send, void* recv, int64_t send_count,
                                            DType type) {
  return Issue(
      state_,
      Call{.op = Op::kAllGather, .send = send, .recv = recv, .count = send_count, .type = type});
}

CommHandle NcclCommunicator::BroadcastAsync(void* buf, int64_t count, DType type, int root) {
  return Issue(state_, Call{.op = Op::kBroadcast,
                            .send = buf,
                            .recv = buf,
                            .count = count,
                            .type = type,
                            .root = root});
}

void NcclCommunicator::Abort(const Status& reason, int exit_code) {
  HOIST_LOG(ERROR) << "NCCL rank " << state_->rank() << " aborting: " << reason.ToString();
  (void)state_->Fail(reason.ok() ? InternalError("Abort called without a reason") : reason);
  state_->host()->Abort(reason, exit_code);
}

}  // namespace hoist::comm
