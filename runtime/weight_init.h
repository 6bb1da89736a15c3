// Random initial weights drawn in parallel, the same values on any number of threads.
#pragma once

#include <cstdint>

namespace hoist::runtime {

// Elements per independently seeded chunk of a FillNormal stream.
inline constexpr int64_t kNormalChunk = int64_t{1} << 20;

// Writes count values drawn from a normal distribution of mean 0 and standard deviation `std`
// into out[0, count). Stream `stream` is cut into chunks of kNormalChunk elements, each drawn by
// its own generator (chunk 0's is Rng(stream), so a tensor of one chunk is Rng(stream)'s
// sequence), and the chunks are drawn by the OpenMP threads: the values depend on the stream
// alone, never on the thread count.
void FillNormal(float* out, int64_t count, uint64_t stream, double std);

}  // namespace hoist::runtime
