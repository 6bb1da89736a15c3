// The CUDA backend's DequantizeNf4 against the CPU backend's on the same codes and absmaxes: the
// same bits in every dtype, for sizes that are odd, not multiples of the block, and larger than
// one grid's worth of threads; nothing written past out; the same argument refusals. Its NF4
// matmuls against the CPU backend's plain MatmulForward / MatmulBackward of the weight the CPU
// dequantizes whole, within the fp32 summation-order bound, for any panel split of the workspace.
// Skipped where no GPU is visible.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/blockwise_quant.h"
#include "kernels/cpu/nf4.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda_backend.h"
#include "kernels/nf4.h"
#include "tests/kernels_cuda/cuda_kernel_test_util.h"

namespace hoist::kernels {
namespace {

using cuda::testing::DeviceArray;
using cuda::testing::DTypeParamName;
using cuda::testing::RandomFloats;
using cuda::testing::RoundTo;

// Bytes in device memory, freed with the object.
class DeviceBytes {
 public:
  explicit DeviceBytes(size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&data_, bytes > 0 ? bytes : 1), cudaSuccess);
  }
  DeviceBytes(const void* host, size_t bytes) : DeviceBytes(bytes) {
    EXPECT_EQ(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // see DeviceArray::Settle
  }
  ~DeviceBytes() { cudaFree(data_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  void Fill(int value) {
    EXPECT_EQ(cudaMemset(data_, value, bytes_), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  std::vector<char> Download() const {
    std::vector<char> out(bytes_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(out.data(), data_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }

 private:
  size_t bytes_;
  void* data_ = nullptr;
};

class CudaNf4 : public ::testing::Test {
 protected:
  void SetUp() override {
    HOIST_SKIP_WITHOUT_GPU();
    auto backend = CudaBackend::Create(0, &tracker_);
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    gpu_ = std::move(backend).value();
  }
  const Stream& cs() const { return cpu_.compute_stream(); }
  const Stream& gs() const { return gpu_->compute_stream(); }
  MemoryTracker tracker_;
  CpuDevice host_device_{Place::kHost, &tracker_};
  CpuBackend cpu_{&host_device_};
  std::unique_ptr<CudaBackend> gpu_;
};

TEST_F(CudaNf4, DequantizeIsTheCpusBitForBit) {
  // kMaxBlocks * 256 threads cover 2^21 bytes: the largest size takes the grid-stride loop.
  for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{63}, int64_t{65}, int64_t{4097},
                    int64_t{1000003}, (int64_t{1} << 22) + 129}) {
    std::vector<float> src = RandomFloats(static_cast<size_t>(n), 5, -0.05f, 0.05f);
    if (n > 200) {
      for (int64_t i = 64; i < 128; ++i) src[i] = 0.0f;  // a block of absmax 0
    }
    std::vector<uint8_t> codes(static_cast<size_t>(nf4::CodeBytes(n)));
    std::vector<float> absmax(static_cast<size_t>(nf4::Blocks(n)));
    HOIST_ASSERT_OK(cpu::QuantizeNf4(src.data(), n, codes.data(), absmax.data()));
    DeviceBytes d_codes(codes.data(), codes.size()),
        d_absmax(absmax.data(), absmax.size() * sizeof(float));
    for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
      SCOPED_TRACE(std::string(DTypeName(t)) + " n " + std::to_string(n));
      const size_t bytes = static_cast<size_t>(n) * DTypeSize(t);
      std::vector<char> want(bytes);
      HOIST_ASSERT_OK(cpu_.DequantizeNf4(want.data(), t, codes.data(), absmax.data(), n, cs()));
      ASSERT_TRUE(cs().Synchronize().ok());
      DeviceBytes d_out(bytes + 64);
      d_out.Fill(0xFF);  // NaN bits: an element not written fails the compare
      HOIST_ASSERT_OK(gpu_->DequantizeNf4(d_out.as<void>(), t, d_codes.as<uint8_t>(),
                                          d_absmax.as<float>(), n, gs()));
      ASSERT_TRUE(gs().Synchronize().ok());
      const std::vector<char> got = d_out.Download();
      EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0) << "GPU != CPU";
      for (size_t i = bytes; i < got.size(); ++i) {
        ASSERT_EQ(static_cast<unsigned char>(got[i]), 0xFF) << "written past out at " << i;
      }
    }
  }
}

TEST_F(CudaNf4, AbsmaxDequantizeIsTheCpusBitForBit) {
  // Double quantization's absmaxes: 8-bit codes, one scale per 256, an offset.
  for (int64_t n : {int64_t{1}, int64_t{255}, int64_t{257}, int64_t{1000003}}) {
    SCOPED_TRACE("n " + std::to_string(n));
    std::vector<float> centred = RandomFloats(static_cast<size_t>(n), 7, -0.03f, 0.03f);
    std::vector<uint8_t> codes(static_cast<size_t>(n));
    std::vector<float> scales(static_cast<size_t>(cpu::QuantBlocks(n)));
    cpu::QuantizeBlockwise(cpu::SignedDynamicMap(), centred.data(), n, codes.data(), scales.data());
    const float offset = 0.0417f;
    std::vector<float> want(static_cast<size_t>(n));
    HOIST_ASSERT_OK(
        cpu_.DequantizeNf4Absmax(want.data(), codes.data(), scales.data(), offset, n, cs()));
    ASSERT_TRUE(cs().Synchronize().ok());
    DeviceBytes d_codes(codes.data(), codes.size()),
        d_scales(scales.data(), scales.size() * sizeof(float));
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    DeviceBytes d_out(bytes + 64);
    d_out.Fill(0xFF);
    HOIST_ASSERT_OK(gpu_->DequantizeNf4Absmax(d_out.as<float>(), d_codes.as<uint8_t>(),
                                              d_scales.as<float>(), offset, n, gs()));
    ASSERT_TRUE(gs().Synchronize().ok());
    const std::vector<char> got = d_out.Download();
    EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0) << "GPU != CPU";
    for (size_t i = bytes; i < got.size(); ++i) {
      ASSERT_EQ(static_cast<unsigned char>(got[i]), 0xFF) << "written past out at " << i;
    }
  }
}

TEST_F(CudaNf4, DequantizeRefusesWhatTheCpuRefuses) {
  DeviceBytes out(64), codes(64), absmax(64);
  const auto same = [](const Status& gpu, const Status& cpu) {
    EXPECT_EQ(gpu.code(), StatusCode::kInvalidArgument) << gpu.ToString();
    EXPECT_EQ(gpu.ToString(), cpu.ToString());
  };
  void* o = out.as<void>();
  const uint8_t* c = codes.as<uint8_t>();
  const float* a = absmax.as<float>();
  same(gpu_->DequantizeNf4(o, DType::kFloat32, c, a, -1, gs()),
       cpu_.DequantizeNf4(o, DType::kFloat32, c, a, -1, cs()));
  same(gpu_->DequantizeNf4(nullptr, DType::kBFloat16, c, a, 3, gs()),
       cpu_.DequantizeNf4(nullptr, DType::kBFloat16, c, a, 3, cs()));
  same(gpu_->DequantizeNf4(o, DType::kFloat16, nullptr, a, 3, gs()),
       cpu_.DequantizeNf4(o, DType::kFloat16, nullptr, a, 3, cs()));
  same(gpu_->DequantizeNf4(o, DType::kFloat32, c, nullptr, 3, gs()),
       cpu_.DequantizeNf4(o, DType::kFloat32, c, nullptr, 3, cs()));
  HOIST_ASSERT_OK(gpu_->DequantizeNf4(nullptr, DType::kFloat32, nullptr, nullptr, 0, gs()));
}

// The NF4 matmuls. Each weight is an (OC, C) matrix starting at element `first` of a quantized
// array a little longer than it (so a matrix starting mid-byte and mid-block, and one ending
// before the array does, both occur); the oracle is the CPU backend's plain matmul of that
// matrix as the CPU backend's DequantizeNf4 (after DequantizeNf4Absmax, when double-quantized)
// writes it: the same values, summed in another order.
struct Nf4Shape {
  int N, C, OC;
  int64_t first;
};
// Odd C and OC; C wider than a block with few rows; OC a multiple of 8 from element 0.
constexpr Nf4Shape kNf4Shapes[] = {{7, 37, 45, 77}, {5, 130, 19, 131}, {33, 16, 96, 0}};

// Host bytes of `values` in `type` (each rounded once) and back.
std::vector<char> ToBytes(DType type, const std::vector<float>& values) {
  std::vector<char> bytes(values.size() * DTypeSize(type));
  const auto n = static_cast<int64_t>(values.size());
  auto* bits = reinterpret_cast<uint16_t*>(bytes.data());
  switch (type) {
    case DType::kFloat32: std::memcpy(bytes.data(), values.data(), bytes.size()); break;
    case DType::kBFloat16: cpu::CastFp32ToBf16(bits, values.data(), n); break;
    case DType::kFloat16: cpu::CastFp32ToFp16(bits, values.data(), n); break;
  }
  return bytes;
}
std::vector<float> ToFloats(DType type, const std::vector<char>& bytes) {
  std::vector<float> values(bytes.size() / DTypeSize(type));
  const auto n = static_cast<int64_t>(values.size());
  const auto* bits = reinterpret_cast<const uint16_t*>(bytes.data());
  switch (type) {
    case DType::kFloat32: std::memcpy(values.data(), bytes.data(), bytes.size()); break;
    case DType::kBFloat16: cpu::CastBf16ToFp32(values.data(), bits, n); break;
    case DType::kFloat16: cpu::CastFp16ToFp32(values.data(), bits, n); break;
  }
  return values;
}

// u = 2^-p of `type`'s p significant bits: one rounding moves a value x by at most u |x|.
double UnitRoundoff(DType type) {
  switch (type) {
    case DType::kFloat32: return std::ldexp(1.0, -24);
    case DType::kBFloat16: return std::ldexp(1.0, -8);
    case DType::kFloat16: return std::ldexp(1.0, -11);
  }
  return 0.0;
}

// How far the GPU's output may be from the CPU's where the exact result (of the same rounded
// inputs) is `exact`, `magnitude` the sum of its terms' magnitudes and `terms` their count: both
// sides sum in fp32 in their own orders, within `terms` u32 `magnitude` each. A 16-bit output is
// then rounded once by each side, and where the GPU may round an intermediate too (the product
// before it adds a misaligned bias), `rounded` is that intermediate's exact value (else 0); each
// rounding moves its value by at most u |value|.
double Nf4Bound(DType type, double exact, double rounded, double magnitude, int terms) {
  const double order = 2.0 * terms * std::ldexp(1.0, -24) * magnitude;
  if (type == DType::kFloat32) return order;
  return order + UnitRoundoff(type) * (2.0 * std::fabs(exact) + std::fabs(rounded) + 3.0 * order);
}

void ExpectWithin(const std::vector<float>& got, const std::vector<float>& want,
                  const std::vector<double>& bound, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    // Negated: a NaN (an element never written) fails.
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= bound[i]) && reported++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i] << " (bound "
                    << bound[i] << ")";
    }
  }
}

