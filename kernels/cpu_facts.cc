// The CPU backend's facts (kernels/device_facts.h): it computes in the host's memory, its ops
// take no workspace beyond their arrays, and its tracker sees everything hoist allocates.
#include <utility>

#include "kernels/device_facts.h"

namespace hoist::kernels {
namespace {

[[maybe_unused]] const bool kRegistered = [] {
  DeviceFacts facts;
  facts.name = "cpu";
  facts.kind = DeviceKind::kCpu;
  facts.computes_in_host_memory = true;
  // As CpuBackend's methods: its attention works in its arrays.
  facts.attention_workspace_bytes = [](int, int, int, int, DType) { return int64_t{0}; };
  facts.tiled_attention_workspace_bytes = [](int, int, int) { return int64_t{0}; };
  facts.gqa_attention_workspace_bytes = [](int, int, int, int, int, DType) { return int64_t{0}; };
  facts.gqa_tiled_attention_workspace_bytes = [](int, int, int) { return int64_t{0}; };
  facts.untracked_memory =
      "tracked memory; the process also holds untracked memory such as the BLAS library's "
      "buffers and code";
  RegisterDeviceFacts(std::move(facts));
  return true;
}();

}  // namespace
}  // namespace hoist::kernels
