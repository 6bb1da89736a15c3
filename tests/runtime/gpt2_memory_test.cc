// GPT-2 on a device that runs out of memory: the activations it cannot allocate and the units its
// ZeRO store cannot serve are errors that name the micro-batch or the unit, the bytes and what to
// change; a pass that meets one stops without aborting.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "comm/thread_communicator.h"
#include "kernels/cpu_backend.h"
#include "runtime/model/gpt2.h"
#include "zero/zero_engine.h"

namespace hoist::runtime {
namespace {

ModelConfig TinyConfig() {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 16;
  m.vocab_size = 40;
  m.seq_len = 8;
  return m;
}

TEST(Gpt2Memory, ActivationsThatDoNotFitNameTheMicroBatchAndWhatShrinksThem) {
  MemoryTracker tracker;
  // Room for the weights and their gradients, not for 64 sequences' activations.
  const int64_t states = 2 * ParamLayout::For(TinyConfig()).total * int64_t{sizeof(float)};
  CpuDevice device(Place::kDevice, &tracker, /*capacity_bytes=*/states + 4096);
  auto model = Gpt2Model::Create(TinyConfig(), 64, 8, &device);
  ASSERT_FALSE(model.ok());
  const std::string& message = model.status().message();
  EXPECT_EQ(model.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(message.find("the activations of a 64 x 8 micro-batch: cannot allocate"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("train_micro_batch_size_per_gpu"), std::string::npos) << message;
  EXPECT_NE(message.find("activation_checkpointing"), std::string::npos) << message;
  EXPECT_EQ(tracker.Snapshot().CurrentTotal(Place::kDevice), 0);  // nothing left behind
}

TEST(Gpt2Memory, AStoreThatRunsOutStopsThePassWithTheError) {
  const ModelConfig config = TinyConfig();
  auto group = comm::ThreadGroup::Create(1, 5.0);
  ASSERT_TRUE(group.ok());
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  kernels::CpuBackend backend(&device);
  zero::ZeroOptions options;
  options.stage = 3;
  options.stage3_param_persistence_threshold = 0;
  auto engine = zero::ZeroEngine::Create(ParamLayout::For(config).Units(), options,
                                         &(*group)->comm(0), &backend);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  auto model = Gpt2Model::Create(config, 2, 8, &device, engine->get());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ASSERT_TRUE(
      (*engine)
          ->Initialize([&](int unit, float* out) { (*model)->InitializeUnit(unit, 1, out); })
          .ok());
  ASSERT_TRUE((*engine)->ZeroGrads().ok());
  // Room for everything the model and the engine hold, but not for one gathered unit.
  device.set_capacity_bytes(tracker.Snapshot().CurrentTotal(Place::kDevice) + 64);
  std::vector<int32_t> tokens(16, 3);
  const StatusOr<float> loss = (*model)->Forward(tokens.data(), tokens.data(), 2, 8, 1.0f);
  ASSERT_FALSE(loss.ok());
  const Status& status = loss.status();
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("gathering parameter unit"), std::string::npos)
      << status.message();
  EXPECT_EQ((*engine)->status().message(), status.message());
  // Abandoned, not aborted: the backward returns the same error and asks nothing of the engine.
  EXPECT_EQ((*model)->Backward().message(), status.message());
  EXPECT_EQ((*engine)->status().message(), status.message());
}

}  // namespace
}  // namespace hoist::runtime
