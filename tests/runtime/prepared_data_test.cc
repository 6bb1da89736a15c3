// Training on prepared shards: the loader turns each token's loss mask and each document's start
// into targets off the loss (-1), and the trainer's loss is the mean over the counted targets of
// the whole global batch, whatever its split into ranks and micro-batches (the same examples in
// one micro-batch of 2 sequences, two micro-batches of 1, or two ranks of 1 give the same loss
// and weights), and the same as on token shards when nothing is masked.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <numeric>
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
  auto loader = DataLoader::Open(path, Split::kTrain, 1, 4, 0, 1, 50257, &MemoryTracker::Global(),
                                 1, DataOrder{false, 0});
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  EXPECT_TRUE((*loader)->masked());
  EXPECT_FALSE((*loader)->shuffled());
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

// Documents d = 0..n-1 of 3 to 7 tokens, every token of document d the value d + 1, all counted.
std::vector<std::pair<std::vector<uint32_t>, std::vector<uint8_t>>> Numbered(int count) {
  std::vector<std::pair<std::vector<uint32_t>, std::vector<uint8_t>>> documents;
  for (int d = 0; d < count; ++d) {
    const size_t n = 3 + static_cast<size_t>(d * 7 % 5);
    documents.emplace_back(std::vector<uint32_t>(n, static_cast<uint32_t>(d + 1)),
                           std::vector<uint8_t>(n, 1));
  }
  return documents;
}

struct Window {
  std::vector<int32_t> inputs, targets;
  bool operator==(const Window&) const = default;
};

Window Take(DataLoader& loader) {
  Window w{std::vector<int32_t>(static_cast<size_t>(loader.B()) * loader.T()),
           std::vector<int32_t>(static_cast<size_t>(loader.B()) * loader.T())};
  const Status status = loader.Next(w.inputs.data(), w.targets.data());
  EXPECT_TRUE(status.ok()) << status.ToString();
  return w;
}

std::unique_ptr<DataLoader> OpenShuffled(const std::string& source, int B, int T, int rank,
                                         int world, uint64_t seed) {
  auto loader = DataLoader::Open(source, Split::kTrain, B, T, rank, world, 50257,
                                 &MemoryTracker::Global(), 1, DataOrder{std::nullopt, seed});
  EXPECT_TRUE(loader.ok()) << loader.status().ToString();
  return loader.ok() ? std::move(loader).value() : nullptr;
}

TEST_F(PreparedDataTest, ShuffledDocumentsComeWholeOnceAnEpochInANewOrderEachEpoch) {
  // Two shards, their documents drawn together.
  const auto documents = Numbered(40);
  WritePrepared(PathOf("a.prepared"), {documents.begin(), documents.begin() + 25});
  WritePrepared(PathOf("b.prepared"), {documents.begin() + 25, documents.end()});
  std::unique_ptr<DataLoader> loader = OpenShuffled(dir_ + "/*.prepared", 1, 8, 0, 1, 5);
  ASSERT_NE(loader, nullptr);
  EXPECT_TRUE(loader->shuffled());
  int64_t tokens = 0;
  for (const auto& d : documents) tokens += static_cast<int64_t>(d.first.size());
  EXPECT_EQ(loader->steps_per_epoch(), (tokens - 1) / 8);
  std::vector<std::vector<int32_t>> orders;  // the documents of each epoch, in the order read
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<int32_t> stream;
    std::vector<int32_t> targets;
    while (loader->state().epoch == epoch) {
      Window w = Take(*loader);
      stream.insert(stream.end(), w.inputs.begin(), w.inputs.end());
      targets.insert(targets.end(), w.targets.begin(), w.targets.end());
    }
    EXPECT_EQ(static_cast<int64_t>(stream.size()), loader->steps_per_epoch() * 8);
    // Runs of one value: each a whole document (the last perhaps cut by the epoch's end), each
    // document once; the target is -1 exactly where the next token starts another document.
    std::vector<int32_t> order;
    std::vector<bool> seen(documents.size() + 1, false);
    for (size_t i = 0; i < stream.size();) {
      size_t j = i;
      while (j < stream.size() && stream[j] == stream[i]) ++j;
      const int32_t d = stream[i];
      ASSERT_FALSE(seen[static_cast<size_t>(d)]) << "document " << d << " twice in epoch " << epoch;
      seen[static_cast<size_t>(d)] = true;
      if (j < stream.size()) {
        EXPECT_EQ(j - i, documents[static_cast<size_t>(d - 1)].first.size()) << "document " << d;
        EXPECT_EQ(targets[j - 1], -1) << "before document " << stream[j];
      }
      for (size_t k = i; k + 1 < j; ++k) EXPECT_EQ(targets[k], d);
      order.push_back(d);
      i = j;
    }
    EXPECT_GT(order.size(), documents.size() - 3);
    orders.push_back(order);
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
  std::vector<int32_t> file_order(orders[0].size());
  std::iota(file_order.begin(), file_order.end(), 1);
  EXPECT_NE(orders[0], file_order);
}

