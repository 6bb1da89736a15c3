// QuantizedStore (a frozen 4-bit base): the quantizable units' decayed segments come back as the
// nearest NF4 value times their block's absmax (checked against a float64 search of the
// codebook), everything else as the compute type rounds it; the resident bytes are about half a
// byte per quantized weight, beside one workspace for the 4-bit matmuls; the weights are read
// through Weight() from any element on; gradients are refused; and the estimate of the store
// beside a trained engine equals the trackers.
#include "zero/quantized_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "comm/thread_communicator.h"
#include "core/memory_tracker.h"
#include "kernels/cpu/blockwise_quant.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/nf4.h"
#include "kernels/cpu_backend.h"
#include "kernels/nf4.h"
#include "zero/memory_estimate.h"
#include "zero/param_store.h"
#include "zero/zero_engine.h"

namespace hoist::zero {
namespace {

// An embedding, two blocks (a decayed matmul weight between undecayed norms and biases, sizes
// that leave short last blocks of 64) and a final norm.
std::vector<UnitSpec> Units() {
  std::vector<UnitSpec> units = {
      {"embed", 100, {{0, 100, true}}},
      {"block0", 3 + 200 + 5, {{0, 3, false}, {3, 203, true}, {203, 208, false}}},
      {"block1", 1 + 129, {{0, 1, false}, {1, 130, true}}},
      {"norm", 4, {{0, 4, false}}}};
  units[1].quantizable = units[2].quantizable = true;
  return units;
}

float Value(int u, int64_t i) {
  return static_cast<float>(std::sin(0.37 * (i + 1) + u) * (1.0 + 0.01 * i));
}

// What the store must hand out for element i of segment [begin, end) of a quantized segment:
// the codebook value nearest (in float64) to x / absmax, times absmax.
float Nf4Reference(const std::vector<float>& unit, int64_t begin, int64_t end, int64_t i) {
  const int64_t block = begin + (i - begin) / 64 * 64;
  double absmax = 0;
  for (int64_t k = block; k < std::min(end, block + 64); ++k) {
    absmax = std::max(absmax, std::abs(double{unit[static_cast<size_t>(k)]}));
  }
  const double x = unit[static_cast<size_t>(i)] / absmax;
  int best = 0;
  for (int c = 1; c < 16; ++c) {
    if (std::abs(x - kernels::nf4::kCodebook[c]) < std::abs(x - kernels::nf4::kCodebook[best])) {
      best = c;
    }
  }
  return static_cast<float>(kernels::nf4::kCodebook[best] * static_cast<float>(absmax));
}

// `count` weights of acquired unit `u` from element `offset` on, read through Weight(): dense ones
// as they are, 4-bit ones dequantized as the matmuls dequantize them (rounded to `type`).
std::vector<float> ReadWeights(const QuantizedStore& store, int u, const void* acquired,
                               int64_t offset, int64_t count, DType type) {
  const StoredWeight w = store.Weight(u, acquired, offset);
  std::vector<float> out(static_cast<size_t>(count));
  if (w.dense != nullptr) {
    kernels::cpu::ToFloat(w.dense, type, out.data(), count);
  } else {
    EXPECT_NE(w.workspace, nullptr);
    EXPECT_GT(w.workspace_bytes, 0);
    kernels::cpu::DequantizeNf4Rect(w.nf4, count, 0, 1, 0, count, type, false, out.data());
  }
  return out;
}

TEST(QuantizedStore, ServesNf4WeightsAndTheRestInTheComputeType) {
  for (DType type : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(type));
    const std::vector<UnitSpec> units = Units();
    MemoryTracker tracker;
    CpuDevice device(Place::kDevice, &tracker);
    kernels::CpuBackend backend(&device);
    auto store = QuantizedStore::Create(units, type, &backend);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE((*store)
                    ->Initialize([&](int u, float* out) {
                      for (int64_t i = 0; i < units[u].size; ++i) out[i] = Value(u, i);
                    })
                    .ok());
    // The units' bytes, and a workspace for the 4-bit matmuls of the largest quantized segment.
    int64_t resident = 0;
    for (const UnitSpec& unit : units) resident += QuantizedUnitBytes(unit, type);
    const auto current = [&](Category c) {
      return tracker.Snapshot().current[int(Place::kDevice)][int(c)];
    };
    EXPECT_EQ(current(Category::kParam), resident);
    EXPECT_EQ(Nf4WorkspaceBytes(units), 200 * 4);
    EXPECT_EQ(current(Category::kWorkspace), 200 * 4);
    // 200 + 129 quantized weights: codes (165 bytes with the odd segment's half byte) and 4 + 3
    // absmaxes, against 2 or 4 bytes each in the compute type.
    EXPECT_EQ(QuantizedUnitBytes(units[1], type),
              4 * 4 + 100 + (type == DType::kFloat32 ? 12 + 20 : 8 + 12));
    for (int u = 0; u < static_cast<int>(units.size()); ++u) {
      const UnitSpec& spec = units[static_cast<size_t>(u)];
      std::vector<float> values(static_cast<size_t>(spec.size));
      for (int64_t i = 0; i < spec.size; ++i) values[static_cast<size_t>(i)] = Value(u, i);
      const void* params = (*store)->AcquireParams(u).value();
      ASSERT_NE(params, nullptr);
      for (const ParamSegment& segment : spec.segments) {
        // From the segment's first element, and from one in its middle (mid-block, mid-byte).
        for (const int64_t from :
             {segment.begin, segment.begin + (segment.end - segment.begin) / 2 +
                                 (QuantizedSegment(spec, segment) ? 7 : 0)}) {
          if (from >= segment.end) continue;
          const std::vector<float> got =
              ReadWeights(**store, u, params, from, segment.end - from, type);
          for (int64_t i = from; i < segment.end; ++i) {
            float want = QuantizedSegment(spec, segment)
                             ? Nf4Reference(values, segment.begin, segment.end, i)
                             : values[static_cast<size_t>(i)];
            uint16_t half = 0;
            if (type != DType::kFloat32) {
              kernels::cpu::FromFloat(&want, &half, type, 1);
              kernels::cpu::ToFloat(&half, type, &want, 1);
            }
            ASSERT_EQ(got[static_cast<size_t>(i - from)], want) << spec.name << " element " << i;
          }
        }
      }
      // Nothing is dequantized ahead of use: acquiring holds no memory, even two units at once.
      if (u == 1) {
        ASSERT_TRUE((*store)->AcquireParams(2).ok());
      }
      EXPECT_EQ(current(Category::kParam), resident) << spec.name;
      if (u == 1) (*store)->ReleaseParams(2);
      (*store)->ReleaseParams(u);
    }
    EXPECT_FALSE((*store)->AcquireGrads(1).ok());
    EXPECT_EQ((*store)->status().code(), StatusCode::kFailedPrecondition);
  }
}

TEST(QuantizedStore, RefusesANonFiniteWeightNamingTheUnit) {
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  kernels::CpuBackend backend(&device);
  const std::vector<UnitSpec> units = Units();
  auto store = QuantizedStore::Create(units, DType::kBFloat16, &backend);
  ASSERT_TRUE(store.ok());
  const Status status = (*store)->Initialize([&](int u, float* out) {
    for (int64_t i = 0; i < units[u].size; ++i) out[i] = (u == 2 && i == 50) ? NAN : 0.5f;
  });
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("block1"), std::string::npos) << status.ToString();
}

