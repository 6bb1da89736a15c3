// DeepSpeed's batch rule and the size bounds the CPU kernels rely on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/config/config.h"
#include "tests/runtime/config_test_util.h"

namespace hoist::runtime {
namespace {

using ::testing::HasSubstr;
using testing_util::ErrorOf;
using testing_util::kMinimal;
using testing_util::Parse;
using testing_util::ParseOk;

// ---- batch rule ----

struct Batch {
  int64_t tbs, mbs, gas;
};

Batch BatchOf(const std::string& keys, int world_size) {
  Config c = ParseOk("{" + keys + R"(, "data": {"train": "t.bin"}, "train": {"steps": 1}})", {},
                     world_size);
  return {c.train_batch_size, c.train_micro_batch_size_per_gpu, c.gradient_accumulation_steps};
}

void ExpectBatch(const Batch& got, int64_t tbs, int64_t mbs, int64_t gas) {
  EXPECT_EQ(got.tbs, tbs);
  EXPECT_EQ(got.mbs, mbs);
  EXPECT_EQ(got.gas, gas);
}

TEST(ConfigBatch, OnlyMicroMeansOneAccumulationStep) {
  ExpectBatch(BatchOf(R"("train_micro_batch_size_per_gpu": 8)", 1), 8, 8, 1);
  ExpectBatch(BatchOf(R"("train_micro_batch_size_per_gpu": 8)", 4), 32, 8, 1);
}

TEST(ConfigBatch, OnlyTrainBatchSizeSplitsAcrossRanks) {
  ExpectBatch(BatchOf(R"("train_batch_size": 32)", 4), 32, 8, 1);
}

TEST(ConfigBatch, TrainBatchSizeAndMicroDeriveAccumulation) {
  ExpectBatch(BatchOf(R"("train_batch_size": 64, "train_micro_batch_size_per_gpu": 4)", 4), 64, 4,
              4);
}

TEST(ConfigBatch, TrainBatchSizeAndAccumulationDeriveMicro) {
  ExpectBatch(BatchOf(R"("train_batch_size": 64, "gradient_accumulation_steps": 2)", 4), 64, 8, 2);
}

TEST(ConfigBatch, MicroAndAccumulationDeriveTrainBatchSize) {
  ExpectBatch(
      BatchOf(R"("train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 3)", 4), 48, 4,
      3);
}

TEST(ConfigBatch, ConsistentTripleIsAccepted) {
  ExpectBatch(BatchOf(R"("train_batch_size": 48, "train_micro_batch_size_per_gpu": 4,
                         "gradient_accumulation_steps": 3)",
                      4),
              48, 4, 3);
}

TEST(ConfigBatch, InconsistentTriplePrintsTheNumbersAndWorldSize) {
  Status s = ErrorOf(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 8,
                         "gradient_accumulation_steps": 1, "train": {"steps": 1}})",
                     {}, 2);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("32 != 8 x 1 x 2"), HasSubstr("world size 2")));
}

TEST(ConfigBatch, NonDivisibleDerivationIsAnError) {
  Status s = ErrorOf(R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 8,
                         "train": {"steps": 1}})",
                     {}, 2);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("not divisible"), HasSubstr("train_batch_size 30"),
                    HasSubstr("train_micro_batch_size_per_gpu 8"),
                    HasSubstr("gradient_accumulation_steps unset"), HasSubstr("world size 2")));
}

TEST(ConfigBatch, TrainBatchSizeSmallerThanWorldIsAnError) {
  Status s = ErrorOf(R"({"train_batch_size": 2, "train": {"steps": 1}})", {}, 4);
  EXPECT_THAT(s.message(), HasSubstr("not divisible"));
}

TEST(ConfigBatch, NeitherTrainBatchSizeNorMicroIsAnError) {
  Status s = ErrorOf(R"({"gradient_accumulation_steps": 2, "train": {"steps": 1}})");
  EXPECT_THAT(s.message(), HasSubstr("either train_batch_size or train_micro_batch_size_per_gpu"));
}

TEST(ConfigBatch, NonPositiveBatchValueIsAnError) {
  Status s = ErrorOf(R"({"train_micro_batch_size_per_gpu": 0, "train": {"steps": 1}})");
  EXPECT_THAT(s.message(), HasSubstr("train_micro_batch_size_per_gpu: must be > 0"));
}

// ---- sizes the int-indexed CPU kernels can hold ----

