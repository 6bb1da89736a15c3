// The CUDA backend's facts (kernels/device_facts.h), from the arithmetic its kernels size their
// buffers with (kernels/cuda/workspace.h). Plain C++ without the CUDA toolkit, built into every
// hoist: `hoist estimate --device cuda` and `hoist plan --device cuda` answer on a machine with
// neither a GPU nor nvcc. Training on the GPU is the CUDA library's (runtime/cuda/).
#include <utility>

#include "kernels/cuda/workspace.h"
#include "kernels/device_facts.h"

namespace hoist::kernels {
namespace {

[[maybe_unused]] const bool kRegistered = [] {
  DeviceFacts facts;
  facts.name = "cuda";
  facts.kind = DeviceKind::kCuda;
  facts.computes_in_host_memory = false;
  // Its kernels read the kept block inputs in host memory over the bus: only pages the driver
  // pinned are theirs to reach.
  facts.host_pinning_driver = "the CUDA driver";
  facts.backend_workspace_bytes = cuda::BackendWorkspaceBytes();
  facts.attention_workspace_bytes = cuda::AttentionWorkspaceBytes;
  facts.tiled_attention_workspace_bytes = cuda::TiledAttentionBackwardWorkspaceBytes;
  facts.gqa_attention_workspace_bytes = cuda::GqaAttentionWorkspaceBytes;
  facts.gqa_tiled_attention_workspace_bytes = cuda::TiledAttentionBackwardWorkspaceBytes;
  facts.untracked_memory =
      "device: the GPU's memory as the caching allocator is asked for it; outside this, on the "
      "GPU: the CUDA context, cuBLASLt's 32 MiB workspace, NCCL's buffers, and the allocator's "
      "rounding and cache; on the host: untracked memory such as code";
  facts.build_requirement =
      "this build of hoist has no CUDA (configured without nvcc, or with HOIST_WITH_CUDA=OFF); "
      "rebuild where the CUDA toolkit is installed";
  RegisterDeviceFacts(std::move(facts));
  return true;
}();

}  // namespace
}  // namespace hoist::kernels
