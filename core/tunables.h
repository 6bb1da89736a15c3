// The tunables of the ZeRO engine and of offload, declared once: each one's config key (with the
// other spelling DeepSpeed takes), its default (DeepSpeed's), the least value it accepts and
// what it counts. The config's structs (runtime/config/config.h), the engine's and offload's
// options (zero/zero_engine.h, zero/param_shards.h, offload/state_swapper.h) take their defaults
// from here, the config reader its keys, ranges and messages, and a test holds the README's table
// of them to this one.
#pragma once

#include <cstdint>

namespace hoist {

struct Tunable {
  const char* section;  // where the key sits in the config: "zero_optimization"
  const char* key;      // "reduce_bucket_size"
  const char* alias;    // DeepSpeed's other spelling of it, or nullptr
  int64_t default_value;
  int64_t min;       // the least value accepted; the most is kMaxTunable
  bool elements;     // a count of elements (else of buffers)
  const char* what;  // what it counts, for messages and the README
};

// The most any tunable takes: far beyond any machine, and small enough that a byte count of it
// (elements x 16) stays far from int64 overflow.
inline constexpr int64_t kMaxTunable = int64_t{1} << 48;

namespace tunables {

inline constexpr Tunable kReduceBucketSize{"zero_optimization",
                                           "reduce_bucket_size",
                                           nullptr,
                                           500000000,
                                           1,
                                           true,
                                           "gradients reduced in one collective"};
inline constexpr Tunable kAllgatherBucketSize{"zero_optimization",
                                              "allgather_bucket_size",
                                              nullptr,
                                              500000000,
                                              1,
                                              true,
                                              "parameters gathered in one collective (stages 1-2)"};
inline constexpr Tunable kPrefetchBucketSize{
    "zero_optimization",
    "stage3_prefetch_bucket_size",
    "prefetch_bucket_size",
    50000000,
    0,
    true,
    "stage-3 parameters gathered ahead of use (0: no prefetch)"};
inline constexpr Tunable kParamPersistenceThreshold{
    "zero_optimization",
    "stage3_param_persistence_threshold",
    "param_persistence_threshold",
    100000,
    0,
    true,
    "the size below which a stage-3 unit stays whole on every rank"};
inline constexpr Tunable kMaxLiveParameters{"zero_optimization",
                                            "stage3_max_live_parameters",
                                            "max_live_parameters",
                                            1000000000,
                                            0,
                                            true,
                                            "gathered stage-3 parameters alive at once"};
inline constexpr Tunable kSubGroupSize{
    "zero_optimization",
    "sub_group_size",
    nullptr,
    1000000000,
    1,
    true,
    "the optimizer shard's part updated (and streamed from NVMe) at a time"};
inline constexpr Tunable kOptimizerBufferCount{
    "zero_optimization.offload_optimizer",
    "buffer_count",
    nullptr,
    4,
    1,
    false,
    "sub-groups of optimizer states held in host memory (NVMe; 3 and more overlap reads, "
    "updates and writes)"};
inline constexpr Tunable kParamBufferCount{"zero_optimization.offload_param",
                                           "buffer_count",
                                           nullptr,
                                           5,
                                           1,
                                           false,
                                           "parameter shards in flight from NVMe at once"};
inline constexpr Tunable kParamBufferSize{
    "zero_optimization.offload_param",           "buffer_size", nullptr, 100000000, 1, true,
    "the largest parameter shard a buffer holds"};
inline constexpr Tunable kParamMaxInCpu{"zero_optimization.offload_param",
                                        "max_in_cpu",
                                        nullptr,
                                        1000000000,
                                        0,
                                        true,
                                        "parameter shards kept in host memory under NVMe offload"};

inline constexpr const Tunable* kAll[] = {
    &kReduceBucketSize,  &kAllgatherBucketSize, &kPrefetchBucketSize,   &kParamPersistenceThreshold,
    &kMaxLiveParameters, &kSubGroupSize,        &kOptimizerBufferCount, &kParamBufferCount,
    &kParamBufferSize,   &kParamMaxInCpu};

}  // namespace tunables
}  // namespace hoist
