// Training on prepared shards: the loader turns each token's loss mask and each document's start
// into targets off the loss (-1), and the trainer's loss is the mean over the counted targets of
// the whole global batch, whatever its split into ranks and micro-batches (the same examples in
// one micro-batch of 2 sequences, two micro-batches of 1, or two ranks of 1 give the same loss
// and weights), and the same as on token shards when nothing is masked.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/data/data_loader.h"
#include "runtime/data/prepared_shard.h"
#include "runtime/data/token_shard.h"
#include "tests/runtime/config_test_util.h"
#include "tests/runtime/trainer_test_util.h"

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class PreparedDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "hoist_prepared_data_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string PathOf(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  // Writes documents (tokens, mask) as a prepared shard.
  static void WritePrepared(
      const std::string& path,
      const std::vector<std::pair<std::vector<uint32_t>, std::vector<uint8_t>>>& documents) {
    auto writer = PreparedShardWriter::Create(path, 2);
    ASSERT_TRUE(writer.ok()) << writer.status().ToString();
    for (const auto& [tokens, mask] : documents) ASSERT_TRUE(writer->Append(tokens, mask).ok());
    ASSERT_TRUE(writer->Finish().ok());
  }

  // Chat-like documents: a prompt of 3 to 9 tokens off the loss, an answer of 2 to 12 on it.
  static std::vector<std::pair<std::vector<uint32_t>, std::vector<uint8_t>>> Conversations(
      int count) {
    std::vector<std::pair<std::vector<uint32_t>, std::vector<uint8_t>>> documents;
    uint32_t x = 12345;
    auto next = [&] {
      x = x * 1103515245u + 12345u;
      return (x >> 16) & 0x7fff;
    };
    for (int d = 0; d < count; ++d) {
      const int prompt = 3 + static_cast<int>(next() % 7),
                answer = 2 + static_cast<int>(next() % 11);
      std::vector<uint32_t> tokens;
      std::vector<uint8_t> mask;
      for (int i = 0; i < prompt + answer; ++i) {
        tokens.push_back(next() % 250);
        mask.push_back(i >= prompt ? 1 : 0);
      }
      documents.emplace_back(std::move(tokens), std::move(mask));
    }
    return documents;
  }

  std::string dir_;
};

TEST_F(PreparedDataTest, TargetsAreOffTheLossWhereMaskedAndAtEachDocumentsStart) {
  const std::string path = PathOf("train.prepared");
  // Tokens 1 2 3 4 | 7 | 9 8 7 6 5, masks 0 0 1 1 | 1 | 0 1 1 0 1.
  WritePrepared(path,
                {{{1, 2, 3, 4}, {0, 0, 1, 1}}, {{7}, {1}}, {{9, 8, 7, 6, 5}, {0, 1, 1, 0, 1}}});
  auto loader = DataLoader::Open(path, Split::kTrain, 1, 4, 0, 1, 50257);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  EXPECT_TRUE((*loader)->masked());
  std::vector<int32_t> inputs(4), targets(4);
  ASSERT_TRUE((*loader)->Next(inputs.data(), targets.data()).ok());
  EXPECT_THAT(inputs, ElementsAre(1, 2, 3, 4));
  // 2 is masked; 7 starts a document (and would count by its mask).
  EXPECT_THAT(targets, ElementsAre(-1, 3, 4, -1));
  ASSERT_TRUE((*loader)->Next(inputs.data(), targets.data()).ok());
  EXPECT_THAT(inputs, ElementsAre(7, 9, 8, 7));
  // 9 starts a document and is masked; 6 is masked.
  EXPECT_THAT(targets, ElementsAre(-1, 8, 7, -1));
  // Token shards are not masked.
  const std::string plain = PathOf("train.bin");
  ASSERT_TRUE(WriteTokenShard(plain, std::vector<uint16_t>(20, 5)).ok());
  auto unmasked = DataLoader::Open(plain, Split::kTrain, 1, 4, 0, 1, 50257);
  ASSERT_TRUE(unmasked.ok());
  EXPECT_FALSE((*unmasked)->masked());
}

