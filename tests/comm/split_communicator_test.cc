// The split communicator: collectives on the backend's device memory go to the device
// communicator, those on host memory (what the backend says is not its device memory) to the host
// one, each with the right result; mixing the two in one collective is refused. The CPU backend
// tells them apart with live_memory (what hoist's allocators handed out counts as its device
// memory), as a GPU backend does with the driver's pointer attributes.
#include "comm/split_communicator.h"

#include <gtest/gtest.h>

#include <vector>

#include "comm/counting_communicator.h"
#include "comm/thread_communicator.h"
#include "core/live_memory.h"
#include "kernels/cpu_backend.h"
#include "tests/comm/comm_test_util.h"

namespace hoist::comm {
namespace {

using testing::ExpectAllOk;
using testing::RunRanks;

int64_t Bytes(const CountingCommunicator& comm) {
  int64_t total = 0;
  for (int op = 0; op < kNumCollectiveOps; ++op) total += comm.bytes(static_cast<CollectiveOp>(op));
  return total;
}

TEST(SplitCommunicator, DeviceBuffersGoToTheDeviceSideAndHostBuffersToTheHostSide) {
  live_memory::ScopedEnable checked;
  const int n = 2;
  const int64_t count = 300;
  auto devices = ThreadGroup::Create(n, 10.0);
  auto hosts = ThreadGroup::Create(n, 10.0);
  ASSERT_TRUE(devices.ok() && hosts.ok());
  ExpectAllOk(RunRanks(**hosts, [&](int rank, Communicator& host_inner) -> Status {
    MemoryTracker tracker;
    CpuDevice device(Place::kDevice, &tracker);
    kernels::CpuBackend backend(&device, HostStream::Mode::kThreaded);
    CountingCommunicator device_side(&(*devices)->comm(rank)), host_side(&host_inner);
    SplitCommunicator comm(&device_side, &host_side, &backend);
    EXPECT_EQ(comm.rank(), rank);
    EXPECT_EQ(comm.world_size(), n);

    // Device memory, written on the stream just before: the collective reads it after.
    HOIST_ASSIGN_OR_RETURN(Buffer buf, device.Allocate(count * 4, Category::kGrad));
    std::vector<float> ones(static_cast<size_t>(count), float(rank + 1));
    HOIST_RETURN_IF_ERROR(backend.Copy(buf.data(), ones.data(), count * 4,
                                       kernels::CopyDirection::kHostToDevice,
                                       backend.compute_stream()));
    HOIST_RETURN_IF_ERROR(comm.AllReduce(buf.data(), count, DType::kFloat32, ReduceOp::kSum));
    for (int64_t i = 0; i < count; ++i) EXPECT_EQ(buf.as<float>()[i], 3.0f) << i;
    EXPECT_EQ(Bytes(device_side), count * 4);
    EXPECT_EQ(Bytes(host_side), 0);

    // A host scalar: the host side, the device side untouched.
    double scalar = rank + 0.5;
    double both[2] = {0, 0};
    HOIST_RETURN_IF_ERROR(comm.AllGather(&scalar, both, 2, DType::kFloat32));
    EXPECT_EQ(both[0], 0.5);
    EXPECT_EQ(both[1], 1.5);
    EXPECT_EQ(Bytes(device_side), count * 4);
    EXPECT_GT(Bytes(host_side), 0);

    // Device to device, asynchronously.
    HOIST_ASSIGN_OR_RETURN(Buffer gathered, device.Allocate(n * count * 4, Category::kComm));
    HOIST_RETURN_IF_ERROR(
        comm.AllGatherAsync(buf.data(), gathered.data(), count, DType::kFloat32)->Wait());
    EXPECT_EQ(gathered.as<float>()[n * count - 1], 3.0f);
    EXPECT_EQ(Bytes(device_side), count * 4 + n * count * 4);  // a gather counts what it gathers

    // One side of each kind: refused, naming why, on every rank alike (nothing was sent).
    const Status mixed = comm.AllGather(buf.data(), both, 1, DType::kFloat32);
    EXPECT_EQ(mixed.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(mixed.message().find("device and host memory"), std::string::npos);
    return comm.Barrier();
  }));
}

// A rank whose device failed under its queued work still takes part in host collectives (its
// peers are in them: the engine's agreement on that very failure) and reports the failure after;
// a device collective cannot run there, and aborting both sides spares the peers the wait.
TEST(SplitCommunicator, AFailedComputeStreamStillAgreesOnTheHostAndAbortsTheDevice) {
  live_memory::ScopedEnable checked;
  const int n = 2;
  auto devices = ThreadGroup::Create(n, 10.0);
  auto hosts = ThreadGroup::Create(n, 10.0);
  ASSERT_TRUE(devices.ok() && hosts.ok());
  std::vector<Status> host_results(n), device_results(n);
  const std::vector<Status> ranks = RunRanks(**hosts, [&](int rank, Communicator& host) -> Status {
    MemoryTracker tracker;
    CpuDevice device(Place::kDevice, &tracker);
    kernels::CpuBackend backend(&device, HostStream::Mode::kThreaded);
    SplitCommunicator comm(&(*devices)->comm(rank), &host, &backend);
    if (rank == 0) {
      const auto& stream = static_cast<const HostStream&>(backend.compute_stream());
      (void)stream.Enqueue([] { return InternalError("the device faulted"); });
    }
    float failures = rank == 0 ? 1.0f : 0.0f;
    host_results[size_t(rank)] = comm.AllReduce(&failures, 1, DType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(failures, 1.0f) << "rank " << rank << " heard the failure";
    HOIST_ASSIGN_OR_RETURN(Buffer grads, device.Allocate(64, Category::kGrad));
    device_results[size_t(rank)] =
        comm.AllReduce(grads.data(), 16, DType::kFloat32, ReduceOp::kSum);
    return Status::Ok();
  });
  ExpectAllOk(ranks);
  EXPECT_EQ(host_results[0].code(), StatusCode::kInternal);
  EXPECT_TRUE(host_results[1].ok()) << host_results[1].ToString();
  EXPECT_FALSE(device_results[0].ok());
  EXPECT_FALSE(device_results[1].ok()) << "the peer's device collective ends, aborted";
}

}  // namespace
}  // namespace hoist::comm
