#include "runtime/data/dataset_rows.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace hoist::runtime {
namespace {

using ::testing::HasSubstr;

class DatasetRows : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "hoist_rows_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  // Every row of `text`, or the first error.
  StatusOr<std::vector<DatasetRow>> ReadAll(const std::string& text,
                                            const RowReaderOptions& options = {},
                                            RowReaderSummary* summary = nullptr) {
    HOIST_ASSIGN_OR_RETURN(
        auto reader, JsonlRowReader::Open(FileSystem::Posix(), Write("d.jsonl", text), options));
    std::vector<DatasetRow> rows;
    DatasetRow row;
    while (true) {
      HOIST_ASSIGN_OR_RETURN(bool more, reader->Next(&row));
      if (!more) break;
      rows.push_back(row);
    }
    if (summary != nullptr) *summary = reader->summary();
    return rows;
  }

  std::string dir_;
};

TEST_F(DatasetRows, FindsEachShapeFromTheFirstRow) {
  auto text = ReadAll("{\"text\": \"one\"}\n{\"text\": \"two\", \"id\": 7}\n");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  ASSERT_EQ(text->size(), 2u);
  EXPECT_EQ((*text)[0].shape, RowShape::kText);
  EXPECT_EQ((*text)[1].text, "two");
  EXPECT_EQ((*text)[1].line, 2);

  auto pc = ReadAll("{\"prompt\": \"2+2=\", \"completion\": \"4\", \"text\": \"ignored\"}");
  ASSERT_TRUE(pc.ok()) << pc.status().ToString();
  ASSERT_EQ(pc->size(), 1u);
  EXPECT_EQ((*pc)[0].shape, RowShape::kPromptCompletion);
  EXPECT_FALSE((*pc)[0].conversational);
  EXPECT_EQ((*pc)[0].prompt, "2+2=");
  EXPECT_EQ((*pc)[0].completion, "4");

  auto chat = ReadAll(
      R"({"messages": [{"role": "system", "content": "Be brief."},)"
      R"( {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello", "name": "x"}]})"
      "\n");
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  ASSERT_EQ(chat->size(), 1u);
  EXPECT_EQ((*chat)[0].shape, RowShape::kMessages);
  ASSERT_EQ((*chat)[0].messages.size(), 3u);
  EXPECT_EQ((*chat)[0].messages[2]["content"], "Hello");
  EXPECT_EQ((*chat)[0].messages[2]["name"], "x");  // a message's other keys are kept
}

TEST_F(DatasetRows, ConversationalPromptAndCompletion) {
  auto rows = ReadAll(R"({"prompt": [{"role": "user", "content": "Hi"}],)"
                      R"( "completion": [{"role": "assistant", "content": "Hello"}]})");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_TRUE((*rows)[0].conversational);
  EXPECT_EQ((*rows)[0].messages[0]["role"], "user");
  EXPECT_EQ((*rows)[0].completion_messages[0]["content"], "Hello");
}

TEST_F(DatasetRows, BlankLinesAndAMissingLastLineEnd) {
  RowReaderSummary summary;
  auto rows = ReadAll("\n{\"text\": \"a\"}\r\n  \n{\"text\": \"b\"}", {}, &summary);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].line, 2);
  EXPECT_EQ((*rows)[1].line, 4);
  EXPECT_EQ((*rows)[1].text, "b");
  EXPECT_EQ(summary.rows, 2);
  EXPECT_EQ(summary.blank_lines, 2);
  auto empty = ReadAll("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST_F(DatasetRows, MalformedRowsNameFileLineAndField) {
  struct Case {
    std::string text;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"{\"text\": \"a\"}\n{\"text\": 5}\n",
       "line 2: field `text`: must be a string, found a number"},
      {"{\"text\": \"a\"}\n{\"body\": \"b\"}\n", "line 2: field `text`: missing"},
      {"{\"text\": \"a\"}\n{\"text\": \"b\"\n", "line 2"},  // not JSON
      {"[1, 2]\n", "line 1: a row must be a JSON object, found a list"},
      {"{\"body\": \"b\", \"id\": 1}\n", "it has: body, id"},
      {R"({"messages": []})", "field `messages`: is empty"},
      {R"({"messages": "hi"})", "field `messages`: must be a list of messages, found a string"},
      {R"({"messages": [{"role": "user"}]})", "field `messages[0].content`: missing"},
      {R"({"messages": [{"role": "user", "content": null}]})",
       "field `messages[0].content`: must be a string, found null"},
      {R"({"messages": [{"content": "x"}]})", "field `messages[0].role`: missing"},
      {R"({"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "42"}]})",
       "field `messages[1].role`: \"tool\" is not a role hoist trains on"},
      {R"({"prompt": "a", "completion": 3})", "field `completion`: must be a string"},
      {R"({"prompt": [{"role": "user", "content": "a"}], "completion": "b"})",
       "field `completion`: must be a list of messages"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    auto rows = ReadAll(c.text);
    ASSERT_FALSE(rows.ok());
    EXPECT_THAT(rows.status().message(), HasSubstr("d.jsonl"));
    EXPECT_THAT(rows.status().message(), HasSubstr(c.want));
  }
}

