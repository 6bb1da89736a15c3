// Random initial weights drawn in parallel, the same values on any number of threads, and any
// range of a unit's initial values drawn on its own.
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

// Elements [begin, begin + count) of a unit's initial values, for an initializer that writes the
// unit tensor by tensor at their offsets: each call writes the part of its tensor that falls in
// the window and nothing else, and the window starts zeroed. Normal() gives the elements of
// FillNormal's sequence at those positions and draws only the chunks that reach the window, so a
// window holds the bits of the same range of the whole unit, at the memory of the window alone.
class UnitWindow {
 public:
  // Zeroes out[0, count).
  UnitWindow(float* out, int64_t begin, int64_t count);
  // Tensor [offset, offset + n) of the unit: FillNormal(n, stream, std)'s values, or `value`.
  void Normal(int64_t offset, int64_t n, uint64_t stream, double std);
  void Fill(int64_t offset, int64_t n, float value);

 private:
  float* out_;
  int64_t begin_, end_;
};

}  // namespace hoist::runtime