// An NF4 array of `n` elements on the host and the device: its codes, fp32 absmaxes, and their
// double quantization (8-bit codes about the mean, one scale per 256).
class Nf4Array {
 public:
  Nf4Array(int64_t n, uint32_t seed) : n_(n) {
    std::vector<float> src = RandomFloats(static_cast<size_t>(n), seed, -0.08f, 0.08f);
    // Blocks of different ranges, so the absmaxes differ by more than the noise.
    for (int64_t i = 0; i < n; ++i) src[i] *= 0.5f + static_cast<float>((i / nf4::kBlock) % 5);
    codes_.resize(static_cast<size_t>(nf4::CodeBytes(n)));
    absmax_.resize(static_cast<size_t>(nf4::Blocks(n)));
    EXPECT_TRUE(cpu::QuantizeNf4(src.data(), n, codes_.data(), absmax_.data()).ok());
    double sum = 0.0;
    for (float a : absmax_) sum += a;
    offset_ = static_cast<float>(sum / static_cast<double>(absmax_.size()));
    std::vector<float> centred = absmax_;
    for (float& a : centred) a -= offset_;
    const auto blocks = static_cast<int64_t>(absmax_.size());
    absmax_codes_.resize(absmax_.size());
    absmax_scales_.resize(static_cast<size_t>(cpu::QuantBlocks(blocks)));
    cpu::QuantizeBlockwise(cpu::SignedDynamicMap(), centred.data(), blocks, absmax_codes_.data(),
                           absmax_scales_.data());
    d_codes_ = std::make_unique<DeviceBytes>(codes_.data(), codes_.size());
    d_absmax_ = std::make_unique<DeviceBytes>(absmax_.data(), absmax_.size() * sizeof(float));
    d_absmax_codes_ = std::make_unique<DeviceBytes>(absmax_codes_.data(), absmax_codes_.size());
    d_absmax_scales_ =
        std::make_unique<DeviceBytes>(absmax_scales_.data(), absmax_scales_.size() * sizeof(float));
  }

