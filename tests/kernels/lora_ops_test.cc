// The CPU backend's LoRA ops. Gemm against a float64 reference for every (trans_a, trans_b), with
// leading dimensions wider than the rows (the padding holds NaN, so a stride not honoured shows),
// C a window of a wider matrix (untouched outside), beta 0 over a C of NaN, fp32/bf16/fp16 with C
// in fp32 or the operands' type, within a bound derived from the roundings. Dropout: its mask's
// statistics, scale, determinism and seeds, in place and out of place, every dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu_backend.h"
#include "kernels/dropout_mask.h"
#include "tests/kernels/kernel_test_util.h"

namespace hoist::kernels {
namespace {

using cpu::testing::RandomFloats;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A row-major matrix of `type` elements stored `ld` apart, its padding NaN, with its values (as
// the type holds them) kept widened for the reference.
struct Matrix {
  Matrix(DType type, int64_t rows, int64_t cols, int64_t ld, uint32_t seed, float pad = kNaN)
      : type(type), rows(rows), cols(cols), ld(ld) {
    std::vector<float> all(static_cast<size_t>(std::max<int64_t>(rows * ld, 1)), pad);
    const std::vector<float> v = RandomFloats(static_cast<size_t>(rows * cols), seed);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) all[r * ld + c] = v[r * cols + c];
    }
    bytes.resize(all.size() * DTypeSize(type));
    cpu::FromFloat(all.data(), bytes.data(), type, static_cast<int64_t>(all.size()));
  }
  // Element (r, c) widened.
  double At(int64_t r, int64_t c) const {
    float x;
    cpu::ToFloat(bytes.data() + (r * ld + c) * DTypeSize(type), type, &x, 1);
    return x;
  }
  void* data() { return bytes.data(); }

  DType type;
  int64_t rows, cols, ld;
  std::vector<char> bytes;
};

#define EXPECT_OK(expr)                              \
  do {                                               \
    const ::hoist::Status status_ = (expr);          \
    EXPECT_TRUE(status_.ok()) << status_.ToString(); \
  } while (0)

class LoraOps : public ::testing::Test {
 protected:
  LoraOps() : device_(Place::kDevice, &tracker_), backend_(&device_) {}
  const Stream& s() const { return backend_.compute_stream(); }
  void Sync() { ASSERT_TRUE(s().Synchronize().ok()); }

