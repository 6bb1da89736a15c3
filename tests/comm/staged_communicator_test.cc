// The host-staged communicator over the CPU backend, where staging is an identity: every
// collective must give what the inner communicator gives on the same values, with the backend's
// streams inline and on worker threads, blocking and asynchronous, and its staging buffers must be
// reused rather than grow with the number of calls.
#include "comm/staged_communicator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "comm/thread_communicator.h"
#include "core/live_memory.h"
#include "kernels/cpu_backend.h"
#include "tests/comm/comm_test_util.h"

namespace hoist::comm {
namespace {

using testing::ExpectAllOk;
using testing::MakeGroup;
using testing::RunRanks;

float Value(int rank, int64_t i) { return static_cast<float>((rank + 1) * 1000 + i % 97); }

class StagedCommunicatorTest : public ::testing::TestWithParam<HostStream::Mode> {};

TEST_P(StagedCommunicatorTest, EveryCollectiveMatchesTheInnerOne) {
  const int n = 3;
  const int64_t count = 1001;
  auto group = MakeGroup(n, 10.0);
  ExpectAllOk(RunRanks(*group, [&](int rank, Communicator& inner) -> Status {
    MemoryTracker tracker;
    CpuDevice device(Place::kDevice, &tracker), staging(Place::kHostPinned, &tracker);
    kernels::CpuBackend backend(&device, GetParam());
    StagedCommunicator comm(&inner, &backend, &staging);
    EXPECT_EQ(comm.rank(), rank);
    EXPECT_EQ(comm.world_size(), n);

    // All-reduce, sum and average.
    std::vector<float> buf(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) buf[size_t(i)] = Value(rank, i);
    HOIST_RETURN_IF_ERROR(comm.AllReduce(buf.data(), count, DType::kFloat32, ReduceOp::kSum));
    for (int64_t i = 0; i < count; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += Value(r, i);
      EXPECT_EQ(buf[size_t(i)], want) << i;
    }
    // Reduce-scatter: block r of the sum.
    std::vector<float> send(static_cast<size_t>(n * count)), recv(static_cast<size_t>(count));
    for (int64_t i = 0; i < n * count; ++i) send[size_t(i)] = Value(rank, i);
    HOIST_RETURN_IF_ERROR(
        comm.ReduceScatter(send.data(), recv.data(), count, DType::kFloat32, ReduceOp::kAvg));
    for (int64_t i = 0; i < count; ++i) {
      float sum = 0;
      for (int r = 0; r < n; ++r) sum += Value(r, rank * count + i);
      EXPECT_EQ(recv[size_t(i)], sum / n) << i;
    }
    // All-gather, with the send buffer inside the receive buffer (allowed).
    std::vector<float> gathered(static_cast<size_t>(n * count), -1.0f);
    for (int64_t i = 0; i < count; ++i) gathered[size_t(rank * count + i)] = Value(rank, i);
    HOIST_RETURN_IF_ERROR(
        comm.AllGather(gathered.data() + rank * count, gathered.data(), count, DType::kFloat32));
    for (int r = 0; r < n; ++r) {
      for (int64_t i = 0; i < count; i += 13)
        EXPECT_EQ(gathered[size_t(r * count + i)], Value(r, i));
    }
    // Broadcast from rank 1.
    std::vector<float> b(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) b[size_t(i)] = Value(rank, i);
    HOIST_RETURN_IF_ERROR(comm.Broadcast(b.data(), count, DType::kFloat32, 1));
    for (int64_t i = 0; i < count; i += 7) EXPECT_EQ(b[size_t(i)], Value(1, i));
    return comm.Barrier();
  }));
}

TEST_P(StagedCommunicatorTest, AsynchronousCollectivesInFlightTogetherAnd16BitTypes) {
  const int n = 2;
  auto group = MakeGroup(n, 10.0);
  ExpectAllOk(RunRanks(*group, [&](int rank, Communicator& inner) -> Status {
    MemoryTracker tracker;
    CpuDevice device(Place::kDevice, &tracker), staging(Place::kHostPinned, &tracker);
    kernels::CpuBackend backend(&device, GetParam());
    StagedCommunicator comm(&inner, &backend, &staging);
    // Four reductions in flight, each with its own buffer; then the same again (buffers reused).
    for (int round = 0; round < 2; ++round) {
      std::vector<std::vector<uint16_t>> bufs(4, std::vector<uint16_t>(300));
      std::vector<CommHandle> handles;
      for (size_t k = 0; k < bufs.size(); ++k) {
        // bf16 bits of small integers: exact through the fp32 sum.
        for (size_t i = 0; i < bufs[k].size(); ++i) {
          const float v = static_cast<float>(rank + int(k) + int(i % 5));
          uint32_t bits;
          std::memcpy(&bits, &v, sizeof bits);
          bufs[k][i] = static_cast<uint16_t>(bits >> 16);
        }
        handles.push_back(
            comm.AllReduceAsync(bufs[k].data(), 300, DType::kBFloat16, ReduceOp::kSum));
      }
      for (auto& h : handles) HOIST_RETURN_IF_ERROR(h->Wait());
      for (size_t k = 0; k < bufs.size(); ++k) {
        for (size_t i = 0; i < bufs[k].size(); ++i) {
          const uint32_t bits = uint32_t{bufs[k][i]} << 16;
          float got;
          std::memcpy(&got, &bits, sizeof got);
          EXPECT_EQ(got, static_cast<float>(1 + 2 * (int(k) + int(i % 5)))) << k << "," << i;
        }
      }
    }
    // The staging kept is what four collectives at once needed, not eight.
    EXPECT_EQ(comm.staging_bytes(), 4 * 300 * 2);
    EXPECT_EQ(tracker.Snapshot().Current(Place::kHostPinned, Category::kComm), 4 * 300 * 2);
    return Status::Ok();
  }));
}

TEST_P(StagedCommunicatorTest, AStagingBufferThatCannotBeHadFailsTheCollectiveClearly) {
  auto group = MakeGroup(2, 10.0);
  ExpectAllOk(RunRanks(*group, [&](int, Communicator& inner) -> Status {
    MemoryTracker tracker;
    CpuDevice device(Place::kDevice, &tracker);
    CpuDevice staging(Place::kHostPinned, &tracker, /*capacity_bytes=*/64);
    kernels::CpuBackend backend(&device, GetParam());
    StagedCommunicator comm(&inner, &backend, &staging);
    std::vector<float> buf(100, 1.0f);
    const Status s = comm.AllReduce(buf.data(), 100, DType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
    EXPECT_NE(s.message().find("of comm on cpu"), std::string::npos) << s.ToString();
    return Status::Ok();
  }));
}

// One rank stages nothing: every collective's result is its input, written where asked on the
// compute stream (a threaded stream: read after the queued work is done).
TEST_P(StagedCommunicatorTest, AloneNothingIsStaged) {
  live_memory::ScopedEnable checked;  // the backend tells device from host memory
  auto group = MakeGroup(1, 10.0);
  ExpectAllOk(RunRanks(*group, [&](int, Communicator& inner) -> Status {
    MemoryTracker tracker;
    CpuDevice device(Place::kDevice, &tracker), staging(Place::kHostPinned, &tracker);
    kernels::CpuBackend backend(&device, GetParam());
    StagedCommunicator comm(&inner, &backend, &staging);
    const int64_t n = 257;
    HOIST_ASSIGN_OR_RETURN(Buffer a, device.Allocate(n * 4, Category::kGrad));
    HOIST_ASSIGN_OR_RETURN(Buffer b, device.Allocate(n * 4, Category::kGrad));
    std::vector<float> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) values[size_t(i)] = Value(0, i);
    HOIST_RETURN_IF_ERROR(backend.Copy(a.data(), values.data(), n * 4,
                                       kernels::CopyDirection::kHostToDevice,
                                       backend.compute_stream()));
    HOIST_RETURN_IF_ERROR(comm.AllReduce(a.data(), n, DType::kFloat32, ReduceOp::kAvg));
    HOIST_RETURN_IF_ERROR(comm.Broadcast(a.data(), n, DType::kFloat32, 0));
    HOIST_RETURN_IF_ERROR(
        comm.ReduceScatter(a.data(), b.data(), n, DType::kFloat32, ReduceOp::kSum));
    HOIST_RETURN_IF_ERROR(backend.compute_stream().Synchronize());
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(b.as<float>()[i], Value(0, i)) << i;
    HOIST_RETURN_IF_ERROR(backend.Zero(a.data(), n * 4, backend.compute_stream()));
    HOIST_RETURN_IF_ERROR(comm.AllGatherAsync(b.data(), a.data(), n, DType::kFloat32)->Wait());
    HOIST_RETURN_IF_ERROR(backend.compute_stream().Synchronize());
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(a.as<float>()[i], Value(0, i)) << i;
    EXPECT_EQ(comm.staging_bytes(), 0);
    EXPECT_EQ(tracker.Snapshot().peak_total[int(Place::kHostPinned)], 0);
    return Status::Ok();
  }));
}

INSTANTIATE_TEST_SUITE_P(Streams, StagedCommunicatorTest,
                         ::testing::Values(HostStream::Mode::kInline, HostStream::Mode::kThreaded),
                         [](const auto& info) {
                           return info.param == HostStream::Mode::kInline ? "Inline" : "Threaded";
                         });

}  // namespace
}  // namespace hoist::comm