TEST(QuantizedStore, DoubleQuantizedAbsmaxesCostAByteAndMoveTheWeightsLittle) {
  const std::vector<UnitSpec> units = Units();
  const DType type = DType::kFloat32;
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  kernels::CpuBackend backend(&device);
  auto single = QuantizedStore::Create(units, type, &backend);
  auto dq = QuantizedStore::Create(units, type, &backend, /*double_quant=*/true);
  ASSERT_TRUE(single.ok() && dq.ok());
  const auto fill = [&](int u, float* out) {
    for (int64_t i = 0; i < units[u].size; ++i) out[i] = Value(u, i);
  };
  ASSERT_TRUE((*single)->Initialize(fill).ok());
  ASSERT_TRUE((*dq)->Initialize(fill).ok());
  // block0's quantized segment: 200 weights, 4 absmaxes in 4 bytes + one 4-byte scale, 100
  // bytes of codes; its norms in fp32 (3 + 5 floats).
  EXPECT_EQ(QuantizedUnitBytes(units[1], type, true), 4 + 4 + 100 + 12 + 20);
  EXPECT_EQ(QuantizedUnitBytes(units[1], type, false), 4 * 4 + 100 + 12 + 20);
  // The workspace is the same; only the resident bytes shrink.
  int64_t resident = 0;
  for (const UnitSpec& unit : units) {
    resident += QuantizedUnitBytes(unit, type) + QuantizedUnitBytes(unit, type, true);
  }
  EXPECT_EQ(tracker.Snapshot().current[int(Place::kDevice)][int(Category::kParam)], resident);
  EXPECT_EQ(tracker.Snapshot().current[int(Place::kDevice)][int(Category::kWorkspace)],
            2 * Nf4WorkspaceBytes(units));
  for (int u : {1, 2}) {
    const UnitSpec& spec = units[static_cast<size_t>(u)];
    const void* pa = (*single)->AcquireParams(u).value();
    const void* pb = (*dq)->AcquireParams(u).value();
    ASSERT_TRUE(pa != nullptr && pb != nullptr);
    // Segment by segment: a weight is asked for by its first element.
    std::vector<float> a, b;
    for (const ParamSegment& segment : spec.segments) {
      const int64_t n = segment.end - segment.begin;
      const std::vector<float> sa = ReadWeights(**single, u, pa, segment.begin, n, type);
      const std::vector<float> sb = ReadWeights(**dq, u, pb, segment.begin, n, type);
      a.insert(a.end(), sa.begin(), sa.end());
      b.insert(b.end(), sb.begin(), sb.end());
    }
    int differ = 0;
    for (const ParamSegment& segment : spec.segments) {
      if (!QuantizedSegment(spec, segment)) {
        for (int64_t i = segment.begin; i < segment.end; ++i) {
          ASSERT_EQ(a[static_cast<size_t>(i)], b[static_cast<size_t>(i)]) << spec.name << " " << i;
        }
        continue;
      }
      // The same codes under an absmax off by at most half the signed map's widest gap times
      // the largest deviation of the segment's absmaxes from their mean (one scale: these
      // segments have under 256 blocks); a code is at most 1, so a weight moves by that at most.
      // The block's largest weight comes back as its absmax, so `a` gives the absmaxes.
      std::vector<double> absmax;
      for (int64_t first = segment.begin; first < segment.end; first += 64) {
        double most = 0;
        for (int64_t j = first; j < std::min(segment.end, first + 64); ++j) {
          most = std::max(most, double{std::abs(a[static_cast<size_t>(j)])});
        }
        absmax.push_back(most);
      }
      double mean = 0, deviation = 0;
      for (double x : absmax) mean += x / double(absmax.size());
      for (double x : absmax) deviation = std::max(deviation, std::abs(x - mean));
      const kernels::cpu::DynamicMap& map = kernels::cpu::SignedDynamicMap();
      double half_gap = 0;
      for (int c = 0; c < 255; ++c) {
        half_gap = std::max(half_gap, (double{map.code[c + 1]} - map.code[c]) / 2);
      }
      const double bound = half_gap * deviation * 1.0001 + 1e-6;
      for (int64_t i = segment.begin; i < segment.end; ++i) {
        const auto k = static_cast<size_t>(i);
        EXPECT_LE(std::abs(double{b[k]} - a[k]), bound) << spec.name << " element " << i;
        differ += a[k] != b[k];
      }
    }
    EXPECT_GT(differ, 0) << spec.name << ": the absmaxes were not requantized";
    (*single)->ReleaseParams(u);
    (*dq)->ReleaseParams(u);
  }
}

