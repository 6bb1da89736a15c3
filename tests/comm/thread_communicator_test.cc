#include "comm/thread_communicator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/half.h"
#include "tests/comm/comm_test_util.h"

namespace hoist::comm {
namespace {

constexpr double kTimeoutS = 5.0;
constexpr int64_t kCount = 7;  // uneven on purpose: no world size divides it

using testing::ExpectAllOk;
using testing::RunRanks;

std::unique_ptr<ThreadGroup> MakeGroup(int n, double timeout_s = kTimeoutS) {
  return testing::MakeGroup(n, timeout_s);
}

// A value that is not exactly representable and differs per rank and element.
double Value(int rank, int64_t i) {
  return 0.1 * (rank + 1) - 0.37 * static_cast<double>(i) + 1.0 / 3;
}

// Element values in a 16-bit type, held as bits.
std::vector<uint16_t> Encode(const std::vector<double>& values, DType type) {
  std::vector<uint16_t> out;
  for (double v : values) {
    const float f = static_cast<float>(v);
    out.push_back(type == DType::kBFloat16 ? FloatToBFloat16(f) : FloatToHalf(f));
  }
  return out;
}

float Decode(uint16_t bits, DType type) {
  return type == DType::kBFloat16 ? BFloat16ToFloat(bits) : HalfToFloat(bits);
}

// Relative step of a type near 1: its rounding error bound, with room for fp32 accumulation.
double Tolerance(DType type) {
  switch (type) {
    case DType::kFloat32: return 1e-6;
    case DType::kBFloat16: return 0x1p-8;
    case DType::kFloat16: return 0x1p-11;
  }
  return 0;
}

class WorldSizeTest : public ::testing::TestWithParam<int> {};

// Named N1..N4; built with append because GCC 12 misreports `"N" + std::to_string(n)` under
// -Wrestrict.
std::string WorldSizeName(const ::testing::TestParamInfo<int>& info) {
  std::string name = "N";
  name.append(std::to_string(info.param));
  return name;
}

INSTANTIATE_TEST_SUITE_P(Ranks, WorldSizeTest, ::testing::Values(1, 2, 3, 4), WorldSizeName);

TEST_P(WorldSizeTest, AllReduceFloat32MatchesSerialReferenceOnEveryRankBitForBit) {
  const int n = GetParam();
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    auto group = MakeGroup(n);
    std::vector<std::vector<float>> bufs(n, std::vector<float>(kCount));
    for (int r = 0; r < n; ++r) {
      for (int64_t i = 0; i < kCount; ++i) bufs[r][i] = static_cast<float>(Value(r, i));
    }
    ExpectAllOk(RunRanks(*group, [&](int r, Communicator& c) {
      return c.AllReduce(bufs[r].data(), kCount, DType::kFloat32, op);
    }));
    for (int64_t i = 0; i < kCount; ++i) {
      double expected = 0;
      for (int r = 0; r < n; ++r) expected += static_cast<float>(Value(r, i));
      if (op == ReduceOp::kAvg) expected /= n;
      EXPECT_NEAR(bufs[0][i], expected, 1e-6 * (1 + std::abs(expected))) << "element " << i;
    }
    for (int r = 1; r < n; ++r) {
      EXPECT_EQ(std::memcmp(bufs[r].data(), bufs[0].data(), kCount * sizeof(float)), 0)
          << "rank " << r << " differs from rank 0 (" << ReduceOpName(op) << ")";
    }
  }
}

TEST_P(WorldSizeTest, AllReduceHalfTypesReduceInFloat32AndRoundOnce) {
  const int n = GetParam();
  for (DType type : {DType::kBFloat16, DType::kFloat16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      auto group = MakeGroup(n);
      std::vector<std::vector<uint16_t>> bufs(n);
      for (int r = 0; r < n; ++r) {
        std::vector<double> values;
        for (int64_t i = 0; i < kCount; ++i) values.push_back(Value(r, i));
        bufs[r] = Encode(values, type);
      }
      const auto inputs = bufs;
      ExpectAllOk(RunRanks(*group, [&](int r, Communicator& c) {
        return c.AllReduce(bufs[r].data(), kCount, type, op);
      }));
      for (int64_t i = 0; i < kCount; ++i) {
        // The contract exactly: fp32 sum in rank order, then one rounding.
        float sum = Decode(inputs[0][i], type);
        double reference = sum;
        for (int r = 1; r < n; ++r) {
          sum += Decode(inputs[r][i], type);
          reference += Decode(inputs[r][i], type);
        }
        if (op == ReduceOp::kAvg) {
          sum /= static_cast<float>(n);
          reference /= n;
        }
        const uint16_t expected = Encode({sum}, type)[0];
        EXPECT_EQ(bufs[0][i], expected) << DTypeName(type) << " element " << i;
        EXPECT_NEAR(Decode(bufs[0][i], type), reference,
                    Tolerance(type) * (1 + std::abs(reference)));
      }
      for (int r = 1; r < n; ++r) EXPECT_EQ(bufs[r], bufs[0]) << "rank " << r;
    }
  }
}

TEST_P(WorldSizeTest, ReduceScatterGivesRankItsBlock) {
  const int n = GetParam();
  for (DType type : {DType::kFloat32, DType::kBFloat16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      auto group = MakeGroup(n);
      std::vector<std::vector<float>> send32(n), recv32(n, std::vector<float>(kCount, -1));
      std::vector<std::vector<uint16_t>> send16(n), recv16(n, std::vector<uint16_t>(kCount));
      for (int r = 0; r < n; ++r) {
        std::vector<double> values;
        for (int64_t i = 0; i < n * kCount; ++i) values.push_back(Value(r, i));
        for (double v : values) send32[r].push_back(static_cast<float>(v));
        send16[r] = Encode(values, type);
      }
      ExpectAllOk(RunRanks(*group, [&](int r, Communicator& c) {
        if (type == DType::kFloat32) {
          return c.ReduceScatter(send32[r].data(), recv32[r].data(), kCount, type, op);
        }
        return c.ReduceScatter(send16[r].data(), recv16[r].data(), kCount, type, op);
      }));
      for (int r = 0; r < n; ++r) {
        for (int64_t i = 0; i < kCount; ++i) {
          const int64_t at = r * kCount + i;
          double expected = 0;
          for (int s = 0; s < n; ++s) {
            expected += type == DType::kFloat32 ? send32[s][at] : Decode(send16[s][at], type);
          }
          if (op == ReduceOp::kAvg) expected /= n;
          const double got = type == DType::kFloat32 ? recv32[r][i] : Decode(recv16[r][i], type);
          EXPECT_NEAR(got, expected, Tolerance(type) * (1 + std::abs(expected)))
              << DTypeName(type) << " " << ReduceOpName(op) << " rank " << r << " element " << i;
        }
      }
    }
  }
}

TEST_P(WorldSizeTest, AllGatherConcatenatesInRankOrder) {
  const int n = GetParam();
  for (DType type : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    auto group = MakeGroup(n);
    const size_t element = DTypeSize(type);
    std::vector<std::vector<unsigned char>> send(n), recv(n);
    for (int r = 0; r < n; ++r) {
      for (size_t b = 0; b < kCount * element; ++b)
        send[r].push_back(static_cast<unsigned char>(r * 31 + b));
      recv[r].assign(n * kCount * element, 0xee);
    }
    ExpectAllOk(RunRanks(*group, [&](int r, Communicator& c) {
      return c.AllGather(send[r].data(), recv[r].data(), kCount, type);
    }));
    for (int r = 0; r < n; ++r) {
      for (int s = 0; s < n; ++s) {
        EXPECT_EQ(
            std::memcmp(recv[r].data() + s * kCount * element, send[s].data(), kCount * element), 0)
            << DTypeName(type) << " rank " << r << " block " << s;
      }
    }
  }
}

TEST_P(WorldSizeTest, AllGatherInPlaceFromOwnBlock) {
  const int n = GetParam();
  auto group = MakeGroup(n);
  std::vector<std::vector<float>> bufs(n, std::vector<float>(n * kCount, -1));
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < kCount; ++i) bufs[r][r * kCount + i] = static_cast<float>(Value(r, i));
  }
  ExpectAllOk(RunRanks(*group, [&](int r, Communicator& c) {
    return c.AllGather(bufs[r].data() + r * kCount, bufs[r].data(), kCount, DType::kFloat32);
  }));
  for (int r = 0; r < n; ++r) {
    for (int s = 0; s < n; ++s) {
      for (int64_t i = 0; i < kCount; ++i) {
        EXPECT_EQ(bufs[r][s * kCount + i], static_cast<float>(Value(s, i)));
      }
    }
  }
}