TEST_F(PreparedDataTest, BadSourcesAreRefusedByName) {
  const std::string prepared = PathOf("a.prepared"), plain = PathOf("b.bin");
  WritePrepared(prepared, {{{1, 2, 3, 4, 5, 6}, {0, 0, 1, 1, 1, 1}}});
  ASSERT_TRUE(WriteTokenShard(plain, std::vector<uint16_t>(20, 5)).ok());
  Status status = DataLoader::Open(dir_ + "/*", Split::kTrain, 1, 4, 0, 1, 50257).status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("mixes token shards"));
  EXPECT_THAT(status.message(), HasSubstr(prepared));
  fs::remove(plain);
  // A token past the model's vocabulary, named by the shard's check.
  status = DataLoader::Open(prepared, Split::kTrain, 1, 4, 0, 1, 5).status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("not below the model's vocab_size 5"));
  // Nothing to learn from.
  const std::string silent = PathOf("silent.prepared");
  fs::remove(prepared);
  WritePrepared(silent, {{{1, 2, 3, 4, 5, 6}, {0, 0, 0, 0, 0, 0}}});
  status = DataLoader::Open(silent, Split::kTrain, 1, 4, 0, 1, 50257).status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("no token counts in the loss"));
}

// The same global batches split three ways: one micro-batch of 2 sequences, 2 micro-batches of
// 1, 2 ranks of 1. The loss is the mean over the counted targets of all of them each time (the
// first two on one rank, the third on two), so losses and weights agree to rounding. The two
// sequences of a step hold different numbers of counted targets (answers of 2 to 12 tokens after
// prompts of 3 to 9), so a mean of per-sequence means would not agree.
TEST_F(PreparedDataTest, TheLossIsTheMeanOverTheGlobalBatchWhateverItsSplit) {
  const std::string path = PathOf("chat.prepared");
  WritePrepared(path, Conversations(400));
  const std::string data = "data.train=\"" + path + "\"";
  const std::vector<std::string> common = {data, "train_batch_size=2", "model.seq_len=16"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return extra;
  };
  const auto one_micro = testing_util::TrainOnRanks(
      testing_util::TinyJob(1, 8, with({"train_micro_batch_size_per_gpu=2"})), 1);
  const auto two_micro = testing_util::TrainOnRanks(
      testing_util::TinyJob(1, 8, with({"train_micro_batch_size_per_gpu=1"})), 1);
  const auto two_ranks = testing_util::TrainOnRanks(
      testing_util::TinyJob(2, 8, with({"train_micro_batch_size_per_gpu=1"})), 2);
  ASSERT_TRUE(one_micro[0].status.ok()) << one_micro[0].status.ToString();
  ASSERT_TRUE(two_micro[0].status.ok()) << two_micro[0].status.ToString();
  ASSERT_TRUE(two_ranks[0].status.ok()) << two_ranks[0].status.ToString();
  ASSERT_TRUE(two_ranks[1].status.ok()) << two_ranks[1].status.ToString();
  ASSERT_EQ(one_micro[0].losses.size(), 8u);
  for (size_t s = 0; s < 8; ++s) {
    const float want = one_micro[0].losses[s];
    EXPECT_NEAR(two_micro[0].losses[s], want, 2e-5 * std::abs(want)) << "step " << s;
    EXPECT_NEAR(two_ranks[0].losses[s], want, 2e-5 * std::abs(want)) << "step " << s;
    EXPECT_EQ(two_ranks[1].losses[s], two_ranks[0].losses[s]);
  }
  double worst = 0;
  for (size_t i = 0; i < one_micro[0].params.size(); ++i) {
    worst = std::max(worst, std::abs(double(two_micro[0].params[i]) - one_micro[0].params[i]));
    worst = std::max(worst, std::abs(double(two_ranks[0].params[i]) - one_micro[0].params[i]));
  }
  EXPECT_LT(worst, 1e-5);
}

// Nothing masked: one document spanning the shard, every mask 1. The targets are the token
// shard's, and so is the loss trajectory.
TEST_F(PreparedDataTest, WithNothingMaskedTheLossIsTheTokenShards) {
  std::vector<uint32_t> tokens(3000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>((i * 37 + 11) % 250);
  const std::string prepared = PathOf("all.prepared"), plain = PathOf("all.bin");
  WritePrepared(prepared, {{tokens, std::vector<uint8_t>(tokens.size(), 1)}});
  ASSERT_TRUE(WriteTokenShard(plain, std::vector<uint16_t>(tokens.begin(), tokens.end())).ok());
  const auto a = testing_util::TrainOnRanks(
      testing_util::TinyJob(1, 6, {"data.train=\"" + prepared + "\""}), 1);
  const auto b =
      testing_util::TrainOnRanks(testing_util::TinyJob(1, 6, {"data.train=\"" + plain + "\""}), 1);
  ASSERT_TRUE(a[0].status.ok()) << a[0].status.ToString();
  ASSERT_TRUE(b[0].status.ok()) << b[0].status.ToString();
  for (size_t s = 0; s < 6; ++s) {
    EXPECT_NEAR(a[0].losses[s], b[0].losses[s], 1e-6 * std::abs(b[0].losses[s])) << "step " << s;
  }
}

}  // namespace
}  // namespace hoist::runtime