  // The matrix at `first` on the device: fp32 absmaxes, or the double-quantized ones.
  nf4::Matrix DeviceMatrix(int64_t first, bool double_quantized) const {
    nf4::Matrix m;
    m.codes = d_codes_->as<uint8_t>();
    if (double_quantized) {
      m.absmax_codes = d_absmax_codes_->as<uint8_t>();
      m.absmax_scales = d_absmax_scales_->as<float>();
      m.absmax_offset = offset_;
    } else {
      m.absmax = d_absmax_->as<float>();
    }
    m.first = first;
    return m;
  }

  // Elements [first, first + count) in `type` as the CPU backend dequantizes the whole array.
  std::vector<char> CpuDequantized(CpuBackend& cpu, DType type, int64_t first, int64_t count,
                                   bool double_quantized) const {
    std::vector<float> absmax = absmax_;
    if (double_quantized) {
      EXPECT_TRUE(cpu.DequantizeNf4Absmax(absmax.data(), absmax_codes_.data(),
                                          absmax_scales_.data(), offset_,
                                          static_cast<int64_t>(absmax.size()), cpu.compute_stream())
                      .ok());
    }
    const size_t e = DTypeSize(type);
    std::vector<char> all(static_cast<size_t>(n_) * e);
    EXPECT_TRUE(
        cpu.DequantizeNf4(all.data(), type, codes_.data(), absmax.data(), n_, cpu.compute_stream())
            .ok());
    EXPECT_TRUE(cpu.compute_stream().Synchronize().ok());
    return std::vector<char>(all.begin() + static_cast<std::ptrdiff_t>(first * e),
                             all.begin() + static_cast<std::ptrdiff_t>((first + count) * e));
  }

