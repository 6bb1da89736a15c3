#include "runtime/weight_init.h"

#include <algorithm>

#include "core/random.h"
#include "kernels/cpu/parallel_for.h"

namespace hoist::runtime {

void FillNormal(float* out, int64_t count, uint64_t stream, double std) {
  const auto draw = [&](int64_t c) {
    // An odd multiplier spreads the chunk index over the seed's bits; chunk 0 keeps the stream.
    Rng rng(stream ^ (static_cast<uint64_t>(c) * 0xD1B54A32D192ED03ull));
    const int64_t begin = c * kNormalChunk, end = std::min(count, begin + kNormalChunk);
    for (int64_t i = begin; i < end; ++i) out[i] = static_cast<float>(rng.Normal() * std);
  };
  const int64_t chunks = (count + kNormalChunk - 1) / kNormalChunk;
  kernels::cpu::ParallelFor(chunks, chunks > 1, draw);
}

}  // namespace hoist::runtime
