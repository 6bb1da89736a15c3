#include "kernels/cpu/gemm_bf16.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/cpu_features.h"
#include "core/logging.h"

#if defined(HOIST_HAVE_DNNL)
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#endif

namespace hoist::kernels::cpu {
namespace {

struct Isa {
  bool amx = false;
  bool avx512_bf16 = false;
};

// The CPU's bf16 features less those HOIST_CPU_MASK hides.
Isa VisibleIsa() {
  const CpuFeatures& f = GetCpuFeatures();
  Isa isa{f.amx_bf16, f.avx512_bf16};
  const char* mask = std::getenv("HOIST_CPU_MASK");
  if (mask == nullptr) return isa;
  std::string list = std::string(",") + mask + ",";
  for (auto& c : list) c = c == ' ' ? ',' : c;
  auto has = [&](const char* name) {
    return list.find(std::string(",") + name + ",") != list.npos;
  };
  if (has("amx_bf16") || has("bf16")) isa.amx = false;
  if (has("avx512_bf16") || has("bf16")) isa.avx512_bf16 = false;
  return isa;
}

#if defined(HOIST_HAVE_DNNL)

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

const dnnl::engine& Engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// A product (gemm_bf16.h's Bf16Product) and whether it adds a bias (N, bf16) before the sum.
struct GemmKey {
  Bf16Product p;
  bool bias = false;
  auto Tie() const {
    return std::tie(p.m, p.n, p.k, p.a_row, p.a_col, p.b_row, p.b_col, p.ldc, p.accumulate,
                    p.c_bf16, p.scale, bias);
  }
  bool operator<(const GemmKey& o) const { return Tie() < o.Tie(); }
};

// Primitives are built once per shape (a build costs about half a millisecond) and shared: a
// oneDNN primitive may execute from several threads at once.
struct Built {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
};

Built Primitive(const GemmKey& key) {
  static std::mutex mu;
  static std::map<GemmKey, Built> cache;  // guarded by mu
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  using dt = dnnl::memory::data_type;
  const Bf16Product& p = key.p;
  dnnl::memory::desc a({p.m, p.k}, dt::bf16, dnnl::memory::dims{p.a_row, p.a_col});
  dnnl::memory::desc b({p.k, p.n}, dt::bf16, dnnl::memory::dims{p.b_row, p.b_col});
  dnnl::memory::desc c({p.m, p.n}, p.c_bf16 ? dt::bf16 : dt::f32, dnnl::memory::dims{p.ldc, 1});
  dnnl::memory::desc bias({1, p.n}, dt::bf16, dnnl::memory::dims{p.n, 1});
  dnnl::primitive_attr attr;
  // A library-managed scratchpad is shared per thread and ties a primitive to the thread that
  // built it; these primitives run on whichever thread (ranks, host streams) calls them, so each
  // call brings its own.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (p.scale != 1.0f) attr.set_output_scales(0, {p.scale});
  if (p.accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  dnnl::matmul::primitive_desc pd(
      key.bias ? dnnl::matmul::desc(a, b, bias, c) : dnnl::matmul::desc(a, b, c), attr, Engine());
  return cache.emplace(key, Built{pd, dnnl::matmul(pd)}).first->second;
}

// A primitive bound to one thread's memory objects, argument map and stream, so that a call only
// points the objects at its arrays: attention's products are small (a 32x64x64 one takes ~2 us)
// and building these per call cost about a third of that.
struct Bound {
  Built built;
  std::unordered_map<int, dnnl::memory> args;
  dnnl::stream stream;
  size_t scratch_bytes;
};

Bound& ThreadPrimitive(const GemmKey& key) {
  thread_local std::map<GemmKey, Bound> bound;
  auto it = bound.find(key);
  if (it != bound.end()) return it->second;
  Built built = Primitive(key);
  const dnnl::matmul::primitive_desc& pd = built.pd;
  std::unordered_map<int, dnnl::memory> args = {
      {DNNL_ARG_SRC, dnnl::memory(pd.src_desc(), Engine(), nullptr)},
      {DNNL_ARG_WEIGHTS, dnnl::memory(pd.weights_desc(), Engine(), nullptr)},
      {DNNL_ARG_DST, dnnl::memory(pd.dst_desc(), Engine(), nullptr)},
      {DNNL_ARG_SCRATCHPAD, dnnl::memory(pd.scratchpad_desc(), Engine(), nullptr)}};
  if (key.bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(pd.bias_desc(), Engine(), nullptr));
  const size_t scratch_bytes = pd.scratchpad_desc().get_size();
  return bound.emplace(key, Bound{built, std::move(args), dnnl::stream(Engine()), scratch_bytes})
      .first->second;
}

void Gemm(const GemmKey& key, const uint16_t* a, const uint16_t* b, void* c,
          const uint16_t* bias = nullptr) {
  try {
    Bound& bound = ThreadPrimitive(key);
    // The scratchpad: this thread's, grown to the largest a call has needed, 64-byte aligned.
    thread_local std::vector<uint8_t> scratch;
    if (scratch.size() < bound.scratch_bytes + 64) scratch.resize(bound.scratch_bytes + 64);
    void* aligned = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
    bound.args.at(DNNL_ARG_SRC).set_data_handle(const_cast<uint16_t*>(a));
    bound.args.at(DNNL_ARG_WEIGHTS).set_data_handle(const_cast<uint16_t*>(b));
    bound.args.at(DNNL_ARG_DST).set_data_handle(c);
    bound.args.at(DNNL_ARG_SCRATCHPAD).set_data_handle(aligned);
    if (key.bias) bound.args.at(DNNL_ARG_BIAS).set_data_handle(const_cast<uint16_t*>(bias));
    bound.built.prim.execute(bound.stream, bound.args);
    bound.stream.wait();
  } catch (const dnnl::error& e) {
    HOIST_CHECK(false) << "oneDNN bf16 matmul (" << key.p.m << "x" << key.p.k << " @ " << key.p.k
                       << "x" << key.p.n << ") failed: " << e.what();
  }
}

std::string DnnlLibrary() {
  const dnnl_version_t* v = dnnl_version();
  std::string impl;
  try {
    impl = Primitive({{64, 64, 64, 64, 1, 1, 64, 64}}).pd.impl_info_str();
  } catch (const dnnl::error&) {
    impl = "none";
  }
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + " (its kernel: " + impl + ")";
}

// Caps oneDNN's own dispatch at what HOIST_CPU_MASK leaves visible. Must run before the first
// primitive is built; a cap set earlier (DNNL_MAX_CPU_ISA) is kept.
void CapDnnlIsa(const Isa& isa) {
  if (isa.amx || !isa.avx512_bf16) return;
  try {
    dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx512_core_bf16);
  } catch (const dnnl::error&) {
  }
}

// GFLOP/s of the best of three runs of fn, a (256x768) @ (768x768) product.
template <typename Fn>
double Rate(Fn fn) {
  constexpr double kFlops = 2.0 * 256 * 768 * 768;
  fn();
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    double t0 = Seconds();
    fn();
    best = std::min(best, Seconds() - t0);
  }
  return kFlops / best / 1e9;
}

#endif  // HOIST_HAVE_DNNL

}  // namespace

