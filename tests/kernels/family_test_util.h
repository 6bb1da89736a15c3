// Helpers of the tests of the ops Qwen3 and Gemma 2 add (family_norm_test.cc, family_ops_test.cc):
// 16-bit arrays (Narrow, Widen: bf16 or fp16 only) to and from fp32, the within-roundings
// comparison against float64, and a fixture with an inline CPU backend.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu_backend.h"
#include "tests/kernels/kernel_test_util.h"

#define EXPECT_OK(expr)                              \
  do {                                               \
    const ::hoist::Status status_ = (expr);          \
    EXPECT_TRUE(status_.ok()) << status_.ToString(); \
  } while (0)

namespace hoist::kernels::family_testing {

using cpu::testing::RandomFloats;

inline constexpr DType kF32 = DType::kFloat32;
inline constexpr DType kHalfTypes[] = {DType::kBFloat16, DType::kFloat16};

inline std::vector<uint16_t> Narrow(const std::vector<float>& x, DType type) {
  std::vector<uint16_t> out(x.size());
  cpu::FromFloat(x.data(), out.data(), type, static_cast<int64_t>(x.size()));
  return out;
}
inline std::vector<float> Widen(const std::vector<uint16_t>& x, DType type) {
  std::vector<float> out(x.size());
  cpu::ToFloat(x.data(), type, out.data(), static_cast<int64_t>(x.size()));
  return out;
}
// Random values that `type` holds exactly (the inputs of an op of that type), as fp32.
inline std::vector<float> RandomIn(DType type, size_t n, uint32_t seed, float lo = -1.0f,
                                   float hi = 1.0f) {
  std::vector<float> x = RandomFloats(n, seed, lo, hi);
  return type == DType::kFloat32 ? x : Widen(Narrow(x, type), type);
}
template <typename E>
bool SameBits(const std::vector<E>& a, const std::vector<E>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(E)) == 0;
}
inline double UnitRoundoff(DType type) { return type == DType::kBFloat16 ? 1.0 / 256 : 1.0 / 2048; }

// |got - ref| <= rel |ref| + slack[i] + 1e-7 (fp16's subnormals): slack is the fp32 arithmetic's
// error where it is not relative to the result (a cancellation), from the terms' magnitudes.
inline void ExpectWithin(const std::vector<float>& got, const std::vector<double>& ref, double rel,
                         const std::vector<double>& slack, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  ASSERT_EQ(slack.size(), ref.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double bound = rel * std::fabs(ref[i]) + slack[i] + 1e-7;
    if (!(std::fabs(got[i] - ref[i]) <= bound) && reported++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << ref[i] << " (bound "
                    << bound << ")";
    }
  }
}
// The same with slack scale_rel max|ref| everywhere (a sum whose terms are as large as the largest
// result).
inline void ExpectWithin(const std::vector<float>& got, const std::vector<double>& ref, double rel,
                         double scale_rel, const std::string& what) {
  double scale = 0.0;
  for (double r : ref) scale = std::max(scale, std::fabs(r));
  ExpectWithin(got, ref, rel, std::vector<double>(ref.size(), scale_rel * scale), what);
}

class FamilyOpsTest : public ::testing::Test {
 protected:
  FamilyOpsTest() : device_(Place::kDevice, &tracker_), backend_(&device_) {}
  const Stream& s() const { return backend_.compute_stream(); }
  void Sync() { ASSERT_TRUE(s().Synchronize().ok()); }

  MemoryTracker tracker_;
  CpuDevice device_;
  CpuBackend backend_;
};

}  // namespace hoist::kernels::family_testing