// A one-layer model whose tensors are all small except the ones a test enlarges.
StatusOr<Config> TinyModel(const std::vector<std::string>& extra) {
  std::vector<std::string> overrides = {"model.n_layer=1", "model.n_head=1", "model.n_embd=64",
                                        "model.vocab_size=128", "model.seq_len=1"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return Parse(kMinimal, overrides);
}

TEST(ConfigKernelSizes, MlpActivationsStopJustBelowTwoToThe31) {
  // 8388607 x 1 x 4 x 64 = 2^31 - 256.
  StatusOr<Config> result = TinyModel({"train_micro_batch_size_per_gpu=8388607"});
  EXPECT_TRUE(result.ok()) << result.status().ToString();
  result = TinyModel({"train_micro_batch_size_per_gpu=8388608"});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(),
              AllOf(HasSubstr("train_micro_batch_size_per_gpu x model.seq_len x 4 x model.n_embd "
                              "= 8388608 x 1 x 4 x 64 = 2147483648 elements"),
                    HasSubstr("MLP activations"), HasSubstr("must be < 2^31")));
}

TEST(ConfigKernelSizes, LogitsOverTheLimitNameThePaddedVocabulary) {
  // The padded vocabulary (256) times micro x seq_len is 2^31 while the MLP stays at 2^30.
  StatusOr<Config> result =
      TinyModel({"model.vocab_size=129", "model.n_embd=32",
                 "train_micro_batch_size_per_gpu=4194304", "model.seq_len=2"});
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(),
              AllOf(HasSubstr("train_micro_batch_size_per_gpu x model.seq_len x model.vocab_size "
                              "padded to a multiple of 128 = 4194304 x 2 x 256 = 2147483648"),
                    HasSubstr("logits")));
}

TEST(ConfigKernelSizes, AttentionProbabilitiesCountHeadsAndSquaredSeqLen) {
  // 1 x 1 x 32768 x 32768 = 2^30 fits; a second head doubles it to 2^31.
  StatusOr<Config> result =
      TinyModel({"train_micro_batch_size_per_gpu=1", "model.seq_len=32768", "model.n_embd=2"});
  EXPECT_TRUE(result.ok()) << result.status().ToString();
  result = TinyModel({"train_micro_batch_size_per_gpu=1", "model.seq_len=32768", "model.n_embd=2",
                      "model.n_head=2"});
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(),
              AllOf(HasSubstr("train_micro_batch_size_per_gpu x model.n_head x model.seq_len x "
                              "model.seq_len = 1 x 2 x 32768 x 32768 = 2147483648"),
                    HasSubstr("attention probabilities of one layer")));
}

TEST(ConfigKernelSizes, WeightMatricesAreBoundedToo) {
  // 4 x 23170^2 = 2147395600 fits; 4 x 23171^2 = 2147580964 does not.
  StatusOr<Config> result = TinyModel({"model.n_embd=23170", "train_micro_batch_size_per_gpu=1"});
  EXPECT_TRUE(result.ok()) << result.status().ToString();
  result = TinyModel({"model.n_embd=23171", "train_micro_batch_size_per_gpu=1"});
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(),
              AllOf(HasSubstr("4 x model.n_embd x model.n_embd = 4 x 23171 x 23171 = 2147580964"),
                    HasSubstr("MLP weight matrix")));
  result = TinyModel(
      {"model.n_embd=32768", "model.vocab_size=65536", "train_micro_batch_size_per_gpu=1"});
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(),
              HasSubstr("model.vocab_size padded to a multiple of 128 x model.n_embd = 65536 x "
                        "32768 = 2147483648"));
}

TEST(ConfigKernelSizes, ProductBeyondInt64IsRefusedNotWrapped) {
  Status s = ErrorOf(kMinimal, {"train_micro_batch_size_per_gpu=4611686018427387904"});
  EXPECT_THAT(s.message(), AllOf(HasSubstr("4611686018427387904 x 1024 x 4 x 768 = 2^63 or more"),
                                 HasSubstr("must be < 2^31")));
}

TEST(ConfigKernelSizes, Gpt2SmallFitsUpToFortyOneSequencesPerMicroBatch) {
  // The logits bound: 41 x 1024 x 50304 < 2^31 <= 42 x 1024 x 50304.
  ParseOk(kMinimal, {"train_micro_batch_size_per_gpu=41"});
  EXPECT_THAT(ErrorOf(kMinimal, {"train_micro_batch_size_per_gpu=42"}).message(),
              HasSubstr("(the logits)"));
}

}  // namespace
}  // namespace hoist::runtime
