// The shared-memory backend, with ranks as forked processes of this test.
#include "comm/shm_communicator.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/half.h"

namespace hoist::comm {
namespace {

constexpr double kTimeoutS = 20.0;
// Small slots, so that every collective below runs in several chunks.
constexpr int64_t kSlotBytes = 1024;

std::string UniqueJobId() {
  static int counter = 0;
  return "test-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

// Whether the job's segment has a name in /dev/shm.
bool SegmentExists(const std::string& job) {
  const int fd = shm_open(ShmSegmentName(job).value().c_str(), O_RDONLY, 0);
  if (fd < 0) return errno != ENOENT;
  close(fd);
  return true;
}

// Whether the job left its segment behind (what a crashed job must not do); removes it, so that
// a failing test does not leak it either.
bool LeftBehind(const std::string& job) {
  const bool exists = SegmentExists(job);
  if (exists) shm_unlink(ShmSegmentName(job).value().c_str());
  return exists;
}

struct Outcome {
  int exit_code = -1;   // -1: killed or did not exit
  std::string message;  // what the child reported
};

// Forks one process per rank; body(rank) returns "" on success or what went wrong. The parent
// collects each child's exit code and message; children still running after `limit_s` are
// killed. `hold` ranks wait (blocked on a pipe) until every other rank exited, then are killed.
std::vector<Outcome> RunProcesses(int n, const std::function<std::string(int)>& body,
                                  const std::vector<int>& hold = {}, double limit_s = 60) {
  std::vector<pid_t> pids(n);
  std::vector<int> reads(n);
  for (int r = 0; r < n; ++r) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      const std::string message = body(r);
      if (!message.empty() && write(fds[1], message.data(), message.size()) < 0) _exit(3);
      close(fds[1]);
      _exit(message.empty() ? 0 : 1);
    }
    close(fds[1]);
    pids[r] = pid;
    reads[r] = fds[0];
  }
  std::vector<Outcome> outcomes(n);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  std::vector<bool> done(n, false);
  int remaining = n;
  auto is_held = [&](int r) { return std::find(hold.begin(), hold.end(), r) != hold.end(); };
  while (remaining > 0) {
    bool only_held_left = true;
    for (int r = 0; r < n; ++r) {
      if (done[r]) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        done[r] = true;
        --remaining;
        outcomes[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      } else if (!is_held(r)) {
        only_held_left = false;
      }
    }
    if (remaining > 0 && (only_held_left || std::chrono::steady_clock::now() > deadline)) {
      for (int r = 0; r < n; ++r) {
        if (!done[r]) kill(pids[r], SIGKILL);
      }
    }
    if (remaining > 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int r = 0; r < n; ++r) {
    char buffer[4096];
    ssize_t got;
    while ((got = read(reads[r], buffer, sizeof(buffer))) > 0)
      outcomes[r].message.append(buffer, got);
    close(reads[r]);
  }
  return outcomes;
}

void ExpectAllSucceeded(const std::vector<Outcome>& outcomes) {
  for (size_t r = 0; r < outcomes.size(); ++r) {
    EXPECT_EQ(outcomes[r].exit_code, 0) << "rank " << r << ": " << outcomes[r].message;
  }
}

std::unique_ptr<Communicator> Join(const std::string& job, int rank, int n,
                                   double timeout_s = kTimeoutS, std::string* error = nullptr) {
  ShmOptions options;
  options.job_id = job;
  options.rank = rank;
  options.world_size = n;
  options.timeout_s = timeout_s;
  options.slot_bytes = kSlotBytes;
  auto comm = CreateShmCommunicator(options);
  if (!comm.ok()) {
    if (error != nullptr) *error = comm.status().ToString();
    return nullptr;
  }
  return std::move(comm).value();
}

float Value(int rank, int64_t i) {
  return static_cast<float>(0.1 * (rank + 1) - 0.37 * i + 1.0 / 3);
}

uint16_t Encode(float v, DType type) {
  return type == DType::kBFloat16 ? FloatToBFloat16(v) : FloatToHalf(v);
}
float Decode(uint16_t bits, DType type) {
  return type == DType::kBFloat16 ? BFloat16ToFloat(bits) : HalfToFloat(bits);
}

// Rank r's input element i of `type`, as the bits it stores.
std::vector<unsigned char> Input(int rank, int64_t count, DType type) {
  std::vector<unsigned char> out(count * DTypeSize(type));
  for (int64_t i = 0; i < count; ++i) {
    if (type == DType::kFloat32) {
      const float v = Value(rank, i);
      std::memcpy(out.data() + 4 * i, &v, 4);
    } else {
      const uint16_t v = Encode(Value(rank, i), type);
      std::memcpy(out.data() + 2 * i, &v, 2);
    }
  }
  return out;
}

float Element(const std::vector<unsigned char>& buf, int64_t i, DType type) {
  if (type == DType::kFloat32) {
    float v;
    std::memcpy(&v, buf.data() + 4 * i, 4);
    return v;
  }
  uint16_t v;
  std::memcpy(&v, buf.data() + 2 * i, 2);
  return Decode(v, type);
}

// The contract, written out: the fp32 sum in rank order, / n for avg, one rounding; as bits.
std::vector<unsigned char> Reference(int n, int64_t offset, int64_t count, DType type,
                                     ReduceOp op) {
  std::vector<std::vector<unsigned char>> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(Input(r, offset + count, type));
  std::vector<unsigned char> out(count * DTypeSize(type));
  for (int64_t i = 0; i < count; ++i) {
    float sum = Element(inputs[0], offset + i, type);
    for (int r = 1; r < n; ++r) sum += Element(inputs[r], offset + i, type);
    if (op == ReduceOp::kAvg) sum /= static_cast<float>(n);
    if (type == DType::kFloat32) {
      std::memcpy(out.data() + 4 * i, &sum, 4);
    } else {
      const uint16_t bits = Encode(sum, type);
      std::memcpy(out.data() + 2 * i, &bits, 2);
    }
  }
  return out;
}

class ShmWorldTest : public ::testing::TestWithParam<int> {};

std::string WorldSizeName(const ::testing::TestParamInfo<int>& info) {
  std::string name = "N";
  name.append(std::to_string(info.param));
  return name;
}

INSTANTIATE_TEST_SUITE_P(Ranks, ShmWorldTest, ::testing::Values(1, 2, 3, 4), WorldSizeName);

// 301 elements: uneven, and several chunks of a 1 KiB slot.
constexpr int64_t kCount = 301;

TEST_P(ShmWorldTest, EveryOpDtypeAndReduceOpMatchesTheRankOrderReferenceBitForBit) {
  const int n = GetParam();
  const std::string job = UniqueJobId();
  ExpectAllSucceeded(RunProcesses(n, [&](int r) -> std::string {
    std::string error;
    auto comm = Join(job, r, n, kTimeoutS, &error);
    if (!comm) return error;
    for (DType type : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
      const std::string where = std::string(DTypeName(type)) + " rank " + std::to_string(r);
      const size_t element = DTypeSize(type);
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        auto buf = Input(r, kCount, type);
        Status s = comm->AllReduce(buf.data(), kCount, type, op);
        if (!s.ok()) return "AllReduce: " + s.ToString();
        if (buf != Reference(n, 0, kCount, type, op)) {
          return "AllReduce " + std::string(ReduceOpName(op)) + " differs, " + where;
        }
        auto send = Input(r, kCount * n, type);
        std::vector<unsigned char> recv(kCount * element, 0xee);
        s = comm->ReduceScatter(send.data(), recv.data(), kCount, type, op);
        if (!s.ok()) return "ReduceScatter: " + s.ToString();
        if (recv != Reference(n, r * kCount, kCount, type, op)) {
          return "ReduceScatter " + std::string(ReduceOpName(op)) + " differs, " + where;
        }
      }
      auto mine = Input(r, kCount, type);
      std::vector<unsigned char> gathered(kCount * element * n, 0xee);
      Status s = comm->AllGather(mine.data(), gathered.data(), kCount, type);
      if (!s.ok()) return "AllGather: " + s.ToString();
      for (int q = 0; q < n; ++q) {
        if (std::memcmp(gathered.data() + q * kCount * element, Input(q, kCount, type).data(),
                        kCount * element) != 0) {
          return "AllGather block " + std::to_string(q) + " differs, " + where;
        }
      }
      for (int root = 0; root < n; ++root) {
        auto buf = Input(r, kCount, type);
        s = comm->Broadcast(buf.data(), kCount, type, root);
        if (!s.ok()) return "Broadcast: " + s.ToString();
        if (buf != Input(root, kCount, type)) {
          return "Broadcast from " + std::to_string(root) + " differs, " + where;
        }
      }
      s = comm->Barrier();
      if (!s.ok()) return "Barrier: " + s.ToString();
    }
    return "";
  }));
}

TEST_P(ShmWorldTest, InPlaceAllGatherAndZeroCountCollectives) {
  const int n = GetParam();
  const std::string job = UniqueJobId();
  ExpectAllSucceeded(RunProcesses(n, [&](int r) -> std::string {
    std::string error;
    auto comm = Join(job, r, n, kTimeoutS, &error);
    if (!comm) return error;
    std::vector<float> buf(kCount * n, -1.0f);
    for (int64_t i = 0; i < kCount; ++i) buf[r * kCount + i] = Value(r, i);
    Status s = comm->AllGather(buf.data() + r * kCount, buf.data(), kCount, DType::kFloat32);
    if (!s.ok()) return s.ToString();
    for (int q = 0; q < n; ++q) {
      for (int64_t i = 0; i < kCount; ++i) {
        if (buf[q * kCount + i] != Value(q, i))
          return "in-place AllGather block " + std::to_string(q);
      }
    }
    s = comm->AllReduce(nullptr, 0, DType::kFloat32, ReduceOp::kSum);
    if (!s.ok()) return "zero-count AllReduce: " + s.ToString();
    s = comm->ReduceScatter(nullptr, nullptr, 0, DType::kBFloat16, ReduceOp::kAvg);
    if (!s.ok()) return "zero-count ReduceScatter: " + s.ToString();
    return "";
  }));
}

TEST_P(ShmWorldTest, AsyncOpsCompleteInIssueOrderWithTheirOwnResults) {
  const int n = GetParam();
  const std::string job = UniqueJobId();
  ExpectAllSucceeded(RunProcesses(n, [&](int r) -> std::string {
    std::string error;
    auto comm = Join(job, r, n, kTimeoutS, &error);
    if (!comm) return error;
    constexpr int kOps = 40;
    std::vector<std::vector<float>> bufs(kOps, std::vector<float>(kCount));
    std::vector<CommHandle> handles;
    for (int op = 0; op < kOps; ++op) {
      for (int64_t i = 0; i < kCount; ++i) bufs[op][i] = static_cast<float>(r * 100 + op + i);
      handles.push_back(
          comm->AllReduceAsync(bufs[op].data(), kCount, DType::kFloat32, ReduceOp::kSum));
    }
    // The blocking broadcast runs after all of them: it overwrites buffer 0 with root's result.
    Status s = comm->Broadcast(bufs[0].data(), kCount, DType::kFloat32, n - 1);
    if (!s.ok()) return s.ToString();
    for (int op = 0; op < kOps; ++op) {
      if (!handles[op]->Done()) return "op " + std::to_string(op) + " not done before a later call";
      s = handles[op]->Wait();
      if (!s.ok()) return s.ToString();
      for (int64_t i = 0; i < kCount; ++i) {
        const float expected = static_cast<float>(100 * n * (n - 1) / 2 + n * (op + i));
        if (bufs[op][i] != expected) {
          return "op " + std::to_string(op) + " element " + std::to_string(i) + ": " +
                 std::to_string(bufs[op][i]) + " != " + std::to_string(expected);
        }
      }
    }
    return "";
  }));
}

TEST(ShmCommunicator, RankThatNeverJoinsACollectiveTimesOutNamingItOnTheOthers) {
  const std::string job = UniqueJobId();
  auto outcomes = RunProcesses(
      3,
      [&](int r) -> std::string {
        std::string error;
        auto comm = Join(job, r, 3, /*timeout_s=*/0.5, &error);
        if (!comm) return error;
        if (r == 2) {
          pause();  // joined the group but never calls the collective; the parent kills it
          return "rank 2 was not killed";
        }
        std::vector<float> buf(10, 1.0f);
        Status s = comm->AllReduce(buf.data(), 10, DType::kFloat32, ReduceOp::kSum);
        if (s.code() != StatusCode::kDeadlineExceeded) return "expected a timeout: " + s.ToString();
        for (const std::string& part :
             {std::string("AllReduce(sum, 10 x fp32, 40 bytes)"),
              "on rank " + std::to_string(r) + " of 3", std::string("did not arrive: 2")}) {
          if (s.message().find(part) == std::string::npos)
            return "'" + part + "' missing: " + s.message();
        }
        // The group is broken: the next call fails at once with the original error.
        Status later = comm->Barrier();
        if (later.message().find("earlier failure") == std::string::npos) {
          return "later call: " + later.ToString();
        }
        return "";
      },
      /*hold=*/{2});
  EXPECT_EQ(outcomes[0].exit_code, 0) << outcomes[0].message;
  EXPECT_EQ(outcomes[1].exit_code, 0) << outcomes[1].message;
  EXPECT_FALSE(LeftBehind(job)) << "rank 2 was killed while attached";
}

TEST(ShmCommunicator, PeerThatDiesIsReportedWithoutWaitingForTheTimeout) {
  const std::string job = UniqueJobId();
  auto outcomes = RunProcesses(2, [&](int r) -> std::string {
    std::string error;
    auto comm = Join(job, r, 2, /*timeout_s=*/60, &error);
    if (!comm) return error;
    if (r == 1) _exit(9);  // crashes after joining
    float x = 1;
    Status s = comm->AllReduce(&x, 1, DType::kFloat32, ReduceOp::kSum);
    if (s.code() != StatusCode::kUnavailable) return "expected kUnavailable: " + s.ToString();
    if (s.message().find("rank 1 (pid") == std::string::npos) return s.message();
    return "";
  });
  EXPECT_EQ(outcomes[0].exit_code, 0) << outcomes[0].message;
  EXPECT_EQ(outcomes[1].exit_code, 9);
  EXPECT_FALSE(LeftBehind(job)) << "rank 1 crashed while attached";
}

TEST(ShmCommunicator, AbortFailsThePeersAndExitsWithTheCode) {
  const std::string job = UniqueJobId();
  auto outcomes = RunProcesses(2, [&](int r) -> std::string {
    std::string error;
    auto comm = Join(job, r, 2, /*timeout_s=*/60, &error);
    if (!comm) return error;
    if (r == 1) {
      comm->Abort(DataLossError("checkpoint shard corrupt"), 7);
      return "Abort returned";
    }
    float x = 1;
    Status s = comm->AllReduce(&x, 1, DType::kFloat32, ReduceOp::kSum);
    if (s.code() != StatusCode::kDataLoss) return "expected the abort reason: " + s.ToString();
    if (s.message().find("rank 1 aborted") == std::string::npos ||
        s.message().find("checkpoint shard corrupt") == std::string::npos) {
      return s.message();
    }
    return "";
  });
  EXPECT_EQ(outcomes[0].exit_code, 0) << outcomes[0].message;
  EXPECT_EQ(outcomes[1].exit_code, 7) << outcomes[1].message;
  EXPECT_FALSE(LeftBehind(job)) << "rank 1 aborted while attached";
}

TEST(ShmCommunicator, MismatchedCountsFailOnEveryRankNamingBothCalls) {
  const std::string job = UniqueJobId();
  ExpectAllSucceeded(RunProcesses(2, [&](int r) -> std::string {
    std::string error;
    auto comm = Join(job, r, 2, kTimeoutS, &error);
    if (!comm) return error;
    std::vector<float> buf(20, 1.0f);
    Status s = comm->AllReduce(buf.data(), r == 0 ? 10 : 11, DType::kFloat32, ReduceOp::kSum);
    if (s.code() != StatusCode::kInvalidArgument)
      return "expected kInvalidArgument: " + s.ToString();
    if (s.message().find("mismatched collective #0") == std::string::npos) return s.message();
    return "";
  }));
}

TEST(ShmCommunicator, TheSegmentLosesItsNameOnceEveryRankHasAttached) {
  for (int n : {1, 3}) {
    const std::string job = UniqueJobId();
    const std::string name = ShmSegmentName(job).value();
    // Every rank is killed at the end, as a crash would end them: nothing runs a destructor.
    auto outcomes = RunProcesses(n, [&](int r) -> std::string {
      std::string error;
      auto comm = Join(job, r, n, kTimeoutS, &error);
      if (!comm) return error;
      // After a collective every rank has attached.
      Status s = comm->Barrier();
      if (!s.ok()) return s.ToString();
      const int fd = shm_open(name.c_str(), O_RDONLY, 0);
      if (fd >= 0 || errno != ENOENT) return "the segment still has its name after attach";
      float x = static_cast<float>(r + 1);
      s = comm->AllReduce(&x, 1, DType::kFloat32, ReduceOp::kSum);
      if (!s.ok()) return s.ToString();
      if (x != static_cast<float>(n * (n + 1) / 2)) return "sum " + std::to_string(x);
      raise(SIGKILL);
      return "not killed";
    });
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(outcomes[r].exit_code, -1)
          << "world " << n << " rank " << r << ": " << outcomes[r].message;
    }
    EXPECT_FALSE(LeftBehind(job)) << "world " << n;
  }
}