TEST_F(DatasetRows, ANamedShapeIsRequiredOfEveryRow) {
  RowReaderOptions options;
  options.shape = RowShape::kMessages;
  auto rows = ReadAll("{\"text\": \"a\"}\n", options);
  ASSERT_FALSE(rows.ok());
  EXPECT_THAT(rows.status().message(), HasSubstr("line 1: field `messages`: missing"));
  auto mixed = ReadAll(
      "{\"text\": \"a\"}\n{\"messages\": [{\"role\": \"user\", \"content\": "
      "\"b\"}]}\n");
  ASSERT_FALSE(mixed.ok());  // the first row made it a text dataset
  EXPECT_THAT(mixed.status().message(), HasSubstr("line 2: field `text`: missing"));
  EXPECT_EQ(RowShapeNamed("prompt_completion").value(), RowShape::kPromptCompletion);
  EXPECT_THAT(RowShapeNamed("chat").status().message(),
              HasSubstr("\"chat\" is not one of \"text\", \"prompt_completion\", \"messages\""));
}

TEST_F(DatasetRows, SkippingMalformedRowsCountsThemAndKeepsTheFirstReasons) {
  std::string text;
  for (int i = 0; i < 10; ++i) text += i % 3 == 0 ? "{\"text\": 1}\n" : "{\"text\": \"ok\"}\n";
  RowReaderOptions options;
  options.skip_malformed = true;
  options.max_reasons = 2;
  RowReaderSummary summary;
  auto rows = ReadAll(text, options, &summary);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ(rows->size(), 6u);
  EXPECT_EQ(summary.rows, 6);
  EXPECT_EQ(summary.skipped, 4);
  ASSERT_EQ(summary.reasons.size(), 2u);
  EXPECT_THAT(summary.reasons[0], HasSubstr("d.jsonl line 1: field `text`"));
  EXPECT_THAT(summary.reasons[1], HasSubstr("d.jsonl line 4: field `text`"));
}

// Rows that straddle the reader's 1 MiB chunks, and a line far longer than a chunk.
TEST_F(DatasetRows, LinesAcrossChunks) {
  std::string text;
  const std::string big(3 << 20, 'x');
  text += "{\"text\": \"" + big + "\"}\n";
  for (int i = 0; i < 20000; ++i) text += "{\"text\": \"row " + std::to_string(i) + "\"}\n";
  auto rows = ReadAll(text);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 20001u);
  EXPECT_EQ((*rows)[0].text, big);
  for (int i = 0; i < 20000; ++i) {
    ASSERT_EQ((*rows)[static_cast<size_t>(i) + 1].text, "row " + std::to_string(i));
    ASSERT_EQ((*rows)[static_cast<size_t>(i) + 1].line, i + 2);
  }
}

TEST_F(DatasetRows, AMissingFileOrADirectoryIsNamed) {
  auto missing = JsonlRowReader::Open(FileSystem::Posix(), dir_ + "/none.jsonl");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("none.jsonl"));
  auto directory = JsonlRowReader::Open(FileSystem::Posix(), dir_);
  ASSERT_FALSE(directory.ok());
  EXPECT_THAT(directory.status().message(), HasSubstr(dir_));
  const std::string fifo = dir_ + "/pipe.jsonl";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto pipe = JsonlRowReader::Open(FileSystem::Posix(), fifo);  // refused, not a hang
  ASSERT_FALSE(pipe.ok());
  EXPECT_THAT(pipe.status().message(), HasSubstr("pipe.jsonl"));
}

}  // namespace
}  // namespace hoist::runtime