// A segment of several initialization chunks (and an odd length) is set a chunk at a time,
// asking for no more than kInitChunk elements at once, and holds what quantizing the whole
// segment in one piece gives: the codes, the absmaxes, and with double quantization the absmaxes'
// offset, codes and scales.
TEST(QuantizedStore, SetsALargeSegmentAChunkAtATimeAsTheWholeOfIt) {
  const int64_t n = 2 * QuantizedStore::kInitChunk + QuantizedStore::kInitChunk / 2 + 11;
  std::vector<UnitSpec> units = {
      {"block", 3 + n + 5, {{0, 3, false}, {3, 3 + n, true}, {3 + n, 3 + n + 5, false}}}};
  units[0].quantizable = true;
  const auto value = [](int64_t i) {
    return static_cast<float>(((i * 7919) % 2001 - 1000) * 1e-5);
  };
  std::vector<float> segment(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) segment[static_cast<size_t>(i)] = value(3 + i);
  for (bool double_quant : {false, true}) {
    SCOPED_TRACE(double_quant ? "double quantization" : "fp32 absmaxes");
    MemoryTracker tracker;
    CpuDevice device(Place::kDevice, &tracker);
    kernels::CpuBackend backend(&device);
    auto store = QuantizedStore::Create(units, DType::kBFloat16, &backend, double_quant);
    ASSERT_TRUE(store.ok());
    int64_t most = 0;
    ASSERT_TRUE((*store)
                    ->Initialize([&](int, int64_t begin, int64_t count, float* out) {
                      most = std::max(most, count);
                      for (int64_t i = 0; i < count; ++i) out[i] = value(begin + i);
                    })
                    .ok());
    EXPECT_EQ(most, QuantizedStore::kInitChunk);
    // The segment quantized in one piece.
    std::vector<uint8_t> codes(static_cast<size_t>(kernels::nf4::CodeBytes(n)));
    std::vector<float> absmax(static_cast<size_t>(kernels::nf4::Blocks(n)));
    ASSERT_TRUE(kernels::cpu::QuantizeNf4(segment.data(), n, codes.data(), absmax.data()).ok());
    kernels::nf4::Matrix whole;
    whole.codes = codes.data();
    whole.absmax = absmax.data();
    const int64_t blocks = kernels::nf4::Blocks(n);
    std::vector<uint8_t> absmax_codes(static_cast<size_t>(blocks));
    std::vector<float> scales(static_cast<size_t>(kernels::cpu::QuantBlocks(blocks)));
    if (double_quant) {
      double sum = 0;
      for (float a : absmax) sum += a;
      whole.absmax_offset = static_cast<float>(sum / double(blocks));
      for (float& a : absmax) a -= whole.absmax_offset;
      kernels::cpu::QuantizeBlockwise(kernels::cpu::SignedDynamicMap(), absmax.data(), blocks,
                                      absmax_codes.data(), scales.data());
      whole.absmax = nullptr;
      whole.absmax_codes = absmax_codes.data();
      whole.absmax_scales = scales.data();
    }
    std::vector<float> want(static_cast<size_t>(n));
    kernels::cpu::DequantizeNf4Rect(whole, n, 0, 1, 0, n, DType::kBFloat16, false, want.data());
    const void* params = (*store)->AcquireParams(0).value();
    ASSERT_NE(params, nullptr);
    const StoredWeight stored = (*store)->Weight(0, params, 3);
    ASSERT_EQ(stored.dense, nullptr);
    if (double_quant) {
      EXPECT_EQ(stored.nf4.absmax_offset, whole.absmax_offset);
    }
    EXPECT_EQ(ReadWeights(**store, 0, params, 3, n, DType::kBFloat16), want);
    // The norms on either side, rounded to bf16.
    for (const auto& [from, count] : {std::pair<int64_t, int64_t>{0, 3}, {3 + n, 5}}) {
      const std::vector<float> got = ReadWeights(**store, 0, params, from, count, DType::kBFloat16);
      for (int64_t i = 0; i < count; ++i) {
        float rounded = value(from + i);
        uint16_t bits = 0;
        kernels::cpu::FromFloat(&rounded, &bits, DType::kBFloat16, 1);
        kernels::cpu::ToFloat(&bits, DType::kBFloat16, &rounded, 1);
        EXPECT_EQ(got[static_cast<size_t>(i)], rounded) << from + i;
      }
    }
    (*store)->ReleaseParams(0);
  }
}