TEST(ShmCommunicator, AStaleSegmentIsReplacedAndRemovedAtTheEnd) {
  const std::string job = UniqueJobId();
  const std::string name = ShmSegmentName(job).value();
  // A leftover of an earlier run with the same job id: wrong size, no magic.
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 100), 0);
  close(fd);
  ExpectAllSucceeded(RunProcesses(2, [&](int r) -> std::string {
    std::string error;
    auto comm = Join(job, r, 2, kTimeoutS, &error);
    if (!comm) return error;
    float x = static_cast<float>(r + 1);
    Status s = comm->AllReduce(&x, 1, DType::kFloat32, ReduceOp::kSum);
    if (!s.ok()) return s.ToString();
    return x == 3.0f ? "" : "sum " + std::to_string(x);
  }));
  EXPECT_FALSE(LeftBehind(job));
}

TEST(ShmCommunicator, AGroupThatNeverAssemblesRemovesTheSegmentWhenItsRanksLeave) {
  const std::string job = UniqueJobId();
  {
    std::string error;
    auto comm = Join(job, 0, 2, kTimeoutS, &error);
    ASSERT_NE(comm, nullptr) << error;
    EXPECT_TRUE(SegmentExists(job)) << "rank 1 has not attached: the segment is still needed";
  }
  EXPECT_FALSE(LeftBehind(job));
}

