#include "runtime/data/data_loader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/memory_tracker.h"
#include "runtime/data/token_shard.h"

extern const unsigned char kDemoCorpus[];
extern const size_t kDemoCorpus_size;

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int kVocab = 65536;

struct Batch {
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
  bool operator==(const Batch&) const = default;
};

Batch Take(DataLoader& loader) {
  Batch batch{std::vector<int32_t>(loader.B() * loader.T()),
              std::vector<int32_t>(loader.B() * loader.T())};
  const Status status = loader.Next(batch.inputs.data(), batch.targets.data());
  EXPECT_TRUE(status.ok()) << status.ToString();
  return batch;
}

std::vector<int32_t> Iota(int32_t first, int count) {
  std::vector<int32_t> values(count);
  for (int i = 0; i < count; ++i) values[i] = first + i;
  return values;
}

class DataLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "hoist_loader_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A shard whose token at index i is first + i, so a batch shows where it was read from.
  std::string WriteCounting(const std::string& name, uint16_t first, int count) {
    std::vector<uint16_t> tokens(count);
    for (int i = 0; i < count; ++i) tokens[i] = static_cast<uint16_t>(first + i);
    const std::string path = (fs::path(dir_) / name).string();
    EXPECT_TRUE(WriteTokenShard(path, tokens).ok());
    return path;
  }

  std::unique_ptr<DataLoader> OpenOrDie(const std::string& source, int B, int T, int rank = 0,
                                        int world = 1) {
    StatusOr<std::unique_ptr<DataLoader>> loader =
        DataLoader::Open(source, Split::kTrain, B, T, rank, world, kVocab);
    EXPECT_TRUE(loader.ok()) << loader.status().ToString();
    return loader.ok() ? std::move(loader).value() : nullptr;
  }

  std::string Glob() const { return dir_ + "/*.bin"; }

  std::string dir_;
};

TEST_F(DataLoaderTest, TargetsAreInputsShiftedByOne) {
  const std::string path = WriteCounting("a.bin", 100, 50);
  auto loader = OpenOrDie(path, 2, 4);
  ASSERT_NE(loader, nullptr);
  Batch first = Take(*loader);
  EXPECT_EQ(first.inputs, Iota(100, 8));
  EXPECT_EQ(first.targets, Iota(101, 8));
  Batch second = Take(*loader);
  EXPECT_EQ(second.inputs, Iota(108, 8));
  EXPECT_EQ(second.targets, Iota(109, 8));
}

TEST_F(DataLoaderTest, RankReadsItsSliceOfTheSharedWindow) {
  const std::string path = WriteCounting("a.bin", 0, 200);
  const int B = 2, T = 3, world = 3;
  for (int rank = 0; rank < world; ++rank) {
    auto loader = OpenOrDie(path, B, T, rank, world);
    ASSERT_NE(loader, nullptr);
    Batch step0 = Take(*loader);
    EXPECT_EQ(step0.inputs, Iota(rank * B * T, B * T)) << "rank " << rank;
    Batch step1 = Take(*loader);
    EXPECT_EQ(step1.inputs, Iota(world * B * T + rank * B * T, B * T)) << "rank " << rank;
    EXPECT_EQ(loader->state().position, 2 * world * B * T);
  }
}

