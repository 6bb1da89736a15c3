// bitsandbytes' dynamic quantization maps and block-wise quantization (blockwise_quant.h)
// against their definitions in float64.
#include "kernels/cpu/blockwise_quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "tests/kernels/kernel_test_util.h"

namespace hoist::kernels::cpu {
namespace {

using testing::RandomFloats;

// create_dynamic_map(signed, max_exponent_bits=7, total_bits=8), written out in float64: decade
// i of 7 has 2^i (signed, per sign) or 2^(i+1) (unsigned) means of adjacent points of
// linspace(0.1, 1, .) times 10^(i-6); plus 0 and 1.
std::vector<double> DefinedMap(bool is_signed) {
  std::vector<double> out;
  for (int i = 0; i < 7; ++i) {
    const int points = (is_signed ? (1 << i) : (1 << (i + 1))) + 1;
    std::vector<double> lin(static_cast<size_t>(points));
    for (int p = 0; p < points; ++p) lin[static_cast<size_t>(p)] = 0.1 + 0.9 * p / (points - 1);
    for (int p = 0; p + 1 < points; ++p) {
      const double mean = (lin[static_cast<size_t>(p)] + lin[static_cast<size_t>(p) + 1]) / 2;
      out.push_back(std::pow(10.0, -6 + i) * mean);
      if (is_signed) out.push_back(-std::pow(10.0, -6 + i) * mean);
    }
  }
  out.push_back(0.0);
  out.push_back(1.0);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(DynamicMap, MatchesTheDefinition) {
  for (bool is_signed : {true, false}) {
    const DynamicMap& map = is_signed ? SignedDynamicMap() : UnsignedDynamicMap();
    const std::vector<double> defined = DefinedMap(is_signed);
    ASSERT_EQ(defined.size(), 256u);
    for (int c = 0; c < 256; ++c) {
      const double want = defined[static_cast<size_t>(c)];
      // Rounded once from the float64 value: within half an ulp.
      EXPECT_LE(std::fabs(map.code[c] - want), std::fabs(want) * 0x1p-24) << is_signed << " " << c;
      if (c > 0) {
        EXPECT_LT(map.code[c - 1], map.code[c]);
      }
    }
    for (int c = 0; c < 255; ++c) {
      const double mid = (static_cast<double>(map.code[c]) + map.code[c + 1]) / 2;
      EXPECT_LE(std::fabs(map.threshold[c] - mid), std::fabs(mid) * 0x1p-24);
    }
    EXPECT_EQ(map.code[255], 1.0f);
  }
  // The signed map's ends: 1 on top; the bottom is the mean of the last decade's last interval,
  // -(1 - 0.9 / 128), so a block's negative extreme is stored 0.7% short of -absmax.
  EXPECT_FLOAT_EQ(SignedDynamicMap().code[0], static_cast<float>(-(1.0 - 0.9 / 128)));
  EXPECT_EQ(std::count(SignedDynamicMap().code, SignedDynamicMap().code + 256, 0.0f), 1);
  EXPECT_EQ(UnsignedDynamicMap().code[0], 0.0f);
  // The smallest positive code: the first decade's first mean, 1e-6 * (0.1 + 0.9 / 4).
  EXPECT_FLOAT_EQ(UnsignedDynamicMap().code[1], static_cast<float>(1e-6 * (0.1 + 0.9 / 4)));
}

TEST(DynamicMap, QuantizeNearestPicksTheNearestCode) {
  for (bool is_signed : {true, false}) {
    const DynamicMap& map = is_signed ? SignedDynamicMap() : UnsignedDynamicMap();
    std::vector<float> xs = RandomFloats(20000, 3, is_signed ? -1.0f : 0.0f, 1.0f);
    // Small magnitudes too, where the codes are densest, and every code and midpoint itself.
    for (float& x : RandomFloats(5000, 4, -1.0f, 1.0f))
      xs.push_back(is_signed ? x * 1e-4f : std::fabs(x) * 1e-5f);
    for (int c = 0; c < 256; ++c) xs.push_back(map.code[c]);
    for (int c = 0; c < 255; ++c) xs.push_back(map.threshold[c]);
    for (float x : xs) {
      const uint8_t q = QuantizeNearest(map, x);
      double best = 1e30;
      for (int c = 0; c < 256; ++c) best = std::min(best, std::fabs(double{x} - map.code[c]));
      // Nearest, up to the midpoint's rounding to float.
      const double slack = std::fabs(double{x}) * 0x1p-23 + 1e-45;
      EXPECT_LE(std::fabs(double{x} - map.code[q]), best + slack) << x;
    }
    for (int c = 0; c < 256; ++c) EXPECT_EQ(QuantizeNearest(map, map.code[c]), c);
  }
}

// The fast path (a bucket by the bits, one comparison) counts the same midpoints as the binary
// search: at every midpoint and its float neighbours, every code, and values of every magnitude
// and sign, from subnormals to beyond the map's range.
TEST(DynamicMap, BucketLookUpEqualsBinarySearch) {
  for (bool is_signed : {true, false}) {
    const DynamicMap& map = is_signed ? SignedDynamicMap() : UnsignedDynamicMap();
    std::vector<float> xs = {0.0f, -0.0f, 1e-45f, -1e-45f, 1e-30f, 2.0f, -2.0f, 3.5f, -7.0f, 1e30f};
    for (int c = 0; c < 256; ++c) {
      for (float base : {map.code[c], c < 255 ? map.threshold[c] : 1.0f}) {
        float up = base, down = base;
        for (int k = 0; k < 3; ++k) {
          xs.push_back(up);
          xs.push_back(down);
          xs.push_back(-up);
          up = std::nextafter(up, 10.0f);
          down = std::nextafter(down, -10.0f);
        }
      }
    }
    for (float x : RandomFloats(100000, 5, -1.0f, 1.0f)) {
      xs.push_back(x);
      xs.push_back(x * 1e-3f);
      xs.push_back(x * 1e-6f);
      xs.push_back(x * 3e-8f);
    }
    for (float x : xs) {
      ASSERT_EQ(QuantizeByBucket(map, x), QuantizeNearest(map, x)) << x << " signed " << is_signed;
    }
  }
}

// The round trip's error: at most half the gap between the two codes around x / absmax (or the
// distance to the end code beyond the map's range), times absmax, plus float rounding.
TEST(DynamicMap, RoundTripErrorIsBoundedByTheMapSpacing) {
  for (bool is_signed : {true, false}) {
    const DynamicMap& map = is_signed ? SignedDynamicMap() : UnsignedDynamicMap();
    const int64_t n = 5 * kQuantBlockSize + 17;
    std::vector<float> x = RandomFloats(static_cast<size_t>(n), 11, is_signed ? -1.0f : 0.0f, 1.0f);
    // Blocks of different scales, and one with a wide dynamic range.
    for (int64_t i = 0; i < n; ++i)
      x[static_cast<size_t>(i)] *= std::pow(10.0f, -static_cast<float>(i / kQuantBlockSize));
    for (int64_t i = 2 * kQuantBlockSize; i < 3 * kQuantBlockSize; ++i) {
      x[static_cast<size_t>(i)] *= std::pow(10.0f, -static_cast<float>(i % 7));
    }
    std::vector<uint8_t> codes(static_cast<size_t>(n));
    std::vector<float> absmax(static_cast<size_t>(QuantBlocks(n))), back(static_cast<size_t>(n));
    QuantizeBlockwise(map, x.data(), n, codes.data(), absmax.data());
    DequantizeBlockwise(map, codes.data(), absmax.data(), n, back.data());
    for (int64_t i = 0; i < n; ++i) {
      const double a = absmax[static_cast<size_t>(i / kQuantBlockSize)];
      const double y = x[static_cast<size_t>(i)] / a;
      int k = 0;  // the codes around y: code[k] <= y <= code[k+1]
      while (k < 254 && map.code[k + 1] < y) ++k;
      double bound = std::max(0.0, map.code[0] - y) + std::max(0.0, y - map.code[255]);
      if (y >= map.code[0] && y <= map.code[255]) bound = (map.code[k + 1] - map.code[k]) / 2;
      EXPECT_LE(std::fabs(double{back[static_cast<size_t>(i)]} - x[static_cast<size_t>(i)]),
                a * (bound + 0x1p-22) + 1e-44)
          << i;
    }
  }
}

// Dequantize -> requantize -> dequantize gives the same bits (a checkpoint holds the dequantized
// moments): blocks whose extreme is positive, negative (the signed map's -0.99296875), or zero.
TEST(DynamicMap, RequantizingDequantizedValuesIsExact) {
  for (bool is_signed : {true, false}) {
    const DynamicMap& map = is_signed ? SignedDynamicMap() : UnsignedDynamicMap();
    const int64_t n = 40 * kQuantBlockSize + 100;
    std::vector<float> x = RandomFloats(static_cast<size_t>(n), 21, is_signed ? -1.0f : 0.0f, 1.0f);
    for (int64_t b = 0; b < QuantBlocks(n); ++b) {
      const float scale = std::pow(2.0f, static_cast<float>(b % 13) - 20.0f) * (1.0f + 0.37f * b);
      for (int64_t i = b * kQuantBlockSize; i < std::min(n, (b + 1) * kQuantBlockSize); ++i) {
        x[static_cast<size_t>(i)] *= b == 5 ? 0.0f : scale;
      }
      // Every other signed block gets a negative extreme.
      if (is_signed && b % 2 == 1) x[static_cast<size_t>(b * kQuantBlockSize)] = -2.0f * scale;
    }
    std::vector<uint8_t> codes(static_cast<size_t>(n)), codes2(static_cast<size_t>(n));
    std::vector<float> absmax(static_cast<size_t>(QuantBlocks(n))), absmax2(absmax.size());
    std::vector<float> d(static_cast<size_t>(n)), d2(static_cast<size_t>(n));
    QuantizeBlockwise(map, x.data(), n, codes.data(), absmax.data());
    DequantizeBlockwise(map, codes.data(), absmax.data(), n, d.data());
    RequantizeBlockwise(map, d.data(), n, codes2.data(), absmax2.data());
    DequantizeBlockwise(map, codes2.data(), absmax2.data(), n, d2.data());
    EXPECT_EQ(codes, codes2);
    EXPECT_EQ(std::memcmp(d.data(), d2.data(), d.size() * sizeof(float)), 0);
    if (is_signed) {
      // Plain quantization of the same values loses a negative extreme's absmax (why Requantize
      // searches): the block's values shrink by 0.99296875.
      std::vector<float> d3(static_cast<size_t>(n));
      QuantizeBlockwise(map, d.data(), n, codes2.data(), absmax2.data());
      DequantizeBlockwise(map, codes2.data(), absmax2.data(), n, d3.data());
      EXPECT_NE(std::memcmp(d.data(), d3.data(), d.size() * sizeof(float)), 0);
    }
  }
}

}  // namespace
}  // namespace hoist::kernels::cpu
