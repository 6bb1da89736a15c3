#include "kernels/cpu/cpu_threads.h"

#include <cblas.h>
#include <omp.h>

namespace hoist::kernels::cpu {

void SetCpuThreads(int threads) {
  omp_set_num_threads(threads);
#if defined(OPENBLAS_VERSION)
  // OpenBLAS built with pthreads keeps a count of its own.
  openblas_set_num_threads(threads);
#endif
}

}  // namespace hoist::kernels::cpu
