// Collectives ordered against streams (Communicator::OrderAfter, CommWork::StreamWait) on the host
// communicators' worker threads: a producer stream writes a collective's input, a consumer stream
// reads its result, and the host never waits for either. The streams are threaded host streams
// (core/host_stream.h), so a missing hand-off is a data race that ThreadSanitizer reports (the
// test is in scripts/test's TSan lane); the values show the order without it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/thread_communicator.h"
#include "core/host_stream.h"
#include "tests/comm/comm_test_util.h"

namespace hoist::comm {
namespace {

using testing::ExpectAllOk;
using testing::MakeGroup;
using testing::RunRanks;
using Clock = std::chrono::steady_clock;

// Blocks the calling thread until `open` is set or 10 s have passed; whether it was opened.
bool AwaitOpen(const std::atomic<bool>& open) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!open.load()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

// The producer's work is held until the host has issued everything: had OrderAfter, the
// collective or StreamWait waited on the host for the producer, the hold would run out (10 s)
// and say so. The collective still reads what the producer wrote, and the consumer reads the
// result, each only through the events.
TEST(StreamOrderedCollectives, RunBetweenProducerAndConsumerStreamsWithoutTheHostWaiting) {
  const int n = 2;
  const int64_t count = 1000;
  auto group = MakeGroup(n, 30.0);
  ExpectAllOk(RunRanks(*group, [&](int rank, Communicator& comm) -> Status {
    std::vector<float> buf(static_cast<size_t>(count), -1.0f);
    std::vector<float> seen(static_cast<size_t>(count), 0.0f);
    std::atomic<bool> issued{false};
    bool held_open = false;
    // After the data their work uses, so that an early return drains them first.
    HostStream producer(HostStream::Mode::kThreaded), consumer(HostStream::Mode::kThreaded);
    HOIST_RETURN_IF_ERROR(producer.Enqueue([&] {
      held_open = AwaitOpen(issued);
      for (int64_t i = 0; i < count; ++i) buf[size_t(i)] = float(rank + 1) * float(i % 7);
      return Status::Ok();
    }));
    HOIST_RETURN_IF_ERROR(comm.OrderAfter(producer));
    CommHandle handle = comm.AllReduceAsync(buf.data(), count, DType::kFloat32, ReduceOp::kSum);
    HOIST_RETURN_IF_ERROR(handle->StreamWait(consumer));
    HOIST_RETURN_IF_ERROR(consumer.Enqueue([&] {
      seen = buf;
      return Status::Ok();
    }));
    issued = true;
    HOIST_RETURN_IF_ERROR(consumer.Synchronize());
    EXPECT_TRUE(held_open) << "rank " << rank << ": the host waited for the producer";
    std::vector<float> want(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) want[size_t(i)] = 3.0f * float(i % 7);
    EXPECT_EQ(seen, want) << "rank " << rank;
    return handle->Wait();
  }));
}

// Several collectives after one OrderAfter: the first waits for the producer and the rest run
// after it (the queue's order), each consumer wait after its own collective.
TEST(StreamOrderedCollectives, LaterCollectivesFollowTheFirstAndConsumersTheirOwn) {
  const int n = 3;
  const int64_t count = 64;
  auto group = MakeGroup(n, 30.0);
  ExpectAllOk(RunRanks(*group, [&](int rank, Communicator& comm) -> Status {
    std::vector<float> send(static_cast<size_t>(n * count), 0.0f);
    std::vector<float> shard(static_cast<size_t>(count), 0.0f);
    std::vector<float> gathered(static_cast<size_t>(n * count), 0.0f);
    std::vector<float> seen_shard, seen_gathered;
    HostStream producer(HostStream::Mode::kThreaded), consumer(HostStream::Mode::kThreaded);
    HOIST_RETURN_IF_ERROR(producer.Enqueue([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (size_t i = 0; i < send.size(); ++i) send[i] = float(rank) + float(i);
      return Status::Ok();
    }));
    HOIST_RETURN_IF_ERROR(comm.OrderAfter(producer));
    CommHandle reduced =
        comm.ReduceScatterAsync(send.data(), shard.data(), count, DType::kFloat32, ReduceOp::kSum);
    // Gathers the reduced shards: reads `shard`, which the reduce-scatter before it wrote.
    CommHandle all = comm.AllGatherAsync(shard.data(), gathered.data(), count, DType::kFloat32);
    HOIST_RETURN_IF_ERROR(reduced->StreamWait(consumer));
    HOIST_RETURN_IF_ERROR(consumer.Enqueue([&] {
      seen_shard = shard;
      return Status::Ok();
    }));
    HOIST_RETURN_IF_ERROR(all->StreamWait(consumer));
    HOIST_RETURN_IF_ERROR(consumer.Enqueue([&] {
      seen_gathered = gathered;
      return Status::Ok();
    }));
    HOIST_RETURN_IF_ERROR(consumer.Synchronize());
    // Element i of the whole: the sum over ranks r of (r + i) = 0 + 1 + 2 + 3i.
    for (int64_t i = 0; i < n * count; ++i) {
      EXPECT_EQ(seen_gathered[size_t(i)], 3.0f + 3.0f * float(i)) << "rank " << rank << " " << i;
    }
    for (int64_t i = 0; i < count; ++i) {
      EXPECT_EQ(seen_shard[size_t(i)], 3.0f + 3.0f * float(rank * count + i)) << i;
    }
    HOIST_RETURN_IF_ERROR(reduced->Wait());
    return all->Wait();
  }));
}

// A consumer stream that waits on a failed collective carries its error, as a GPU stream reports
// an earlier fault at its next call; Wait returns it too. The ranks disagree on the count, which
// the group refuses on every rank.
TEST(StreamOrderedCollectives, AFailedCollectiveIsTheConsumerStreamsError) {
  const int n = 2;
  auto group = MakeGroup(n, 30.0);
  std::vector<Status> streamed(n), waited(n);
  ExpectAllOk(RunRanks(*group, [&](int rank, Communicator& comm) -> Status {
    HostStream consumer(HostStream::Mode::kThreaded);
    std::vector<float> buf(8, 1.0f);
    CommHandle handle =
        comm.AllReduceAsync(buf.data(), rank == 0 ? 4 : 8, DType::kFloat32, ReduceOp::kSum);
    HOIST_RETURN_IF_ERROR(handle->StreamWait(consumer));
    streamed[size_t(rank)] = consumer.Synchronize();
    waited[size_t(rank)] = handle->Wait();
    return Status::Ok();
  }));
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(streamed[size_t(r)].code(), StatusCode::kInvalidArgument) << "rank " << r;
    EXPECT_EQ(waited[size_t(r)].code(), StatusCode::kInvalidArgument) << "rank " << r;
  }
}

// Inline streams (a CPU rank's): their work is done when it is enqueued, so OrderAfter has
// nothing to wait for and StreamWait waits on the host, returning the collective's outcome.
TEST(StreamOrderedCollectives, InlineStreamsWaitOnTheHost) {
  const int n = 2;
  auto group = MakeGroup(n, 30.0);
  ExpectAllOk(RunRanks(*group, [&](int rank, Communicator& comm) -> Status {
    HostStream stream(HostStream::Mode::kInline);
    float value = float(rank + 1);
    HOIST_RETURN_IF_ERROR(comm.OrderAfter(stream));
    CommHandle handle = comm.AllReduceAsync(&value, 1, DType::kFloat32, ReduceOp::kSum);
    HOIST_RETURN_IF_ERROR(handle->StreamWait(stream));
    EXPECT_TRUE(handle->Done());
    EXPECT_EQ(value, 3.0f);
    return Status::Ok();
  }));
}

}  // namespace
}  // namespace hoist::comm
