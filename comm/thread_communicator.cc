#include "comm/thread_communicator.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>

#include "comm/collective.h"
#include "comm/work_queue.h"
#include "core/check.h"
#include "core/logging.h"

namespace hoist::comm {
namespace {

using Op = CollectiveOp;
using Call = CollectiveCall;

}  // namespace

class ThreadGroup::State {
 public:
  State(int world_size, double timeout_s)
      : world_size_(world_size),
        timeout_(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(timeout_s))),
        timeout_s_(timeout_s),
        present_(world_size, false),
        send_(world_size, nullptr),
        recv_(world_size, nullptr) {}

  int world_size() const { return world_size_; }

  Status Run(int rank, const Call& call, const void* send, void* recv) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    std::unique_lock<std::mutex> lock(mu_);
    if (!failure_.ok()) {
      return Status(failure_.code(),
                    "comm group unusable after an earlier failure: " + failure_.message());
    }
    if (Status valid = ValidateCall(call, rank, world_size_, send, recv); !valid.ok()) {
      return Fail(valid);
    }
    if (arrived_ == 0) {
      call_ = call;
      first_rank_ = rank;
    } else if (!(call == *call_)) {
      return Fail(InvalidArgumentError(
          "mismatched collective #" + std::to_string(completed_) + ": rank " +
          std::to_string(first_rank_) + " called " + Describe(*call_, world_size_) + " but rank " +
          std::to_string(rank) + " called " + Describe(call, world_size_)));
    }
    present_[rank] = true;
    send_[rank] = send;
    recv_[rank] = recv;
    const uint64_t generation = completed_;
    if (++arrived_ == world_size_) {
      Execute();
      arrived_ = 0;
      std::fill(present_.begin(), present_.end(), false);
      call_.reset();
      ++completed_;
      cv_.notify_all();
      return Status::Ok();
    }
    cv_.wait_until(lock, deadline, [&] { return completed_ != generation || !failure_.ok(); });
    if (completed_ != generation) return Status::Ok();
    if (!failure_.ok() && (aborted_ || failure_.code() != StatusCode::kDeadlineExceeded)) {
      return failure_;
    }
    // This rank's own deadline passed, or a peer's did first: either way report from here.
    std::ostringstream message;
    message << Describe(call, world_size_) << " on rank " << rank << " of " << world_size_
            << " did not complete within " << timeout_s_ << " s (collective #" << generation
            << "); ranks that did not arrive:";
    for (int r = 0; r < world_size_; ++r) {
      if (!present_[r]) message << " " << r;
    }
    Status timeout(StatusCode::kDeadlineExceeded, message.str());
    if (failure_.ok()) return Fail(timeout);
    return timeout;
  }

  // Marks the group failed because `rank` gave up; every waiting and later call fails with it.
  void Abort(int rank, const Status& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return;  // the first failure is the one worth reporting
    aborted_ = true;
    (void)Fail(Status(reason.code(), "rank " + std::to_string(rank) +
                                         " aborted the comm group: " + reason.message()));
  }

 private:
  // Records the group's failure and wakes every waiting rank so it reports too.
  Status Fail(Status status) {
    failure_ = status;
    cv_.notify_all();
    return status;
  }

  // Runs with the lock held and every rank present. Each result is computed into scratch before
  // any output is written, so outputs may alias inputs.
  void Execute() {
    const Call& call = *call_;
    const int64_t n = call.count;
    const size_t element = DTypeSize(call.type);
    switch (call.op) {
      case Op::kBarrier: return;
      case Op::kAllReduce:
        Reduce(call, /*block=*/0);
        for (int r = 0; r < world_size_; ++r) WriteAccumulator(call, recv_[r], 0);
        return;
      case Op::kReduceScatter:
        accumulator_.resize(static_cast<size_t>(n * world_size_));
        for (int block = 0; block < world_size_; ++block) Reduce(call, block);
        for (int r = 0; r < world_size_; ++r) WriteAccumulator(call, recv_[r], r * n);
        return;
      case Op::kAllGather: {
        const size_t block_bytes = static_cast<size_t>(n) * element;
        staging_.resize(block_bytes * world_size_);
        for (int r = 0; r < world_size_; ++r) {
          if (block_bytes > 0)
            std::memcpy(staging_.data() + r * block_bytes, send_[r], block_bytes);
        }
        for (int r = 0; r < world_size_; ++r) {
          if (!staging_.empty()) std::memcpy(recv_[r], staging_.data(), staging_.size());
        }
        return;
      }
      case Op::kBroadcast: {
        const size_t bytes = static_cast<size_t>(n) * element;
        for (int r = 0; r < world_size_; ++r) {
          if (r != call.root && bytes > 0 && recv_[r] != recv_[call.root]) {
            std::memcpy(recv_[r], recv_[call.root], bytes);
          }
        }
        return;
      }
    }
  }

  // accumulator_[block * count + i] = reduction over ranks (in rank order) of element
  // block * count + i of each rank's send buffer.
  void Reduce(const Call& call, int block) {
    const int64_t n = call.count;
    const int64_t offset = block * n;
    if (accumulator_.size() < static_cast<size_t>(offset + n)) {
      accumulator_.resize(static_cast<size_t>(offset + n));
    }
    for (int64_t i = 0; i < n; ++i) {
      float sum = LoadElement(send_[0], offset + i, call.type);
      for (int r = 1; r < world_size_; ++r) sum += LoadElement(send_[r], offset + i, call.type);
      if (call.reduce == ReduceOp::kAvg) sum /= static_cast<float>(world_size_);
      accumulator_[offset + i] = sum;
    }
  }

  void WriteAccumulator(const Call& call, void* out, int64_t offset) {
    for (int64_t i = 0; i < call.count; ++i)
      StoreElement(out, i, call.type, accumulator_[offset + i]);
  }

  const int world_size_;
  const std::chrono::steady_clock::duration timeout_;
  const double timeout_s_;

  std::mutex mu_;
  std::condition_variable cv_;
  // Everything below is guarded by mu_.
  uint64_t completed_ = 0;  // collectives completed; the generation of the one in progress
  int arrived_ = 0;
  int first_rank_ = 0;
  std::optional<Call> call_;
  std::vector<bool> present_;
  std::vector<const void*> send_;
  std::vector<void*> recv_;
  Status failure_;        // non-OK once the group is broken; it stays broken
  bool aborted_ = false;  // failure_ came from Abort: waiting ranks report it as is
  std::vector<float> accumulator_;
  std::vector<unsigned char> staging_;
};