TEST_P(WorldSizeTest, BroadcastFromEveryRoot) {
  const int n = GetParam();
  auto group = MakeGroup(n);
  for (int root = 0; root < n; ++root) {
    std::vector<std::vector<uint16_t>> bufs(n, std::vector<uint16_t>(kCount));
    for (int r = 0; r < n; ++r) {
      for (int64_t i = 0; i < kCount; ++i) bufs[r][i] = static_cast<uint16_t>(r * 100 + i);
    }
    const auto root_data = bufs[root];
    ExpectAllOk(RunRanks(*group, [&](int r, Communicator& c) {
      return c.Broadcast(bufs[r].data(), kCount, DType::kFloat16, root);
    }));
    for (int r = 0; r < n; ++r) EXPECT_EQ(bufs[r], root_data) << "root " << root << " rank " << r;
  }
}

TEST_P(WorldSizeTest, BarrierWaitsForEveryRank) {
  const int n = GetParam();
  auto group = MakeGroup(n);
  std::atomic<int> entered{0};
  std::vector<int> seen(n, -1);
  ExpectAllOk(RunRanks(*group, [&](int r, Communicator& c) {
    entered.fetch_add(1);
    Status s = c.Barrier();
    seen[r] = entered.load();
    return s;
  }));
  for (int r = 0; r < n; ++r) EXPECT_EQ(seen[r], n) << "rank " << r;
}