  MemoryTracker tracker_;
  CpuDevice device_;
  CpuBackend backend_;
};

// Half the distance between 1 and the next value of `type` (the unit roundoff).
double UnitRoundoff(DType type) {
  switch (type) {
    case DType::kFloat32: return std::ldexp(1.0, -24);
    case DType::kBFloat16: return std::ldexp(1.0, -8);
    case DType::kFloat16: return std::ldexp(1.0, -11);
  }
  return 0;
}

struct GemmCase {
  DType type, c_type;
  bool trans_a, trans_b;
  float alpha, beta;
};

// Runs one case with M, N, K and checks C's window against float64 and the rest of C unchanged.
void CheckGemm(CpuBackend& backend, const GemmCase& g, int M, int N, int K) {
  const std::string what = std::string(DTypeName(g.type)) + "->" + DTypeName(g.c_type) +
                           (g.trans_a ? " At" : " A") + (g.trans_b ? " Bt" : " B") + " alpha " +
                           std::to_string(g.alpha) + " beta " + std::to_string(g.beta) + " M,N,K " +
                           std::to_string(M) + "," + std::to_string(N) + "," + std::to_string(K);
  SCOPED_TRACE(what);
  Matrix a(g.type, g.trans_a ? K : M, g.trans_a ? M : K, (g.trans_a ? M : K) + 3, 1);
  Matrix b(g.type, g.trans_b ? N : K, g.trans_b ? K : N, (g.trans_b ? K : N) + 5, 2);
  // C: a window at (row 1, column 3) of a (M + 2, N + 7) matrix of 7.0 (beta 0: NaN inside).
  constexpr int64_t kRow = 1, kCol = 3;
  const int64_t ldc = N + 7;
  Matrix wide(g.c_type, M + 2, ldc, ldc, 3);
  std::vector<float> fill(static_cast<size_t>((M + 2) * ldc), 7.0f);
  const std::vector<float> window = RandomFloats(static_cast<size_t>(M) * N, 4);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      fill[(kRow + i) * ldc + kCol + j] = g.beta == 0.0f ? kNaN : window[i * N + j];
    }
  }
  cpu::FromFloat(fill.data(), wide.data(), g.c_type, static_cast<int64_t>(fill.size()));
  const Matrix before = wide;
  const size_t e = DTypeSize(g.c_type);
  void* c = wide.bytes.data() + (kRow * ldc + kCol) * e;

  EXPECT_OK(backend.Gemm(g.trans_a, g.trans_b, M, N, K, g.alpha, a.data(), a.ld, b.data(), b.ld,
                         g.beta, c, ldc, g.type, g.c_type, backend.compute_stream()));
  ASSERT_TRUE(backend.compute_stream().Synchronize().ok());

  const double u32 = UnitRoundoff(DType::kFloat32);
  const double u_c = g.c_type == DType::kFloat32 ? 0.0 : 2.0 * UnitRoundoff(g.c_type);
  int bad = 0;
  for (int64_t i = 0; i < M + 2; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const bool inside = i >= kRow && i < kRow + M && j >= kCol && j < kCol + N;
      const double got = wide.At(i, j);
      if (!inside) {
        if (std::memcmp(wide.bytes.data() + (i * ldc + j) * e,
                        before.bytes.data() + (i * ldc + j) * e, e) != 0 &&
            bad++ < 5) {
          ADD_FAILURE() << "C written outside its window at (" << i << ", " << j << ")";
        }
        continue;
      }
      const int64_t r = i - kRow, col = j - kCol;
      double sum = 0, magnitude = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double x = g.trans_a ? a.At(k, r) : a.At(r, k);
        const double y = g.trans_b ? b.At(col, k) : b.At(k, col);
        sum += x * y;
        magnitude += std::fabs(x * y);
      }
      double want = g.alpha * sum;
      magnitude *= std::fabs(g.alpha);
      if (g.beta != 0.0f) {
        const double old = before.At(i, j);
        want += g.beta * old;
        magnitude += std::fabs(g.beta * old);
      }
      // fp32 accumulation (at most K + 2 roundings of the terms' magnitude), then C's one
      // rounding to its type (an ulp of the result, and fp16's subnormal spacing near 0).
      const double bound = 2.0 * (K + 2) * u32 * magnitude + u_c * std::fabs(want) +
                           (g.c_type == DType::kFloat16 ? std::ldexp(1.0, -24) : 0.0);
      if (!(std::fabs(got - want) <= bound) && bad++ < 5) {
        ADD_FAILURE() << "C(" << r << ", " << col << ") = " << got << ", want " << want
                      << " within " << bound;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST_F(LoraOps, GemmMatchesFloat64ForEveryLayoutTypeAndScale) {
  for (DType type : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (DType c_type : {DType::kFloat32, type}) {
      for (int t = 0; t < 4; ++t) {
        for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, {0.75f, 1.25f}, {-2.0f, -0.5f}}) {
          const GemmCase g{type, c_type, (t & 1) != 0, (t & 2) != 0, alpha, beta};
          CheckGemm(backend_, g, 13, 11, 17);
        }
      }
      if (type == DType::kFloat32) break;  // c_type fp32 is type
    }
  }
}

TEST_F(LoraOps, GemmWithALargeKStaysWithinTheAccumulationBound) {
  for (DType type : {DType::kFloat32, DType::kBFloat16}) {
    CheckGemm(backend_, {type, DType::kFloat32, false, true, 1.0f, 1.0f}, 33, 40, 1000);
    CheckGemm(backend_, {type, type, true, false, 0.5f, 0.0f}, 8, 64, 777);
  }
}

TEST_F(LoraOps, GemmWithKZeroScalesCAndWithMOrNZeroDoesNothing) {
  for (DType type : {DType::kFloat32, DType::kFloat16}) {
    CheckGemm(backend_, {type, type, false, false, 1.0f, 0.5f}, 5, 6, 0);
    CheckGemm(backend_, {type, DType::kFloat32, true, true, 1.0f, 0.0f}, 5, 6, 0);
    CheckGemm(backend_, {type, type, false, false, 1.0f, 0.5f}, 0, 6, 4);
    CheckGemm(backend_, {type, type, false, false, 1.0f, 0.5f}, 5, 0, 4);
  }
  // Zero sizes take null arrays.
  EXPECT_OK(backend_.Gemm(false, false, 0, 0, 0, 1.0f, nullptr, 0, nullptr, 0, 0.0f, nullptr, 0,
                          DType::kFloat32, DType::kFloat32, s()));
}