// A global batch of 4 sequences of T = 4 tokens split (world, B, accumulation) any way reads the
// same sequences step after step: within a shard and across its end (the shards' sizes are no
// multiple of any split's window), and from a state saved by one split and restored by another.
// The global batch of one step, in the order (micro-step, rank, sequence), per step.
TEST_F(DataLoaderTest, EverySplitOfTheGlobalBatchReadsTheSameStepsAcrossShardEnds) {
  WriteCounting("a.bin", 0, 61);
  WriteCounting("b.bin", 1000, 45);
  constexpr int T = 4, kSteps = 9;
  struct Split {
    int world, B, accumulation;
  };
  const auto steps = [&](const Split& split, int first, int count, LoaderState* state) {
    std::vector<std::unique_ptr<DataLoader>> ranks;
    for (int r = 0; r < split.world; ++r) {
      auto loader =
          DataLoader::Open(Glob(), ::hoist::runtime::Split::kTrain, split.B, T, r, split.world,
                           kVocab, &MemoryTracker::Global(), split.accumulation);
      EXPECT_TRUE(loader.ok()) << loader.status().ToString();
      if (!loader.ok()) return std::vector<std::vector<int32_t>>{};
      EXPECT_TRUE((*loader)->Restore(*state).ok());
      ranks.push_back(std::move(loader).value());
    }
    std::vector<std::vector<int32_t>> out;
    for (int step = first; step < first + count; ++step) {
      std::vector<int32_t> global;
      for (int micro = 0; micro < split.accumulation; ++micro) {
        for (auto& rank : ranks) {
          const Batch batch = Take(*rank);
          global.insert(global.end(), batch.inputs.begin(), batch.inputs.end());
        }
      }
      out.push_back(std::move(global));
    }
    *state = ranks[0]->state();
    return out;
  };
  const Split splits[] = {{1, 4, 1}, {1, 2, 2}, {1, 1, 4}, {2, 1, 2}, {2, 2, 1}, {4, 1, 1}};
  LoaderState start;
  const std::vector<std::vector<int32_t>> want = steps(splits[0], 0, kSteps, &start);
  for (const Split& a : splits) {
    for (const Split& b : splits) {
      LoaderState state;
      std::vector<std::vector<int32_t>> got = steps(a, 0, 4, &state);
      const std::vector<std::vector<int32_t>> rest = steps(b, 4, kSteps - 4, &state);
      got.insert(got.end(), rest.begin(), rest.end());
      EXPECT_EQ(got, want) << "(" << a.world << ", " << a.B << ", " << a.accumulation << ") then ("
                           << b.world << ", " << b.B << ", " << b.accumulation << ")";
    }
  }
}

