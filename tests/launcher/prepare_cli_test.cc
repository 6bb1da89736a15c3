// `hoist data prepare` end to end: a chat JSONL prepared with a chat template, then trained on by
// `hoist train` with the shards as data.train and data.val; and its errors on the command line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/launcher/run_hoist.h"

namespace {

namespace fs = std::filesystem;

using hoist::launcher::testing::RunHoist;

fs::path TempDir(const std::string& name) {
  fs::path dir = fs::path(testing::TempDir()) / ("hoist_prepare_cli_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A chatml template, and conversations of a question and its answer.
void WriteChat(const fs::path& dir, int rows) {
  std::ofstream(dir / "chatml.jinja")
      << "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + "
         "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ "
         "'<|im_start|>assistant\\n' }}{% endif %}";
  std::ofstream chat(dir / "chat.jsonl");
  for (int i = 0; i < rows; ++i) {
    chat << R"({"messages": [{"role": "user", "content": "Count after )" << i
         << R"("}, {"role": "assistant", "content": ")" << i + 1 << ", " << i + 2 << "\"}]}\n";
  }
}

TEST(PrepareCli, PreparedChatTrainsWithHeldOutEvaluation) {
  const fs::path dir = TempDir("train");
  WriteChat(dir, 200);
  auto r = RunHoist(
      "data prepare chat.jsonl -o prepared --chat-template chatml.jinja "
      "--val-fraction 0.1 --seed 3",
      dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(100%)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("data.train = \"prepared/train_*.bin\""), std::string::npos) << r.output;
  ASSERT_TRUE(fs::exists(dir / "prepared" / "train_000000.bin"));
  ASSERT_TRUE(fs::exists(dir / "prepared" / "val_000000.bin"));
  const nlohmann::json manifest =
      nlohmann::json::parse(std::ifstream(dir / "prepared" / "prepare.json"));
  EXPECT_EQ(manifest["rows"], 200);
  EXPECT_EQ(manifest["loss"], "auto");

  r = RunHoist(std::string("train -c ") + HOIST_SOURCE_DIR +
                   "/examples/demo.json --set data.train=prepared/train_*.bin "
                   "--set data.val=prepared/val_*.bin --set train.steps=6 "
                   "--set train.eval_interval=3 --set train.eval_steps=1 "
                   "--set train_micro_batch_size_per_gpu=2 --set model.seq_len=64 "
                   "--set steps_per_print=1 --set checkpoint.interval_steps=0",
               dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("val loss"), std::string::npos) << r.output;
}

TEST(PrepareCli, ABadRowIsNamedAndNothingIsWritten) {
  const fs::path dir = TempDir("bad");
  WriteChat(dir, 3);
  std::ofstream(dir / "chat.jsonl", std::ios::app)
      << R"({"messages": [{"role": "tool", "content": "42"}]})"
      << "\n";
  const auto r = RunHoist("data prepare chat.jsonl -o prepared --chat-template chatml.jinja", dir);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("chat.jsonl line 4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tool"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "prepared" / "train_000000.bin"));
}

TEST(PrepareCli, ConversationsWithoutATemplateAskForOne) {
  const fs::path dir = TempDir("template");
  WriteChat(dir, 2);
  const auto r = RunHoist("data prepare chat.jsonl -o prepared", dir);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--chat-template"), std::string::npos) << r.output;
  const auto loss = RunHoist("data prepare chat.jsonl -o prepared --loss everything", dir);
  EXPECT_EQ(loss.exit_code, 1) << loss.output;
  EXPECT_NE(loss.output.find("everything"), std::string::npos) << loss.output;
}

}  // namespace