namespace {

class ThreadCommunicator : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadGroup::State> state, int rank)
      : state_(std::move(state)), rank_(rank) {}

  int rank() const override { return rank_; }
  int world_size() const override { return state_->world_size(); }

  Status AllReduce(void* buf, int64_t count, DType type, ReduceOp op) override {
    return queue_.Run(AllReduceTask(buf, count, type, op));
  }
  Status ReduceScatter(const void* send, void* recv, int64_t recv_count, DType type,
                       ReduceOp op) override {
    return queue_.Run(ReduceScatterTask(send, recv, recv_count, type, op));
  }
  Status AllGather(const void* send, void* recv, int64_t send_count, DType type) override {
    return queue_.Run(AllGatherTask(send, recv, send_count, type));
  }
  Status Broadcast(void* buf, int64_t count, DType type, int root) override {
    return queue_.Run(BroadcastTask(buf, count, type, root));
  }
  Status Barrier() override {
    return queue_.Run([this] { return state_->Run(rank_, Call{}, nullptr, nullptr); });
  }
  Status OrderAfter(const Stream& producer) override { return queue_.OrderAfter(producer); }

  CommHandle AllReduceAsync(void* buf, int64_t count, DType type, ReduceOp op) override {
    return queue_.Submit(AllReduceTask(buf, count, type, op));
  }
  CommHandle ReduceScatterAsync(const void* send, void* recv, int64_t recv_count, DType type,
                                ReduceOp op) override {
    return queue_.Submit(ReduceScatterTask(send, recv, recv_count, type, op));
  }
  CommHandle AllGatherAsync(const void* send, void* recv, int64_t send_count, DType type) override {
    return queue_.Submit(AllGatherTask(send, recv, send_count, type));
  }
  CommHandle BroadcastAsync(void* buf, int64_t count, DType type, int root) override {
    return queue_.Submit(BroadcastTask(buf, count, type, root));
  }

  void Abort(const Status& reason, int exit_code) override {
    HOIST_LOG(ERROR) << "rank " << rank_ << " aborts the thread comm group (exit code " << exit_code
                     << " is not used: the ranks are threads of one process): "
                     << reason.ToString();
    state_->Abort(rank_, reason);
  }

 private:
  std::function<Status()> AllReduceTask(void* buf, int64_t count, DType type, ReduceOp op) {
    return [=, this] { return state_->Run(rank_, {Op::kAllReduce, count, type, op, 0}, buf, buf); };
  }
  std::function<Status()> ReduceScatterTask(const void* send, void* recv, int64_t recv_count,
                                            DType type, ReduceOp op) {
    return [=, this] {
      return state_->Run(rank_, {Op::kReduceScatter, recv_count, type, op, 0}, send, recv);
    };
  }
  std::function<Status()> AllGatherTask(const void* send, void* recv, int64_t send_count,
                                        DType type) {
    return [=, this] {
      return state_->Run(rank_, {Op::kAllGather, send_count, type, ReduceOp::kSum, 0}, send, recv);
    };
  }
  std::function<Status()> BroadcastTask(void* buf, int64_t count, DType type, int root) {
    return [=, this] {
      return state_->Run(rank_, {Op::kBroadcast, count, type, ReduceOp::kSum, root}, buf, buf);
    };
  }

  std::shared_ptr<ThreadGroup::State> state_;
  const int rank_;
  WorkQueue queue_;  // last: its worker runs tasks that use the members above
};

}  // namespace

StatusOr<std::unique_ptr<ThreadGroup>> ThreadGroup::Create(int world_size, double timeout_s) {
  if (world_size < 1) {
    return InvalidArgumentError("thread group needs at least one rank, got " +
                                std::to_string(world_size));
  }
  if (!(timeout_s > 0)) {
    return InvalidArgumentError("comm timeout must be positive, got " + std::to_string(timeout_s));
  }
  std::unique_ptr<ThreadGroup> group(new ThreadGroup());
  group->state_ = std::make_shared<State>(world_size, timeout_s);
  for (int r = 0; r < world_size; ++r) {
    group->comms_.push_back(std::make_unique<ThreadCommunicator>(group->state_, r));
  }
  return group;
}

ThreadGroup::~ThreadGroup() = default;

Communicator& ThreadGroup::comm(int rank) {
  HOIST_CHECK(rank >= 0 && rank < world_size()) << "rank " << rank << " of " << world_size();
  return *comms_[rank];
}

}  // namespace hoist::comm
