#include "core/host_stream.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <vector>

namespace hoist {
namespace {

using Mode = HostStream::Mode;

TEST(HostStream, InlineRunsWorkAtTheCallAndReturnsItsStatus) {
  HostStream stream(Mode::kInline);
  int x = 0;
  EXPECT_TRUE(stream
                  .Enqueue([&] {
                    x = 1;
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_EQ(x, 1);  // no Synchronize needed
  Status failed = stream.Enqueue([] { return InternalError("boom"); });
  EXPECT_EQ(failed.code(), StatusCode::kInternal);
  EXPECT_EQ(stream.Synchronize().code(), StatusCode::kInternal);
}

TEST(HostStream, InlineEventIsCompleteOnceRecorded) {
  HostStream stream(Mode::kInline);
  HostEvent event;
  ASSERT_TRUE(event.Record(stream).ok());
  EXPECT_TRUE(event.IsComplete().value());
  EXPECT_TRUE(stream.WaitEvent(event).ok());
}

TEST(HostStream, ThreadedRunsWorkInOrderOffTheCallingThread) {
  HostStream stream(Mode::kThreaded);
  std::vector<int> order;
  std::atomic<bool> other_thread{true};
  const auto caller = std::this_thread::get_id();
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(stream
                    .Enqueue([&, i] {
                      if (std::this_thread::get_id() == caller) other_thread = false;
                      order.push_back(i);
                      return Status::Ok();
                    })
                    .ok());
  }
  ASSERT_TRUE(stream.Synchronize().ok());
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  EXPECT_TRUE(other_thread);
}

TEST(HostStream, ThreadedErrorSurfacesAtSynchronizeAndLaterEnqueues) {
  HostStream stream(Mode::kThreaded);
  ASSERT_TRUE(stream.Enqueue([] { return DataLossError("bad bytes"); }).ok());
  Status synced = stream.Synchronize();
  EXPECT_EQ(synced.code(), StatusCode::kDataLoss);
  EXPECT_NE(synced.message().find("bad bytes"), std::string::npos);
  EXPECT_EQ(stream.Enqueue([] { return Status::Ok(); }).code(), StatusCode::kDataLoss);
}

TEST(HostStream, EventCompletesOnlyWhenTheRecordedWorkHas) {
  HostStream producer(Mode::kThreaded);
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  ASSERT_TRUE(producer
                  .Enqueue([opened] {
                    opened.wait();
                    return Status::Ok();
                  })
                  .ok());
  HostEvent event;
  ASSERT_TRUE(event.Record(producer).ok());
  EXPECT_FALSE(event.IsComplete().value());  // the producer is held at the gate
  gate.set_value();
  ASSERT_TRUE(event.Synchronize().ok());
  EXPECT_TRUE(event.IsComplete().value());
}

TEST(HostStream, ConsumerStreamWaitsForTheProducersEvent) {
  HostStream producer(Mode::kThreaded), consumer(Mode::kThreaded);
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  int value = 0;  // written by the producer, read by the consumer: ordered by the event alone
  ASSERT_TRUE(producer
                  .Enqueue([&value, opened] {
                    opened.wait();
                    value = 42;
                    return Status::Ok();
                  })
                  .ok());
  HostEvent ready;
  ASSERT_TRUE(ready.Record(producer).ok());
  ASSERT_TRUE(consumer.WaitEvent(ready).ok());
  std::atomic<bool> consumed{false};
  int seen = -1;
  ASSERT_TRUE(consumer
                  .Enqueue([&] {
                    seen = value;
                    consumed = true;
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_FALSE(consumed);  // it cannot have run: the producer is still at the gate
  gate.set_value();
  ASSERT_TRUE(consumer.Synchronize().ok());
  EXPECT_EQ(seen, 42);
}

TEST(HostStream, InlineStreamWaitingOnAThreadedEventBlocksTheHost) {
  HostStream producer(Mode::kThreaded), host(Mode::kInline);
  int value = 0;
  ASSERT_TRUE(producer
                  .Enqueue([&value] {
                    value = 7;
                    return Status::Ok();
                  })
                  .ok());
  HostEvent ready;
  ASSERT_TRUE(ready.Record(producer).ok());
  ASSERT_TRUE(host.WaitEvent(ready).ok());
  EXPECT_EQ(value, 7);  // the wait returned only after the producer's write
}

TEST(HostStream, AnEventNeverRecordedHoldsNothingBack) {
  HostStream stream(Mode::kThreaded);
  HostEvent never;
  EXPECT_TRUE(never.IsComplete().value());
  ASSERT_TRUE(stream.WaitEvent(never).ok());
  ASSERT_TRUE(stream.Synchronize().ok());
}

TEST(HostStream, DestroyingAThreadedStreamDrainsItsQueue) {
  int ran = 0;
  {
    HostStream stream(Mode::kThreaded);
    for (int i = 0; i < 10; ++i) {
      ASSERT_TRUE(stream
                      .Enqueue([&ran] {
                        ++ran;
                        return Status::Ok();
                      })
                      .ok());
    }
  }
  EXPECT_EQ(ran, 10);
}

}  // namespace
}  // namespace hoist