 private:
  int64_t n_;
  std::vector<uint8_t> codes_, absmax_codes_;
  std::vector<float> absmax_, absmax_scales_;
  float offset_ = 0.0f;
  std::unique_ptr<DeviceBytes> d_codes_, d_absmax_, d_absmax_codes_, d_absmax_scales_;
};

// Workspaces that split the weight every way: one line (a row or column of fp32) per panel, a few
// lines (panels rounded down to a multiple of 8, and a shorter last one), the whole matrix.
std::vector<int64_t> WorkspaceSizes(int C, int OC) {
  const int64_t line = int64_t{4} * std::max(C, OC);
  return {line, 11 * line, nf4::WorkspaceBytes(int64_t{OC} * C)};
}

class CudaNf4Matmul : public CudaNf4, public ::testing::WithParamInterface<DType> {};

enum class Bias { kNone, kAligned, kMisaligned };
const char* BiasName(Bias bias) {
  switch (bias) {
    case Bias::kNone: return "none";
    case Bias::kAligned: return "aligned";
    case Bias::kMisaligned: return "misaligned";
  }
  return "?";
}

TEST_P(CudaNf4Matmul, ForwardIsTheCpuProductOfTheDequantizedWeight) {
  const DType type = GetParam();
  const size_t e = DTypeSize(type);
  uint32_t seed = 100;
  for (const Nf4Shape& s : kNf4Shapes) {
    const auto N = static_cast<size_t>(s.N), C = static_cast<size_t>(s.C),
               OC = static_cast<size_t>(s.OC);
    const int64_t weight_n = int64_t{s.OC} * s.C;
    const Nf4Array array(s.first + weight_n + 5, ++seed);
    const std::vector<float> inp = RoundTo(type, RandomFloats(N * C, ++seed));
    const std::vector<float> bias = RoundTo(type, RandomFloats(OC, ++seed));
    const std::vector<char> inp_bytes = ToBytes(type, inp), bias_bytes = ToBytes(type, bias);
    std::vector<float> padded_bias = bias;
    padded_bias.insert(padded_bias.begin(), 0.0f);
    DeviceArray d_inp(type, inp), d_bias(type, bias), d_padded_bias(type, padded_bias);
    DeviceArray d_out(type, N * OC);
    for (bool double_quantized : {false, true}) {
      const std::vector<char> weight =
          array.CpuDequantized(cpu_, type, s.first, weight_n, double_quantized);
      const std::vector<float> w = ToFloats(type, weight);
      const nf4::Matrix matrix = array.DeviceMatrix(s.first, double_quantized);
      for (Bias bias_kind : {Bias::kNone, Bias::kAligned, Bias::kMisaligned}) {
        const bool with_bias = bias_kind != Bias::kNone;
        std::vector<char> want_bytes(N * OC * e);
        HOIST_ASSERT_OK(cpu_.MatmulForward(want_bytes.data(), inp_bytes.data(), weight.data(),
                                           with_bias ? bias_bytes.data() : nullptr, s.N, s.C, s.OC,
                                           type, nullptr, cs()));
        ASSERT_TRUE(cs().Synchronize().ok());
        const std::vector<float> want = ToFloats(type, want_bytes);
        std::vector<double> bound(want.size());
        for (size_t i = 0; i < N; ++i) {
          for (size_t o = 0; o < OC; ++o) {
            double product = 0.0, magnitude = with_bias ? std::fabs(bias[o]) : 0.0;
            for (size_t c = 0; c < C; ++c) {
              const double term = double{inp[i * C + c]} * w[o * C + c];
              product += term;
              magnitude += std::fabs(term);
            }
            const double exact = product + (with_bias ? bias[o] : 0.0);
            bound[i * OC + o] = Nf4Bound(type, exact, product, magnitude, s.C + 1);
          }
        }
        const void* bias_ptr = bias_kind == Bias::kAligned ? d_bias.data()
                               : with_bias ? ElementPtr(d_padded_bias.data(), type, 1)
                                           : nullptr;
        for (int64_t workspace_bytes : WorkspaceSizes(s.C, s.OC)) {
          SCOPED_TRACE(std::string(DTypeName(type)) + " N " + std::to_string(s.N) + " C " +
                       std::to_string(s.C) + " OC " + std::to_string(s.OC) + " first " +
                       std::to_string(s.first) + (double_quantized ? " double-quantized" : "") +
                       " bias " + BiasName(bias_kind) + " workspace " +
                       std::to_string(workspace_bytes));
          DeviceBytes workspace(static_cast<size_t>(workspace_bytes));
          d_out.Poison();
          HOIST_ASSERT_OK(gpu_->MatmulForwardNf4(d_out.data(), d_inp.data(), matrix, bias_ptr, s.N,
                                                 s.C, s.OC, type, workspace.as<void>(),
                                                 workspace_bytes, gs()));
          ASSERT_TRUE(gs().Synchronize().ok());
          ExpectWithin(d_out.Download(), want, bound, "out");
        }
      }
    }
  }
}

