// ParallelFor: an OpenMP loop that costs nothing when it runs on one thread.
//
// libgomp allocates and frees a thread team for every parallel region it enters, even one that
// its `if` clause runs on one thread. Ops called per small tensor, or per 64-weight block (the
// 4-bit base's dequantization casts a 16-value table per block), paid more for that than for
// their work: on llama-3.2-1b the 4-bit base's step fell from 11.7 s to 2.2 s once they stopped
// (bench/LORA_NOTES.md). So the serial case enters no OpenMP construct at all. Host code; needs
// the OpenMP flags of the kernels library.
#pragma once

#include <cstdint>

namespace hoist::kernels::cpu {

// body(i) for each i in [0, n): split statically over the OpenMP team when `parallel`, else in
// order on the calling thread.
template <typename Body>
void ParallelFor(int64_t n, bool parallel, Body&& body) {
  if (!parallel) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) body(i);
}

}  // namespace hoist::kernels::cpu