// Each global batch reads the same documents on any number of ranks, and a loader restored from
// a state continues the sequence, across epochs; another seed draws another order.
TEST_F(PreparedDataTest, ShuffledBatchesAreTheSameOnAnySplitAndAfterARestore) {
  WritePrepared(PathOf("c.prepared"), Numbered(30));
  const std::string source = PathOf("c.prepared");
  std::unique_ptr<DataLoader> wide = OpenShuffled(source, 2, 4, 0, 1, 9);
  std::unique_ptr<DataLoader> rank0 = OpenShuffled(source, 1, 4, 0, 2, 9);
  std::unique_ptr<DataLoader> rank1 = OpenShuffled(source, 1, 4, 1, 2, 9);
  ASSERT_TRUE(wide && rank0 && rank1);
  std::vector<Window> straight;
  LoaderState saved;
  for (int step = 0; step < 40; ++step) {
    if (step == 13) saved = wide->state();
    Window w = Take(*wide);
    Window a = Take(*rank0), b = Take(*rank1);
    a.inputs.insert(a.inputs.end(), b.inputs.begin(), b.inputs.end());
    a.targets.insert(a.targets.end(), b.targets.begin(), b.targets.end());
    EXPECT_EQ(a, w) << "step " << step;
    straight.push_back(w);
  }
  EXPECT_GE(wide->state().epoch, 2);  // the steps crossed epochs
  std::unique_ptr<DataLoader> resumed = OpenShuffled(source, 2, 4, 0, 1, 9);
  ASSERT_TRUE(resumed->Restore(saved).ok());
  for (int step = 13; step < 40; ++step) EXPECT_EQ(Take(*resumed), straight[step]) << step;
  std::unique_ptr<DataLoader> other = OpenShuffled(source, 2, 4, 0, 1, 10);
  EXPECT_NE(Take(*other), straight[0]);
  // A state that is no place in the stream.
  Status bad = resumed->Restore(LoaderState{1, 0, 0});
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("shuffled documents"));
}

TEST_F(PreparedDataTest, ShufflingTokenShardsIsRefused) {
  const std::string plain = PathOf("plain.bin");
  ASSERT_TRUE(WriteTokenShard(plain, std::vector<uint16_t>(40, 5)).ok());
  Status status = DataLoader::Open(plain, Split::kTrain, 1, 4, 0, 1, 50257,
                                   &MemoryTracker::Global(), 1, DataOrder{true, 0})
                      .status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("data.shuffle"));
  auto unshuffled = DataLoader::Open(plain, Split::kTrain, 1, 4, 0, 1, 50257);
  ASSERT_TRUE(unshuffled.ok());
  EXPECT_FALSE((*unshuffled)->shuffled());
}

// A job resumed mid-epoch from a checkpoint continues the straight run's losses exactly, past
// the epochs' ends: about 6 steps an epoch here, so the checkpoint is in the second.
TEST_F(PreparedDataTest, AResumeMidEpochContinuesTheExactLosses) {
  const std::string path = PathOf("chat.prepared");
  WritePrepared(path, Conversations(16));
  const std::string ck = PathOf("ck");
  const std::vector<std::string> job = {"data.train=\"" + path + "\"", "train_batch_size=2",
                                        "checkpoint.dir=\"" + ck + "\"",
                                        "checkpoint.interval_steps=8"};
  // The checkpoint's step is past the first epoch's end.
  auto loader = DataLoader::Open(path, Split::kTrain, 2, 16, 0, 1, 50257);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  ASSERT_LT((*loader)->steps_per_epoch(), 8);
  const auto straight = testing_util::TrainOnRanks(testing_util::TinyJob(1, 16, job), 1);
  ASSERT_TRUE(straight[0].status.ok()) << straight[0].status.ToString();
  ASSERT_EQ(straight[0].losses.size(), 16u);
  TrainerOptions resume;
  resume.resume_from = ck + "/step_00000008";
  const auto resumed = testing_util::TrainOnRanks(testing_util::TinyJob(1, 16, job), 1, resume);
  ASSERT_TRUE(resumed[0].status.ok()) << resumed[0].status.ToString();
  ASSERT_EQ(resumed[0].losses.size(), 8u);
  for (size_t s = 0; s < 8; ++s) {
    EXPECT_EQ(resumed[0].losses[s], straight[0].losses[8 + s]) << "step " << 9 + s;
  }
  EXPECT_EQ(resumed[0].params, straight[0].params);
  // A position among shuffled documents is none in the documents read in order.
  std::vector<std::string> in_order = job;
  in_order.push_back("data.shuffle=false");
  const auto refused =
      testing_util::TrainOnRanks(testing_util::TinyJob(1, 16, in_order), 1, resume);
  EXPECT_EQ(refused[0].status.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused[0].status.message(), HasSubstr("data.shuffle true"));
}

// train.epochs: the job runs whole passes over the data, as many steps as they hold.
TEST_F(PreparedDataTest, TrainEpochsRunsWholePassesOverTheData) {
  const std::string path = PathOf("chat.prepared");
  WritePrepared(path, Conversations(16));
  auto loader = DataLoader::Open(path, Split::kTrain, 2, 16, 0, 1, 50257);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  const int64_t per_epoch = (*loader)->steps_per_epoch();
  ASSERT_GT(per_epoch, 1);
  const auto run = testing_util::TrainOnRanks(
      testing_util::TinyJob(
          1, 40,
          {"data.train=\"" + path + "\"", "train_batch_size=2", "train.steps=0", "train.epochs=3"}),
      1);
  ASSERT_TRUE(run[0].status.ok()) << run[0].status.ToString();
  EXPECT_EQ(static_cast<int64_t>(run[0].losses.size()), 3 * per_epoch);
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
