#include "runtime/model/weight_init.h"

#include <algorithm>
#include <vector>

#include "core/random.h"
#include "kernels/cpu/parallel_for.h"

namespace hoist::runtime {
namespace {

// Chunk c of a stream of `count` values: elements [c * kNormalChunk, ...) into dst.
void DrawChunk(int64_t c, int64_t count, uint64_t stream, double std, float* dst) {
  // An odd multiplier spreads the chunk index over the seed's bits; chunk 0 keeps the stream.
  Rng rng(stream ^ (static_cast<uint64_t>(c) * 0xD1B54A32D192ED03ull));
  const int64_t n = std::min(count - c * kNormalChunk, kNormalChunk);
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(rng.Normal() * std);
}

}  // namespace

void FillNormal(float* out, int64_t count, uint64_t stream, double std) {
  const int64_t chunks = (count + kNormalChunk - 1) / kNormalChunk;
  kernels::cpu::ParallelFor(chunks, chunks > 1, [&](int64_t c) {
    DrawChunk(c, count, stream, std, out + c * kNormalChunk);
  });
}

UnitWindow::UnitWindow(float* out, int64_t begin, int64_t count)
    : out_(out), begin_(begin), end_(begin + count) {
  std::fill(out, out + count, 0.0f);
}

void UnitWindow::Normal(int64_t offset, int64_t n, uint64_t stream, double std) {
  const int64_t lo = std::max(offset, begin_), hi = std::min(offset + n, end_);
  if (lo >= hi) return;
  if (lo == offset && hi == offset + n) {  // the whole tensor is in the window
    FillNormal(out_ + (offset - begin_), n, stream, std);
    return;
  }
  // The chunks that reach the window: one wholly inside is drawn in place, one cut by an edge
  // into a scratch of its own and its part copied.
  const int64_t first = (lo - offset) / kNormalChunk, last = (hi - 1 - offset) / kNormalChunk;
  kernels::cpu::ParallelFor(last - first + 1, last > first, [&](int64_t k) {
    const int64_t c = first + k;
    const int64_t chunk_begin = offset + c * kNormalChunk;
    const int64_t chunk_end = std::min(offset + n, chunk_begin + kNormalChunk);
    if (chunk_begin >= lo && chunk_end <= hi) {
      DrawChunk(c, n, stream, std, out_ + (chunk_begin - begin_));
      return;
    }
    std::vector<float> scratch(static_cast<size_t>(chunk_end - chunk_begin));
    DrawChunk(c, n, stream, std, scratch.data());
    const int64_t from = std::max(chunk_begin, lo), to = std::min(chunk_end, hi);
    std::copy(scratch.begin() + (from - chunk_begin), scratch.begin() + (to - chunk_begin),
              out_ + (from - begin_));
  });
}

void UnitWindow::Fill(int64_t offset, int64_t n, float value) {
  const int64_t lo = std::max(offset, begin_), hi = std::min(offset + n, end_);
  if (lo < hi) std::fill(out_ + (lo - begin_), out_ + (hi - begin_), value);
}

}  // namespace hoist::runtime
