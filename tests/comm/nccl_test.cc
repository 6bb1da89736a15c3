// NcclCommunicator on the GPUs of one machine. NCCL refuses two ranks on one GPU, so on a 1-GPU
// machine every collective runs as a 1-rank group (the results are then each rank's own input,
// which still proves dtype handling, buffer addressing and stream ordering, not the reduction
// across ranks). Every test skips with the reason where no GPU is visible.
#if defined(HOIST_HAVE_NCCL)

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/half.h"
#include "comm/nccl_communicator.h"
#include "comm/thread_communicator.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/event.h"
#include "core/cuda/pinned_host_device.h"
#include "core/cuda/stream.h"
#include "core/cuda/testing/ordering_kernels.h"

namespace hoist::comm {
namespace {

constexpr double kTimeoutS = 60.0;
constexpr int64_t kCount = 4099;   // not a multiple of any vector width or block size
constexpr uint8_t kPoison = 0xFF;  // all-ones: a NaN in every dtype

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Values of `type` held as raw bytes, drawn from a fixed seed; never zero, so that an output
// that was not written cannot pass.
std::vector<uint8_t> RandomElements(DType type, int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(0.25f, 4.0f);
  std::vector<uint8_t> bytes(count * DTypeSize(type));
  for (int64_t i = 0; i < count; ++i) {
    const float v = (i % 2 ? -1.0f : 1.0f) * dist(rng);
    if (type == DType::kFloat32) {
      std::memcpy(&bytes[i * 4], &v, 4);
    } else {
      const uint16_t h = type == DType::kBFloat16 ? FloatToBFloat16(v) : FloatToHalf(v);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  return bytes;
}

float LoadElement(const std::vector<uint8_t>& bytes, DType type, int64_t i) {
  if (type == DType::kFloat32) {
    float v;
    std::memcpy(&v, &bytes[i * 4], 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, &bytes[i * 2], 2);
  return type == DType::kBFloat16 ? BFloat16ToFloat(h) : HalfToFloat(h);
}

// The reduction of `contributions` (one per rank) computed on the host as the Communicator
// contract defines it: rank-ordered fp32 sum, divided by N for kAvg, one rounding at the end.
std::vector<uint8_t> HostReduce(const std::vector<std::vector<uint8_t>>& contributions, DType type,
                                ReduceOp op, int64_t count) {
  std::vector<uint8_t> out(count * DTypeSize(type));
  for (int64_t i = 0; i < count; ++i) {
    float sum = 0.0f;
    for (const auto& c : contributions) sum += LoadElement(c, type, i);
    if (op == ReduceOp::kAvg) sum /= static_cast<float>(contributions.size());
    if (type == DType::kFloat32) {
      std::memcpy(&out[i * 4], &sum, 4);
    } else {
      const uint16_t h = type == DType::kBFloat16 ? FloatToBFloat16(sum) : FloatToHalf(sum);
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

class NcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA GPU visible (driver " << CudaDriverVersionString() << ")";
    }
    auto group = ThreadGroup::Create(1, kTimeoutS);
    ASSERT_TRUE(group.ok()) << group.status().ToString();
    group_ = std::move(group).value();
    auto comm = NcclCommunicator::Create(&group_->comm(0), NcclOptions{.timeout_s = kTimeoutS});
    ASSERT_TRUE(comm.ok()) << comm.status().ToString();
    comm_ = std::move(comm).value();
    auto device = CudaDevice::Open(comm_->device(), &tracker_);
    ASSERT_TRUE(device.ok()) << device.status().ToString();
    device_ = std::move(device).value();
    stream_ = CudaStream::Create().value();
  }

  Buffer Allocate(int64_t bytes) {
    return device_->Allocate(std::max<int64_t>(bytes, 1), Category::kComm).value();
  }

  void Upload(void* device, const std::vector<uint8_t>& host) {
    ASSERT_EQ(
        cudaMemcpyAsync(device, host.data(), host.size(), cudaMemcpyHostToDevice, stream_.get()),
        cudaSuccess);
    ASSERT_TRUE(stream_.Synchronize().ok());
  }

  void Poison(void* device, int64_t bytes) {
    ASSERT_EQ(cudaMemsetAsync(device, kPoison, bytes, stream_.get()), cudaSuccess);
    ASSERT_TRUE(stream_.Synchronize().ok());
  }

  std::vector<uint8_t> Download(const void* device, int64_t bytes) {
    std::vector<uint8_t> host(bytes);
    EXPECT_EQ(cudaMemcpyAsync(host.data(), device, bytes, cudaMemcpyDeviceToHost, stream_.get()),
              cudaSuccess);
    EXPECT_TRUE(stream_.Synchronize().ok());
    return host;
  }

  MemoryTracker tracker_;
  std::unique_ptr<ThreadGroup> group_;
  std::unique_ptr<NcclCommunicator> comm_;
  std::unique_ptr<CudaDevice> device_;
  CudaStream stream_;
};

TEST_F(NcclTest, BootstrapsOverAOneRankThreadGroup) {
  EXPECT_EQ(comm_->rank(), 0);
  EXPECT_EQ(comm_->world_size(), 1);
  EXPECT_EQ(comm_->device(), 0);  // local_rank 0 % visible GPUs
  EXPECT_TRUE(comm_->Barrier().ok());
}

struct DtypeOp {
  DType type;
  ReduceOp op;
};

void PrintTo(const DtypeOp& p, std::ostream* out) {
  *out << DTypeName(p.type) << " " << ReduceOpName(p.op);
}

std::string Name(const ::testing::TestParamInfo<DtypeOp>& info) {
  return std::string(DTypeName(info.param.type)) + "_" + ReduceOpName(info.param.op);
}

class NcclReduceTest : public NcclTest, public ::testing::WithParamInterface<DtypeOp> {};

TEST_P(NcclReduceTest, AllReduceMatchesHostReduction) {
  const auto [type, op] = GetParam();
  const int64_t bytes = kCount * DTypeSize(type);
  std::vector<uint8_t> input = RandomElements(type, kCount, 11);
  Buffer buf = Allocate(bytes);
  Upload(buf.data(), input);
  ASSERT_TRUE(comm_->AllReduce(buf.data(), kCount, type, op).ok());
  EXPECT_EQ(Download(buf.data(), bytes), HostReduce({input}, type, op, kCount));
}

TEST_P(NcclReduceTest, AllReduceAsyncMatchesHostReduction) {
  const auto [type, op] = GetParam();
  const int64_t bytes = kCount * DTypeSize(type);
  std::vector<uint8_t> input = RandomElements(type, kCount, 12);
  Buffer buf = Allocate(bytes);
  Upload(buf.data(), input);
  CommHandle handle = comm_->AllReduceAsync(buf.data(), kCount, type, op);
  ASSERT_TRUE(handle->Wait().ok());
  EXPECT_TRUE(handle->Done());
  EXPECT_TRUE(handle->Wait().ok());  // a second Wait returns the same outcome
  EXPECT_EQ(Download(buf.data(), bytes), HostReduce({input}, type, op, kCount));
}

TEST_P(NcclReduceTest, ReduceScatterWritesEveryElementOfThePoisonedOutput) {
  const auto [type, op] = GetParam();
  const int64_t bytes = kCount * DTypeSize(type);
  std::vector<uint8_t> input = RandomElements(type, kCount, 13);
  Buffer send = Allocate(bytes);
  Buffer recv = Allocate(bytes);
  Upload(send.data(), input);
  Poison(recv.data(), bytes);
  CommHandle handle = comm_->ReduceScatterAsync(send.data(), recv.data(), kCount, type, op);
  ASSERT_TRUE(handle->Wait().ok());
  EXPECT_EQ(Download(recv.data(), bytes), HostReduce({input}, type, op, kCount));
  EXPECT_EQ(Download(send.data(), bytes), input);  // the input is left alone
}

INSTANTIATE_TEST_SUITE_P(EveryDtypeAndOp, NcclReduceTest,
                         ::testing::Values(DtypeOp{DType::kFloat32, ReduceOp::kSum},
                                           DtypeOp{DType::kFloat32, ReduceOp::kAvg},
                                           DtypeOp{DType::kBFloat16, ReduceOp::kSum},
                                           DtypeOp{DType::kBFloat16, ReduceOp::kAvg},
                                           DtypeOp{DType::kFloat16, ReduceOp::kSum},
                                           DtypeOp{DType::kFloat16, ReduceOp::kAvg}),
                         Name);

struct Dtype {
  DType type;
};

void PrintTo(const Dtype& p, std::ostream* out) { *out << DTypeName(p.type); }

class NcclCopyTest : public NcclTest, public ::testing::WithParamInterface<Dtype> {};

TEST_P(NcclCopyTest, AllGatherFillsThePoisonedOutput) {
  const DType type = GetParam().type;
  const int64_t bytes = kCount * DTypeSize(type);
  std::vector<uint8_t> input = RandomElements(type, kCount, 21);
  Buffer send = Allocate(bytes);
  Buffer recv = Allocate(bytes * comm_->world_size());
  Upload(send.data(), input);
  Poison(recv.data(), bytes);
  ASSERT_TRUE(comm_->AllGather(send.data(), recv.data(), kCount, type).ok());
  EXPECT_EQ(Download(recv.data(), bytes), input);
}

TEST_P(NcclCopyTest, AllGatherInPlaceKeepsOwnBlock) {
  const DType type = GetParam().type;
  const int64_t bytes = kCount * DTypeSize(type);
  std::vector<uint8_t> input = RandomElements(type, kCount, 22);
  Buffer recv = Allocate(bytes * comm_->world_size());
  Upload(recv.data(), input);
  CommHandle handle = comm_->AllGatherAsync(recv.data(), recv.data(), kCount, type);
  ASSERT_TRUE(handle->Wait().ok());
  EXPECT_EQ(Download(recv.data(), bytes), input);
}

TEST_P(NcclCopyTest, BroadcastFromRootKeepsRootData) {
  const DType type = GetParam().type;
  const int64_t bytes = kCount * DTypeSize(type);
  std::vector<uint8_t> input = RandomElements(type, kCount, 23);
  Buffer buf = Allocate(bytes);
  Upload(buf.data(), input);
  ASSERT_TRUE(comm_->Broadcast(buf.data(), kCount, type, 0).ok());
  EXPECT_EQ(Download(buf.data(), bytes), input);
  CommHandle handle = comm_->BroadcastAsync(buf.data(), kCount, type, 0);
  ASSERT_TRUE(handle->Wait().ok());
  EXPECT_EQ(Download(buf.data(), bytes), input);
}

INSTANTIATE_TEST_SUITE_P(EveryDtype, NcclCopyTest,
                         ::testing::Values(Dtype{DType::kFloat32}, Dtype{DType::kBFloat16},
                                           Dtype{DType::kFloat16}),
                         [](const ::testing::TestParamInfo<Dtype>& info) {
                           return std::string(DTypeName(info.param.type));
                         });

TEST_F(NcclTest, HostBufferIsRejectedAndTheGroupStaysUsable) {
  std::vector<float> host(16, 1.0f);
  Status status = comm_->AllReduce(host.data(), 16, DType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(status.message(), "not device memory")) << status.message();
  EXPECT_TRUE(Contains(status.message(), "AllReduce")) << status.message();
  EXPECT_TRUE(comm_->Barrier().ok());
}

TEST_F(NcclTest, BadCountOrRootIsInvalidArgument) {
  Buffer buf = Allocate(64);
  EXPECT_EQ(comm_->AllReduce(buf.data(), -1, DType::kFloat32, ReduceOp::kSum).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(comm_->Broadcast(buf.data(), 4, DType::kFloat32, 1).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(comm_->AllReduce(buf.data(), 0, DType::kFloat32, ReduceOp::kSum).ok());
}

// The producer writes the collective's input after a long spin; OrderAfter orders the collective
// after it, and StreamWait orders a consumer kernel after the collective, with no host wait in
// between. Without either event the consumer would almost surely see the poison.
TEST_F(NcclTest, EventsOrderTheCollectiveBetweenProducerAndConsumerStreams) {
  CudaStream producer = CudaStream::Create().value();
  CudaStream consumer = CudaStream::Create().value();
  Buffer send = Allocate(sizeof(float));
  Buffer recv = Allocate(sizeof(float));
  Buffer seen = Allocate(sizeof(float));
  Poison(recv.data(), sizeof(float));
  Poison(seen.data(), sizeof(float));
  const int value = std::bit_cast<int>(2.5f);

  constexpr int64_t kSpinCycles = int64_t{100} << 20;
  ASSERT_TRUE(testing::LaunchDelayedStore(send.as<int>(), value, kSpinCycles, producer).ok());
  ASSERT_TRUE(comm_->OrderAfter(producer).ok());
  CommHandle handle = comm_->AllGatherAsync(send.data(), recv.data(), 1, DType::kFloat32);
  // Through the Communicator's interface, as the engine calls it.
  ASSERT_TRUE(handle->StreamWait(consumer).ok());
  EXPECT_FALSE(handle->Done()) << "the host waited for the producer";
  ASSERT_TRUE(testing::LaunchCopyOne(recv.as<int>(), seen.as<int>(), consumer).ok());
  int observed = 0;
  ASSERT_EQ(
      cudaMemcpyAsync(&observed, seen.data(), sizeof(int), cudaMemcpyDeviceToHost, consumer.get()),
      cudaSuccess);
  ASSERT_TRUE(consumer.Synchronize().ok());
  EXPECT_EQ(observed, value);
  ASSERT_TRUE(handle->Wait().ok());
  std::vector<uint8_t> after = Download(recv.data(), sizeof(float));
  EXPECT_EQ(std::memcmp(after.data(), &value, sizeof(int)), 0);
}

// A collective held back past the deadline: Wait aborts the NCCL communicator and names the op,
// the rank and the bytes; every later call fails fast with that error.
TEST_F(NcclTest, WaitPastTheDeadlineAbortsAndNamesOpRankAndBytes) {
  // Long enough for a second communicator's creation, far shorter than the blocker's spin.
  auto fast = NcclCommunicator::Create(&group_->comm(0), NcclOptions{.timeout_s = 1.0});
  ASSERT_TRUE(fast.ok()) << fast.status().ToString();
  auto pinned = PinnedHostDevice::Open(&tracker_);
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  Buffer release = (*pinned)->Allocate(sizeof(int), Category::kWorkspace).value();
  CudaStream blocker = CudaStream::Create().value();
  CudaEvent blocked = CudaEvent::Create().value();
  Buffer buf = Allocate(256 * sizeof(float));

  // 2^32 cycles (over 2 s at today's clocks, past the 1 s deadline) bound the blocker should the
  // release never come. ncclCommAbort waits for what is already queued on the comm stream, here
  // the wait on this kernel, so the test lasts about that long.
  ASSERT_TRUE(testing::LaunchSpinUntilSet(release.as<int>(), int64_t{1} << 32, blocker).ok());
  ASSERT_TRUE(blocked.Record(blocker).ok());
  ASSERT_TRUE((*fast)->WaitFor(blocked).ok());
  CommHandle handle = (*fast)->AllReduceAsync(buf.data(), 256, DType::kFloat32, ReduceOp::kSum);
  Status status = handle->Wait();
  *static_cast<volatile int*>(release.as<int>()) = 1;
  ASSERT_TRUE(blocker.Synchronize().ok());

  EXPECT_EQ(status.code(), StatusCode::kDeadlineExceeded) << status.ToString();
  EXPECT_TRUE(Contains(status.message(), "AllReduce")) << status.message();
  EXPECT_TRUE(Contains(status.message(), "rank 0 of 1")) << status.message();
  EXPECT_TRUE(Contains(status.message(), "1024 bytes")) << status.message();
  Status later = (*fast)->Barrier();
  EXPECT_EQ(later.code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(Contains(later.message(), "unusable")) << later.message();
  // The first communicator on the same GPU is untouched by the other's abort.
  EXPECT_TRUE(comm_->Barrier().ok());
}

// NCCL does not allow two ranks of one group on one GPU: on a 1-GPU machine both ranks must
// get an error back, neither may hang.
TEST(NcclCreate, TwoRanksOnOneGpuFailOnBothRanks) {
  if (CudaDeviceCount() != 1) {
    GTEST_SKIP() << "needs exactly one visible GPU; " << CudaDeviceCount() << " visible";
  }
  auto group = ThreadGroup::Create(2, kTimeoutS);
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  std::vector<Status> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto comm = NcclCommunicator::Create(&(*group)->comm(r),
                                           NcclOptions{.local_rank = r, .timeout_s = 20});
      results[r] = comm.status();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(results[r].ok()) << "rank " << r;
    std::cout << "rank " << r << ": " << results[r].ToString() << "\n";
  }
}

}  // namespace
}  // namespace hoist::comm

#endif  // defined(HOIST_HAVE_NCCL)