// The trainer relies on this: `world` ranks taking one micro-step each read the sequences one
// rank reads in `world` consecutive micro-steps, rank r's being the r-th. The shards are sized
// world*B*T*k + 1 so both runs leave each shard at the same point.
TEST_F(DataLoaderTest, WorldRanksReadWhatOneRankReadsInWorldMicroSteps) {
  const int B = 2, T = 4;
  for (int world : {1, 2, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    fs::remove_all(dir_);
    fs::create_directory(dir_);
    WriteCounting("s0.bin", 0, world * B * T * 3 + 1);
    WriteCounting("s1.bin", 5000, world * B * T * 2 + 1);
    auto single = OpenOrDie(Glob(), B, T);
    ASSERT_NE(single, nullptr);
    std::vector<std::unique_ptr<DataLoader>> ranks;
    for (int r = 0; r < world; ++r) {
      ranks.push_back(OpenOrDie(Glob(), B, T, r, world));
      ASSERT_NE(ranks.back(), nullptr);
    }
    // 7 global steps cross both shard ends and wrap into a second epoch.
    for (int step = 0; step < 7; ++step) {
      for (int r = 0; r < world; ++r) {
        Batch expected = Take(*single);
        EXPECT_EQ(Take(*ranks[r]), expected) << "step " << step << " rank " << r;
      }
      for (int r = 0; r < world; ++r) EXPECT_EQ(ranks[r]->state(), single->state());
    }
  }
}

// And in a second shape: the ranks' micro-batches stacked in rank order are one micro-batch of
// B*world sequences read by a single rank, for any shard sizes.
TEST_F(DataLoaderTest, RankBatchesStackIntoOneRankWithWorldTimesB) {
  const int B = 2, T = 5;
  WriteCounting("s0.bin", 0, 203);
  WriteCounting("s1.bin", 1000, 97);
  for (int world : {1, 2, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    auto wide = OpenOrDie(Glob(), B * world, T);
    ASSERT_NE(wide, nullptr);
    std::vector<std::unique_ptr<DataLoader>> ranks;
    for (int r = 0; r < world; ++r) {
      ranks.push_back(OpenOrDie(Glob(), B, T, r, world));
      ASSERT_NE(ranks.back(), nullptr);
    }
    for (int step = 0; step < 12; ++step) {
      Batch stacked;
      for (int r = 0; r < world; ++r) {
        Batch part = Take(*ranks[r]);
        stacked.inputs.insert(stacked.inputs.end(), part.inputs.begin(), part.inputs.end());
        stacked.targets.insert(stacked.targets.end(), part.targets.begin(), part.targets.end());
      }
      EXPECT_EQ(stacked, Take(*wide)) << "step " << step;
    }
  }
}

TEST_F(DataLoaderTest, MovesToNextShardThenWrapsToFirst) {
  WriteCounting("a.bin", 0, 25);
  WriteCounting("b.bin", 100, 17);
  auto loader = OpenOrDie(Glob(), 1, 8);
  ASSERT_NE(loader, nullptr);
  // Windows of 9 tokens: a.bin at 0, 8, 16 (its last token is index 24); b.bin at 0, 8.
  const std::vector<int32_t> starts = {0, 8, 16, 100, 108, 0, 8};
  for (size_t i = 0; i < starts.size(); ++i) {
    EXPECT_EQ(Take(*loader).inputs, Iota(starts[i], 8)) << "micro-step " << i;
  }
  EXPECT_EQ(loader->state(), (LoaderState{0, 16, /*epoch=*/1}));
}

TEST_F(DataLoaderTest, StateAfterLastWindowOfShardPointsAtNextShard) {
  WriteCounting("a.bin", 0, 17);
  WriteCounting("b.bin", 100, 17);
  auto loader = OpenOrDie(Glob(), 1, 8);
  ASSERT_NE(loader, nullptr);
  Take(*loader);
  EXPECT_EQ(loader->state(), (LoaderState{0, 8}));
  Take(*loader);
  EXPECT_EQ(loader->state(), (LoaderState{1, 0}));
}

TEST_F(DataLoaderTest, RestoreReproducesTheStream) {
  WriteCounting("a.bin", 0, 100);
  WriteCounting("b.bin", 1000, 60);
  auto original = OpenOrDie(Glob(), 2, 4, 1, 2);
  ASSERT_NE(original, nullptr);
  for (int i = 0; i < 5; ++i) Take(*original);
  const LoaderState saved = original->state();
  std::vector<Batch> expected;
  for (int i = 0; i < 7; ++i) expected.push_back(Take(*original));

  auto resumed = OpenOrDie(Glob(), 2, 4, 1, 2);
  ASSERT_NE(resumed, nullptr);
  ASSERT_TRUE(resumed->Restore(saved).ok());
  EXPECT_EQ(resumed->state(), saved);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(Take(*resumed), expected[i]) << "micro-step " << i;
}

TEST_F(DataLoaderTest, RestoreRejectsShardIndexOutsideTheData) {
  WriteCounting("a.bin", 0, 100);
  auto loader = OpenOrDie(Glob(), 1, 4);
  ASSERT_NE(loader, nullptr);
  Status status = loader->Restore({3, 0});
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("shard_index 3"));
  EXPECT_FALSE(loader->Restore({-1, 0}).ok());
  EXPECT_EQ(loader->state(), LoaderState{});
}

TEST_F(DataLoaderTest, RestoreRejectsPositionOutsideTheShardNamingIt) {
  const std::string path = WriteCounting("a.bin", 0, 100);
  auto loader = OpenOrDie(path, 1, 4);
  ASSERT_NE(loader, nullptr);
  Status status = loader->Restore({0, 101});
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("position 101"));
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_FALSE(loader->Restore({0, -4}).ok());
}

TEST_F(DataLoaderTest, RestoredPositionWithoutRoomForAWindowMovesToNextShard) {
  WriteCounting("a.bin", 0, 40);
  WriteCounting("b.bin", 100, 40);
  auto loader = OpenOrDie(Glob(), 2, 8);
  ASSERT_NE(loader, nullptr);
  ASSERT_TRUE(loader->Restore({0, 32}).ok());
  EXPECT_EQ(loader->state(), (LoaderState{1, 0}));
  EXPECT_EQ(Take(*loader).inputs, Iota(100, 16));
}

TEST_F(DataLoaderTest, ResetReturnsToTheFirstBatch) {
  WriteCounting("a.bin", 0, 30);
  WriteCounting("b.bin", 500, 30);
  auto loader = OpenOrDie(Glob(), 1, 8);
  ASSERT_NE(loader, nullptr);
  const Batch first = Take(*loader);
  for (int i = 0; i < 4; ++i) Take(*loader);
  loader->Reset();
  EXPECT_EQ(loader->state(), LoaderState{});
  EXPECT_EQ(Take(*loader), first);
}