TEST_P(WorldSizeTest, ManyCollectivesInSequenceReuseTheRendezvous) {
  const int n = GetParam();
  auto group = MakeGroup(n);
  std::vector<std::vector<float>> bufs(n, std::vector<float>(3));
  ExpectAllOk(RunRanks(*group, [&](int r, Communicator& c) {
    for (int step = 0; step < 200; ++step) {
      for (float& x : bufs[r]) x = static_cast<float>(r + step);
      HOIST_RETURN_IF_ERROR(c.AllReduce(bufs[r].data(), 3, DType::kFloat32, ReduceOp::kSum));
      for (float x : bufs[r]) {
        if (x != static_cast<float>(n * step + n * (n - 1) / 2)) {
          return InternalError("step " + std::to_string(step) + " got " + std::to_string(x));
        }
      }
    }
    return Status::Ok();
  }));
}

TEST(ThreadGroup, RankThatNeverJoinsTimesOutNamingOpRankBytesAndMissingRank) {
  constexpr double kShortTimeoutS = 0.2;
  auto group = MakeGroup(3, kShortTimeoutS);
  std::vector<float> bufs[2] = {std::vector<float>(kCount), std::vector<float>(kCount)};
  std::vector<Status> results(2);
  std::vector<double> elapsed_s(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {  // rank 2 never calls
    threads.emplace_back([&, r] {
      const auto start = std::chrono::steady_clock::now();
      results[r] =
          group->comm(r).AllReduce(bufs[r].data(), kCount, DType::kFloat32, ReduceOp::kSum);
      elapsed_s[r] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r].code(), StatusCode::kDeadlineExceeded) << results[r].ToString();
    const std::string& m = results[r].message();
    EXPECT_NE(m.find("AllReduce"), std::string::npos) << m;
    EXPECT_NE(m.find("rank " + std::to_string(r) + " of 3"), std::string::npos) << m;
    EXPECT_NE(m.find("28 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("did not arrive: 2"), std::string::npos) << m;
    EXPECT_LT(elapsed_s[r], kShortTimeoutS + 1.0);
  }
  // The group is broken now: a late rank fails at once instead of waiting forever.
  Status late = group->comm(2).AllReduce(bufs[0].data(), kCount, DType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(late.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(late.message().find("earlier failure"), std::string::npos) << late.message();
}

TEST(ThreadGroup, CountMismatchIsAnErrorOnEveryRank) {
  auto group = MakeGroup(2);
  std::vector<float> small(kCount), large(kCount + 1);
  auto results = RunRanks(*group, [&](int r, Communicator& c) {
    return r == 0 ? c.AllReduce(small.data(), kCount, DType::kFloat32, ReduceOp::kSum)
                  : c.AllReduce(large.data(), kCount + 1, DType::kFloat32, ReduceOp::kSum);
  });
  for (const Status& s : results) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("mismatched"), std::string::npos) << s.message();
  }
}

TEST(ThreadGroup, OpMismatchIsAnErrorOnEveryRank) {
  auto group = MakeGroup(2);
  std::vector<float> buf0(kCount), buf1(kCount);
  auto results = RunRanks(*group, [&](int r, Communicator& c) {
    return r == 0 ? c.AllReduce(buf0.data(), kCount, DType::kFloat32, ReduceOp::kSum)
                  : c.Broadcast(buf1.data(), kCount, DType::kFloat32, 0);
  });
  for (const Status& s : results) EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
}

TEST(ThreadGroup, BadArgumentsAreRejected) {
  EXPECT_EQ(ThreadGroup::Create(0, 1.0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ThreadGroup::Create(2, 0.0).status().code(), StatusCode::kInvalidArgument);
  auto group = MakeGroup(1);
  float x = 1;
  EXPECT_EQ(group->comm(0).Broadcast(&x, 1, DType::kFloat32, 1).code(),
            StatusCode::kInvalidArgument);
}

TEST(ThreadGroup, ReportsRankAndWorldSize) {
  auto group = MakeGroup(3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(group->comm(r).rank(), r);
    EXPECT_EQ(group->comm(r).world_size(), 3);
  }
}

}  // namespace
}  // namespace hoist::comm
