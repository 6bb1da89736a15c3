// The bounds on model dimensions (runtime/model/model_limits.h), where a job config and a Hugging
// Face config.json are read: a dimension beyond one is refused naming the key and the bound, before
// it sizes a loop or an allocation (3,000,000 layers used to abort `hoist estimate` on a failed
// StatusOr's value(), and 2^31 - 1 to end in std::bad_alloc).
#include "runtime/model/model_limits.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "runtime/interchange/hf_config.h"
#include "runtime/memory/memory_estimate.h"
#include "tests/runtime/config_test_util.h"

namespace hoist::runtime {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing_util::ErrorOf;
using testing_util::kMinimal;
using testing_util::ParseOk;

TEST(ModelLimits, JobDimensionsBeyondTheirBoundAreRefusedNamingKeyAndBound) {
  for (const char* layers : {"3000000", "100000", "2147483647"}) {
    const Status s = ErrorOf(kMinimal, {std::string("model.n_layer=") + layers});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), AllOf(HasSubstr("model.n_layer: must be <= 4096"),
                                   HasSubstr(std::string("found ") + layers)));
  }
  EXPECT_THAT(ErrorOf(kMinimal, {"model.num_hidden_layers=5000"}).message(),
              HasSubstr("model.num_hidden_layers: must be <= 4096"));
  EXPECT_THAT(ErrorOf(kMinimal, {"model.n_embd=1048576", "model.n_head=1"}).message(),
              HasSubstr("model.n_embd: must be <= 2^17"));
  EXPECT_THAT(ErrorOf(kMinimal, {"model.n_positions=33554432"}).message(),
              HasSubstr("model.n_positions: must be <= 2^24"));
}

TEST(ModelLimits, TheBoundItselfIsAcceptedAndEstimated) {
  const Config config =
      ParseOk(kMinimal, {"model.n_layer=4096", "model.n_embd=8", "model.n_head=1"});
  EXPECT_EQ(config.model.n_layer, kMaxModelLayers);
  StatusOr<MemoryEstimate> estimate = EstimateMemory(config, 1, DeviceKind::kCpu);
  EXPECT_TRUE(estimate.ok()) << estimate.status().ToString();
}

nlohmann::json Gpt2Config() {
  return {{"model_type", "gpt2"}, {"n_layer", 2},     {"n_head", 2},
          {"n_embd", 8},          {"vocab_size", 64}, {"n_positions", 16}};
}

TEST(ModelLimits, HuggingFaceDimensionsSayWhatIsWrongWithThem) {
  ASSERT_TRUE(ModelConfigFromHf(Gpt2Config(), "m/config.json").ok());
  const struct {
    nlohmann::json n_layer;
    const char* expected;
  } cases[] = {
      {3000000, "m/config.json: n_layer is 3000000, more than 4096"},
      {2147483647, "n_layer is 2147483647, more than 4096"},
      {18446744073709551615ull, "n_layer is 18446744073709551615, more than 4096"},
      // A number that is no integer used to be reported as "missing".
      {1e9, "n_layer is 1000000000.0, not an integer"},
      {0, "n_layer is 0; it must be a positive integer"},
      {"12", "n_layer is \"12\", not an integer"},
      {nullptr, "n_layer is missing"},
  };
  for (const auto& c : cases) {
    nlohmann::json config = Gpt2Config();
    config["n_layer"] = c.n_layer;
    StatusOr<ModelConfig> read = ModelConfigFromHf(config, "m/config.json");
    ASSERT_FALSE(read.ok()) << c.n_layer.dump();
    EXPECT_EQ(read.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(read.status().message(), HasSubstr(c.expected));
    if (!c.n_layer.is_null()) {
      EXPECT_THAT(read.status().message(), Not(HasSubstr("missing")));
    }
  }
  nlohmann::json llama = {{"model_type", "llama"},        {"hidden_size", 8},
                          {"intermediate_size", 1 << 21}, {"num_hidden_layers", 1},
                          {"num_attention_heads", 2},     {"vocab_size", 64},
                          {"max_position_embeddings", 16}};
  EXPECT_THAT(ModelConfigFromHf(llama, "l/config.json").status().message(),
              HasSubstr("intermediate_size is 2097152, more than 2^20"));
}

}  // namespace
}  // namespace hoist::runtime
