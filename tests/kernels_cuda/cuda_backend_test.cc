// The CUDA backend against the CPU backend, its oracle, op by op on the same data: casts,
// accumulation and AdamW to the bit, the sum of squares to double rounding; host<->device copies
// on the copy stream ordered before the compute by an event. Skipped where no GPU is visible.
#include "kernels/cuda_backend.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/cuda/cuda_device.h"
#include "kernels/cpu_backend.h"
#include "tests/kernels_cuda/cuda_kernel_test_util.h"

namespace hoist::kernels {
namespace {

const DType kTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};

// n random values of `type` (fp32 rounded by the CPU backend), as raw bytes.
std::vector<char> RandomArray(CpuBackend& cpu, DType type, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = dist(rng);
  std::vector<char> out(static_cast<size_t>(n) * DTypeSize(type));
  EXPECT_TRUE(
      cpu.Cast(out.data(), type, values.data(), DType::kFloat32, n, cpu.compute_stream()).ok());
  return out;
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HOIST_SKIP_WITHOUT_GPU();
    auto backend = CudaBackend::Create(0, &tracker_);
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    gpu_ = std::move(backend).value();
  }

  // A device copy of `host` (uploaded on the copy stream, ready on the compute stream).
  Buffer Upload(const std::vector<char>& host) {
    Buffer buffer =
        gpu_->device().Allocate(static_cast<int64_t>(host.size()), Category::kWorkspace).value();
    // The allocator zero-fills on the compute stream: the copy stream waits for that first.
    auto allocated = gpu_->CreateEvent().value();
    EXPECT_TRUE(allocated->Record(gpu_->compute_stream()).ok());
    EXPECT_TRUE(gpu_->copy_stream().WaitEvent(*allocated).ok());
    EXPECT_TRUE(gpu_->Copy(buffer.data(), host.data(), static_cast<int64_t>(host.size()),
                           CopyDirection::kHostToDevice, gpu_->copy_stream())
                    .ok());
    auto uploaded = gpu_->CreateEvent().value();
    EXPECT_TRUE(uploaded->Record(gpu_->copy_stream()).ok());
    EXPECT_TRUE(gpu_->compute_stream().WaitEvent(*uploaded).ok());
    EXPECT_TRUE(gpu_->copy_stream().Synchronize().ok());  // `host` may go after this
    return buffer;
  }

  std::vector<char> Download(const Buffer& buffer) {
    std::vector<char> host(static_cast<size_t>(buffer.bytes()));
    EXPECT_TRUE(gpu_->Copy(host.data(), buffer.data(), buffer.bytes(), CopyDirection::kDeviceToHost,
                           gpu_->compute_stream())
                    .ok());
    EXPECT_TRUE(gpu_->compute_stream().Synchronize().ok());
    return host;
  }

  MemoryTracker tracker_;
  CpuDevice host_device_{Place::kHost, &tracker_};
  CpuBackend cpu_{&host_device_};
  std::unique_ptr<CudaBackend> gpu_;
};

TEST_F(CudaBackendTest, CastMatchesTheCpuBackendBitForBitForEveryPairOfTypes) {
  const int64_t n = 100003;
  for (DType from : kTypes) {
    const std::vector<char> src = RandomArray(cpu_, from, n, 1);
    Buffer d_src = Upload(src);
    for (DType to : kTypes) {
      std::vector<char> want(static_cast<size_t>(n) * DTypeSize(to));
      HOIST_ASSERT_OK(cpu_.Cast(want.data(), to, src.data(), from, n, cpu_.compute_stream()));
      Buffer d_dst =
          gpu_->device().Allocate(static_cast<int64_t>(want.size()), Category::kWorkspace).value();
      HOIST_ASSERT_OK(gpu_->Cast(d_dst.data(), to, d_src.data(), from, n, gpu_->compute_stream()));
      EXPECT_EQ(Download(d_dst), want) << DTypeName(from) << " -> " << DTypeName(to);
    }
  }
}

TEST_F(CudaBackendTest, AccumulateMatchesTheCpuBackendBitForBit) {
  const int64_t n = 70001;
  for (DType acc_type : kTypes) {
    for (DType add_type : kTypes) {
      std::vector<char> acc = RandomArray(cpu_, acc_type, n, 2);
      const std::vector<char> add = RandomArray(cpu_, add_type, n, 3);
      Buffer d_acc = Upload(acc), d_add = Upload(add);
      HOIST_ASSERT_OK(cpu_.Accumulate(acc.data(), acc_type, add.data(), add_type, 0.375f, n,
                                      cpu_.compute_stream()));
      HOIST_ASSERT_OK(gpu_->Accumulate(d_acc.data(), acc_type, d_add.data(), add_type, 0.375f, n,
                                       gpu_->compute_stream()));
      EXPECT_EQ(Download(d_acc), acc) << DTypeName(acc_type) << " += " << DTypeName(add_type);
    }
  }
}

