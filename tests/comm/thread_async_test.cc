// The asynchronous forms and Abort of ThreadGroup's communicators, and the WorkQueue under them.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/thread_communicator.h"
#include "comm/work_queue.h"
#include "tests/comm/comm_test_util.h"

namespace hoist::comm {
namespace {

constexpr double kTimeoutS = 5.0;

using testing::ExpectAllOk;
using testing::RunRanks;

std::unique_ptr<ThreadGroup> MakeGroup(int n, double timeout_s = kTimeoutS) {
  return testing::MakeGroup(n, timeout_s);
}

TEST(WorkQueue, RunsTasksInSubmissionOrder) {
  std::vector<int> order;
  std::vector<CommHandle> handles;
  {
    WorkQueue queue;
    for (int i = 0; i < 100; ++i) {
      handles.push_back(queue.Submit([&order, i] {
        order.push_back(i);
        return Status::Ok();
      }));
    }
    // A blocking Run behind them waits for all of them.
    EXPECT_TRUE(queue
                    .Run([&order] {
                      order.push_back(100);
                      return Status::Ok();
                    })
                    .ok());
    ASSERT_EQ(order.size(), 101u);
    for (int i = 0; i <= 100; ++i) EXPECT_EQ(order[i], i);
    for (auto& h : handles) EXPECT_TRUE(h->Done());
  }
}

TEST(WorkQueue, HandleReportsTheTaskStatusEveryTime) {
  WorkQueue queue;
  CommHandle handle = queue.Submit([] { return InternalError("boom"); });
  for (int i = 0; i < 2; ++i) {
    Status s = handle->Wait();
    EXPECT_EQ(s.code(), StatusCode::kInternal);
    EXPECT_EQ(s.message(), "boom");
  }
  EXPECT_TRUE(handle->Done());
}

TEST(WorkQueue, DestroyingAHandleWaitsForItsTask) {
  WorkQueue queue;
  std::atomic<bool> release{false};
  std::atomic<bool> finished{false};
  CommHandle handle = queue.Submit([&] {
    while (!release.load()) std::this_thread::yield();
    finished = true;
    return Status::Ok();
  });
  EXPECT_FALSE(handle->Done());
  std::thread releaser([&] { release = true; });
  handle.reset();
  EXPECT_TRUE(finished.load());
  releaser.join();
}

TEST(WorkQueue, DestructorRunsQueuedTasks) {
  std::atomic<int> ran{0};
  std::vector<CommHandle> handles;
  {
    WorkQueue queue;
    for (int i = 0; i < 10; ++i) {
      handles.push_back(queue.Submit([&] {
        ++ran;
        return Status::Ok();
      }));
    }
  }
  EXPECT_EQ(ran.load(), 10);
  for (auto& h : handles) EXPECT_TRUE(h->Wait().ok());
}

class AsyncTest : public ::testing::TestWithParam<int> {};

std::string WorldSizeName(const ::testing::TestParamInfo<int>& info) {
  std::string name = "N";
  name.append(std::to_string(info.param));
  return name;
}

INSTANTIATE_TEST_SUITE_P(Ranks, AsyncTest, ::testing::Values(1, 2, 4), WorldSizeName);

// Each of many outstanding all-reduces sums a value that depends on its index, so a result in the
// wrong buffer or out of order shows.
TEST_P(AsyncTest, ManyOutstandingAllReducesCompleteWithTheirOwnResults) {
  const int n = GetParam();
  constexpr int kOps = 64;
  constexpr int64_t kCount = 5;
  auto group = MakeGroup(n);
  std::vector<std::vector<std::vector<float>>> bufs(
      n, std::vector<std::vector<float>>(kOps, std::vector<float>(kCount)));
  ExpectAllOk(RunRanks(*group, [&](int r, Communicator& c) {
    std::vector<CommHandle> handles;
    for (int op = 0; op < kOps; ++op) {
      for (int64_t i = 0; i < kCount; ++i) bufs[r][op][i] = static_cast<float>(r * 1000 + op + i);
      handles.push_back(c.AllReduceAsync(bufs[r][op].data(), kCount, DType::kFloat32,
                                         op % 2 ? ReduceOp::kSum : ReduceOp::kAvg));
    }
    // Wait in reverse: completion does not depend on the order of waits.
    for (int op = kOps - 1; op >= 0; --op) HOIST_RETURN_IF_ERROR(handles[op]->Wait());
    return Status::Ok();
  }));
  for (int r = 0; r < n; ++r) {
    for (int op = 0; op < kOps; ++op) {
      for (int64_t i = 0; i < kCount; ++i) {
        double sum = 0;
        for (int s = 0; s < n; ++s) sum += s * 1000 + op + i;
        const double expected = op % 2 ? sum : sum / n;
        EXPECT_NEAR(bufs[r][op][i], expected, 1e-6 * std::abs(expected))
            << "rank " << r << " op " << op << " element " << i;
      }
    }
  }
}

// A blocking call issued after asynchronous ones runs after them: the async broadcast fills the
// buffer that the blocking all-reduce then sums.
TEST_P(AsyncTest, BlockingCallRunsAfterEarlierAsyncOnes) {
  const int n = GetParam();
  auto group = MakeGroup(n);
  std::vector<std::vector<float>> bufs(n, std::vector<float>(3));
  std::vector<std::vector<float>> gathered(n, std::vector<float>(3 * n));
  ExpectAllOk(RunRanks(*group, [&](int r, Communicator& c) {
    for (float& x : bufs[r]) x = static_cast<float>(r + 1);
    CommHandle bcast = c.BroadcastAsync(bufs[r].data(), 3, DType::kFloat32, n - 1);
    CommHandle gather = c.AllGatherAsync(bufs[r].data(), gathered[r].data(), 3, DType::kFloat32);
    HOIST_RETURN_IF_ERROR(c.AllReduce(bufs[r].data(), 3, DType::kFloat32, ReduceOp::kSum));
    // Both handles completed before the blocking call returned.
    if (!bcast->Done() || !gather->Done()) return InternalError("async op not done");
    HOIST_RETURN_IF_ERROR(bcast->Wait());
    return gather->Wait();
  }));
  for (int r = 0; r < n; ++r) {
    for (float x : bufs[r]) EXPECT_EQ(x, static_cast<float>(n * n)) << "rank " << r;
    for (float x : gathered[r]) EXPECT_EQ(x, static_cast<float>(n)) << "rank " << r;
  }
}

TEST_P(AsyncTest, AsyncResultsEqualBlockingResultsBitForBit) {
  const int n = GetParam();
  constexpr int64_t kCount = 33;
  auto group = MakeGroup(n);
  auto value = [](int r, int64_t i) { return static_cast<float>(0.1 * (r + 1) + 1.0 / (i + 3)); };
  std::vector<std::vector<float>> sync_ar(n), async_ar(n), sync_rs(n), async_rs(n);
  std::vector<std::vector<float>> send(n);
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < kCount * n; ++i) send[r].push_back(value(r, i));
    sync_ar[r].assign(send[r].begin(), send[r].begin() + kCount);
    async_ar[r] = sync_ar[r];
    sync_rs[r].assign(kCount, 0);
    async_rs[r].assign(kCount, 0);
  }
  ExpectAllOk(RunRanks(*group, [&](int r, Communicator& c) {
    HOIST_RETURN_IF_ERROR(c.AllReduce(sync_ar[r].data(), kCount, DType::kFloat32, ReduceOp::kAvg));
    HOIST_RETURN_IF_ERROR(c.ReduceScatter(send[r].data(), sync_rs[r].data(), kCount,
                                          DType::kFloat32, ReduceOp::kSum));
    CommHandle a = c.AllReduceAsync(async_ar[r].data(), kCount, DType::kFloat32, ReduceOp::kAvg);
    CommHandle b = c.ReduceScatterAsync(send[r].data(), async_rs[r].data(), kCount, DType::kFloat32,
                                        ReduceOp::kSum);
    HOIST_RETURN_IF_ERROR(a->Wait());
    return b->Wait();
  }));
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(async_ar[r], sync_ar[r]) << "rank " << r;
    EXPECT_EQ(async_rs[r], sync_rs[r]) << "rank " << r;
    EXPECT_EQ(async_ar[r], async_ar[0]) << "rank " << r;
  }
}

