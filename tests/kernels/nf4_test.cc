// NF4 (kernels/nf4.h, kernels/cpu/nf4.h): the hard-coded codebook against its definition rebuilt
// in float64; the blockwise quantizer against a float64 reference (every code the nearest level,
// absmax exact, the round trip within half the widest gap, the mean squared error on N(0,1) data)
// for normal and uniform data at sizes that are not multiples of the block or even; the packing
// order and that nothing past the outputs is written; the refusal of non-finite input; and the CPU
// backend's DequantizeNf4 as cpu::DequantizeNf4 rounded once to each dtype.
#include "kernels/cpu/nf4.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/blockwise_quant.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu_backend.h"
#include "kernels/nf4.h"

namespace hoist::kernels {
namespace {

using nf4::kCodebook;

std::vector<float> NormalFloats(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}
std::vector<float> UniformFloats(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

double HalfWidestGap() {
  double gap = 0.0;
  for (int k = 0; k < 15; ++k) gap = std::max(gap, double{kCodebook[k + 1]} - kCodebook[k]);
  return gap / 2;
}

// Codes and absmaxes of src with sentinels past their ends (kGuard bytes / floats).
struct Quantized {
  static constexpr size_t kGuard = 8;
  static constexpr uint8_t kByteSentinel = 0xA5;
  static constexpr float kFloatSentinel = -12345.0f;
  explicit Quantized(int64_t n)
      : codes(static_cast<size_t>(nf4::CodeBytes(n)) + kGuard, kByteSentinel),
        absmax(static_cast<size_t>(nf4::Blocks(n)) + kGuard, kFloatSentinel) {}
  bool GuardsIntact(int64_t n) const {
    for (size_t i = static_cast<size_t>(nf4::CodeBytes(n)); i < codes.size(); ++i) {
      if (codes[i] != kByteSentinel) return false;
    }
    for (size_t b = static_cast<size_t>(nf4::Blocks(n)); b < absmax.size(); ++b) {
      if (absmax[b] != kFloatSentinel) return false;
    }
    return true;
  }
  std::vector<uint8_t> codes;
  std::vector<float> absmax;
};

TEST(Nf4Codebook, TableIsItsDefinitionInFloat64) {
  const std::vector<double> defined = cpu::Nf4CodebookFromDefinition();
  ASSERT_EQ(defined.size(), 16u);
  double worst = 0.0;
  for (int k = 0; k < 16; ++k) {
    worst = std::max(worst, std::fabs(double{kCodebook[k]} - defined[static_cast<size_t>(k)]));
  }
  // Measured: 4.3e-8, the fp32 rounding of the levels (bitsandbytes stores them in fp32).
  std::printf("NF4 codebook: max |table - definition| = %.3g\n", worst);
  EXPECT_LE(worst, 1e-7);
  // The ends and zero come out exact.
  EXPECT_EQ(defined[0], -1.0);
  EXPECT_EQ(defined[7], 0.0);
  EXPECT_EQ(defined[15], 1.0);
}

TEST(Nf4Codebook, AscendingFromMinusOneThroughZeroToOne) {
  EXPECT_EQ(kCodebook[0], -1.0f);
  EXPECT_EQ(kCodebook[7], 0.0f);
  EXPECT_EQ(kCodebook[15], 1.0f);
  for (int k = 0; k < 15; ++k) EXPECT_LT(kCodebook[k], kCodebook[k + 1]) << k;
}

TEST(Nf4Codebook, SymmetricOnlyAtTheEnds) {
  // 8 levels above 0 and 7 below, from quantiles of different probabilities: the ends are
  // +-1, and no interior level has its mirror image in the table.
  EXPECT_EQ(kCodebook[0], -kCodebook[15]);
  for (int k = 1; k < 7; ++k) {
    for (int j = 8; j < 15; ++j) {
      EXPECT_GT(std::fabs(kCodebook[k] + kCodebook[j]), 1e-3) << k << " mirrors " << j;
    }
  }
}

TEST(Nf4Nearest, LevelsMapToThemselvesAndMidpointsTieToTheLowerCode) {
  for (int k = 0; k < 16; ++k) EXPECT_EQ(nf4::Nearest(kCodebook[k]), k);
  for (int k = 0; k < 15; ++k) {
    const float mid = (kCodebook[k] + kCodebook[k + 1]) * 0.5f;
    EXPECT_EQ(nf4::Nearest(mid), k) << "midpoint " << k;
    EXPECT_EQ(nf4::Nearest(std::nextafter(mid, 2.0f)), k + 1) << "above midpoint " << k;
  }
  EXPECT_EQ(nf4::Nearest(-0.0f), 7);
  EXPECT_EQ(nf4::Nearest(-3.0f), 0);
  EXPECT_EQ(nf4::Nearest(3.0f), 15);
}

// Quantizes data and checks it against float64: absmax the exact max |x|, every code the nearest
// level to x / absmax (where that is not within 1e-6 of a midpoint, a tie the fp32 division may
// send either way), the round trip within absmax * half the widest gap. Returns the squared error
// summed in double.
double CheckAgainstFloat64(const std::vector<float>& src, const std::string& what) {
  SCOPED_TRACE(what);
  const int64_t n = static_cast<int64_t>(src.size());
  Quantized q(n);
  EXPECT_TRUE(cpu::QuantizeNf4(src.data(), n, q.codes.data(), q.absmax.data()).ok());
  EXPECT_TRUE(q.GuardsIntact(n)) << "written past the codes or the absmaxes";
  std::vector<float> back(static_cast<size_t>(n) + 4, 777.0f);
  cpu::DequantizeNf4(q.codes.data(), q.absmax.data(), n, back.data());
  for (size_t i = static_cast<size_t>(n); i < back.size(); ++i) EXPECT_EQ(back[i], 777.0f);
  const double half_gap = HalfWidestGap();
  double squared = 0.0;
  int wrong = 0;
  for (int64_t b = 0; b < nf4::Blocks(n); ++b) {
    const int64_t first = b * nf4::kBlock, last = std::min(n, first + nf4::kBlock);
    double amax = 0.0;
    for (int64_t i = first; i < last; ++i) amax = std::max(amax, std::fabs(double{src[i]}));
    EXPECT_EQ(q.absmax[b], amax) << "block " << b;
    for (int64_t i = first; i < last; ++i) {
      const int code = nf4::CodeAt(q.codes.data(), i);
      const double v = amax == 0.0 ? 0.0 : src[i] / amax;
      int best = 0;
      for (int k = 1; k < 16; ++k) {
        if (std::fabs(v - kCodebook[k]) < std::fabs(v - kCodebook[best])) best = k;
      }
      if (code != best) {
        const double mid =
            (double{kCodebook[std::min(code, best)]} + kCodebook[std::max(code, best)]) / 2;
        if (std::abs(code - best) != 1 || std::fabs(v - mid) > 1e-6) {
          if (++wrong <= 5)
            ADD_FAILURE() << "element " << i << " x/absmax " << v << " code " << code << " nearest "
                          << best;
        }
      }
      const double err = std::fabs(double{back[i]} - src[i]);
      EXPECT_LE(err, amax * half_gap * (1 + 1e-6)) << "element " << i;
      squared += err * err;
    }
  }
  return squared;
}

TEST(Nf4Quantize, EveryCodeIsTheNearestLevelInFloat64) {
  for (int64_t n : {1, 2, 3, 63, 64, 65, 127, 128, 1001, 4097, 65537}) {
    CheckAgainstFloat64(NormalFloats(static_cast<size_t>(n), 1), "normal n " + std::to_string(n));
    CheckAgainstFloat64(UniformFloats(static_cast<size_t>(n), 2, -3.0f, 3.0f),
                        "uniform n " + std::to_string(n));
    CheckAgainstFloat64(UniformFloats(static_cast<size_t>(n), 3, 0.001f, 0.002f),
                        "positive n " + std::to_string(n));
  }
}

TEST(Nf4Quantize, MeanSquaredErrorOnStandardNormalData) {
  constexpr int64_t n = int64_t{1} << 20;
  const std::vector<float> src = NormalFloats(static_cast<size_t>(n), 7);
  const double mse = CheckAgainstFloat64(src, "N(0,1)") / n;
  // Measured: 8.46e-3 (mean |error| 0.073, as QLoRA's NF4 gives at blocks of 64). The same
  // blocks on 16 evenly spaced levels over [-absmax, absmax] give 1.01e-2, on the symmetric int4
  // grid k/7 1.16e-2: the bound holds NF4 below both.
  std::printf("NF4 on N(0,1), blocks of 64: MSE = %.4g\n", mse);
  EXPECT_LT(mse, 0.0095);
  EXPECT_GT(mse, 0.0075);
}

TEST(Nf4Quantize, PacksElementZeroInTheHighNibble) {
  // Levels 15, 0, 7, 13, 8 over an absmax of 1.
  const std::vector<float> src = {1.0f, -1.0f, 0.0f, kCodebook[13], kCodebook[8]};
  Quantized q(5);
  ASSERT_TRUE(cpu::QuantizeNf4(src.data(), 5, q.codes.data(), q.absmax.data()).ok());
  EXPECT_EQ(q.codes[0], 0xF0);
  EXPECT_EQ(q.codes[1], 0x7D);
  EXPECT_EQ(q.codes[2], 0x80);  // the odd element's low nibble is 0
  EXPECT_EQ(q.absmax[0], 1.0f);
  EXPECT_TRUE(q.GuardsIntact(5));
  std::vector<float> back(5);
  cpu::DequantizeNf4(q.codes.data(), q.absmax.data(), 5, back.data());
  EXPECT_EQ(back, src);
}

TEST(Nf4Quantize, ScalesEachBlockByItsOwnAbsmax) {
  // Block 0 in [-1, 1], block 1 all zero, block 2 (8 elements) times 1000.
  std::vector<float> src(136, 0.0f);
  for (int i = 0; i < 64; ++i) src[i] = kCodebook[i % 16];
  for (int i = 128; i < 136; ++i) src[i] = 1000.0f * kCodebook[(i * 5) % 16];
  Quantized q(136);
  ASSERT_TRUE(cpu::QuantizeNf4(src.data(), 136, q.codes.data(), q.absmax.data()).ok());
  EXPECT_EQ(q.absmax[0], 1.0f);
  EXPECT_EQ(q.absmax[1], 0.0f);
  EXPECT_EQ(q.absmax[2], 1000.0f);
  for (int i = 64; i < 128; ++i) EXPECT_EQ(nf4::CodeAt(q.codes.data(), i), 7) << i;
  std::vector<float> back(136);
  cpu::DequantizeNf4(q.codes.data(), q.absmax.data(), 136, back.data());
  for (int i = 0; i < 136; ++i)
    EXPECT_EQ(back[i], kCodebook[nf4::CodeAt(q.codes.data(), i)] * q.absmax[i / 64]) << i;
  for (int i = 0; i < 128; ++i) EXPECT_EQ(back[i], src[i]) << i;
}

TEST(Nf4Quantize, RefusesNonFiniteInputNamingItAndWritesNothing) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    std::vector<float> src = NormalFloats(200, 4);
    src[131] = bad;
    src[170] = bad;
    Quantized q(200);
    const Status status = cpu::QuantizeNf4(src.data(), 200, q.codes.data(), q.absmax.data());
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.ToString().find("element 131"), std::string::npos) << status.ToString();
    EXPECT_TRUE(q.GuardsIntact(0)) << "a refused tensor wrote its outputs";
  }
}