TEST_P(CudaNf4Matmul, BackwardAddsTheCpuProductOfTheDequantizedWeight) {
  const DType type = GetParam();
  const size_t e = DTypeSize(type);
  uint32_t seed = 200;
  for (const Nf4Shape& s : kNf4Shapes) {
    const auto N = static_cast<size_t>(s.N), C = static_cast<size_t>(s.C),
               OC = static_cast<size_t>(s.OC);
    const int64_t weight_n = int64_t{s.OC} * s.C;
    const Nf4Array array(s.first + weight_n + 5, ++seed);
    const std::vector<float> dout = RoundTo(type, RandomFloats(N * OC, ++seed));
    // dinp is accumulated into: both sides start from the same values.
    const std::vector<float> dinp0 = RoundTo(type, RandomFloats(N * C, ++seed));
    const std::vector<char> dout_bytes = ToBytes(type, dout), dinp0_bytes = ToBytes(type, dinp0);
    const std::vector<char> unused_inp(N * C * e);  // for dweight, not asked for
    DeviceArray d_dout(type, dout), d_dinp(type, N * C);
    for (bool double_quantized : {false, true}) {
      const std::vector<char> weight =
          array.CpuDequantized(cpu_, type, s.first, weight_n, double_quantized);
      const std::vector<float> w = ToFloats(type, weight);
      const nf4::Matrix matrix = array.DeviceMatrix(s.first, double_quantized);
      std::vector<char> want_bytes = dinp0_bytes;
      HOIST_ASSERT_OK(cpu_.MatmulBackward(want_bytes.data(), nullptr, nullptr, dout_bytes.data(),
                                          unused_inp.data(), weight.data(), s.N, s.C, s.OC, type,
                                          cs()));
      ASSERT_TRUE(cs().Synchronize().ok());
      const std::vector<float> want = ToFloats(type, want_bytes);
      std::vector<double> bound(want.size());
      for (size_t i = 0; i < N; ++i) {
        for (size_t c = 0; c < C; ++c) {
          const size_t at = i * C + c;
          double product = 0.0, magnitude = std::fabs(dinp0[at]);
          for (size_t o = 0; o < OC; ++o) {
            const double term = double{dout[i * OC + o]} * w[o * C + c];
            product += term;
            magnitude += std::fabs(term);
          }
          // One rounding of the sum: the product is never rounded on its own.
          bound[at] = Nf4Bound(type, dinp0[at] + product, 0.0, magnitude, s.OC + 1);
        }
      }
      for (int64_t workspace_bytes : WorkspaceSizes(s.C, s.OC)) {
        SCOPED_TRACE(std::string(DTypeName(type)) + " N " + std::to_string(s.N) + " C " +
                     std::to_string(s.C) + " OC " + std::to_string(s.OC) + " first " +
                     std::to_string(s.first) + (double_quantized ? " double-quantized" : "") +
                     " workspace " + std::to_string(workspace_bytes));
        DeviceBytes workspace(static_cast<size_t>(workspace_bytes));
        d_dinp.Upload(dinp0);
        HOIST_ASSERT_OK(gpu_->MatmulBackwardNf4(d_dinp.data(), d_dout.data(), matrix, s.N, s.C,
                                                s.OC, type, workspace.as<void>(), workspace_bytes,
                                                gs()));
        ASSERT_TRUE(gs().Synchronize().ok());
        ExpectWithin(d_dinp.Download(), want, bound, "dinp");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, CudaNf4Matmul,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16),
                         DTypeParamName);

TEST_F(CudaNf4, MatmulRefusesWhatTheCpuRefuses) {
  // Every call below fails the shared checks, which both backends make before anything else:
  // the CPU backend never reads the device pointers it is handed here.
  constexpr int N = 3, C = 37, OC = 45;
  DeviceBytes out(4096), in(4096), codes(4096), absmax(4096), scales(64), workspace(4096);
  nf4::Matrix fp32_weight;
  fp32_weight.codes = codes.as<uint8_t>();
  fp32_weight.absmax = absmax.as<float>();
  const auto same = [](const Status& gpu, const Status& cpu) {
    EXPECT_EQ(gpu.code(), StatusCode::kInvalidArgument) << gpu.ToString();
    EXPECT_EQ(gpu.ToString(), cpu.ToString());
    return gpu.ToString();
  };
  using Call = Status (*)(Backend&, const Stream&, void*, const void*, const nf4::Matrix&, int,
                          void*, int64_t);
  const Call forward = [](Backend& backend, const Stream& stream, void* o, const void* x,
                          const nf4::Matrix& w, int n, void* ws, int64_t ws_bytes) {
    return backend.MatmulForwardNf4(o, x, w, nullptr, n, C, OC, DType::kBFloat16, ws, ws_bytes,
                                    stream);
  };
  const Call backward = [](Backend& backend, const Stream& stream, void* o, const void* x,
                           const nf4::Matrix& w, int n, void* ws, int64_t ws_bytes) {
    return backend.MatmulBackwardNf4(o, x, w, n, C, OC, DType::kFloat32, ws, ws_bytes, stream);
  };
  const int64_t enough = int64_t{4} * OC;
  for (const Call op : {forward, backward}) {
    const auto both = [&](void* o, const void* x, const nf4::Matrix& w, int n, void* ws,
                          int64_t ws_bytes) {
      return same(op(*gpu_, gs(), o, x, w, n, ws, ws_bytes),
                  op(cpu_, cs(), o, x, w, n, ws, ws_bytes));
    };
    void* o = out.as<void>();
    const void* x = in.as<void>();
    void* ws = workspace.as<void>();
    both(o, x, fp32_weight, 0, ws, enough);
    both(nullptr, x, fp32_weight, N, ws, enough);
    both(o, nullptr, fp32_weight, N, ws, enough);
    nf4::Matrix w = fp32_weight;
    w.codes = nullptr;
    both(o, x, w, N, ws, enough);
    w = fp32_weight;
    w.absmax = nullptr;  // and no 8-bit absmaxes either
    both(o, x, w, N, ws, enough);
    w.absmax_codes = codes.as<uint8_t>();
    w.absmax_scales = scales.as<float>();
    w.absmax_offset = std::numeric_limits<float>::quiet_NaN();
    both(o, x, w, N, ws, enough);
    w = fp32_weight;
    w.first = -1;
    both(o, x, w, N, ws, enough);
    both(o, x, fp32_weight, N, nullptr, enough);
    // One fp32 line of the wider side (OC) short by a byte: the message names both sizes.
    const std::string small = both(o, x, fp32_weight, N, ws, enough - 1);
    EXPECT_NE(small.find("a workspace of " + std::to_string(enough - 1) + " bytes"),
              std::string::npos)
        << small;
    EXPECT_NE(small.find("needs " + std::to_string(enough)), std::string::npos) << small;
  }
}

}  // namespace
}  // namespace hoist::kernels