TEST_F(DataLoaderTest, GlobReadsShardsInSortedOrder) {
  WriteCounting("train_002.bin", 200, 20);
  WriteCounting("train_000.bin", 0, 20);
  WriteCounting("train_001.bin", 100, 20);
  WriteCounting("val_000.bin", 900, 20);
  auto loader = OpenOrDie(dir_ + "/train_*.bin", 1, 16);
  ASSERT_NE(loader, nullptr);
  ASSERT_EQ(loader->num_shards(), 3);
  EXPECT_EQ(loader->shard_name(0), dir_ + "/train_000.bin");
  EXPECT_EQ(loader->shard_name(1), dir_ + "/train_001.bin");
  EXPECT_EQ(loader->shard_name(2), dir_ + "/train_002.bin");
  EXPECT_EQ(Take(*loader).inputs, Iota(0, 16));
  EXPECT_EQ(Take(*loader).inputs, Iota(100, 16));
  EXPECT_EQ(Take(*loader).inputs, Iota(200, 16));
}

TEST_F(DataLoaderTest, GlobMatchingNothingIsNotFoundNamingThePattern) {
  const std::string pattern = dir_ + "/nothing_*.bin";
  StatusOr<std::unique_ptr<DataLoader>> loader =
      DataLoader::Open(pattern, Split::kTrain, 1, 4, 0, 1, kVocab);
  ASSERT_FALSE(loader.ok());
  EXPECT_EQ(loader.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(loader.status().message(), HasSubstr(pattern));
}

TEST_F(DataLoaderTest, MissingPathIsNotFoundNamingIt) {
  const std::string path = dir_ + "/absent.bin";
  StatusOr<std::unique_ptr<DataLoader>> loader =
      DataLoader::Open(path, Split::kTrain, 1, 4, 0, 1, kVocab);
  ASSERT_FALSE(loader.ok());
  EXPECT_EQ(loader.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(loader.status().message(), HasSubstr(path));
}

TEST_F(DataLoaderTest, ShardTooSmallForOneWindowFailsOpenNamingShardAndNumbers) {
  WriteCounting("a.bin", 0, 1000);
  const std::string small = WriteCounting("b.bin", 0, 64);
  // world 2 x B 4 x T 8 + 1 = 65 tokens per micro-step.
  StatusOr<std::unique_ptr<DataLoader>> loader =
      DataLoader::Open(Glob(), Split::kTrain, 4, 8, 1, 2, kVocab);
  ASSERT_FALSE(loader.ok());
  EXPECT_EQ(loader.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(loader.status().message(), HasSubstr(small));
  EXPECT_THAT(loader.status().message(), HasSubstr("64 tokens"));
  EXPECT_THAT(loader.status().message(), HasSubstr("65"));
  EXPECT_THAT(loader.status().message(), HasSubstr("B 4"));
  EXPECT_THAT(loader.status().message(), HasSubstr("T 8"));
  EXPECT_THAT(loader.status().message(), HasSubstr("world_size 2"));
}

TEST_F(DataLoaderTest, TokenAtOrAboveVocabFailsOpenNamingShardIndexAndValue) {
  const std::string path = WriteCounting("a.bin", 250, 20);
  StatusOr<std::unique_ptr<DataLoader>> loader =
      DataLoader::Open(path, Split::kTrain, 1, 4, 0, 1, 256);
  ASSERT_FALSE(loader.ok());
  EXPECT_EQ(loader.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(loader.status().message(), HasSubstr(path));
  EXPECT_THAT(loader.status().message(), HasSubstr("index 6 is 256"));
  EXPECT_THAT(loader.status().message(), HasSubstr("vocab_size 256"));
}

TEST_F(DataLoaderTest, InvalidShapeOrRankIsInvalidArgumentNamingTheValue) {
  const std::string path = WriteCounting("a.bin", 0, 100);
  auto open = [&](int B, int T, int rank, int world, int vocab) {
    return DataLoader::Open(path, Split::kTrain, B, T, rank, world, vocab).status();
  };
  EXPECT_THAT(open(0, 4, 0, 1, kVocab).message(), HasSubstr("got 0"));
  EXPECT_THAT(open(1, -2, 0, 1, kVocab).message(), HasSubstr("got -2"));
  EXPECT_THAT(open(1, 4, 2, 2, kVocab).message(), HasSubstr("rank 2"));
  EXPECT_THAT(open(1, 4, 0, 0, kVocab).message(), HasSubstr("world_size"));
  EXPECT_THAT(open(1, 4, 0, 1, 0).message(), HasSubstr("vocab_size"));
  EXPECT_EQ(open(1, 4, -1, 2, kVocab).code(), StatusCode::kInvalidArgument);
}

TEST(BuiltinDemo, TrainIsFirstNinetyPercentAndValTheRest) {
  const int64_t total = static_cast<int64_t>(kDemoCorpus_size);
  const int64_t train_tokens = total * 9 / 10;
  ASSERT_GT(total, 10000) << "the demo corpus is too small to train on";

  StatusOr<std::unique_ptr<DataLoader>> train =
      DataLoader::Open("builtin:demo", Split::kTrain, 2, 64, 0, 1, 256);
  ASSERT_TRUE(train.ok()) << train.status().ToString();
  StatusOr<std::unique_ptr<DataLoader>> val =
      DataLoader::Open("builtin:demo", Split::kVal, 2, 64, 0, 1, 256);
  ASSERT_TRUE(val.ok()) << val.status().ToString();
  ASSERT_EQ((*train)->num_shards(), 1);
  ASSERT_EQ((*val)->num_shards(), 1);
  EXPECT_EQ((*train)->shard_tokens(0), train_tokens);
  EXPECT_EQ((*val)->shard_tokens(0), total - train_tokens);

  std::vector<int32_t> inputs(128), targets(128);
  ASSERT_TRUE((*train)->Next(inputs.data(), targets.data()).ok());
  for (int i = 0; i < 128; ++i) ASSERT_EQ(inputs[i], kDemoCorpus[i]) << i;
  ASSERT_TRUE((*val)->Next(inputs.data(), targets.data()).ok());
  for (int i = 0; i < 128; ++i) ASSERT_EQ(inputs[i], kDemoCorpus[train_tokens + i]) << i;
}

// The demo config reads 8 x 128 tokens per rank; its validation split must serve 8 ranks.
TEST(BuiltinDemo, ValSplitServesEightRanksOfTheDemoMicroBatch) {
  StatusOr<std::unique_ptr<DataLoader>> val =
      DataLoader::Open("builtin:demo", Split::kVal, 8, 128, 7, 8, 256);
  EXPECT_TRUE(val.ok()) << val.status().ToString();
}

TEST(BuiltinDemo, CorpusIsPrintableAscii) {
  for (size_t i = 0; i < kDemoCorpus_size; ++i) {
    const unsigned char c = kDemoCorpus[i];
    ASSERT_TRUE(c == '\n' || (c >= 32 && c < 127)) << "byte " << int(c) << " at offset " << i;
  }
}

TEST(BuiltinDemo, TokensAreCountedAsHostWorkspace) {
  auto host_workspace = [] {
    return MemoryTracker::Global().Snapshot().Current(Place::kHost, Category::kWorkspace);
  };
  const int64_t before = host_workspace();
  {
    StatusOr<std::unique_ptr<DataLoader>> val =
        DataLoader::Open("builtin:demo", Split::kVal, 1, 16, 0, 1, 256);
    ASSERT_TRUE(val.ok());
    EXPECT_EQ(host_workspace() - before, 2 * (*val)->shard_tokens(0));
  }
  EXPECT_EQ(host_workspace(), before);
}

TEST(BuiltinDemo, UnknownBuiltinIsNotFoundNamingIt) {
  StatusOr<std::unique_ptr<DataLoader>> loader =
      DataLoader::Open("builtin:shakespeare", Split::kTrain, 1, 16, 0, 1, 256);
  ASSERT_FALSE(loader.ok());
  EXPECT_EQ(loader.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(loader.status().message(), HasSubstr("builtin:shakespeare"));
}

TEST(BuiltinDemo, VocabSmallerThanBytesFailsOpen) {
  StatusOr<std::unique_ptr<DataLoader>> loader =
      DataLoader::Open("builtin:demo", Split::kTrain, 1, 16, 0, 1, 64);
  ASSERT_FALSE(loader.ok());
  EXPECT_THAT(loader.status().message(), HasSubstr("builtin:demo"));
  EXPECT_THAT(loader.status().message(), HasSubstr("vocab_size 64"));
}

// The loader reads ahead 131072 tokens at a time: the tokens it already holds are served, and the
// first read past them finds the file short.
TEST_F(DataLoaderTest, AShardTruncatedAfterOpenIsAnErrorNamingIt) {
  const std::string path = WriteCounting("a.bin", 0, 200000);
  std::unique_ptr<DataLoader> loader = OpenOrDie(path, 8, 1024);  // 8192 tokens a window
  ASSERT_NE(loader, nullptr);
  for (int i = 0; i < 3; ++i) Take(*loader);
  fs::resize_file(path, 1024 + 2 * 100000);
  // Windows 3..14 end within the first 131072 tokens; window 15 needs the next read.
  for (int i = 3; i < 15; ++i) Take(*loader);
  std::vector<int32_t> inputs(8192, 9), targets(8192, 9);
  const Status status = loader->Next(inputs.data(), targets.data());
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_NE(
      status.message().find(path + "' should be 401024 bytes (200000 tokens) but is 201024 bytes"),
      std::string::npos)
      << status.ToString();
  // The batch is valid tokens, so a step may finish its collectives before stopping.
  EXPECT_EQ(inputs, std::vector<int32_t>(8192, 0));
  EXPECT_EQ(targets, std::vector<int32_t>(8192, 0));
  EXPECT_EQ(loader->state(), (LoaderState{0, 15 * 8192}));
}

TEST_F(DataLoaderTest, AShardRewrittenInPlaceWithATokenPastTheVocabularyIsAnError) {
  const std::string path = WriteCounting("a.bin", 0, 200);
  StatusOr<std::unique_ptr<DataLoader>> loader =
      DataLoader::Open(path, Split::kTrain, 2, 8, 0, 1, /*vocab_size=*/256);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  {
    std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
    file.seekp(1024 + 2 * 3);
    const uint16_t big = 60000;
    file.write(reinterpret_cast<const char*>(&big), 2);
  }
  std::vector<int32_t> inputs(16), targets(16);
  const Status status = (*loader)->Next(inputs.data(), targets.data());
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("token at index 3 is now 60000"), std::string::npos)
      << status.ToString();
}

TEST_F(DataLoaderTest, ReadsUint32ShardsWithTokensPast16Bits) {
  // llm.c's Llama 3 shards: ids up to 128255 need 32 bits.
  std::vector<uint32_t> tokens(50);
  for (int i = 0; i < 50; ++i) tokens[i] = 100000 + i;
  const std::string path = (fs::path(dir_) / "wide.bin").string();
  ASSERT_TRUE(WriteTokenShard(path, tokens).ok());
  StatusOr<std::unique_ptr<DataLoader>> loader =
      DataLoader::Open(path, Split::kTrain, 2, 4, 0, 1, /*vocab_size=*/128256);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  Batch first = Take(**loader);
  EXPECT_EQ(first.inputs, Iota(100000, 8));
  EXPECT_EQ(first.targets, Iota(100001, 8));
  Batch second = Take(**loader);
  EXPECT_EQ(second.inputs, Iota(100008, 8));
}

TEST_F(DataLoaderTest, Uint32ShardWithATokenPastTheVocabularyIsRefusedAtOpen) {
  const std::string path = (fs::path(dir_) / "wide.bin").string();
  ASSERT_TRUE(WriteTokenShard(path, std::vector<uint32_t>(50, 70000)).ok());
  StatusOr<std::unique_ptr<DataLoader>> loader =
      DataLoader::Open(path, Split::kTrain, 2, 4, 0, 1, /*vocab_size=*/65536);
  ASSERT_FALSE(loader.ok());
  EXPECT_THAT(loader.status().message(), HasSubstr("index 0 is 70000"));
}

}  // namespace
}  // namespace hoist::runtime