TEST_F(CudaBackendTest, SumOfSquaresAddsToTheSumAsTheCpuBackendDoes) {
  for (DType type : kTypes) {
    const std::vector<char> a = RandomArray(cpu_, type, 1 << 20, 4);
    const std::vector<char> b = RandomArray(cpu_, type, 777, 5);
    const int64_t na = 1 << 20, nb = 777;
    double want = 2.0;
    HOIST_ASSERT_OK(cpu_.SumOfSquares(a.data(), type, 0.5f, na, &want, cpu_.compute_stream()));
    HOIST_ASSERT_OK(cpu_.SumOfSquares(b.data(), type, 1.0f, nb, &want, cpu_.compute_stream()));
    Buffer d_a = Upload(a), d_b = Upload(b);
    std::vector<char> start(sizeof(double));
    const double two = 2.0;
    std::memcpy(start.data(), &two, sizeof(double));
    Buffer d_sum = Upload(start);
    HOIST_ASSERT_OK(
        gpu_->SumOfSquares(d_a.data(), type, 0.5f, na, d_sum.as<double>(), gpu_->compute_stream()));
    HOIST_ASSERT_OK(
        gpu_->SumOfSquares(d_b.data(), type, 1.0f, nb, d_sum.as<double>(), gpu_->compute_stream()));
    const std::vector<char> got_bytes = Download(d_sum);
    double got = 0;
    std::memcpy(&got, got_bytes.data(), sizeof(double));
    // Each square is exact in double; only the order of ~1e6 additions differs.
    EXPECT_NEAR(got, want, 1e-12 * want) << DTypeName(type);
  }
}

TEST_F(CudaBackendTest, AdamWMatchesTheCpuBackendBitForBit) {
  const int64_t n = 50000;
  for (DType type : kTypes) {
    std::vector<char> param = RandomArray(cpu_, DType::kFloat32, n, 6);
    std::vector<char> m = RandomArray(cpu_, DType::kFloat32, n, 7);
    std::vector<char> v = RandomArray(cpu_, DType::kFloat32, n, 8);
    for (size_t i = 0; i < v.size(); i += 4) v[i + 3] &= 0x7f;  // second moments are >= 0
    const std::vector<char> grad = RandomArray(cpu_, type, n, 9);
    std::vector<char> copy(static_cast<size_t>(n) * DTypeSize(type));
    Buffer d_param = Upload(param), d_m = Upload(m), d_v = Upload(v), d_grad = Upload(grad),
           d_copy = Upload(copy);
    const int64_t half = n / 2;
    const size_t e = DTypeSize(type);
    auto tensors = [&](char* p, char* mm, char* vv, const char* g, char* c) {
      std::vector<AdamWTensorRef> list(2);
      list[0] = {reinterpret_cast<float*>(p),
                 reinterpret_cast<float*>(mm),
                 reinterpret_cast<float*>(vv),
                 g,
                 IsHalf(type) ? c : nullptr,
                 half,
                 0.1f};
      list[1] = {reinterpret_cast<float*>(p) + half,
                 reinterpret_cast<float*>(mm) + half,
                 reinterpret_cast<float*>(vv) + half,
                 g + half * static_cast<int64_t>(e),
                 IsHalf(type) ? c + half * static_cast<int64_t>(e) : nullptr,
                 n - half,
                 0.0f};
      return list;
    };
    AdamWStepScalars s;
    s.lr = 3e-3f;
    s.grad_scale = 0.25f;
    s.step = 7;
    HOIST_ASSERT_OK(cpu_.AdamW(tensors(param.data(), m.data(), v.data(), grad.data(), copy.data()),
                               type, type, s, cpu_.compute_stream()));
    HOIST_ASSERT_OK(gpu_->AdamW(tensors(d_param.as<char>(), d_m.as<char>(), d_v.as<char>(),
                                        d_grad.as<char>(), d_copy.as<char>()),
                                type, type, s, gpu_->compute_stream()));
    EXPECT_EQ(Download(d_param), param) << DTypeName(type);
    EXPECT_EQ(Download(d_m), m) << DTypeName(type);
    EXPECT_EQ(Download(d_v), v) << DTypeName(type);
    if (IsHalf(type)) {
      EXPECT_EQ(Download(d_copy), copy) << DTypeName(type);
    }
  }
}

TEST_F(CudaBackendTest, ZeroAndCountedMemory) {
  const std::vector<char> ones(4096, 1);
  Buffer d = Upload(ones);
  HOIST_ASSERT_OK(gpu_->Zero(d.data(), 1000, gpu_->compute_stream()));
  const std::vector<char> got = Download(d);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], i < 1000 ? 0 : 1) << i;
  EXPECT_GT(tracker_.Snapshot().Current(Place::kDevice, Category::kWorkspace), 0);
}

}  // namespace
}  // namespace hoist::kernels
