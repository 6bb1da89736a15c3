// The 4-bit matmuls (Backend::MatmulForwardNf4 / MatmulBackwardNf4 on the CPU backend): for
// fp32, bf16 and fp16, odd shapes, a matrix that starts mid-block and mid-byte in its array, fp32
// and double-quantized absmaxes, a workspace of one line per panel and one of the whole matrix,
// with and without a bias, the panels the bits of the whole dequantized weight at every SIMD
// level, and the products against a float64 product of the whole weight as DequantizeNf4 (and
// DequantizeNf4Absmax) give it, within a bound derived from fp32 accumulation and one rounding to
// the output type; and against the dense ops on that weight. The refusals name what is wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cpu/blockwise_quant.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/nf4.h"
#include "kernels/cpu_backend.h"
#include "kernels/nf4.h"
#include "tests/kernels/kernel_test_util.h"

namespace hoist::kernels {
namespace {

const double kU32 = std::ldexp(1.0, -24);

// Unit roundoff of `type`.
double UnitRoundoff(DType type) {
  switch (type) {
    case DType::kBFloat16: return std::ldexp(1.0, -8);
    case DType::kFloat16: return std::ldexp(1.0, -11);
    default: return kU32;
  }
}

std::vector<char> Rounded(const std::vector<float>& x, DType type) {
  std::vector<char> out(x.size() * DTypeSize(type));
  cpu::FromFloat(x.data(), out.data(), type, static_cast<int64_t>(x.size()));
  return out;
}

std::vector<float> Widened(const std::vector<char>& x, DType type) {
  std::vector<float> out(x.size() / DTypeSize(type));
  cpu::ToFloat(x.data(), type, out.data(), static_cast<int64_t>(out.size()));
  return out;
}

// An array of `first` + OC*C N(0, 0.05) weights in NF4, its absmaxes in fp32 and (double
// quantization) in 8 bits, and the matrix that starts at `first`.
struct QuantizedArray {
  QuantizedArray(int64_t first, int64_t OC, int64_t C, bool double_quant) {
    const int64_t n = first + OC * C;
    std::vector<float> w = cpu::testing::RandomFloats(static_cast<size_t>(n), 5, -0.1f, 0.1f);
    codes.resize(static_cast<size_t>(nf4::CodeBytes(n)));
    absmax.resize(static_cast<size_t>(nf4::Blocks(n)));
    EXPECT_TRUE(cpu::QuantizeNf4(w.data(), n, codes.data(), absmax.data()).ok());
    matrix.codes = codes.data();
    matrix.first = first;
    if (!double_quant) {
      matrix.absmax = absmax.data();
      return;
    }
    const int64_t blocks = nf4::Blocks(n);
    double sum = 0;
    for (float a : absmax) sum += a;
    offset = static_cast<float>(sum / double(blocks));
    std::vector<float> centred = absmax;
    for (float& a : centred) a -= offset;
    absmax_codes.resize(static_cast<size_t>(blocks));
    scales.resize(static_cast<size_t>(cpu::QuantBlocks(blocks)));
    cpu::QuantizeBlockwise(cpu::SignedDynamicMap(), centred.data(), blocks, absmax_codes.data(),
                           scales.data());
    matrix.absmax_codes = absmax_codes.data();
    matrix.absmax_scales = scales.data();
    matrix.absmax_offset = offset;
  }
  std::vector<uint8_t> codes, absmax_codes;
  std::vector<float> absmax, scales;
  float offset = 0;
  nf4::Matrix matrix;
};

class Nf4Matmul : public ::testing::Test {
 protected:
  Nf4Matmul() : device_(Place::kDevice, &tracker_), backend_(&device_) {}
  const Stream& s() const { return backend_.compute_stream(); }

  // The matrix's weights in `type` as the backend's DequantizeNf4 writes them (after
  // DequantizeNf4Absmax for a double-quantized array), widened to fp32.
  std::vector<float> Dense(const QuantizedArray& q, int64_t OC, int64_t C, DType type) {
    const int64_t n = q.matrix.first + OC * C;
    std::vector<float> absmax = q.absmax;
    if (q.matrix.absmax == nullptr) {
      EXPECT_TRUE(backend_
                      .DequantizeNf4Absmax(absmax.data(), q.absmax_codes.data(), q.scales.data(),
                                           q.offset, nf4::Blocks(n), s())
                      .ok());
    }
    std::vector<char> all(static_cast<size_t>(n) * DTypeSize(type));
    EXPECT_TRUE(
        backend_.DequantizeNf4(all.data(), type, q.codes.data(), absmax.data(), n, s()).ok());
    EXPECT_TRUE(s().Synchronize().ok());
    std::vector<float> wide = Widened(all, type);
    return std::vector<float>(wide.begin() + q.matrix.first, wide.end());
  }