const char* GemmPathName(GemmPath path) {
  return path == GemmPath::kBf16Dnnl ? "bf16 (oneDNN)" : "fp32 (BLAS sgemm)";
}

bool Bf16GemmAvailable() {
#if defined(HOIST_HAVE_DNNL)
  Isa isa = VisibleIsa();
  return isa.amx || isa.avx512_bf16;
#else
  return false;
#endif
}

GemmChoice DecideGemmPath() {
  GemmChoice choice;
  const Isa isa = VisibleIsa();
  choice.isa = isa.amx ? "amx_bf16" : isa.avx512_bf16 ? "avx512_bf16" : "none";
  const char* mode_env = std::getenv("HOIST_GEMM");
  std::string mode = mode_env == nullptr || *mode_env == '\0' ? "auto" : mode_env;
  if (mode != "auto" && mode != "bf16" && mode != "fp32") {
    HOIST_LOG(WARN) << "HOIST_GEMM='" << mode << "' is not auto, bf16 or fp32; using auto";
    mode = "auto";
  }
#if !defined(HOIST_HAVE_DNNL)
  choice.library = "none (built without oneDNN: HOIST_WITH_DNNL)";
  choice.reason = "hoist was built without oneDNN";
  return choice;
#else
  if (choice.isa == "none") {
    choice.library = "oneDNN (unused)";
    const CpuFeatures& f = GetCpuFeatures();
    choice.reason = f.amx_bf16 || f.avx512_bf16 ? "HOIST_CPU_MASK hides AVX512_BF16 and AMX-BF16"
                                                : "the CPU has neither AVX512_BF16 nor AMX-BF16";
    return choice;
  }
  if (mode == "fp32") {
    choice.library = "oneDNN (unused)";
    choice.reason = "HOIST_GEMM=fp32";
    return choice;
  }
  CapDnnlIsa(isa);
  choice.library = DnnlLibrary();
  if (mode == "bf16") {
    choice.path = GemmPath::kBf16Dnnl;
    choice.reason = "HOIST_GEMM=bf16";
    return choice;
  }
  constexpr int M = 256, K = 768, N = 768;
  std::vector<float> a(M * K, 0.5f), b(K * N, 0.25f), c(M * N);
  std::vector<uint16_t> ah(M * K, 0x3f00), bh(K * N, 0x3e80);
  choice.fp32_gflops = Rate([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a.data(), K, b.data(), K,
                0.0f, c.data(), N);
  });
  choice.bf16_gflops =
      Rate([&] { MatmulForwardBf16(c.data(), false, ah.data(), bh.data(), nullptr, M, K, N); });
  if (choice.bf16_gflops > choice.fp32_gflops) {
    choice.path = GemmPath::kBf16Dnnl;
    choice.reason = "oneDNN's bf16 product measured faster than sgemm";
  } else {
    choice.reason = "oneDNN's bf16 product measured no faster than sgemm";
  }
  return choice;
