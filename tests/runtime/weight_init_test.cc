#include "runtime/model/weight_init.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "core/random.h"
#include "runtime/config/config.h"
#include "runtime/model/decoder.h"
#include "runtime/model/gpt2.h"
#include "runtime/model/model.h"

namespace hoist::runtime {
namespace {

std::vector<float> Draw(int64_t count, uint64_t stream, int threads) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  std::vector<float> out(static_cast<size_t>(count), NAN);
  FillNormal(out.data(), count, stream, 0.02);
  omp_set_num_threads(before);
  return out;
}

TEST(FillNormal, OneChunkIsTheGeneratorsOwnSequence) {
  const std::vector<float> got = Draw(1000, 77, 2);
  Rng rng(77);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], static_cast<float>(rng.Normal() * 0.02)) << "element " << i;
  }
}

TEST(FillNormal, ValuesDoNotDependOnTheThreadCount) {
  // Two and a half chunks: the last one partial.
  const int64_t n = 2 * kNormalChunk + kNormalChunk / 2;
  const std::vector<float> one = Draw(n, 5, 1), three = Draw(n, 5, 3);
  ASSERT_EQ(one.size(), three.size());
  for (size_t i = 0; i < one.size(); ++i) {
    ASSERT_TRUE(std::isfinite(one[i])) << "element " << i << " was not written";
    ASSERT_EQ(one[i], three[i]) << "element " << i;
  }
}

TEST(FillNormal, ChunksAreDistinctStreamsWithTheRightMoments) {
  const int64_t n = 3 * kNormalChunk;
  const std::vector<float> v = Draw(n, 9, 2);
  // No chunk repeats another's opening values.
  for (int64_t c = 1; c < 3; ++c) {
    EXPECT_NE(v[static_cast<size_t>(c * kNormalChunk)], v[0]);
    EXPECT_NE(v[static_cast<size_t>(c * kNormalChunk + 1)], v[1]);
  }
  double sum = 0, squares = 0;
  for (float x : v) {
    sum += x;
    squares += double{x} * x;
  }
  const double mean = sum / double(n), sd = std::sqrt(squares / double(n) - mean * mean);
  // 3.1M draws: the mean's standard error is 0.02 / 1773 = 1.1e-5, the deviation's 8e-6.
  EXPECT_NEAR(mean, 0.0, 6e-5);
  EXPECT_NEAR(sd, 0.02, 5e-5);
}

// A window of a unit holds the bits of the same range of the whole unit: windows that cut
// tensors, FillNormal's chunks, and the unit's end, in both families, and a window past the unit
// (an engine's padding) is zeros.
TEST(UnitWindow, AnyRangeOfAUnitIsTheSameRangeOfTheWholeUnit) {
  ModelConfig llama;
  llama.family = ModelFamily::kLlama;
  llama.n_layer = 2;
  llama.n_embd = 512;
  llama.n_head = 8;
  llama.n_kv_head = 2;
  llama.intermediate_size = 4096;  // gate_up: 4.2M elements, four chunks
  llama.vocab_size = 1000;
  llama.seq_len = 64;
  ModelConfig gpt2;
  gpt2.n_layer = 2;
  gpt2.n_embd = 384;  // the MLP's weights: 590K elements each, the block 1.77M
  gpt2.n_head = 6;
  gpt2.vocab_size = 1000;
  gpt2.seq_len = 64;
  for (const ModelConfig& config : {llama, gpt2}) {
    const bool is_llama = config.family == ModelFamily::kLlama;
    const std::vector<zero::UnitSpec> units = ModelUnits(config);
    for (int unit : {0, 1, static_cast<int>(units.size()) - 1}) {
      const int64_t size = units[static_cast<size_t>(unit)].size;
      std::vector<float> whole(static_cast<size_t>(size));
      if (is_llama) {
        InitializeDecoderUnit(config, unit, 11, whole.data());
      } else {
        InitializeGpt2Unit(config, unit, 11, whole.data());
      }
      for (const auto& [begin, count] : std::vector<std::pair<int64_t, int64_t>>{
               {0, size},
               {1, 5},
               {size / 3, size / 3 + 7},
               {kNormalChunk - 3, kNormalChunk + 10},
               {kNormalChunk - 3, 3 * kNormalChunk + 13},  // chunks of gate_up wholly inside
               {size - 129, 129},
               {size - 50, 100}}) {
        if (begin < 0 || begin >= size) continue;
        SCOPED_TRACE(std::string(is_llama ? "llama" : "gpt2") + " unit " + std::to_string(unit) +
                     " [" + std::to_string(begin) + ", +" + std::to_string(count) + ")");
        std::vector<float> window(static_cast<size_t>(count), NAN);
        if (is_llama) {
          InitializeDecoderRange(config, unit, 11, begin, count, window.data());
        } else {
          InitializeGpt2Range(config, unit, 11, begin, count, window.data());
        }
        for (int64_t i = 0; i < count; ++i) {
          const float want = begin + i < size ? whole[static_cast<size_t>(begin + i)] : 0.0f;
          ASSERT_EQ(window[static_cast<size_t>(i)], want) << "element " << begin + i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace hoist::runtime
