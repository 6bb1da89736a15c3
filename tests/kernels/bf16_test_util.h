// What the bf16 kernel tests share: casts of whole vectors, the attention tests' shapes, inputs
// and bound checks, and the skip where no bf16 product is available.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/cast.h"
#include "kernels/cpu/gemm_bf16.h"
#include "tests/kernels/kernel_test_util.h"

namespace hoist::kernels::cpu::testing {

inline const double kU = std::ldexp(1.0, -8);     // bf16's unit roundoff
inline const double kU32 = std::ldexp(1.0, -24);  // fp32's

inline std::vector<uint16_t> ToBf16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  CastFp32ToBf16(out.data(), x.data(), static_cast<int64_t>(x.size()));
  return out;
}

inline std::vector<float> Widen(const std::vector<uint16_t>& x) {
  std::vector<float> out(x.size());
  CastBf16ToFp32(out.data(), x.data(), static_cast<int64_t>(x.size()));
  return out;
}

template <typename E>
bool SameBits(const std::vector<E>& a, const std::vector<E>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(E)) == 0;
}

// An attention case: qkv (B, T, (NH + 2 NKV) hd), out (B, T, NH hd).
struct AttentionShape {
  int B, T, NH, NKV, hd;
  int C() const { return NH * hd; }
  int W() const { return (NH + 2 * NKV) * hd; }
  size_t QkvSize() const { return size_t(B) * T * W(); }
  size_t OutSize() const { return size_t(B) * T * C(); }
  size_t AttSize() const { return size_t(B) * NH * T * T; }
  size_t LseSize() const { return size_t(B) * NH * T; }
};

// The inputs of one case, bf16, and their exact fp32 widening.
struct AttentionInputs {
  std::vector<uint16_t> qkv, dout, dqkv0;
  std::vector<float> qkv32, dout32, dqkv032;
};

inline AttentionInputs MakeAttentionInputs(const AttentionShape& s, uint32_t seed) {
  AttentionInputs in;
  in.qkv = ToBf16(RandomFloats(s.QkvSize(), seed, -2.0f, 2.0f));
  in.dout = ToBf16(RandomFloats(s.OutSize(), seed + 1));
  in.dqkv0 = ToBf16(RandomFloats(s.QkvSize(), seed + 2));
  in.qkv32 = Widen(in.qkv);
  in.dout32 = Widen(in.dout);
  in.dqkv032 = Widen(in.dqkv0);
  return in;
}

// Reports the first few elements over their bound; returns how many were.
inline int CountOver(const std::vector<float>& got, const std::vector<float>& want,
                     const std::vector<double>& bound, const char* what) {
  int over = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(double(got[i]) - want[i]) <= bound[i]) continue;
    if (over++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", fp32 " << want[i] << ", bound "
                    << bound[i];
    }
  }
  return over;
}

}  // namespace hoist::kernels::cpu::testing

#define SKIP_WITHOUT_BF16_GEMM()                     \
  if (!::hoist::kernels::cpu::Bf16GemmAvailable())   \
  GTEST_SKIP() << "no oneDNN build or no bf16 ISA: " \
               << ::hoist::kernels::cpu::DecideGemmPath().reason
