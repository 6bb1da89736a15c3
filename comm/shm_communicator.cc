#include "comm/shm_communicator.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <thread>
#include <vector>

#include "comm/collective.h"
#include "comm/queued_communicator.h"
#include "comm/work_queue.h"
#include "core/logging.h"
#include "core/posix_error.h"

namespace hoist::comm {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kMagic = 0x686f697374736d31;  // "hoistsm1"
constexpr uint32_t kVersion = 2;
constexpr int kSpinPolls = 100;   // busy polls before yielding
constexpr int kYieldPolls = 200;  // polls (spin + yield) before sleeping on the futex
constexpr auto kFutexSlice = std::chrono::milliseconds(50);  // re-check deadline and peers
constexpr int64_t kReduceAlign = 16;  // elements; keeps each rank's share vector-friendly

enum RankState : int32_t { kAbsent = 0, kJoined = 1, kLeft = 2 };
enum FailState : int32_t { kHealthy = 0, kWriting = 1, kFailed = 2 };

// One rank's view of the collective it runs, written before its first phase of that collective.
struct Descriptor {
  int64_t entered;
  int64_t count;
  int32_t op;
  int32_t type;
  int32_t reduce;
  int32_t root;
};

struct alignas(64) RankRecord {
  std::atomic<uint64_t> phase;   // phases this rank has published
  std::atomic<int64_t> entered;  // collectives this rank has entered
  std::atomic<int32_t> pid;
  std::atomic<int32_t> state;  // RankState
  Descriptor descriptor[2];    // by collective parity: a peer is at most one collective ahead
};

struct alignas(64) Header {
  std::atomic<uint64_t> magic;  // stored last by the creator
  uint32_t version;
  int32_t world_size;
  int64_t slot_bytes;
  int64_t total_bytes;
  int32_t creator_pid;
  std::atomic<int32_t> attached;
  std::atomic<int32_t> unlinked;            // the name is gone from /dev/shm (or about to be)
  alignas(64) std::atomic<uint32_t> epoch;  // futex word, bumped by every publish
  std::atomic<int32_t> waiters;
  alignas(64) std::atomic<int32_t> fail_state;  // FailState
  int32_t fail_code;
  int32_t fail_is_timeout;  // the failure is a rank's collective timeout
  char fail_message[2048];
};

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

int64_t RoundUp(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

int64_t RecordsOffset() { return RoundUp(sizeof(Header), 64); }
int64_t SlotsOffset(int world_size) {
  return RoundUp(RecordsOffset() + world_size * static_cast<int64_t>(sizeof(RankRecord)), 4096);
}
int64_t SegmentBytes(int world_size, int64_t slot_bytes) {
  return SlotsOffset(world_size) + (world_size + 1) * slot_bytes;
}

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

bool ProcessGone(int32_t pid) { return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH; }

class ShmCommunicator : public QueuedCommunicator {
 public:
  ShmCommunicator(const ShmOptions& options, std::string name)
      : options_(options),
        name_(std::move(name)),
        timeout_(std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(options.timeout_s))) {}

  ~ShmCommunicator() override {
    queue_.reset();
    if (base_ == nullptr) return;
    Record(options_.rank).state.store(kLeft);
    // Normally done when the last rank attached; here for a group that never assembled.
    if (header_->attached.fetch_sub(1) == 1) Unlink();
    munmap(base_, static_cast<size_t>(bytes_));
  }

  Status Join() {
    bytes_ = SegmentBytes(options_.world_size, options_.slot_bytes);
    const Clock::time_point deadline = Clock::now() + timeout_;
    if (options_.rank == 0) {
      HOIST_RETURN_IF_ERROR(CreateSegment());
    } else {
      HOIST_RETURN_IF_ERROR(OpenSegment(deadline));
    }
    RankRecord& mine = Record(options_.rank);
    mine.pid.store(getpid());
    mine.state.store(kJoined);
    // Every rank has mapped the segment once the last one attaches; nobody needs its name any
    // more, and without a name a crash of any process cannot leave it in /dev/shm.
    if (header_->attached.fetch_add(1) + 1 == options_.world_size) Unlink();
    queue_ = std::make_unique<WorkQueue>();
    return Status::Ok();
  }

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }

  void Abort(const Status& reason, int exit_code) override {
    HOIST_LOG(ERROR) << "rank " << options_.rank << " of " << options_.world_size
                     << " aborts the job (exit code " << exit_code << "): " << reason.ToString();
    FailGroup(Status(reason.code(), "rank " + std::to_string(options_.rank) +
                                        " aborted the job: " + reason.message()));
    std::fflush(nullptr);
    std::_Exit(exit_code);
  }