#endif
}

const GemmChoice& ActiveGemmPath() {
  static const GemmChoice choice = [] {
    GemmChoice c = DecideGemmPath();
    HOIST_LOG(INFO) << "bf16 matmuls: " << GemmPathName(c.path) << ": " << c.reason << " (ISA "
                    << c.isa << ", " << c.library << ")";
    return c;
  }();
  return choice;
}

#if defined(HOIST_HAVE_DNNL)

void MatmulForwardBf16(void* out, bool out_bf16, const uint16_t* inp, const uint16_t* weight,
                       const uint16_t* bias, int N, int C, int OC) {
  // B (C,OC) is weight transposed: element (k, n) at weight[n * C + k].
  Gemm({{N, OC, C, C, 1, 1, C, OC, false, out_bf16}, bias != nullptr}, inp, weight, out, bias);
}

void MatmulBackwardBf16(void* dinp, bool dinp_bf16, float* dweight, float* dbias,
                        const uint16_t* dout, const uint16_t* inp, const uint16_t* weight, int N,
                        int C, int OC) {
  if (dinp != nullptr) Gemm({{N, C, OC, OC, 1, C, 1, C, true, dinp_bf16}}, dout, weight, dinp);
  // A (OC,N) is dout transposed: element (m, k) at dout[k * OC + m].
  if (dweight != nullptr) Gemm({{OC, C, N, 1, OC, C, 1, C, true}}, dout, inp, dweight);
  if (dbias == nullptr) return;
  // Column sums in fp32, rows in order within each block of columns (as BiasBackward).
  constexpr int kBlock = 128;
  const int num_blocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < num_blocks; ++blk) {
    const int j0 = blk * kBlock;
    const int count = OC - j0 < kBlock ? OC - j0 : kBlock;
    float* __restrict db = dbias + j0;
    for (int i = 0; i < N; ++i) {
      const uint16_t* __restrict d = dout + static_cast<size_t>(i) * OC + j0;
      for (int j = 0; j < count; ++j) {
        const uint32_t bits = static_cast<uint32_t>(d[j]) << 16;
        float x;
        std::memcpy(&x, &bits, 4);
        db[j] += x;
      }
    }
  }
}

void GemmBf16(const Bf16Product& product, const uint16_t* a, const uint16_t* b, void* c,
              const uint16_t* bias) {
  Gemm({product, bias != nullptr}, a, b, c, bias);
}

#else

void MatmulForwardBf16(void*, bool, const uint16_t*, const uint16_t*, const uint16_t*, int, int,
                       int) {
  HOIST_CHECK(false) << "MatmulForwardBf16 called in a build without oneDNN";
}

void MatmulBackwardBf16(void*, bool, float*, float*, const uint16_t*, const uint16_t*,
                        const uint16_t*, int, int, int) {
  HOIST_CHECK(false) << "MatmulBackwardBf16 called in a build without oneDNN";
}

void GemmBf16(const Bf16Product&, const uint16_t*, const uint16_t*, void*, const uint16_t*) {
  HOIST_CHECK(false) << "GemmBf16 called in a build without oneDNN";
}

#endif

}  // namespace hoist::kernels::cpu
