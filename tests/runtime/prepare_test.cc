// `hoist data prepare` (runtime/data/prepare.h): JSONL rows into prepared shards that the loader
// reads; the held-out choice, long examples, and every way it can fail leaving the output
// directory as it was.
#include "runtime/data/prepare.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/data/data_loader.h"
#include "runtime/data/prepared_shard.h"

namespace hoist::runtime {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string ChatFixture(const std::string& name) {
  return std::string(HOIST_SOURCE_DIR) + "/tests/data/chat_templates/" + name;
}

class Prepare : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "hoist_prepare_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    out_ = dir_ + "/out";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  // A Llama 3.2 tokenizer directory: the chat fixture's tokenizer.json and the model's
  // tokenizer_config.json (its chat template and special tokens).
  std::string TokenizerDir() {
    const std::string tok = dir_ + "/tok";
    fs::create_directories(tok);
    fs::copy_file(ChatFixture("chat_tokenizer.json"), tok + "/tokenizer.json");
    fs::copy_file(ChatFixture("llama3_2/tokenizer_config.json"), tok + "/tokenizer_config.json");
    return tok;
  }

  // `n` conversations of a system, a user and an assistant turn.
  std::string Conversations(int n) {
    std::string text;
    for (int i = 0; i < n; ++i) {
      text += R"({"messages": [{"role": "system", "content": "Be brief."}, )"
              R"({"role": "user", "content": "What is )" +
              std::to_string(i) + R"( plus one?"}, {"role": "assistant", "content": ")" +
              std::to_string(i + 1) + "\"}]}\n";
    }
    return text;
  }

  PrepareOptions Options(std::vector<std::string> inputs) {
    PrepareOptions options;
    options.inputs = std::move(inputs);
    options.output_dir = out_;
    options.encoder.eos_token = "</s>";
    return options;
  }

  // The tokens of the held-out shards, in order.
  std::vector<uint32_t> ValTokens(const PrepareSummary& summary) {
    std::vector<uint32_t> tokens;
    for (const std::string& name : summary.val.shards) {
      StatusOr<PreparedShard> shard = PreparedShard::Open(out_ + "/" + name);
      EXPECT_TRUE(shard.ok()) << shard.status().ToString();
      if (!shard.ok()) return {};
      const size_t at = tokens.size();
      tokens.resize(at + static_cast<size_t>(shard->tokens()));
      EXPECT_TRUE(shard->ReadTokens(0, shard->tokens(), tokens.data() + at).ok());
    }
    return tokens;
  }

  // The files in the output directory, sorted.
  std::vector<std::string> OutputFiles() {
    std::vector<std::string> names;
    if (!fs::exists(out_)) return names;
    for (const auto& entry : fs::directory_iterator(out_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  std::string dir_, out_;
};

TEST_F(Prepare, ConversationsBecomeShardsTheLoaderTrainsOn) {
  PrepareOptions options = Options({Write("chat.jsonl", Conversations(20))});
  options.tokenizer = TokenizerDir();
  options.encoder.eos_token.clear();  // the tokenizer_config.json's, then
  std::ostringstream progress;
  options.progress = &progress;
  StatusOr<PrepareSummary> summary = PrepareDataset(options);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->rows.rows, 20);
  EXPECT_EQ(summary->train.documents, 20);
  EXPECT_EQ(summary->val.documents, 0);
  EXPECT_EQ(OutputFiles(), (std::vector<std::string>{"prepare.json", "train_000000.bin"}));
  EXPECT_THAT(progress.str(), HasSubstr("20 rows"));

  StatusOr<PreparedShard> shard = PreparedShard::Open(out_ + "/train_000000.bin");
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  ASSERT_TRUE(shard->Verify().ok());
  EXPECT_EQ(shard->documents(), 20);
  EXPECT_EQ(shard->tokens(), summary->train.tokens);
  EXPECT_EQ(shard->header().trainable, summary->train.targets);
  // Each conversation's targets are its answer and <|eot_id|>: a handful, not the prompt.
  EXPECT_GE(summary->train.targets, 2 * 20);
  EXPECT_LE(summary->train.targets, 4 * 20);
  EXPECT_EQ(shard->header().token_bytes, 2);

  const nlohmann::json manifest = nlohmann::json::parse(std::ifstream(out_ + "/prepare.json"));
  EXPECT_EQ(manifest["rows"], 20);
  EXPECT_EQ(manifest["loss"], "auto");
  EXPECT_EQ(manifest["eos_token"], "<|eot_id|>");  // the tokenizer_config.json's
  EXPECT_EQ(manifest["train"]["shards"], nlohmann::json::array({"train_000000.bin"}));

  StatusOr<std::unique_ptr<DataLoader>> loader = DataLoader::Open(
      out_ + "/train_*.bin", Split::kTrain, /*B=*/2, /*T=*/64, 0, 1, /*vocab_size=*/512);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  EXPECT_TRUE((*loader)->masked());
}

TEST_F(Prepare, AHeldOutFractionChoosesTheSameRowsWhateverTheShards) {
  std::string text;
  for (int i = 0; i < 400; ++i) text += "{\"text\": \"row " + std::to_string(i) + "\"}\n";
  PrepareOptions options = Options({Write("t.jsonl", text)});
  options.val_fraction = 0.25;
  options.seed = 7;
  StatusOr<PrepareSummary> one = PrepareDataset(options);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->train.documents + one->val.documents, 400);
  EXPECT_GT(one->val.documents, 60);
  EXPECT_LT(one->val.documents, 140);
  ASSERT_EQ(one->val.shards.size(), 1u);
  const std::vector<uint32_t> one_val = ValTokens(*one);

  // Smaller shards: the same rows held out, in more files; the old files replaced.
  options.shard_tokens = 500;
  options.overwrite = true;
  StatusOr<PrepareSummary> two = PrepareDataset(options);
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  EXPECT_EQ(two->val.documents, one->val.documents);
  EXPECT_EQ(two->val.tokens, one->val.tokens);
  EXPECT_EQ(ValTokens(*two), one_val);
  EXPECT_GT(two->train.shards.size(), 2u);
  // Another seed, other rows.
  options.seed = 8;
  StatusOr<PrepareSummary> three = PrepareDataset(options);
  ASSERT_TRUE(three.ok());
  EXPECT_NE(three->val.tokens, one->val.tokens);

  // Back to one shard: the extra shards of the run before are gone.
  options.shard_tokens = int64_t{1} << 27;
  ASSERT_TRUE(PrepareDataset(options).ok());
  EXPECT_EQ(OutputFiles(),
            (std::vector<std::string>{"prepare.json", "train_000000.bin", "val_000000.bin"}));
}