 private:
  RankRecord& Record(int rank) {
    return reinterpret_cast<RankRecord*>(base_ + RecordsOffset())[rank];
  }
  unsigned char* Slot(int rank) {
    return base_ + SlotsOffset(options_.world_size) + rank * options_.slot_bytes;
  }
  unsigned char* ResultSlot() { return Slot(options_.world_size); }

  // Removes the segment's name once per group: a second shm_unlink could remove the segment of
  // a later job with the same HOIST_JOB_ID.
  void Unlink() {
    if (header_->unlinked.exchange(1) == 0) shm_unlink(name_.c_str());
  }

  Status Map(int fd) {
    void* p = mmap(nullptr, static_cast<size_t>(bytes_), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return PosixError("mmap", name_, errno);
    base_ = static_cast<unsigned char*>(p);
    header_ = reinterpret_cast<Header*>(base_);
    return Status::Ok();
  }

  Status CreateSegment() {
    int fd = shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 && errno == EEXIST) {
      HOIST_LOG(WARN) << "removing the stale shared-memory segment " << name_
                      << " left by an earlier run with the same HOIST_JOB_ID";
      shm_unlink(name_.c_str());
      fd = shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    }
    if (fd < 0) return PosixError("shm_open", name_, errno);
    if (ftruncate(fd, bytes_) != 0) {
      const int error = errno;
      close(fd);
      shm_unlink(name_.c_str());
      return PosixError("ftruncate to " + std::to_string(bytes_) +
                            " bytes (is /dev/shm large "
                            "enough? lower slot_bytes or enlarge it)",
                        name_, error);
    }
    Status mapped = Map(fd);
    close(fd);
    if (!mapped.ok()) {
      shm_unlink(name_.c_str());
      return mapped;
    }
    // ftruncate zero-filled the segment: every atomic starts at 0.
    header_->version = kVersion;
    header_->world_size = options_.world_size;
    header_->slot_bytes = options_.slot_bytes;
    header_->total_bytes = bytes_;
    header_->creator_pid = getpid();
    header_->magic.store(kMagic, std::memory_order_release);
    return Status::Ok();
  }

