// The number of threads the CPU kernels use: OpenMP's team size and OpenBLAS's. Call it from the
// main thread before training; not thread-safe.
#pragma once

namespace hoist::kernels::cpu {

void SetCpuThreads(int threads);

}  // namespace hoist::kernels::cpu
