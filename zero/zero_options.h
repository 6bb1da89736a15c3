// The options of a ZeroEngine: the stage, the precision, the ZeRO tunables, AdamW's
// hyperparameters and where the optimizer states and the parameters live. Plain data; the
// refusals for a bad combination are ValidateZeroOptions's (zero/zero_engine.h).
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/placement.h"
#include "core/tunables.h"
#include "offload/block_storage.h"
#include "zero/param_shards.h"

namespace hoist::zero {

struct AdamWParams {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  // bitsandbytes' AdamW8bit: m and v of this rank's shard as block-wise 8-bit codes with fp32
  // absmaxes (zero/moments_8bit.h), the update computed in fp32 from the dequantized values.
  // Units smaller than min_8bit_size elements keep fp32 moments.
  bool eight_bit = false;
  int64_t min_8bit_size = 4096;
};

// Where the optimizer states (fp32 master weights and the two moments) of this rank's shard live.
struct OptimizerOffload {
  Placement place = Placement::kDevice;
  // Host buffers page-locked (kHostPinned in the tracker); false: pageable (kHost). The NVMe
  // swapper's buffers are always page-aligned and counted as kHostPinned.
  bool pin_memory = true;
  std::string nvme_file;  // kNvme: this rank's scratch file, created here and removed at the end
  int64_t sub_group_size = tunables::kSubGroupSize.default_value;
  int buffer_count = static_cast<int>(tunables::kOptimizerBufferCount.default_value);  // kNvme
  offload::StorageFactory open_storage;  // kNvme; empty: OpenBlockStorage with its defaults
  // kHost: the share of the owned shard whose optimizer states (and update) are offloaded, in
  // (0, 1] (DeepSpeed's offload_optimizer.ratio). Below 1 the shard splits at a unit boundary
  // (DeviceStateElements in zero/memory_estimate.h): the leading units keep their states on the
  // device and are updated there as without offload, the rest are offloaded as with ratio 1; on
  // an accelerator the device part's update runs while the host part's gradients come down.
  // Stages 1-3 (DeepSpeed: 3 only); not with NVMe. With AdamW8bit the 8-bit arrays split the
  // same way (parts8_).
  double ratio = 1.0;
};

struct ZeroOptions {
  int stage = 0;  // 0..3
  DType compute_type = DType::kFloat32;
  DType comm_type = DType::kFloat32;
  // The tunables (core/tunables.h says what each counts), in elements.
  int64_t reduce_bucket_size = tunables::kReduceBucketSize.default_value;
  int64_t allgather_bucket_size = tunables::kAllgatherBucketSize.default_value;
  bool overlap_comm = false;
  bool reduce_scatter = true;
  int64_t stage3_prefetch_bucket_size = tunables::kPrefetchBucketSize.default_value;
  int64_t stage3_param_persistence_threshold = tunables::kParamPersistenceThreshold.default_value;
  int64_t stage3_max_live_parameters = tunables::kMaxLiveParameters.default_value;
  AdamWParams adam;
  OptimizerOffload offload_optimizer;
  ParamOffload offload_param;  // stage 3 only
  // Frozen weights (a LoRA fine-tune's base): the engine keeps the compute-type copy alone,
  // partitioned and gathered as the stage says, and no gradients, master weights or optimizer
  // states; it serves AcquireParams and refuses AcquireGrads, ZeroGrads, Step and the state
  // calls. The optimizer options are then unused (offload_optimizer must stay on the device).
  bool frozen = false;
};

}  // namespace hoist::zero
