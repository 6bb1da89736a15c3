// Helpers shared by the config tests (parse a job text and get its Config or its error) and by
// the trainer tests (a tiny job to train on one or more ranks).
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/logging.h"
#include "runtime/config/config.h"

namespace hoist::runtime::testing_util {

// The smallest valid job that draws no notice: one batch key, the training data, a step count,
// and the optimizer and clipping whose defaults would each be noticed.
inline constexpr char kMinimal[] =
    R"({"train_micro_batch_size_per_gpu": 4, "data": {"train": "t.bin"},
        "train": {"steps": 10}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "gradient_clipping": 1.0})";

inline StatusOr<Config> Parse(std::string_view text, const std::vector<std::string>& overrides = {},
                              int world_size = 1) {
  return ParseConfig(text, overrides, world_size, "job.json");
}

// The error of a parse that must fail; fails the test if it succeeded.
inline Status ErrorOf(std::string_view text, const std::vector<std::string>& overrides = {},
                      int world_size = 1) {
  StatusOr<Config> config = Parse(text, overrides, world_size);
  EXPECT_FALSE(config.ok()) << "parsed: " << text;
  return config.ok() ? Status::Ok() : config.status();
}

inline Config ParseOk(std::string_view text, const std::vector<std::string>& overrides = {},
                      int world_size = 1) {
  StatusOr<Config> config = Parse(text, overrides, world_size);
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  return config.ok() ? std::move(config).value() : Config{};
}

// A value the config must refuse: the overrides applied to kMinimal, the error code, and a
// substring of the message (the key path and the rule).
struct BadValue {
  const char* name;
  std::vector<std::string> overrides;
  StatusCode code;
  const char* expected;
};

inline constexpr StatusCode kInvalid = StatusCode::kInvalidArgument;
inline constexpr StatusCode kUnimplemented = StatusCode::kUnimplemented;

inline void ExpectRefused(const BadValue& bad) {
  Status s = ErrorOf(kMinimal, bad.overrides);
  EXPECT_EQ(s.code(), bad.code) << s.ToString();
  EXPECT_THAT(s.message(), ::testing::HasSubstr(bad.expected));
}

inline std::string BadValueName(const ::testing::TestParamInfo<BadValue>& info) {
  return info.param.name;
}

// The demo job shrunk for trainer tests: a 2-layer, 32-channel GPT on sequences of 16, a global
// batch of 8 sequences for every world size (micro-batches of 2, accumulated 8 / (2 N) times on
// each of N ranks), `steps` steps with the schedule over them, and no evaluation, log, progress
// lines or checkpoints; `extra` overrides come last.
inline Config TinyJob(int world, int64_t steps, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> overrides = {"model.n_layer=2",
                                        "model.n_head=2",
                                        "model.n_embd=32",
                                        "model.seq_len=16",
                                        "train_batch_size=8",
                                        "train_micro_batch_size_per_gpu=2",
                                        "gradient_accumulation_steps=null",
                                        "train.steps=" + std::to_string(steps),
                                        "train.eval_interval=0",
                                        "data.val=\"\"",
                                        "scheduler.params.total_num_steps=" + std::to_string(steps),
                                        "scheduler.params.warmup_num_steps=4",
                                        "monitor.jsonl.path=\"\"",
                                        "steps_per_print=0",
                                        "checkpoint.dir=\"\"",
                                        "checkpoint.interval_steps=0",
                                        "comm.timeout_s=60"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  StatusOr<Config> config = LoadConfig("", overrides, world);
  HOIST_CHECK(config.ok()) << config.status().ToString();
  return *config;
}

}  // namespace hoist::runtime::testing_util