TEST(ShmCommunicator, BadOptionsAreRejectedWithTheReason) {
  ShmOptions options;
  options.job_id = "a/b";
  EXPECT_NE(CreateShmCommunicator(options).status().message().find("HOIST_JOB_ID"),
            std::string::npos);
  options.job_id = "";
  EXPECT_EQ(CreateShmCommunicator(options).status().code(), StatusCode::kInvalidArgument);
  options.job_id = UniqueJobId();
  options.rank = 2;
  options.world_size = 2;
  EXPECT_NE(CreateShmCommunicator(options).status().message().find("outside a world of 2"),
            std::string::npos);
  options.rank = 0;
  options.slot_bytes = 100;
  EXPECT_NE(CreateShmCommunicator(options).status().message().find("slot_bytes"),
            std::string::npos);
}

TEST(ShmCommunicator, RankWaitingForAMissingRankZeroTimesOut) {
  ShmOptions options;
  options.job_id = UniqueJobId();
  options.rank = 1;
  options.world_size = 2;
  options.timeout_s = 0.05;
  auto comm = CreateShmCommunicator(options);
  EXPECT_EQ(comm.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(comm.status().message().find("rank 0's shared-memory segment"), std::string::npos)
      << comm.status().message();
}

}  // namespace
}  // namespace hoist::comm