TEST_F(Prepare, HeldOutFilesGoToTheValidationShards) {
  PrepareOptions options =
      Options({Write("a.jsonl", "{\"text\": \"one\"}\n{\"text\": \"two\"}\n")});
  options.val_inputs = {Write("b.jsonl", "{\"text\": \"three\"}\n")};
  StatusOr<PrepareSummary> summary = PrepareDataset(options);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->train.documents, 2);
  EXPECT_EQ(summary->val.documents, 1);
  EXPECT_EQ(summary->val.tokens, 9);  // "three</s>", a byte a token
  options.val_fraction = 0.1;
  options.overwrite = true;
  EXPECT_THAT(PrepareDataset(options).status().message(), HasSubstr("give one of them"));
}

TEST_F(Prepare, LongExamplesAreTruncatedOrSplitAndCounted) {
  const std::string input =
      Write("t.jsonl", "{\"text\": \"abcdefghij\"}\n{\"text\": \"ab\"}\n");  // 14 and 6 tokens
  PrepareOptions options = Options({input});
  options.max_length = 5;
  StatusOr<PrepareSummary> cut = PrepareDataset(options);
  ASSERT_TRUE(cut.ok()) << cut.status().ToString();
  EXPECT_EQ(cut->truncated, 2);
  EXPECT_EQ(cut->truncated_tokens, 9 + 1);
  EXPECT_EQ(cut->train.tokens, 10);

  options.overflow = Overflow::kSplit;
  options.overwrite = true;
  StatusOr<PrepareSummary> split = PrepareDataset(options);
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  EXPECT_EQ(split->split, 2);
  EXPECT_EQ(split->train.tokens, 20);
  EXPECT_EQ(split->train.documents, 3 + 2);
  StatusOr<PreparedShard> shard = PreparedShard::Open(out_ + "/train_000000.bin");
  ASSERT_TRUE(shard.ok());
  std::vector<int64_t> starts(5);
  ASSERT_TRUE(shard->ReadDocuments(0, 5, starts.data()).ok());
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 5, 10, 14, 19}));
}

