#include "runtime/config/engine_options.h"

#include <algorithm>

namespace hoist::runtime {

zero::ZeroOptions ZeroOptionsFrom(const Config& config) {
  zero::ZeroOptions options;
  const ZeroConfig& z = config.zero;
  options.stage = z.stage;
  options.compute_type = config.precision();
  options.comm_type = config.communication_data_type;
  options.reduce_bucket_size = z.reduce_bucket_size;
  options.allgather_bucket_size = z.allgather_bucket_size;
  options.overlap_comm = z.overlap_comm;
  options.reduce_scatter = z.reduce_scatter;
  options.stage3_prefetch_bucket_size = z.stage3_prefetch_bucket_size;
  options.stage3_param_persistence_threshold = z.stage3_param_persistence_threshold;
  options.stage3_max_live_parameters = z.stage3_max_live_parameters;
  options.adam = {config.optimizer.beta1,
                  config.optimizer.beta2,
                  config.optimizer.eps,
                  config.optimizer.weight_decay,
                  config.optimizer.type == "AdamW8bit",
                  config.optimizer.min_8bit_size};
  const OffloadOptimizerConfig& offload = z.offload_optimizer;
  options.offload_optimizer.place = offload.device;
  options.offload_optimizer.pin_memory = offload.pin_memory;
  options.offload_optimizer.ratio = offload.ratio;
  options.offload_optimizer.sub_group_size = z.sub_group_size;
  options.offload_optimizer.buffer_count =
      static_cast<int>(std::min<int64_t>(offload.buffer_count, 1 << 20));
  const OffloadParamConfig& param = z.offload_param;
  options.offload_param.place = param.device;
  options.offload_param.pin_memory = param.pin_memory;
  options.offload_param.buffer_count =
      static_cast<int>(std::min<int64_t>(param.buffer_count, 1 << 20));
  options.offload_param.buffer_size = param.buffer_size;
  options.offload_param.max_in_cpu = param.max_in_cpu;
  return options;
}

zero::ZeroOptions FrozenBaseOptions(const zero::ZeroOptions& options) {
  zero::ZeroOptions base = options;
  base.frozen = true;
  base.offload_optimizer = zero::OptimizerOffload{};
  return base;
}

zero::ZeroOptions AdapterOptions(const zero::ZeroOptions& options) {
  zero::ZeroOptions adapters = options;
  adapters.offload_param = zero::ParamOffload{};
  return adapters;
}

}  // namespace hoist::runtime