TEST_F(LoraOps, GemmRefusesBadArgumentsNamingThem) {
  std::vector<float> a(64), b(64), c(64);
  const DType f = DType::kFloat32;
  const auto refused = [&](Status status, const std::string& word) {
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
    EXPECT_NE(status.message().find("Gemm"), std::string::npos) << status.message();
    EXPECT_NE(status.message().find(word), std::string::npos) << status.message();
  };
  refused(
      backend_.Gemm(false, false, -1, 4, 4, 1, a.data(), 4, b.data(), 4, 0, c.data(), 4, f, f, s()),
      "M");
  refused(
      backend_.Gemm(false, false, 4, 4, -2, 1, a.data(), 4, b.data(), 4, 0, c.data(), 4, f, f, s()),
      "K");
  refused(
      backend_.Gemm(false, false, 4, 4, 4, 1, a.data(), 3, b.data(), 4, 0, c.data(), 4, f, f, s()),
      "lda");
  refused(
      backend_.Gemm(true, false, 4, 5, 3, 1, a.data(), 3, b.data(), 5, 0, c.data(), 5, f, f, s()),
      "lda");  // A stored (K,M): rows of M = 4
  refused(
      backend_.Gemm(false, true, 4, 5, 3, 1, a.data(), 3, b.data(), 2, 0, c.data(), 5, f, f, s()),
      "ldb");
  refused(
      backend_.Gemm(false, false, 4, 5, 3, 1, a.data(), 3, b.data(), 5, 0, c.data(), 4, f, f, s()),
      "ldc");
  refused(
      backend_.Gemm(false, false, 4, 4, 4, 1, nullptr, 4, b.data(), 4, 0, c.data(), 4, f, f, s()),
      "A is null");
  refused(
      backend_.Gemm(false, false, 4, 4, 4, 1, a.data(), 4, nullptr, 4, 0, c.data(), 4, f, f, s()),
      "B is null");
  refused(
      backend_.Gemm(false, false, 4, 4, 4, 1, a.data(), 4, b.data(), 4, 0, nullptr, 4, f, f, s()),
      "C is null");
  refused(backend_.Gemm(false, false, 4, 4, 4, 1, a.data(), 4, b.data(), 4, 0, c.data(), 4,
                        DType::kBFloat16, DType::kFloat16, s()),
          "c_type");
}

// ---- Dropout ----

std::vector<char> Bytes(DType type, const std::vector<float>& v) {
  std::vector<char> out(v.size() * DTypeSize(type));
  cpu::FromFloat(v.data(), out.data(), type, static_cast<int64_t>(v.size()));
  return out;
}
std::vector<float> Floats(DType type, const std::vector<char>& bytes) {
  std::vector<float> out(bytes.size() / DTypeSize(type));
  cpu::ToFloat(bytes.data(), type, out.data(), static_cast<int64_t>(out.size()));
  return out;
}

TEST_F(LoraOps, DropoutWithPZeroIsTheIdentity) {
  for (DType type : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    const std::vector<char> in = Bytes(type, RandomFloats(10000, 1));
    std::vector<char> out(in.size(), 0), inplace = in;
    EXPECT_OK(backend_.Dropout(out.data(), in.data(), 10000, 0.0f, 7, type, s()));
    EXPECT_OK(backend_.Dropout(inplace.data(), inplace.data(), 10000, 0.0f, 7, type, s()));
    Sync();
    EXPECT_EQ(out, in) << DTypeName(type);
    EXPECT_EQ(inplace, in) << DTypeName(type);
  }
}

TEST_F(LoraOps, DropoutKeepsOneMinusPOfTheElementsScaledExactly) {
  constexpr int64_t n = 1000000;
  const std::vector<float> in = RandomFloats(n, 2, 0.5f, 1.5f);  // no zeros: a 0 out was dropped
  for (float p : {0.05f, 0.1f, 0.3f, 0.5f, 0.9f}) {
    std::vector<float> out(n, kNaN);
    EXPECT_OK(backend_.Dropout(out.data(), in.data(), n, p, 1234, DType::kFloat32, s()));
    Sync();
    const float scale = 1.0f / (1.0f - p);
    int64_t kept = 0, wrong = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (out[i] == 0.0f) continue;
      ++kept;
      if (out[i] != in[i] * scale) ++wrong;
    }
    EXPECT_EQ(wrong, 0) << "p " << p << ": kept elements not inp * (1 / (1 - p)) in fp32";
    const double expected = n * (1.0 - p), sd = std::sqrt(n * p * (1.0 - p));
    EXPECT_LE(std::fabs(kept - expected), 5 * sd) << "p " << p << ": kept " << kept;
  }
}