  MemoryTracker tracker_;
  CpuDevice device_;
  CpuBackend backend_;
};

struct Shape {
  int N, C, OC;
};

// got against `exact` (float64 of the same operands): the fp32 sums of k terms are within
// k * u32 * sum|terms| of it (one ordering), and a 16-bit output is one rounding more.
void ExpectNear(const std::vector<float>& got, const std::vector<double>& exact,
                const std::vector<double>& magnitude, int k, DType type, const char* what) {
  int over = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = (k + 2) * kU32 * magnitude[i] * 1.01 +
                         UnitRoundoff(type) * (std::abs(exact[i]) + k * kU32 * magnitude[i]);
    if (std::abs(got[i] - exact[i]) <= bound) continue;
    if (over++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", exact " << exact[i]
                    << ", bound " << bound;
    }
  }
  EXPECT_EQ(over, 0) << what;
}

// The panels' values are the bits DequantizeNf4 (after DequantizeNf4Absmax) writes for the whole
// weight, at every SIMD level, for panels of rows and of columns cut anywhere.
TEST_F(Nf4Matmul, PanelsHoldTheBitsOfTheWholeDequantizedWeightAtEveryLevel) {
  const int64_t C = 150, OC = 37;
  for (int64_t first : {0, 1, 77}) {
    for (bool double_quant : {false, true}) {
      const QuantizedArray q(first, OC, C, double_quant);
      for (DType type : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
        const std::vector<float> w = Dense(q, OC, C, type);
        for (SimdLevel level : cpu::testing::kAllLevels) {
          if (!cpu::SimdLevelAvailable(level)) continue;
          SCOPED_TRACE(std::string(DTypeName(type)) + " first " + std::to_string(first) +
                       (double_quant ? " double-quantized " : " ") + SimdLevelName(level));
          for (bool as_bf16 : {false, true}) {
            if (as_bf16 && type != DType::kBFloat16) continue;
            // Rows [5, 5 + 20) whole, and columns [3, 3 + 101) of every row.
            for (const auto& [row0, rows, col0, cols] :
                 std::vector<std::array<int64_t, 4>>{{5, 20, 0, C}, {0, OC, 3, 101}}) {
              std::vector<float> got(static_cast<size_t>(rows * cols));
              std::vector<uint16_t> bits(got.size());
              cpu::DequantizeNf4RectAt(level, q.matrix, C, row0, rows, col0, cols, type, as_bf16,
                                       as_bf16 ? static_cast<void*>(bits.data()) : got.data());
              if (as_bf16) cpu::ToFloat(bits.data(), DType::kBFloat16, got.data(), rows * cols);
              for (int64_t r = 0; r < rows; ++r) {
                for (int64_t c = 0; c < cols; ++c) {
                  ASSERT_EQ(got[static_cast<size_t>(r * cols + c)],
                            w[static_cast<size_t>((row0 + r) * C + col0 + c)])
                      << "element (" << row0 + r << ", " << col0 + c << ")";
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST_F(Nf4Matmul, TheProductsOfTheWholeDequantizedWeightAPanelAtATime) {
  // The ctest that runs this suite with HOIST_GEMM=bf16 is for oneDNN's bf16 products: where they
  // are not there it would only repeat the fp32 path.
  if (const char* gemm = std::getenv("HOIST_GEMM");
      gemm != nullptr && std::string(gemm) == "bf16" &&
      cpu::ActiveGemmPath().path != cpu::GemmPath::kBf16Dnnl) {
    GTEST_SKIP() << "HOIST_GEMM=bf16 but no bf16 product here: " << cpu::ActiveGemmPath().reason;
  }
  for (DType type : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (const Shape shape : {Shape{3, 64, 48}, Shape{5, 37, 29}, Shape{9, 130, 70}}) {
      for (int64_t first : {0, 1, 77}) {
        for (bool double_quant : {false, true}) {
          const int N = shape.N, C = shape.C, OC = shape.OC;
          const QuantizedArray q(first, OC, C, double_quant);
          const std::vector<float> w = Dense(q, OC, C, type);
          const std::vector<char> inp = Rounded(cpu::testing::RandomFloats(size_t(N) * C, 7), type);
          const std::vector<char> dout =
              Rounded(cpu::testing::RandomFloats(size_t(N) * OC, 8), type);
          const std::vector<char> bias = Rounded(cpu::testing::RandomFloats(size_t(OC), 9), type);
          const std::vector<char> dinp0 =
              Rounded(cpu::testing::RandomFloats(size_t(N) * C, 10), type);
          const std::vector<float> x = Widened(inp, type), d = Widened(dout, type),
                                   b = Widened(bias, type), di0 = Widened(dinp0, type);
          // One line per panel (many panels), and the whole matrix in one.
          const int64_t line = 4 * int64_t{std::max(C, OC)};
          for (int64_t workspace_bytes : {line, nf4::WorkspaceBytes(int64_t{OC} * C)}) {
            for (bool with_bias : {false, true}) {
              SCOPED_TRACE(std::string(DTypeName(type)) + " N " + std::to_string(N) + " C " +
                           std::to_string(C) + " OC " + std::to_string(OC) + " first " +
                           std::to_string(first) + (double_quant ? " double-quantized" : "") +
                           " workspace " + std::to_string(workspace_bytes) +
                           (with_bias ? " bias" : ""));
              std::vector<char> workspace(static_cast<size_t>(workspace_bytes));
              std::vector<char> out(size_t(N) * OC * DTypeSize(type));
              ASSERT_TRUE(backend_
                              .MatmulForwardNf4(out.data(), inp.data(), q.matrix,
                                                with_bias ? bias.data() : nullptr, N, C, OC, type,
                                                workspace.data(), workspace_bytes, s())
                              .ok());
              std::vector<char> dinp = dinp0;
              ASSERT_TRUE(backend_
                              .MatmulBackwardNf4(dinp.data(), dout.data(), q.matrix, N, C, OC, type,
                                                 workspace.data(), workspace_bytes, s())
                              .ok());
              ASSERT_TRUE(s().Synchronize().ok());
              // float64 of the same operands.
              std::vector<double> out_exact(size_t(N) * OC), out_mag(out_exact.size());
              for (int i = 0; i < N; ++i) {
                for (int o = 0; o < OC; ++o) {
                  double sum = with_bias ? b[size_t(o)] : 0.0, mag = std::abs(sum);
                  for (int c = 0; c < C; ++c) {
                    const double t = double(x[size_t(i) * C + c]) * w[size_t(o) * C + c];
                    sum += t;
                    mag += std::abs(t);
                  }
                  out_exact[size_t(i) * OC + o] = sum;
                  out_mag[size_t(i) * OC + o] = mag;
                }
              }
              ExpectNear(Widened(out, type), out_exact, out_mag, C + 1, type, "out");
              std::vector<double> dinp_exact(size_t(N) * C), dinp_mag(dinp_exact.size());
              for (int i = 0; i < N; ++i) {
                for (int c = 0; c < C; ++c) {
                  double sum = di0[size_t(i) * C + c], mag = std::abs(sum);
                  for (int o = 0; o < OC; ++o) {
                    const double t = double(d[size_t(i) * OC + o]) * w[size_t(o) * C + c];
                    sum += t;
                    mag += std::abs(t);
                  }
                  dinp_exact[size_t(i) * C + c] = sum;
                  dinp_mag[size_t(i) * C + c] = mag;
                }
              }
              ExpectNear(Widened(dinp, type), dinp_exact, dinp_mag, OC + 1, type, "dinp");

              // The dense ops on the same weight give the same values to the same bound.
              const std::vector<char> dense = Rounded(w, type);
              std::vector<char> out_dense(out.size());
              std::vector<char> dinp_dense = dinp0;
              ASSERT_TRUE(backend_
                              .MatmulForward(out_dense.data(), inp.data(), dense.data(),
                                             with_bias ? bias.data() : nullptr, N, C, OC, type,
                                             nullptr, s())
                              .ok());
              ASSERT_TRUE(backend_
                              .MatmulBackward(dinp_dense.data(), nullptr, nullptr, dout.data(),
                                              inp.data(), dense.data(), N, C, OC, type, s())
                              .ok());
              ASSERT_TRUE(s().Synchronize().ok());
              ExpectNear(Widened(out_dense, type), out_exact, out_mag, C + 1, type, "dense out");
              ExpectNear(Widened(dinp_dense, type), dinp_exact, dinp_mag, OC + 1, type,
                         "dense dinp");
            }
          }
        }
      }
    }
  }
}

// A weight whose dequantization is wrong by one code in one block fails the bound above: the
// test sees the values, not only the shapes.
TEST_F(Nf4Matmul, AWrongAbsmaxIsSeen) {
  const int N = 4, C = 64, OC = 8;
  const QuantizedArray q(0, OC, C, false);
  const std::vector<float> w = Dense(q, OC, C, DType::kFloat32);
  std::vector<float> absmax = q.absmax;
  absmax[3] *= 1.01f;  // row 3's block
  nf4::Matrix wrong = q.matrix;
  wrong.absmax = absmax.data();
  const std::vector<float> x = cpu::testing::RandomFloats(size_t(N) * C, 7);
  std::vector<float> out(size_t(N) * OC), workspace(static_cast<size_t>(C));
  ASSERT_TRUE(backend_
                  .MatmulForwardNf4(out.data(), x.data(), wrong, nullptr, N, C, OC, DType::kFloat32,
                                    workspace.data(), 4 * C, s())
                  .ok());
  ASSERT_TRUE(s().Synchronize().ok());
  double worst_other = 0, row3 = 0;
  for (int i = 0; i < N; ++i) {
    for (int o = 0; o < OC; ++o) {
      double sum = 0;
      for (int c = 0; c < C; ++c) sum += double(x[size_t(i) * C + c]) * w[size_t(o) * C + c];
      const double err = std::abs(out[size_t(i) * OC + o] - sum) / (std::abs(sum) + 1e-3);
      (o == 3 ? row3 : worst_other) = std::max(o == 3 ? row3 : worst_other, err);
    }
  }
  EXPECT_LT(worst_other, 1e-5);
  EXPECT_GT(row3, 1e-3);
}

TEST_F(Nf4Matmul, RefusesBadArgumentsNamingThem) {
  const QuantizedArray q(0, 4, 8, false);
  std::vector<float> inp(16), out(8), workspace(8);
  const auto forward = [&](const nf4::Matrix& m, void* ws, int64_t ws_bytes, int C = 8,
                           int OC = 4) {
    return backend_.MatmulForwardNf4(out.data(), inp.data(), m, nullptr, 2, C, OC, DType::kFloat32,
                                     ws, ws_bytes, s());
  };
  const auto expect_refused = [](const Status& status, const std::string& what) {
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
    EXPECT_NE(status.ToString().find(what), std::string::npos) << status.ToString();
  };
  expect_refused(forward(q.matrix, workspace.data(), 31),
                 "a workspace of 31 bytes holds no panel of this 4 x 8 weight (it needs 32");
  expect_refused(forward(q.matrix, nullptr, 32), "the workspace is null");
  expect_refused(forward(q.matrix, workspace.data(), 32, 0), "N, C and OC must be positive");
  nf4::Matrix no_codes = q.matrix;
  no_codes.codes = nullptr;
  expect_refused(forward(no_codes, workspace.data(), 32), "the weight's codes are null");
  nf4::Matrix no_absmax = q.matrix;
  no_absmax.absmax = nullptr;
  expect_refused(forward(no_absmax, workspace.data(), 32), "neither fp32 absmaxes nor 8-bit");
  nf4::Matrix negative = q.matrix;
  negative.first = -1;
  expect_refused(forward(negative, workspace.data(), 32), "first element is negative");
  expect_refused(backend_.MatmulBackwardNf4(nullptr, inp.data(), q.matrix, 2, 8, 4, DType::kFloat32,
                                            workspace.data(), 32, s()),
                 "MatmulBackwardNf4: the output is null");
  EXPECT_TRUE(forward(q.matrix, workspace.data(), 32).ok());
  EXPECT_TRUE(s().Synchronize().ok());
}

}  // namespace
}  // namespace hoist::kernels
