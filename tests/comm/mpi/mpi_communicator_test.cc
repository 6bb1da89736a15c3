// The MPI backend, run by CTest under mpirun with 2 and 4 ranks. Every rank runs every test in
// the same order; each rank's gtest exit code is its verdict and mpirun fails if any rank fails.
// Expected values are computed on each rank from the known inputs of all ranks.
#include "comm/mpi_communicator.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/half.h"
#include "comm/world.h"
#include "core/rank_env.h"

namespace hoist::comm {
namespace {

constexpr double kTimeoutS = 60.0;

RankEnv Env() {
  auto env = DiscoverRankEnv();
  HOIST_CHECK(env.ok()) << env.status().ToString();
  return *env;
}

std::unique_ptr<Communicator> MakeComm() {
  WorldOptions options;
  options.timeout_s = kTimeoutS;
  auto comm = CreateWorldCommunicator(Env(), options);
  HOIST_CHECK(comm.ok()) << comm.status().ToString();
  return std::move(comm).value();
}

// One communicator for the tests that leave it healthy.
Communicator& Shared() {
  static Communicator* comm = MakeComm().release();  // freed at exit by the runtime's finalize
  return *comm;
}

// Bounded (periodic in i), so that fp16 sums of large buffers stay finite.
double Value(int rank, int64_t i) {
  return 0.1 * (rank + 1) - 0.037 * static_cast<double>(i % 997) + 1.0 / 3;
}

uint16_t Encode(float v, DType type) {
  return type == DType::kBFloat16 ? FloatToBFloat16(v) : FloatToHalf(v);
}
float Decode(uint16_t bits, DType type) {
  return type == DType::kBFloat16 ? BFloat16ToFloat(bits) : HalfToFloat(bits);
}

// Rank r's input element i, as stored in `type`, read back as a double.
double Stored(int rank, int64_t i, DType type) {
  const float f = static_cast<float>(Value(rank, i));
  return type == DType::kFloat32 ? f : Decode(Encode(f, type), type);
}

void Fill(std::vector<unsigned char>* buf, int rank, int64_t offset, int64_t count, DType type) {
  buf->resize(count * DTypeSize(type));
  for (int64_t i = 0; i < count; ++i) {
    const float f = static_cast<float>(Value(rank, offset + i));
    if (type == DType::kFloat32) {
      std::memcpy(buf->data() + 4 * i, &f, 4);
    } else {
      const uint16_t bits = Encode(f, type);
      std::memcpy(buf->data() + 2 * i, &bits, 2);
    }
  }
}

double Read(const std::vector<unsigned char>& buf, int64_t i, DType type) {
  if (type == DType::kFloat32) {
    float f;
    std::memcpy(&f, buf.data() + 4 * i, 4);
    return f;
  }
  uint16_t bits;
  std::memcpy(&bits, buf.data() + 2 * i, 2);
  return Decode(bits, type);
}

// The float64 reduction of element i over all ranks' stored inputs.
double Reference(int n, int64_t i, DType type, ReduceOp op) {
  double sum = 0;
  for (int r = 0; r < n; ++r) sum += Stored(r, i, type);
  return op == ReduceOp::kAvg ? sum / n : sum;
}

// fp32 accumulation error over n terms of magnitude `scale`, plus the final 16-bit rounding.
double Tolerance(DType type, double reference, double scale, int n) {
  const double final_rounding = type == DType::kBFloat16  ? 0x1p-8
                                : type == DType::kFloat16 ? 0x1p-11
                                                          : 0.0;
  return final_rounding * std::abs(reference) + n * 0x1p-23 * scale + 1e-30;
}

// Every rank's copy of `buf` (bytes), gathered through raw MPI, must be equal.
void ExpectIdenticalOnEveryRank(const std::vector<unsigned char>& buf, const std::string& what) {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  std::vector<unsigned char> all(buf.size() * n);
  ASSERT_EQ(MPI_Allgather(buf.data(), static_cast<int>(buf.size()), MPI_BYTE, all.data(),
                          static_cast<int>(buf.size()), MPI_BYTE, MPI_COMM_WORLD),
            MPI_SUCCESS);
  for (int r = 1; r < n; ++r) {
    EXPECT_EQ(std::memcmp(all.data() + r * buf.size(), all.data(), buf.size()), 0)
        << what << ": rank " << r << " differs from rank 0";
  }
}

// 1001 elements: uneven; 300000: large enough for MPI's large-message algorithms.
const int64_t kCounts[] = {1001, 300000};
const DType kTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg};

TEST(MpiCommunicator, ReportsTheRankAndSizeOfTheLauncher) {
  const RankEnv env = Env();
  EXPECT_EQ(env.source, "Open MPI");
  EXPECT_EQ(Shared().rank(), env.rank);
  EXPECT_EQ(Shared().world_size(), env.world_size);
  EXPECT_GE(env.world_size, 2) << "run under mpirun -np 2 or more";
}

TEST(MpiCommunicator, AllReduceEveryDtypeAndReduceOpMatchesTheReferenceOnEveryRank) {
  Communicator& comm = Shared();
  const int n = comm.world_size();
  for (int64_t count : kCounts) {
    for (DType type : kTypes) {
      for (ReduceOp op : kOps) {
        std::vector<unsigned char> buf;
        Fill(&buf, comm.rank(), 0, count, type);
        ASSERT_TRUE(comm.AllReduce(buf.data(), count, type, op).ok());
        const std::string what = std::string(DTypeName(type)) + " " + ReduceOpName(op) + " count " +
                                 std::to_string(count);
        int bad = 0;
        for (int64_t i = 0; i < count && bad < 5; ++i) {
          const double ref = Reference(n, i, type, op);
          const double scale = op == ReduceOp::kAvg ? std::abs(ref) + 1 : n * (std::abs(ref) + 1);
          if (std::abs(Read(buf, i, type) - ref) > Tolerance(type, ref, scale, n)) {
            ++bad;
            ADD_FAILURE() << what << " element " << i << ": " << Read(buf, i, type) << " vs "
                          << ref;
          }
        }
        ExpectIdenticalOnEveryRank(buf, what);
      }
    }
  }
}

TEST(MpiCommunicator, ReduceScatterGivesEachRankItsReducedBlock) {
  Communicator& comm = Shared();
  const int n = comm.world_size();
  const int r = comm.rank();
  for (int64_t count : kCounts) {
    for (DType type : kTypes) {
      for (ReduceOp op : kOps) {
        std::vector<unsigned char> send;
        Fill(&send, r, 0, count * n, type);
        std::vector<unsigned char> recv(count * DTypeSize(type), 0xee);
        ASSERT_TRUE(comm.ReduceScatter(send.data(), recv.data(), count, type, op).ok());
        int bad = 0;
        for (int64_t i = 0; i < count && bad < 5; ++i) {
          const double ref = Reference(n, r * count + i, type, op);
          const double scale = n * (std::abs(ref) + 1);
          if (std::abs(Read(recv, i, type) - ref) > Tolerance(type, ref, scale, n)) {
            ++bad;
            ADD_FAILURE() << DTypeName(type) << " " << ReduceOpName(op) << " rank " << r
                          << " element " << i << ": " << Read(recv, i, type) << " vs " << ref;
          }
        }
      }
    }
  }
}

TEST(MpiCommunicator, ReduceScatterInPlaceFromOwnBlock) {
  Communicator& comm = Shared();
  const int n = comm.world_size();
  const int r = comm.rank();
  constexpr int64_t kCount = 1001;
  std::vector<unsigned char> buf;
  Fill(&buf, r, 0, kCount * n, DType::kFloat32);
  float* block = reinterpret_cast<float*>(buf.data()) + r * kCount;
  ASSERT_TRUE(comm.ReduceScatter(buf.data(), block, kCount, DType::kFloat32, ReduceOp::kSum).ok());
  for (int64_t i = 0; i < kCount; ++i) {
    const double ref = Reference(n, r * kCount + i, DType::kFloat32, ReduceOp::kSum);
    ASSERT_NEAR(block[i], ref, 1e-5 * (std::abs(ref) + 1)) << "element " << i;
  }
}

TEST(MpiCommunicator, AllGatherConcatenatesInRankOrderAlsoInPlace) {
  Communicator& comm = Shared();
  const int n = comm.world_size();
  const int r = comm.rank();
  for (int64_t count : kCounts) {
    for (DType type : kTypes) {
      const size_t bytes = count * DTypeSize(type);
      std::vector<unsigned char> mine;
      Fill(&mine, r, 0, count, type);
      std::vector<unsigned char> out(bytes * n, 0xee);
      ASSERT_TRUE(comm.AllGather(mine.data(), out.data(), count, type).ok());
      std::vector<unsigned char> in_place(bytes * n, 0xee);
      std::memcpy(in_place.data() + r * bytes, mine.data(), bytes);
      ASSERT_TRUE(comm.AllGather(in_place.data() + r * bytes, in_place.data(), count, type).ok());
      for (int q = 0; q < n; ++q) {
        std::vector<unsigned char> theirs;
        Fill(&theirs, q, 0, count, type);
        EXPECT_EQ(std::memcmp(out.data() + q * bytes, theirs.data(), bytes), 0)
            << DTypeName(type) << " block " << q;
        EXPECT_EQ(std::memcmp(in_place.data() + q * bytes, theirs.data(), bytes), 0)
            << DTypeName(type) << " in place, block " << q;
      }
    }
  }
}

TEST(MpiCommunicator, BroadcastFromEveryRoot) {
  Communicator& comm = Shared();
  for (DType type : kTypes) {
    for (int root = 0; root < comm.world_size(); ++root) {
      std::vector<unsigned char> buf;
      Fill(&buf, comm.rank(), 0, 1001, type);
      ASSERT_TRUE(comm.Broadcast(buf.data(), 1001, type, root).ok());
      std::vector<unsigned char> expected;
      Fill(&expected, root, 0, 1001, type);
      EXPECT_EQ(buf, expected) << DTypeName(type) << " root " << root;
    }
  }
  EXPECT_TRUE(comm.Barrier().ok());
}

TEST(MpiCommunicator, AsyncOpsCompleteInIssueOrderAndBeforeALaterBlockingCall) {
  Communicator& comm = Shared();
  const int n = comm.world_size();
  const int r = comm.rank();
  constexpr int kOps = 50;
  constexpr int64_t kCount = 257;
  std::vector<std::vector<float>> bufs(kOps, std::vector<float>(kCount));
  std::vector<CommHandle> handles;
  for (int op = 0; op < kOps; ++op) {
    for (int64_t i = 0; i < kCount; ++i) bufs[op][i] = static_cast<float>(r * 100 + op + i);
    handles.push_back(
        comm.AllReduceAsync(bufs[op].data(), kCount, DType::kFloat32, ReduceOp::kSum));
  }
  // The async broadcast of buffer 0 is queued behind the all-reduce of buffer 0: it must see the
  // reduced values, and so must the blocking barrier's caller afterwards.
  CommHandle bcast = comm.BroadcastAsync(bufs[0].data(), kCount, DType::kFloat32, n - 1);
  ASSERT_TRUE(comm.Barrier().ok());
  EXPECT_TRUE(bcast->Done());
  ASSERT_TRUE(bcast->Wait().ok());
  for (int op = kOps - 1; op >= 0; --op) {
    EXPECT_TRUE(handles[op]->Done()) << "op " << op;
    ASSERT_TRUE(handles[op]->Wait().ok());
    for (int64_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(bufs[op][i], static_cast<float>(100 * n * (n - 1) / 2 + n * (op + i)))
          << "op " << op << " element " << i;
    }
  }
}

TEST(MpiCommunicator, AsyncResultsEqualBlockingResultsBitForBit) {
  Communicator& comm = Shared();
  const int n = comm.world_size();
  for (DType type : kTypes) {
    std::vector<unsigned char> blocking, async, send, rs_blocking, rs_async;
    Fill(&blocking, comm.rank(), 0, 5000, type);
    async = blocking;
    Fill(&send, comm.rank(), 0, 5000 * n, type);
    rs_blocking.assign(5000 * DTypeSize(type), 0);
    rs_async = rs_blocking;
    ASSERT_TRUE(comm.AllReduce(blocking.data(), 5000, type, ReduceOp::kAvg).ok());
    ASSERT_TRUE(
        comm.ReduceScatter(send.data(), rs_blocking.data(), 5000, type, ReduceOp::kSum).ok());
    CommHandle a = comm.AllReduceAsync(async.data(), 5000, type, ReduceOp::kAvg);
    CommHandle b =
        comm.ReduceScatterAsync(send.data(), rs_async.data(), 5000, type, ReduceOp::kSum);
    ASSERT_TRUE(a->Wait().ok());
    ASSERT_TRUE(b->Wait().ok());
    EXPECT_EQ(async, blocking) << DTypeName(type);
    EXPECT_EQ(rs_async, rs_blocking) << DTypeName(type);
  }
}

TEST(MpiCommunicator, BadArgumentsFailOnEveryRankAndBreakOnlyThatCommunicator) {
  std::unique_ptr<Communicator> comm = MakeComm();
  float x = 0;
  Status s = comm->AllReduce(&x, -1, DType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("negative count"), std::string::npos) << s.message();
  Status later = comm->Barrier();
  EXPECT_NE(later.message().find("earlier failure"), std::string::npos) << later.message();
  // Another communicator of the same job is unaffected.
  EXPECT_TRUE(Shared().Barrier().ok());
}

TEST(MpiCommunicator, RankDisagreeingWithTheEnvironmentIsAClearError) {
  RankEnv env = Env();
  env.rank = (env.rank + 1) % env.world_size;
  auto comm = CreateMpiCommunicator(env, kTimeoutS);
  EXPECT_EQ(comm.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(comm.status().message().find("MPI reports rank"), std::string::npos)
      << comm.status().message();
}

// On ranks other than 0, print only failures, each line tagged with the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace hoist::comm

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const hoist::RankEnv env = hoist::comm::Env();
  if (env.rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new hoist::comm::RankFailurePrinter(env.rank));
  }
  return RUN_ALL_TESTS();
}
