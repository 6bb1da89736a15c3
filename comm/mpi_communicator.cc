#include "comm/mpi_communicator.h"

#include <sched.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <sstream>
#include <thread>
#include <vector>

#include "comm/collective.h"
#include "comm/mpi_runtime.h"
#include "comm/queued_communicator.h"
#include "comm/work_queue.h"
#include "core/logging.h"

namespace hoist::comm {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kNoticeTag = 7001;
// Polls that spin before the poll starts yielding the CPU, and the wait after which it also
// sleeps: nonblocking collectives progress only inside MPI_Test, so sleeping early would slow
// every multi-round algorithm, while a rank waiting seconds for a straggler should not burn a core.
constexpr int kSpinPolls = 64;
constexpr auto kSleepAfter = std::chrono::seconds(1);
constexpr auto kSleepFor = std::chrono::microseconds(100);

// What a rank announces to its peers as it enters a collective.
struct Notice {
  int64_t entered = 0;  // collectives this rank has entered, this one included (0: none yet)
  int64_t count = 0;
  int32_t op = 0;
  int32_t type = 0;
  int32_t reduce = 0;
  int32_t root = 0;
};

Notice MakeNotice(int64_t entered, const CollectiveCall& call) {
  return Notice{entered,
                call.count,
                static_cast<int32_t>(call.op),
                static_cast<int32_t>(call.type),
                static_cast<int32_t>(call.reduce),
                call.root};
}

CollectiveCall CallOf(const Notice& notice) {
  return CollectiveCall{static_cast<CollectiveOp>(notice.op), notice.count,
                        static_cast<DType>(notice.type), static_cast<ReduceOp>(notice.reduce),
                        notice.root};
}

bool Overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

class MpiCommunicator : public QueuedCommunicator {
 public:
  MpiCommunicator(int rank, int size, double timeout_s)
      : rank_(rank),
        size_(size),
        timeout_s_(timeout_s),
        timeout_(
            std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s))),
        last_seen_(size),
        recv_notice_(size),
        recv_requests_(size, MPI_REQUEST_NULL) {}

  ~MpiCommunicator() override {
    queue_.reset();              // runs what is queued, then no other thread touches this object
    if (!failure_.ok()) return;  // requests may still be live: leave the MPI objects alone
    auto lock = MpiLock();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (MPI_Request& request : recv_requests_) {
      if (request == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&request);
      MPI_Wait(&request, MPI_STATUS_IGNORE);
    }
    for (auto& batch : sends_) {
      MPI_Waitall(static_cast<int>(batch.requests.size()), batch.requests.data(),
                  MPI_STATUSES_IGNORE);
    }
    if (notice_comm_ != MPI_COMM_NULL) MPI_Comm_free(&notice_comm_);
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  // Duplicates the world twice (collectively, under the timeout) and posts the notice receives.
  Status Init() {
    HOIST_RETURN_IF_ERROR(Duplicate(&comm_));
    HOIST_RETURN_IF_ERROR(Duplicate(&notice_comm_));
    auto lock = MpiLock();
    for (int peer = 0; peer < size_; ++peer) {
      if (peer != rank_) HOIST_RETURN_IF_ERROR(PostNoticeReceive(peer));
    }
    queue_ = std::make_unique<WorkQueue>();
    return Status::Ok();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }

  void Abort(const Status& reason, int exit_code) override {
    HOIST_LOG(ERROR) << "rank " << rank_ << " of " << size_ << " aborts the MPI job (exit code "
                     << exit_code << "): " << reason.ToString();
    MarkMpiBroken();
    // The worker may be inside MPI_Test; it lets go of the lock between polls. If it is stuck
    // inside MPI for good, aborting anyway beats hanging.
    std::unique_lock<std::timed_mutex> lock(MpiMutex(), std::defer_lock);
    (void)lock.try_lock_for(std::chrono::seconds(5));
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);
  }

 private:
  struct SendBatch {
    Notice notice;
    std::vector<MPI_Request> requests;
  };

  Status Duplicate(MPI_Comm* out) {
    MPI_Request request = MPI_REQUEST_NULL;
    {
      auto lock = MpiLock();
      HOIST_MPI_CALL(MPI_Comm_idup(MPI_COMM_WORLD, out, &request));
    }
    const Clock::time_point deadline = Clock::now() + timeout_;
    for (int polls = 0;; ++polls) {
      int done = 0;
      {
        auto lock = MpiLock();
        HOIST_MPI_CALL(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
        if (done) {
          HOIST_MPI_CALL(MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN));
          return Status::Ok();
        }
      }
      if (Clock::now() >= deadline) {
        return Fail(Status(StatusCode::kDeadlineExceeded,
                           "creating the MPI communicator on rank " + std::to_string(rank_) +
                               " of " + std::to_string(size_) + " did not complete within " +
                               FormatSeconds() + " s: some rank has not created its communicator"));
      }
      Backoff(polls, Clock::now() - (deadline - timeout_));
    }
  }

  Status PostNoticeReceive(int peer) {
    HOIST_MPI_CALL(MPI_Irecv(&recv_notice_[peer], sizeof(Notice), MPI_BYTE, peer, kNoticeTag,
                             notice_comm_, &recv_requests_[peer]));
    return Status::Ok();
  }

  // Records every notice that has arrived. Caller holds MpiLock().
  Status DrainNotices() {
    std::vector<int> indices(size_);
    while (true) {
      int completed = 0;
      HOIST_MPI_CALL(MPI_Testsome(size_, recv_requests_.data(), &completed, indices.data(),
                                  MPI_STATUSES_IGNORE));
      if (completed == MPI_UNDEFINED || completed == 0) return Status::Ok();
      for (int k = 0; k < completed; ++k) {
        const int peer = indices[k];
        last_seen_[peer] = recv_notice_[peer];
        HOIST_RETURN_IF_ERROR(PostNoticeReceive(peer));
      }
    }
  }

  // Tells every peer this rank entered collective `entered`. Caller holds MpiLock().
  Status SendNotices(const Notice& notice) {
    while (!sends_.empty()) {
      int done = 0;
      SendBatch& front = sends_.front();
      HOIST_MPI_CALL(MPI_Testall(static_cast<int>(front.requests.size()), front.requests.data(),
                                 &done, MPI_STATUSES_IGNORE));
      if (!done) break;
      sends_.pop_front();
    }
    sends_.push_back(SendBatch{notice, {}});
    SendBatch& batch = sends_.back();
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      batch.requests.push_back(MPI_REQUEST_NULL);
      HOIST_MPI_CALL(MPI_Isend(&batch.notice, sizeof(Notice), MPI_BYTE, peer, kNoticeTag,
                               notice_comm_, &batch.requests.back()));
    }
    return Status::Ok();
  }

  static void Backoff(int polls, Clock::duration waited) {
    if (polls < kSpinPolls) return;
    if (waited >= kSleepAfter) {
      std::this_thread::sleep_for(kSleepFor);
    } else {
      sched_yield();
    }
  }

  std::string FormatSeconds() const {
    std::ostringstream out;
    out << timeout_s_;
    return out.str();
  }

  // `pending`: a request of this communicator may never complete, so MPI_Finalize must not run.
  Status Fail(Status status, bool pending = true) {
    failure_ = status;
    if (pending) MarkMpiBroken();
    return status;
  }

  static MPI_Datatype WireType(DType type) {
    return type == DType::kFloat32 ? MPI_FLOAT : MPI_UINT16_T;
  }

  // Runs on the worker (or inline in a blocking call): one collective from start to finish.
  Status Execute(const CollectiveCall& call, const void* send, void* recv) override {
    if (!failure_.ok()) {
      return Status(failure_.code(),
                    "comm group unusable after an earlier failure: " + failure_.message());
    }
    if (Status valid = ValidateCall(call, rank_, size_, send, recv); !valid.ok()) {
      return Fail(valid, /*pending=*/false);
    }
    const int64_t total =
        call.op == CollectiveOp::kReduceScatter || call.op == CollectiveOp::kAllGather
            ? call.count * size_
            : call.count;
    if (total > INT_MAX) {
      return Fail(InvalidArgumentError(
                      Describe(call, size_) + " on rank " + std::to_string(rank_) + ": " +
                      std::to_string(total) + " elements exceed MPI's int count (" +
                      std::to_string(INT_MAX) + "); split the buffer into smaller collectives"),
                  /*pending=*/false);
    }
    const int64_t entered = ++entered_;
    const int count = static_cast<int>(call.count);
    const bool wide = call.type != DType::kFloat32 && (call.op == CollectiveOp::kAllReduce ||
                                                       call.op == CollectiveOp::kReduceScatter);
    const size_t element = DTypeSize(call.type);
    const size_t block_bytes = static_cast<size_t>(call.count) * element;
    MPI_Request request = MPI_REQUEST_NULL;
    // Where a reduce-scatter's fp32 result lands before it is copied out or narrowed.
    float* rs_out = static_cast<float*>(recv);
    if (wide) {
      const int64_t in = call.op == CollectiveOp::kAllReduce ? call.count : total;
      wide_in_.resize(static_cast<size_t>(in));
      const void* src = call.op == CollectiveOp::kAllReduce ? recv : send;
      for (int64_t i = 0; i < in; ++i) wide_in_[i] = LoadElement(src, i, call.type);
    }
    if (call.op == CollectiveOp::kReduceScatter &&
        (wide || Overlaps(send, block_bytes * size_, recv, block_bytes))) {
      wide_out_.resize(static_cast<size_t>(call.count));
      rs_out = wide_out_.data();
    }
    {
      auto lock = MpiLock();
      HOIST_RETURN_IF_ERROR(SendNotices(MakeNotice(entered, call)));
      int rc = MPI_SUCCESS;
      switch (call.op) {
        case CollectiveOp::kAllReduce:
          rc = MPI_Iallreduce(MPI_IN_PLACE, wide ? wide_in_.data() : recv, count, MPI_FLOAT,
                              MPI_SUM, comm_, &request);
          break;
        case CollectiveOp::kReduceScatter:
          rc = MPI_Ireduce_scatter_block(wide ? wide_in_.data() : send, rs_out, count, MPI_FLOAT,
                                         MPI_SUM, comm_, &request);
          break;
        case CollectiveOp::kAllGather: {
          const void* own = static_cast<const char*>(recv) + block_bytes * rank_;
          rc = MPI_Iallgather(send == own ? MPI_IN_PLACE : send, count, WireType(call.type), recv,
                              count, WireType(call.type), comm_, &request);
          break;
        }
        case CollectiveOp::kBroadcast:
          rc = MPI_Ibcast(recv, count, WireType(call.type), call.root, comm_, &request);
          break;
        case CollectiveOp::kBarrier: rc = MPI_Ibarrier(comm_, &request); break;
      }
      if (rc != MPI_SUCCESS) {
        return Fail(MpiError(rc, CollectiveOpName(call.op), __FILE__, __LINE__)
                        .WithContext(Describe(call, size_) + " on rank " + std::to_string(rank_)));
      }
    }
    HOIST_RETURN_IF_ERROR(Poll(&request, entered, call));
    Finish(call, recv, rs_out);
    return Status::Ok();
  }

  // Narrows widened results, applies kAvg's division and copies a staged reduce-scatter out.
  void Finish(const CollectiveCall& call, void* recv, const float* rs_out) {
    const float n = static_cast<float>(size_);
    const bool avg = call.reduce == ReduceOp::kAvg;
    if (call.op == CollectiveOp::kAllReduce) {
      if (call.type == DType::kFloat32) {
        if (avg) {
          float* out = static_cast<float*>(recv);
          for (int64_t i = 0; i < call.count; ++i) out[i] /= n;
        }
        return;
      }
      for (int64_t i = 0; i < call.count; ++i) {
        StoreElement(recv, i, call.type, avg ? wide_in_[i] / n : wide_in_[i]);
      }
    } else if (call.op == CollectiveOp::kReduceScatter) {
      if (call.type == DType::kFloat32 && rs_out == recv) {
        if (avg) {
          float* out = static_cast<float*>(recv);
          for (int64_t i = 0; i < call.count; ++i) out[i] /= n;
        }
        return;
      }
      for (int64_t i = 0; i < call.count; ++i) {
        StoreElement(recv, i, call.type, avg ? rs_out[i] / n : rs_out[i]);
      }
    }
  }

  Status Poll(MPI_Request* request, int64_t entered, const CollectiveCall& call) {
    const Clock::time_point start = Clock::now();
    const Clock::time_point deadline = start + timeout_;
    for (int polls = 0;; ++polls) {
      int done = 0;
      int rc = MPI_SUCCESS;
      {
        auto lock = MpiLock();
        rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
        if (rc == MPI_SUCCESS && !done && polls % 64 == 63) HOIST_RETURN_IF_ERROR(DrainNotices());
      }
      if (rc != MPI_SUCCESS) {
        return Fail(MpiError(rc, "MPI_Test", __FILE__, __LINE__)
                        .WithContext(Describe(call, size_) + " on rank " + std::to_string(rank_)));
      }
      if (done) return Status::Ok();
      const Clock::time_point now = Clock::now();
      if (now >= deadline) return Fail(TimeoutError(entered, call));
      Backoff(polls, now - start);
    }
  }

  Status TimeoutError(int64_t entered, const CollectiveCall& call) {
    {
      auto lock = MpiLock();
      (void)DrainNotices();
    }
    std::ostringstream message;
    message << Describe(call, size_) << " on rank " << rank_ << " of " << size_
            << " did not complete within " << timeout_s_ << " s (collective #" << entered - 1
            << "); ranks that did not arrive:";
    std::ostringstream detail;
    std::ostringstream mismatched;
    int missing = 0;
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      const Notice& seen = last_seen_[peer];
      if (seen.entered < entered) {
        ++missing;
        message << " " << peer;
        detail << "; rank " << peer;
        if (seen.entered == 0) {
          detail << " has not entered any collective";
        } else {
          detail << " last entered collective #" << seen.entered - 1 << " "
                 << Describe(CallOf(seen), size_);
        }
      } else if (seen.entered == entered && !(CallOf(seen) == call)) {
        mismatched << "; rank " << peer << " called " << Describe(CallOf(seen), size_);
      }
    }
    if (missing == 0) message << " none (every rank entered it)";
    message << detail.str();
    if (!mismatched.str().empty()) {
      message << "; the ranks disagree on the arguments" << mismatched.str();
    }
    return Status(StatusCode::kDeadlineExceeded, message.str());
  }

  const int rank_;
  const int size_;
  const double timeout_s_;
  const Clock::duration timeout_;

  // Used only by the thread running collectives (the worker, or the owner inline), under
  // MpiLock() where MPI is called.
  MPI_Comm comm_ = MPI_COMM_NULL;         // the collectives
  MPI_Comm notice_comm_ = MPI_COMM_NULL;  // arrival notices
  int64_t entered_ = 0;
  Status failure_;                 // non-OK once a collective failed; the communicator stays broken
  std::vector<Notice> last_seen_;  // per peer: its latest notice
  std::vector<Notice> recv_notice_;  // per peer: the posted receive's buffer
  std::vector<MPI_Request> recv_requests_;
  std::deque<SendBatch> sends_;  // notices not yet known to be sent; deque keeps addresses
  std::vector<float> wide_in_;   // bf16/fp16 reductions: fp32 input (and in-place result)
  std::vector<float> wide_out_;  // reduce-scatter result staged before narrowing
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateMpiCommunicator(const RankEnv& env,
                                                              double timeout_s) {
  if (!(timeout_s > 0)) {
    return InvalidArgumentError("comm timeout must be positive, got " + std::to_string(timeout_s));
  }
  HOIST_RETURN_IF_ERROR(EnsureMpiInitialized(env));
  auto comm = std::make_unique<MpiCommunicator>(env.rank, env.world_size, timeout_s);
  HOIST_RETURN_IF_ERROR(comm->Init());
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace hoist::comm