  // Waits for rank 0's segment; a leftover one (its creator gone) is skipped until rank 0
  // replaces it.
  Status OpenSegment(Clock::time_point deadline) {
    std::string last_problem = "it does not exist yet";
    while (true) {
      int fd = shm_open(name_.c_str(), O_RDWR, 0600);
      if (fd >= 0) {
        struct stat st = {};
        if (fstat(fd, &st) == 0 && st.st_size == bytes_) {
          Status mapped = Map(fd);
          close(fd);
          HOIST_RETURN_IF_ERROR(mapped);
          if (header_->magic.load(std::memory_order_acquire) == kMagic) {
            Status usable = CheckSegment();
            if (usable.ok()) return usable;
            if (usable.code() != StatusCode::kUnavailable) return usable;
            last_problem = usable.message();
          } else {
            last_problem = "rank 0 has not finished creating it";
          }
          munmap(base_, static_cast<size_t>(bytes_));
          base_ = nullptr;
          header_ = nullptr;
        } else {
          close(fd);
          last_problem = "its size is not the " + std::to_string(bytes_) + " bytes expected";
        }
      } else if (errno != ENOENT) {
        return PosixError("shm_open", name_, errno);
      }
      if (Clock::now() >= deadline) {
        return Status(StatusCode::kDeadlineExceeded,
                      "rank " + std::to_string(options_.rank) + " of " +
                          std::to_string(options_.world_size) + " waited " +
                          std::to_string(options_.timeout_s) +
                          " s for rank 0's shared-memory segment " + name_ + ", but " +
                          last_problem + "; is rank 0 running with the same HOIST_JOB_ID?");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // kUnavailable: a stale segment to skip; other codes: a real mismatch.
  Status CheckSegment() {
    if (ProcessGone(header_->creator_pid)) {
      return UnavailableError("it was left by an earlier run (its creator, pid " +
                              std::to_string(header_->creator_pid) + ", is gone)");
    }
    if (header_->version != kVersion || header_->world_size != options_.world_size ||
        header_->slot_bytes != options_.slot_bytes) {
      return FailedPreconditionError(
          "shared-memory segment " + name_ + " is for " + std::to_string(header_->world_size) +
          " ranks with " + std::to_string(header_->slot_bytes) + "-byte slots (version " +
          std::to_string(header_->version) + "), but rank " + std::to_string(options_.rank) +
          " expects " + std::to_string(options_.world_size) + " ranks with " +
          std::to_string(options_.slot_bytes) +
          "-byte slots; do all ranks run the same build "
          "with the same WORLD_SIZE?");
    }
    const RankRecord& mine = Record(options_.rank);
    const int32_t holder = mine.pid.load();
    if (mine.state.load() == kJoined && holder != getpid() && !ProcessGone(holder)) {
      return FailedPreconditionError("rank " + std::to_string(options_.rank) +
                                     " of shared-memory segment " + name_ +
                                     " is already held by pid " + std::to_string(holder) +
                                     "; two processes have the same RANK");
    }
    return Status::Ok();
  }

  // Records the first failure in the segment and wakes every waiting rank.
  void FailGroup(const Status& status, bool timeout = false) {
    int32_t expected = kHealthy;
    if (header_->fail_state.compare_exchange_strong(expected, kWriting)) {
      header_->fail_code = static_cast<int32_t>(status.code());
      header_->fail_is_timeout = timeout ? 1 : 0;
      std::snprintf(header_->fail_message, sizeof(header_->fail_message), "%s",
                    status.message().c_str());
      header_->fail_state.store(kFailed, std::memory_order_release);
    }
    header_->epoch.fetch_add(1);
    Futex(&header_->epoch, FUTEX_WAKE, INT_MAX, nullptr);
  }

  // The group's recorded failure, once another rank has written it.
  Status GroupFailure() {
    while (header_->fail_state.load(std::memory_order_acquire) == kWriting) sched_yield();
    return Status(static_cast<StatusCode>(header_->fail_code), header_->fail_message);
  }

  Status Fail(const Status& status) {
    FailGroup(status);
    return status;
  }

  void Publish() {
    Record(options_.rank).phase.store(++phase_, std::memory_order_release);
    header_->epoch.fetch_add(1);
    if (header_->waiters.load() > 0) Futex(&header_->epoch, FUTEX_WAKE, INT_MAX, nullptr);
  }

  bool AllReached(uint64_t phase) {
    for (int q = 0; q < options_.world_size; ++q) {
      if (Record(q).phase.load(std::memory_order_acquire) < phase) return false;
    }
    return true;
  }

  // Waits until every rank has published this rank's current phase.
  Status WaitAll(const CollectiveCall& call, int64_t entered, Clock::time_point deadline) {
    Clock::time_point next_peer_check = Clock::now() + kFutexSlice;
    for (int polls = 0;; ++polls) {
      const uint32_t epoch = header_->epoch.load();
      if (AllReached(phase_)) return Status::Ok();
      if (header_->fail_state.load() != kHealthy) {
        Status failure = GroupFailure();
        // A peer timed out in the collective this rank waits in too: report it from here, with
        // this rank's own view of who is missing.
        if (header_->fail_is_timeout) return TimeoutError(call, entered);
        return failure;
      }
      const Clock::time_point now = Clock::now();
      if (now >= deadline) {
        Status timeout = TimeoutError(call, entered);
        FailGroup(timeout, /*timeout=*/true);
        return timeout;
      }
      if (polls < kSpinPolls) continue;
      if (polls < kYieldPolls) {
        sched_yield();
        continue;
      }
      if (now >= next_peer_check) {
        next_peer_check = now + kFutexSlice;
        HOIST_RETURN_IF_ERROR(CheckPeersAlive(call));
      }
      const auto slice = std::min<Clock::duration>(deadline - now, kFutexSlice);
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(slice).count();
      const timespec timeout{static_cast<time_t>(ns / 1000000000),
                             static_cast<long>(ns % 1000000000)};
      header_->waiters.fetch_add(1);
      Futex(&header_->epoch, FUTEX_WAIT, epoch, &timeout);
      header_->waiters.fetch_sub(1);
    }
  }

  Status CheckPeersAlive(const CollectiveCall& call) {
    for (int q = 0; q < options_.world_size; ++q) {
      const RankRecord& record = Record(q);
      const int32_t pid = record.pid.load();
      const int32_t state = record.state.load();
      if (q == options_.rank || state == kAbsent) continue;
      if (state == kLeft || ProcessGone(pid)) {
        return Fail(UnavailableError("rank " + std::to_string(q) + " (pid " + std::to_string(pid) +
                                     ") " + (state == kLeft ? "left the job" : "exited") +
                                     " while rank " + std::to_string(options_.rank) +
                                     " waited in " + Describe(call, options_.world_size) +
                                     "; the job cannot continue without it"));
      }
    }
    return Status::Ok();
  }

  Status TimeoutError(const CollectiveCall& call, int64_t entered) {
    std::ostringstream message;
    message << Describe(call, options_.world_size) << " on rank " << options_.rank << " of "
            << options_.world_size << " did not complete within " << options_.timeout_s
            << " s (collective #" << entered - 1 << "); ranks that did not arrive:";
    std::ostringstream behind;
    int missing = 0;
    for (int q = 0; q < options_.world_size; ++q) {
      const RankRecord& record = Record(q);
      if (record.entered.load() < entered) {
        ++missing;
        message << " " << q;
      } else if (record.phase.load() < phase_) {
        behind << " " << q;
      }
    }
    if (missing == 0) message << " none";
    if (!behind.str().empty()) message << "; ranks stalled inside it:" << behind.str();
    return Status(StatusCode::kDeadlineExceeded, message.str());
  }

  // After the first phase: every rank must have entered the same collective with equal arguments.
  Status CheckDescriptors(const CollectiveCall& call, int64_t entered) {
    const int parity = static_cast<int>(entered & 1);
    for (int q = 0; q < options_.world_size; ++q) {
      const Descriptor& d = Record(q).descriptor[parity];
      const CollectiveCall theirs{static_cast<CollectiveOp>(d.op), d.count,
                                  static_cast<DType>(d.type), static_cast<ReduceOp>(d.reduce),
                                  d.root};
      if (d.entered != entered || !(theirs == call)) {
        return Fail(InvalidArgumentError(
            "mismatched collective #" + std::to_string(entered - 1) + ": rank " +
            std::to_string(options_.rank) + " called " + Describe(call, options_.world_size) +
            " but rank " + std::to_string(q) + " called " +
            (d.entered == entered ? Describe(theirs, options_.world_size)
                                  : "collective #" + std::to_string(d.entered - 1))));
      }
    }
    return Status::Ok();
  }

  Status Execute(const CollectiveCall& call, const void* send, void* recv) override {
    if (header_->fail_state.load() != kHealthy) {
      Status failure = GroupFailure();
      return Status(failure.code(),
                    "comm group unusable after an earlier failure: " + failure.message());
    }
    if (Status valid = ValidateCall(call, options_.rank, options_.world_size, send, recv);
        !valid.ok()) {
      return Fail(valid);
    }
    const Clock::time_point deadline = Clock::now() + timeout_;
    const int64_t entered = ++entered_;
    RankRecord& mine = Record(options_.rank);
    mine.descriptor[entered & 1] = Descriptor{entered,
                                              call.count,
                                              static_cast<int32_t>(call.op),
                                              static_cast<int32_t>(call.type),
                                              static_cast<int32_t>(call.reduce),
                                              call.root};
    mine.entered.store(entered, std::memory_order_release);

    const int n = options_.world_size;
    const int r = options_.rank;
    const int64_t element = static_cast<int64_t>(DTypeSize(call.type));
    const int64_t slot_elements = options_.slot_bytes / element;
    const int64_t chunk =
        call.op == CollectiveOp::kReduceScatter ? slot_elements / n : slot_elements;
    bool first = true;
    // One pass even for zero elements, so that every rank meets every collective.
    for (int64_t offset = 0; first || offset < call.count; offset += chunk) {
      const int64_t m = std::min(chunk, call.count - offset);
      const int64_t bytes = m * element;
      auto* in_base = static_cast<const unsigned char*>(send);
      auto* out_base = static_cast<unsigned char*>(recv);
      switch (call.op) {
        case CollectiveOp::kBarrier: break;
        case CollectiveOp::kAllReduce:
        case CollectiveOp::kAllGather:
          if (bytes > 0) std::memcpy(Slot(r), in_base + offset * element, bytes);
          break;
        case CollectiveOp::kBroadcast:
          if (r == call.root && bytes > 0) std::memcpy(Slot(r), in_base + offset * element, bytes);
          break;
        case CollectiveOp::kReduceScatter:
          for (int q = 0; q < n && bytes > 0; ++q) {
            std::memcpy(Slot(r) + q * bytes, in_base + (q * call.count + offset) * element, bytes);
          }
          break;
      }
      Publish();
      HOIST_RETURN_IF_ERROR(WaitAll(call, entered, deadline));
      if (first) {
        HOIST_RETURN_IF_ERROR(CheckDescriptors(call, entered));
        first = false;
      }
      std::vector<const void*> inputs(n);
      switch (call.op) {
        case CollectiveOp::kBarrier: break;
        case CollectiveOp::kAllReduce: {
          // This rank's share of the chunk, reduced into the result slot.
          const int64_t share = RoundUp((m + n - 1) / n, kReduceAlign);
          const int64_t lo = std::min(m, r * share);
          const int64_t hi = std::min(m, lo + share);
          for (int q = 0; q < n; ++q) inputs[q] = Slot(q) + lo * element;
          if (hi > lo) {
            ReduceInRankOrder(inputs.data(), n, ResultSlot() + lo * element, hi - lo, call.type,
                              call.reduce);
          }
          Publish();
          HOIST_RETURN_IF_ERROR(WaitAll(call, entered, deadline));
          if (bytes > 0) std::memcpy(out_base + offset * element, ResultSlot(), bytes);
          break;
        }
        case CollectiveOp::kReduceScatter:
          for (int q = 0; q < n; ++q) inputs[q] = Slot(q) + r * bytes;
          if (m > 0) {
            ReduceInRankOrder(inputs.data(), n, out_base + offset * element, m, call.type,
                              call.reduce);
          }
          break;
        case CollectiveOp::kAllGather:
          for (int q = 0; q < n && bytes > 0; ++q) {
            unsigned char* dst = out_base + (q * call.count + offset) * element;
            if (dst != Slot(q) && !(q == r && dst == in_base + offset * element)) {
              std::memcpy(dst, Slot(q), bytes);
            }
          }
          break;
        case CollectiveOp::kBroadcast:
          if (r != call.root && bytes > 0) {
            std::memcpy(out_base + offset * element, Slot(call.root), bytes);
          }
          break;
      }
      if (call.op == CollectiveOp::kBarrier) break;
      // Nobody may overwrite a slot (or, for all-reduce, the result) until every rank has read it:
      // the all-reduce's next first phase waits for this publish, the others wait here.
      Publish();
      if (call.op != CollectiveOp::kAllReduce) {
        HOIST_RETURN_IF_ERROR(WaitAll(call, entered, deadline));
      }
    }
    return Status::Ok();
  }

  const ShmOptions options_;
  const std::string name_;
  const Clock::duration timeout_;
  int64_t bytes_ = 0;
  unsigned char* base_ = nullptr;  // the mapped segment
  Header* header_ = nullptr;
  // Used only by the thread running collectives.
  uint64_t phase_ = 0;
  int64_t entered_ = 0;
};

}  // namespace

StatusOr<std::string> ShmSegmentName(const std::string& job_id) {
  if (job_id.empty() || job_id.size() > 200) {
    return InvalidArgumentError("HOIST_JOB_ID must hold 1 to 200 characters, got " +
                                std::to_string(job_id.size()));
  }
  for (char c : job_id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      return InvalidArgumentError("HOIST_JOB_ID='" + job_id +
                                  "' may hold only letters, digits, '.', '_' and '-'");
    }
  }
  return "/hoist-" + job_id;
}

StatusOr<std::unique_ptr<Communicator>> CreateShmCommunicator(const ShmOptions& options) {
  HOIST_ASSIGN_OR_RETURN(std::string name, ShmSegmentName(options.job_id));
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return InvalidArgumentError("shared-memory comm: rank " + std::to_string(options.rank) +
                                " is outside a world of " + std::to_string(options.world_size));
  }
  if (!(options.timeout_s > 0)) {
    return InvalidArgumentError("comm timeout must be positive, got " +
                                std::to_string(options.timeout_s));
  }
  // A slot must hold one element of every rank's block for a reduce-scatter chunk.
  const int64_t min_slot = int64_t{4} * kReduceAlign * options.world_size;
  if (options.slot_bytes < min_slot || options.slot_bytes % 64 != 0) {
    return InvalidArgumentError(
        "shared-memory comm: slot_bytes " + std::to_string(options.slot_bytes) +
        " must be a multiple of 64 and at least " + std::to_string(min_slot) + " for " +
        std::to_string(options.world_size) + " ranks");
  }
  auto comm = std::make_unique<ShmCommunicator>(options, std::move(name));
  HOIST_RETURN_IF_ERROR(comm->Join());
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace hoist::comm