// The store beside a trained engine (a 4-bit base under LoRA adapters): the estimate's replay
// of both on one timeline equals the trackers.
class QuantizedStoreEstimate : public ::testing::TestWithParam<bool> {};

TEST_P(QuantizedStoreEstimate, BesideTheAdaptersEngineMatchesTheTracker) {
  const bool double_quant = GetParam();
  const std::vector<UnitSpec> base = Units();
  const std::vector<UnitSpec> adapters = {{"lora0", 24, {{0, 24, true}}},
                                          {"lora1", 24, {{0, 24, true}}}};
  using Op = StoreCall::Op;
  ModelPasses passes;
  for (int u = 0; u < 4; ++u) {
    passes.forward.push_back({Op::kAcquireParams, u});
    if (u == 1) {  // a second quantized unit while the first is held
      passes.forward.push_back({Op::kAcquireParams, 2});
      passes.forward.push_back({Op::kReleaseParams, 2});
    }
    if (u == 1 || u == 2) passes.forward.push_back({Op::kAcquireParams, 3 + u});
    if (u == 1 || u == 2) passes.forward.push_back({Op::kReleaseParams, 3 + u});
    passes.forward.push_back({Op::kReleaseParams, u});
  }
  for (int u = 3; u >= 0; --u) {
    passes.backward.push_back({Op::kAcquireParams, u});
    if (u == 1 || u == 2) {
      for (Op op : {Op::kAcquireParams, Op::kAcquireGrads, Op::kReleaseGrads, Op::kReleaseParams}) {
        passes.backward.push_back({op, 3 + u});
      }
    }
    passes.backward.push_back({Op::kReleaseParams, u});
  }
  ZeroOptions options;
  options.stage = 1;
  options.compute_type = DType::kBFloat16;
  options.comm_type = DType::kBFloat16;
  ZeroOptions frozen = options;
  frozen.frozen = true;

  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  kernels::CpuBackend backend(&device);
  auto group = comm::ThreadGroup::Create(1, 30.0);
  ASSERT_TRUE(group.ok());
  auto store = QuantizedStore::Create(base, options.compute_type, &backend, double_quant);
  auto engine = ZeroEngine::Create(adapters, options, &(*group)->comm(0), &backend);
  ASSERT_TRUE(store.ok() && engine.ok());
  ASSERT_TRUE((*store)
                  ->Initialize([&](int u, float* out) {
                    for (int64_t i = 0; i < base[u].size; ++i) out[i] = Value(u, i);
                  })
                  .ok());
  ASSERT_TRUE((*engine)
                  ->Initialize([&](int u, float* out) {
                    for (int64_t i = 0; i < adapters[u].size; ++i) out[i] = 0.01f * i;
                  })
                  .ok());
  JoinedParamStore joined(store->get(), 4, engine->get());
  tracker.ResetPeaks();
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE((*engine)->ZeroGrads().ok());
    for (const auto* pass : {&passes.forward, &passes.backward}) {
      for (const StoreCall& call : *pass) {
        switch (call.op) {
          case Op::kAcquireParams: ASSERT_TRUE(joined.AcquireParams(call.unit).ok()); break;
          case Op::kReleaseParams: joined.ReleaseParams(call.unit); break;
          case Op::kPrefetch: joined.Prefetch(call.unit); break;
          case Op::kAcquireGrads: ASSERT_TRUE(joined.AcquireGrads(call.unit).ok()); break;
          case Op::kReleaseGrads: joined.ReleaseGrads(call.unit); break;
        }
      }
    }
    ASSERT_TRUE((*engine)->Step(0.01f, 1.0f, 0.0f).ok());
  }
  auto estimate = EstimateEngineMemory(
      {EngineUnits{base, frozen, /*quantized=*/true, double_quant}, EngineUnits{adapters, options}},
      1, 0, passes);
  ASSERT_TRUE(estimate.ok()) << estimate.status().ToString();
  const MemorySnapshot seen = tracker.Snapshot();
  for (int c = 0; c < kNumCategories; ++c) {
    EXPECT_EQ(seen.peak[int(Place::kDevice)][c], estimate->Peak(Place::kDevice, Category(c)))
        << CategoryName(Category(c));
  }
  EXPECT_EQ(seen.peak_total[int(Place::kDevice)], estimate->PeakTotal(Place::kDevice));
}

INSTANTIATE_TEST_SUITE_P(Absmaxes, QuantizedStoreEstimate, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "double_quant" : "fp32"; });

}  // namespace
}  // namespace hoist::zero
