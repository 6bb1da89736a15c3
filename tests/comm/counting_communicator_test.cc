// CountingCommunicator passes every collective through unchanged and counts the bytes of the
// buffers each kind of op worked on: the all-reduce's and broadcast's buffer, the
// reduce-scatter's input and the all-gather's output, in the element type's size.
#include "comm/counting_communicator.h"

#include <gtest/gtest.h>

#include <vector>

#include "comm/collective.h"
#include "tests/comm/comm_test_util.h"

namespace hoist::comm {
namespace {

using testing::ExpectAllOk;
using testing::MakeGroup;
using testing::RunRanks;

TEST(CountingCommunicator, CountsEachOpsBuffersAndPassesResultsThrough) {
  constexpr int kWorld = 3;
  auto group = MakeGroup(kWorld, 30.0);
  std::vector<std::array<int64_t, kNumCollectiveOps>> counted(kWorld);
  ExpectAllOk(RunRanks(*group, [&](int rank, Communicator& inner) -> Status {
    CountingCommunicator comm(&inner);
    EXPECT_EQ(comm.rank(), rank);
    EXPECT_EQ(comm.world_size(), kWorld);
    std::vector<float> sum(10, static_cast<float>(rank + 1));
    HOIST_RETURN_IF_ERROR(comm.AllReduce(sum.data(), 10, DType::kFloat32, ReduceOp::kSum));
    EXPECT_EQ(sum[0], 6.0f);
    // 2 bytes per element: 7 bf16 elements reduced asynchronously.
    std::vector<uint16_t> half(7, 0);
    HOIST_RETURN_IF_ERROR(
        comm.AllReduceAsync(half.data(), 7, DType::kBFloat16, ReduceOp::kSum)->Wait());
    std::vector<float> scatter_in(kWorld * 4, 1.0f), scatter_out(4);
    HOIST_RETURN_IF_ERROR(comm.ReduceScatter(scatter_in.data(), scatter_out.data(), 4,
                                             DType::kFloat32, ReduceOp::kSum));
    EXPECT_EQ(scatter_out[3], static_cast<float>(kWorld));
    std::vector<float> gathered(kWorld * 5);
    std::vector<float> mine(5, static_cast<float>(rank));
    HOIST_RETURN_IF_ERROR(
        comm.AllGatherAsync(mine.data(), gathered.data(), 5, DType::kFloat32)->Wait());
    EXPECT_EQ(gathered[5 * 2], 2.0f);
    std::vector<float> root(6, static_cast<float>(rank));
    HOIST_RETURN_IF_ERROR(comm.Broadcast(root.data(), 6, DType::kFloat32, 1));
    EXPECT_EQ(root[0], 1.0f);
    HOIST_RETURN_IF_ERROR(comm.Barrier());
    for (int op = 0; op < kNumCollectiveOps; ++op) {
      counted[rank][op] = comm.bytes(static_cast<CollectiveOp>(op));
    }
    return Status::Ok();
  }));
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(counted[r][int(CollectiveOp::kAllReduce)], 10 * 4 + 7 * 2) << r;
    EXPECT_EQ(counted[r][int(CollectiveOp::kReduceScatter)], kWorld * 4 * 4) << r;
    EXPECT_EQ(counted[r][int(CollectiveOp::kAllGather)], kWorld * 5 * 4) << r;
    EXPECT_EQ(counted[r][int(CollectiveOp::kBroadcast)], 6 * 4) << r;
  }
}

TEST(CountingCommunicator, LabelsAreTheMetricsOps) {
  EXPECT_STREQ(CollectiveOpLabel(CollectiveOp::kAllReduce), "all_reduce");
  EXPECT_STREQ(CollectiveOpLabel(CollectiveOp::kReduceScatter), "reduce_scatter");
  EXPECT_STREQ(CollectiveOpLabel(CollectiveOp::kAllGather), "all_gather");
  EXPECT_STREQ(CollectiveOpLabel(CollectiveOp::kBroadcast), "broadcast");
}

}  // namespace
}  // namespace hoist::comm