TEST(Nf4Quantize, RefusesBadArguments) {
  float x = 1.0f, amax = 0.0f;
  uint8_t code = 0;
  EXPECT_EQ(cpu::QuantizeNf4(&x, -1, &code, &amax).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu::QuantizeNf4(nullptr, 1, &code, &amax).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu::QuantizeNf4(&x, 1, nullptr, &amax).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu::QuantizeNf4(&x, 1, &code, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(cpu::QuantizeNf4(nullptr, 0, nullptr, nullptr).ok());
}

// ---- Backend::DequantizeNf4 ----

class Nf4Backend : public ::testing::Test {
 protected:
  Nf4Backend() : device_(Place::kDevice, &tracker_), backend_(&device_) {}
  const Stream& s() const { return backend_.compute_stream(); }

  MemoryTracker tracker_;
  CpuDevice device_;
  CpuBackend backend_;
};

TEST_F(Nf4Backend, DequantizeIsTheKernelRoundedOnceToEachType) {
  // Odd, not a multiple of 64, and more than one of the 16-bit path's chunks and of the runs
  // the threads share (64K elements).
  for (int64_t n : {1, 5, 64, 4095, 4096 + 64 + 3, 20001, 3 * 65536 + 77}) {
    const std::vector<float> src = NormalFloats(static_cast<size_t>(n), 9, 0.02f);
    Quantized q(n);
    ASSERT_TRUE(cpu::QuantizeNf4(src.data(), n, q.codes.data(), q.absmax.data()).ok());
    std::vector<float> want(static_cast<size_t>(n));
    cpu::DequantizeNf4(q.codes.data(), q.absmax.data(), n, want.data());
    for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
      SCOPED_TRACE(std::string(DTypeName(t)) + " n " + std::to_string(n));
      const size_t e = DTypeSize(t);
      std::vector<char> expected(static_cast<size_t>(n) * e);
      cpu::FromFloat(want.data(), expected.data(), t, n);
      std::vector<char> out(static_cast<size_t>(n) * e + 16, '\x5A');
      ASSERT_TRUE(
          backend_.DequantizeNf4(out.data(), t, q.codes.data(), q.absmax.data(), n, s()).ok());
      ASSERT_TRUE(s().Synchronize().ok());
      EXPECT_EQ(std::memcmp(out.data(), expected.data(), expected.size()), 0);
      for (size_t i = expected.size(); i < out.size(); ++i) ASSERT_EQ(out[i], '\x5A') << "past out";
    }
  }
}

TEST_F(Nf4Backend, DequantizeRefusesBadArgumentsNamingThem) {
  float out = 0.0f, amax = 1.0f;
  uint8_t code = 0;
  const auto expect_refused = [](const Status& status, const std::string& name) {
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
    EXPECT_NE(status.ToString().find("DequantizeNf4: " + name), std::string::npos)
        << status.ToString();
  };
  expect_refused(backend_.DequantizeNf4(&out, DType::kFloat32, &code, &amax, -1, s()), "n");
  expect_refused(backend_.DequantizeNf4(nullptr, DType::kFloat32, &code, &amax, 1, s()), "out");
  expect_refused(backend_.DequantizeNf4(&out, DType::kFloat32, nullptr, &amax, 1, s()), "codes");
  expect_refused(backend_.DequantizeNf4(&out, DType::kFloat32, &code, nullptr, 1, s()), "absmax");
  EXPECT_TRUE(backend_.DequantizeNf4(nullptr, DType::kBFloat16, nullptr, nullptr, 0, s()).ok());
}

// ---- Backend::DequantizeNf4Absmax (double quantization) ----

// The absmaxes of NF4 blocks of N(0, 0.02) weights: their mean taken off, quantized blockwise with
// the signed dynamic map.
struct DoubleQuantized {
  explicit DoubleQuantized(int64_t n) : codes(static_cast<size_t>(n)) {
    const std::vector<float> w = NormalFloats(static_cast<size_t>(n * nf4::kBlock), 21, 0.02f);
    absmax.resize(static_cast<size_t>(n));
    std::vector<uint8_t> nf4_codes(static_cast<size_t>(nf4::CodeBytes(n * nf4::kBlock)));
    EXPECT_TRUE(cpu::QuantizeNf4(w.data(), n * nf4::kBlock, nf4_codes.data(), absmax.data()).ok());
    double sum = 0;
    for (float a : absmax) sum += a;
    offset = static_cast<float>(sum / double(n));
    std::vector<float> centred = absmax;
    for (float& a : centred) a -= offset;
    scales.resize(static_cast<size_t>(cpu::QuantBlocks(n)));
    cpu::QuantizeBlockwise(cpu::SignedDynamicMap(), centred.data(), n, codes.data(), scales.data());
  }
  std::vector<float> absmax;  // the exact ones
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  float offset = 0;
};

TEST_F(Nf4Backend, AbsmaxDequantizeIsTheBlockwiseMapPlusTheOffset) {
  // 70001: above the size the CPU backend splits across threads.
  for (int64_t n : {1, 255, 256, 257, 3 * 256 + 17, 70001}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const DoubleQuantized q(n);
    std::vector<float> want(static_cast<size_t>(n));
    cpu::DequantizeBlockwise(cpu::SignedDynamicMap(), q.codes.data(), q.scales.data(), n,
                             want.data());
    for (float& w : want) w += q.offset;
    std::vector<float> out(static_cast<size_t>(n) + 4, -7.0f);
    ASSERT_TRUE(
        backend_.DequantizeNf4Absmax(out.data(), q.codes.data(), q.scales.data(), q.offset, n, s())
            .ok());
    ASSERT_TRUE(s().Synchronize().ok());
    // The nearest code is at most half the map's widest gap from the deviation over its scale.
    const cpu::DynamicMap& map = cpu::SignedDynamicMap();
    double half_gap = 0;
    for (int k = 0; k < 255; ++k) {
      half_gap = std::max(half_gap, (double{map.code[k + 1]} - map.code[k]) / 2);
    }
    double worst = 0;
    for (int64_t b = 0; b < n; ++b) {
      const auto i = static_cast<size_t>(b);
      ASSERT_EQ(out[i], want[i]) << "absmax " << b;
      const double scale = q.scales[static_cast<size_t>(b / cpu::kQuantBlockSize)];
      EXPECT_LE(std::abs(double{out[i]} - q.absmax[i]), scale * half_gap * 1.0001 + 1e-9)
          << "absmax " << b;
      worst = std::max(worst, std::abs(double{out[i]} - q.absmax[i]) / q.absmax[i]);
    }
    // On these weights the absmaxes come back within a few parts per thousand.
    EXPECT_LT(worst, 0.01);
    for (size_t i = static_cast<size_t>(n); i < out.size(); ++i) ASSERT_EQ(out[i], -7.0f);
  }
}

TEST_F(Nf4Backend, AbsmaxDequantizeRefusesBadArgumentsNamingThem) {
  float out = 0.0f, scale = 1.0f;
  uint8_t code = 0;
  const auto expect_refused = [](const Status& status, const std::string& name) {
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
    EXPECT_NE(status.ToString().find("DequantizeNf4Absmax: " + name), std::string::npos)
        << status.ToString();
  };
  expect_refused(backend_.DequantizeNf4Absmax(&out, &code, &scale, 0.0f, -1, s()), "n");
  expect_refused(backend_.DequantizeNf4Absmax(nullptr, &code, &scale, 0.0f, 1, s()), "out");
  expect_refused(backend_.DequantizeNf4Absmax(&out, nullptr, &scale, 0.0f, 1, s()), "codes");
  expect_refused(backend_.DequantizeNf4Absmax(&out, &code, nullptr, 0.0f, 1, s()), "scales");
  expect_refused(backend_.DequantizeNf4Absmax(&out, &code, &scale, NAN, 1, s()), "offset");
  EXPECT_TRUE(backend_.DequantizeNf4Absmax(nullptr, nullptr, nullptr, 0.0f, 0, s()).ok());
}

}  // namespace
}  // namespace hoist::kernels