TEST_F(Prepare, AMalformedRowNamesFileAndLineAndLeavesTheDirectoryAsItWas) {
  const std::string input = Write("bad.jsonl", "{\"text\": \"a\"}\n{\"text\": 3}\n");
  StatusOr<PrepareSummary> summary = PrepareDataset(Options({input}));
  ASSERT_FALSE(summary.ok());
  EXPECT_THAT(summary.status().message(), HasSubstr("bad.jsonl line 2"));
  EXPECT_THAT(summary.status().message(), HasSubstr("`text`"));
  EXPECT_FALSE(fs::exists(out_));  // the directory it made, and the staging inside, are gone

  PrepareOptions options = Options({input});
  options.rows.skip_malformed = true;
  summary = PrepareDataset(options);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->rows.skipped, 1);
  ASSERT_EQ(summary->rows.reasons.size(), 1u);
  EXPECT_THAT(summary->rows.reasons[0], HasSubstr("line 2"));
  EXPECT_THAT(DescribePrepareSummary(*summary), HasSubstr("1 malformed skipped"));
}

TEST_F(Prepare, AnExistingDatasetIsKeptUnlessReplacingIsAsked) {
  const std::string input = Write("t.jsonl", "{\"text\": \"a\"}\n");
  ASSERT_TRUE(PrepareDataset(Options({input})).ok());
  const auto before = fs::last_write_time(out_ + "/train_000000.bin");
  StatusOr<PrepareSummary> again = PrepareDataset(Options({input}));
  ASSERT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(again.status().message(), HasSubstr("--overwrite"));
  EXPECT_EQ(fs::last_write_time(out_ + "/train_000000.bin"), before);
}

TEST_F(Prepare, NothingToTrainOnIsRefused) {
  // Conversations without an assistant turn: no target token.
  PrepareOptions options =
      Options({Write("c.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}\n")});
  options.tokenizer = TokenizerDir();
  StatusOr<PrepareSummary> summary = PrepareDataset(options);
  ASSERT_EQ(summary.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(summary.status().message(), HasSubstr("nothing to train on"));
  EXPECT_FALSE(fs::exists(out_));
  // A fraction that holds out nothing.
  options = Options({Write("t.jsonl", "{\"text\": \"a\"}\n")});
  options.val_fraction = 1e-9;
  EXPECT_THAT(PrepareDataset(options).status().message(), HasSubstr("chose none"));
}

TEST_F(Prepare, AFullDiskFailsNamingTheShardAndLeavesNothing) {
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += "{\"text\": \"a row of some length " + std::to_string(i) + "\"}\n";
  const std::string input = Write("t.jsonl", text);
  ASSERT_TRUE(PrepareDataset(Options({input})).ok());
  const std::vector<std::string> before = OutputFiles();
  FaultInjectingFileSystem faulty;
  faulty.SetWriteBudget(3000);
  PrepareOptions options = Options({input});
  options.overwrite = true;
  options.shard_tokens = 1000;
  StatusOr<PrepareSummary> summary = PrepareDataset(options, faulty);
  ASSERT_FALSE(summary.ok());
  EXPECT_THAT(summary.status().message(), HasSubstr("train_0000"));
  EXPECT_EQ(OutputFiles(), before);  // the old dataset is untouched, no staging left
  // A rename that fails while the new shards go into place (the second rename to that name; the
  // first finished the shard in the staging directory): the old manifest is gone first, so
  // the directory never shows a complete dataset that is not one.
  faulty.Clear();
  faulty.Inject(FileFault(FileOp::kRename, EIO).OnPathsContaining("train_000001").Nth(2));
  summary = PrepareDataset(options, faulty);
  ASSERT_FALSE(summary.ok());
  EXPECT_FALSE(fs::exists(out_ + "/prepare.json"));
  faulty.Clear();
  ASSERT_TRUE(PrepareDataset(options, faulty).ok());
  EXPECT_TRUE(fs::exists(out_ + "/prepare.json"));
  StatusOr<PreparedShard> old = PreparedShard::Open(out_ + "/train_000000.bin");
  ASSERT_TRUE(old.ok());
  EXPECT_TRUE(old->Verify().ok());
}

TEST_F(Prepare, BadOptionsAreNamed) {
  PrepareOptions options = Options({});
  EXPECT_THAT(PrepareDataset(options).status().message(), HasSubstr("no dataset file"));
  options = Options({Write("t.jsonl", "{\"text\": \"a\"}\n")});
  options.val_fraction = 1.5;
  EXPECT_THAT(PrepareDataset(options).status().message(), HasSubstr("not in [0, 1)"));
  options.val_fraction = 0;
  options.inputs = {dir_ + "/missing.jsonl"};
  StatusOr<PrepareSummary> missing = PrepareDataset(options);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("missing.jsonl"));
  options = Options({Write("t.jsonl", "{\"text\": \"a\"}\n")});
  options.chat_template = Write("bad.jinja", "{% for m in messages %}{{ m | nosuchfilter }}");
  StatusOr<PrepareSummary> bad = PrepareDataset(options);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("bad.jinja"));
}

}  // namespace
}  // namespace hoist::runtime