TEST(ThreadGroupAsync, TimeoutSurfacesThroughWaitNamingOpRankBytesAndMissingRank) {
  auto group = MakeGroup(3, /*timeout_s=*/0.2);
  std::vector<std::vector<float>> bufs(2, std::vector<float>(10));
  std::vector<Status> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {  // rank 2 never calls
    threads.emplace_back([&, r] {
      CommHandle h =
          group->comm(r).AllReduceAsync(bufs[r].data(), 10, DType::kFloat32, ReduceOp::kSum);
      results[r] = h->Wait();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r].code(), StatusCode::kDeadlineExceeded) << results[r].ToString();
    const std::string& m = results[r].message();
    EXPECT_NE(m.find("AllReduce(sum, 10 x fp32, 40 bytes)"), std::string::npos) << m;
    EXPECT_NE(m.find("on rank " + std::to_string(r) + " of 3"), std::string::npos) << m;
    EXPECT_NE(m.find("did not arrive: 2"), std::string::npos) << m;
  }
}

TEST(ThreadGroupAsync, FailedGroupFailsLaterCallsFast) {
  auto group = MakeGroup(2, /*timeout_s=*/0.1);
  float x[4] = {};
  // Rank 1 never joins: rank 0 times out and the group is broken.
  Status first = group->comm(0).AllReduce(x, 4, DType::kFloat32, ReduceOp::kSum);
  ASSERT_EQ(first.code(), StatusCode::kDeadlineExceeded) << first.ToString();
  // Later calls on every rank fail at once with the original error, blocking and async alike;
  // neither waits out another timeout because the group is known to be broken.
  for (int r = 0; r < 2; ++r) {
    CommHandle h = group->comm(r).AllGatherAsync(x, x, 2, DType::kFloat32);
    Status s = h->Wait();
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
    EXPECT_NE(s.message().find("earlier failure"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("did not arrive: 1"), std::string::npos) << s.message();
    Status b = group->comm(r).Barrier();
    EXPECT_NE(b.message().find("earlier failure"), std::string::npos) << b.message();
  }
}

TEST(ThreadGroupAsync, AbortFailsWaitingAndLaterCallsWithTheReason) {
  auto group = MakeGroup(3, /*timeout_s=*/30.0);
  float x[2] = {};
  float y[2] = {};
  // Ranks 0 and 1 wait in a barrier that rank 2 never joins; rank 2 aborts instead. They must
  // return with the abort reason long before the 30 s timeout.
  CommHandle h0 = group->comm(0).AllReduceAsync(x, 2, DType::kFloat32, ReduceOp::kSum);
  CommHandle h1 = group->comm(1).AllReduceAsync(y, 2, DType::kFloat32, ReduceOp::kSum);
  group->comm(2).Abort(UnavailableError("data loader failed"), 3);
  for (CommHandle* h : {&h0, &h1}) {
    Status s = (*h)->Wait();
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
    EXPECT_NE(s.message().find("rank 2 aborted"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("data loader failed"), std::string::npos) << s.message();
  }
  Status later = group->comm(2).Barrier();
  EXPECT_EQ(later.code(), StatusCode::kUnavailable) << later.ToString();
}

}  // namespace
}  // namespace hoist::comm