TEST_F(LoraOps, DropoutMaskDependsOnSeedAndIndexOnly) {
  constexpr int64_t n = 100000;
  const std::vector<float> in = RandomFloats(n, 3, 0.5f, 1.5f);
  std::vector<float> first(n), second(n), other_seed(n), prefix(1000);
  EXPECT_OK(backend_.Dropout(first.data(), in.data(), n, 0.5f, 42, DType::kFloat32, s()));
  EXPECT_OK(backend_.Dropout(second.data(), in.data(), n, 0.5f, 42, DType::kFloat32, s()));
  EXPECT_OK(backend_.Dropout(other_seed.data(), in.data(), n, 0.5f, 43, DType::kFloat32, s()));
  EXPECT_OK(backend_.Dropout(prefix.data(), in.data(), 1000, 0.5f, 42, DType::kFloat32, s()));
  Sync();
  EXPECT_EQ(first, second);
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), first.begin()));
  // Seeds 42 and 43: independent masks agree on about half the elements at p 0.5.
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) differ += (first[i] == 0.0f) != (other_seed[i] == 0.0f);
  EXPECT_NEAR(static_cast<double>(differ) / n, 0.5, 0.01);
}

TEST_F(LoraOps, Dropout16BitIsTheFp32MaskRoundedOnceInPlaceOrNot) {
  constexpr int64_t n = 50001;  // several chunks and a partial one
  const float p = 0.25f;
  const std::vector<float> values = RandomFloats(n, 4, 0.5f, 1.5f);
  for (DType type : {DType::kBFloat16, DType::kFloat16}) {
    const std::vector<char> in = Bytes(type, values);
    const std::vector<float> widened = Floats(type, in);
    std::vector<float> fp32_out(n);
    std::vector<char> out(in.size()), inplace = in;
    EXPECT_OK(backend_.Dropout(fp32_out.data(), widened.data(), n, p, 9, DType::kFloat32, s()));
    EXPECT_OK(backend_.Dropout(out.data(), in.data(), n, p, 9, type, s()));
    EXPECT_OK(backend_.Dropout(inplace.data(), inplace.data(), n, p, 9, type, s()));
    Sync();
    EXPECT_EQ(out, Bytes(type, fp32_out)) << DTypeName(type);
    EXPECT_EQ(inplace, out) << DTypeName(type);
  }
  std::vector<float> out(n), inplace = values;
  EXPECT_OK(backend_.Dropout(out.data(), values.data(), n, p, 9, DType::kFloat32, s()));
  EXPECT_OK(backend_.Dropout(inplace.data(), inplace.data(), n, p, 9, DType::kFloat32, s()));
  Sync();
  EXPECT_EQ(inplace, out);
}

TEST_F(LoraOps, DropoutRefusesBadArgumentsNamingThem) {
  std::vector<float> x(8);
  const auto refused = [&](Status status, const std::string& word) {
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
    EXPECT_NE(status.message().find("Dropout"), std::string::npos) << status.message();
    EXPECT_NE(status.message().find(word), std::string::npos) << status.message();
  };
  const DType f = DType::kFloat32;
  refused(backend_.Dropout(x.data(), x.data(), 8, 1.0f, 1, f, s()), "p");
  refused(backend_.Dropout(x.data(), x.data(), 8, -0.1f, 1, f, s()), "p");
  refused(backend_.Dropout(x.data(), x.data(), 8, kNaN, 1, f, s()), "p");
  refused(backend_.Dropout(x.data(), x.data(), -1, 0.5f, 1, f, s()), "n");
  refused(backend_.Dropout(nullptr, x.data(), 8, 0.5f, 1, f, s()), "out is null");
  refused(backend_.Dropout(x.data(), nullptr, 8, 0.5f, 1, f, s()), "inp is null");
  EXPECT_OK(backend_.Dropout(nullptr, nullptr, 0, 0.5f, 1, f, s()));
}

// The threaded test backend (ops on a worker thread) gives the same results.
TEST(LoraOpsThreaded, GemmAndDropoutMatchTheInlineBackend) {
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  CpuBackend inline_backend(&device), threaded(&device, HostStream::Mode::kThreaded);
  const std::vector<float> a = RandomFloats(6 * 5, 1), b = RandomFloats(5 * 7, 2),
                           x = RandomFloats(5000, 3);
  std::vector<float> c1(6 * 7, 1.0f), c2 = c1, d1(5000), d2(5000);
  for (CpuBackend* backend : {&inline_backend, &threaded}) {
    const bool first = backend == &inline_backend;
    EXPECT_OK(backend->Gemm(false, false, 6, 7, 5, 1.0f, a.data(), 5, b.data(), 7, 0.5f,
                            first ? c1.data() : c2.data(), 7, DType::kFloat32, DType::kFloat32,
                            backend->compute_stream()));
    EXPECT_OK(backend->Dropout(first ? d1.data() : d2.data(), x.data(), 5000, 0.3f, 5,
                               DType::kFloat32, backend->compute_stream()));
    ASSERT_TRUE(backend->compute_stream().Synchronize().ok());
  }
  EXPECT_EQ(c1, c2);
  EXPECT_EQ(d1, d2);
}

}  // namespace
}  // namespace hoist::kernels
