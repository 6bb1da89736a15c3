#include "runtime/interchange/bpe_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace hoist::runtime {
namespace {

using ::testing::HasSubstr;

// The fixtures of scripts/reference/tokenizer.py: tokenizers trained by the Hugging Face
// tokenizers library and the ids it gives for text.txt.
std::string FixturePath(const std::string& name) {
  return std::string(HOIST_SOURCE_DIR) + "/tests/data/tokenizer/" + name;
}

std::string ReadFixture(const std::string& name) {
  std::ifstream in(FixturePath(name), std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

const nlohmann::json& Expected() {
  static const nlohmann::json expected = nlohmann::json::parse(ReadFixture("expected.json"));
  return expected;
}

std::unique_ptr<BpeTokenizer> LoadFixture(const std::string& name) {
  StatusOr<std::unique_ptr<BpeTokenizer>> tokenizer = BpeTokenizer::Load(FixturePath(name));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
}

std::vector<int32_t> StreamEncode(const BpeTokenizer& tokenizer, const std::string& text,
                                  size_t chunk) {
  BpeStreamEncoder encoder(tokenizer);
  std::vector<int32_t> ids;
  for (size_t at = 0; at < text.size(); at += chunk) {
    encoder.Add(std::string_view(text).substr(at, chunk), &ids);
  }
  encoder.Finish(&ids);
  return ids;
}

class FixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureTest, IdsEqualTheTokenizersLibrary) {
  std::unique_ptr<BpeTokenizer> tokenizer = LoadFixture(GetParam());
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<int32_t> expected = Expected()[GetParam()]["ids"];
  EXPECT_EQ(tokenizer->Encode(ReadFixture("text.txt")), expected);
}

TEST_P(FixtureTest, PiecesEqualTheLibrarysPreTokenizer) {
  std::unique_ptr<BpeTokenizer> tokenizer = LoadFixture(GetParam());
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<std::string> expected = Expected()[GetParam()]["pieces"];
  EXPECT_EQ(tokenizer->PreTokenize(ReadFixture("text.txt")), expected);
}

TEST_P(FixtureTest, DecodeEqualsTheLibraryAndTheText) {
  std::unique_ptr<BpeTokenizer> tokenizer = LoadFixture(GetParam());
  ASSERT_NE(tokenizer, nullptr);
  const std::string text = ReadFixture("text.txt");
  const std::vector<int32_t> ids = Expected()[GetParam()]["ids"];
  EXPECT_EQ(tokenizer->Decode(ids), Expected()[GetParam()]["decoded"].get<std::string>());
  EXPECT_EQ(tokenizer->Decode(tokenizer->Encode(text)), text);
}

TEST_P(FixtureTest, StreamingInChunksGivesTheWholeTextsIds) {
  std::unique_ptr<BpeTokenizer> tokenizer = LoadFixture(GetParam());
  ASSERT_NE(tokenizer, nullptr);
  // The text three times over, so that chunk boundaries fall everywhere in it, and the cases
  // where a piece depends on what follows it: lower-case contractions (GPT-2's are
  // case-sensitive), whitespace runs before line breaks and words, digit runs.
  const std::string text = ReadFixture("text.txt") + "we're they'll you've I'd it's 'll 're\n" +
                           ReadFixture("text.txt") + "\n \n  \r\n\t x  \n\n y 1234567 '" +
                           ReadFixture("text.txt");
  const std::vector<int32_t> whole = tokenizer->Encode(text);
  for (size_t chunk : {1, 2, 3, 5, 7, 13, 64, 4096}) {
    EXPECT_EQ(StreamEncode(*tokenizer, text, chunk), whole) << "chunk " << chunk;
  }
}

TEST_P(FixtureTest, RoundTripsBytesThatAreNotUtf8) {
  std::unique_ptr<BpeTokenizer> tokenizer = LoadFixture(GetParam());
  ASSERT_NE(tokenizer, nullptr);
  std::string bytes;
  for (int b = 255; b >= 0; --b) bytes.push_back(static_cast<char>(b));
  bytes += "\xE4\xB8 cut\xF0\x9F";
  EXPECT_EQ(tokenizer->Decode(tokenizer->Encode(bytes)), bytes);
  EXPECT_EQ(StreamEncode(*tokenizer, bytes, 1), tokenizer->Encode(bytes));
}

TEST_P(FixtureTest, OffsetsPlaceEachTokenInTheText) {
  std::unique_ptr<BpeTokenizer> tokenizer = LoadFixture(GetParam());
  ASSERT_NE(tokenizer, nullptr);
  std::string text = ReadFixture("text.txt") + "<|endoftext|>\xE4\xB8 cut\xF0\x9F";
  std::vector<int64_t> offsets;
  const std::vector<int32_t> ids = tokenizer->Encode(text, &offsets);
  EXPECT_EQ(ids, tokenizer->Encode(text));
  ASSERT_EQ(offsets.size(), ids.size() + 1);
  EXPECT_EQ(offsets.front(), 0);
  EXPECT_EQ(offsets.back(), static_cast<int64_t>(text.size()));
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto begin = static_cast<size_t>(offsets[i]);
    const auto length = static_cast<size_t>(offsets[i + 1] - offsets[i]);
    ASSERT_EQ(tokenizer->Decode(std::span(&ids[i], 1)), text.substr(begin, length)) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(BpeTokenizer, FixtureTest,
                         ::testing::Values("gpt2.json", "llama3.json", "llama3_wide.json"));

TEST(BpeTokenizer, WideIdsEqualTheLibrary) {
  std::unique_ptr<BpeTokenizer> tokenizer = LoadFixture("llama3_wide.json");
  ASSERT_NE(tokenizer, nullptr);
  const nlohmann::json& wide = Expected()["llama3_wide.json"];
  const std::vector<int32_t> expected = wide["wide_ids"];
  EXPECT_EQ(tokenizer->Encode(wide["wide_text"].get<std::string>()), expected);
  EXPECT_EQ(tokenizer->id_limit(), 70001);
}

TEST(BpeTokenizer, AddedTokenSplitAcrossChunksIsFound) {
  std::unique_ptr<BpeTokenizer> tokenizer = LoadFixture("llama3.json");
  ASSERT_NE(tokenizer, nullptr);
  const std::string text = "ab<|begin_of_text|>cd";
  const std::vector<int32_t> whole = tokenizer->Encode(text);
  EXPECT_THAT(whole, ::testing::Contains(0));
  for (size_t chunk = 1; chunk < text.size(); ++chunk) {
    EXPECT_EQ(StreamEncode(*tokenizer, text, chunk), whole) << "chunk " << chunk;
  }
}

TEST(BpeTokenizer, AddedTokenIdIsTheIdEncodeGivesItsText) {
  std::unique_ptr<BpeTokenizer> tokenizer = LoadFixture("llama3_wide.json");
  ASSERT_NE(tokenizer, nullptr);
  for (const std::string token : {"<|begin_of_text|>", "<|end_of_text|>", "<|wide|>"}) {
    const std::optional<int32_t> id = tokenizer->AddedTokenId(token);
    ASSERT_TRUE(id.has_value()) << token;
    EXPECT_EQ(tokenizer->Encode("x" + token + "y")[1], *id) << token;
  }
  EXPECT_EQ(tokenizer->AddedTokenId("<|wide|>"), std::optional<int32_t>(70000));
  // Plain vocabulary entries and unknown text are not added tokens.
  EXPECT_EQ(tokenizer->AddedTokenId("a"), std::nullopt);
  EXPECT_EQ(tokenizer->AddedTokenId("<|nope|>"), std::nullopt);
}

// The fuzz target's seed: a tiny vocabulary, so that most of the text stays single bytes.
TEST(BpeTokenizer, StreamingWithATinyVocabularyGivesTheWholeTextsIds) {
  StatusOr<std::unique_ptr<BpeTokenizer>> tokenizer = BpeTokenizer::Load(
      std::string(HOIST_SOURCE_DIR) + "/fuzz/corpus/fuzz_tokenizer_json/gpt2_small.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  const std::string text =
      "It's THEY'LL 12345 \t\n\n  x\xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD "
      "<|endoftext|>\xff\xfe\r\n end  ";
  const std::vector<int32_t> whole = (*tokenizer)->Encode(text);
  for (size_t chunk : {1, 2, 3, 5}) {
    EXPECT_EQ(StreamEncode(**tokenizer, text, chunk), whole) << "chunk " << chunk;
  }
}

// A valid tokenizer.json with one edit, for the error tests.
std::string Edited(const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json config = nlohmann::json::parse(ReadFixture("llama3.json"));
  edit(config);
  return config.dump();
}

Status ParseError(const std::string& text) {
  StatusOr<std::unique_ptr<BpeTokenizer>> tokenizer = BpeTokenizer::Parse(text, "tok.json");
  return tokenizer.ok() ? Status::Ok() : tokenizer.status();
}

TEST(BpeTokenizerErrors, MissingModelNamesTheFileAndField) {
  Status status = ParseError(Edited([](nlohmann::json& c) { c.erase("model"); }));
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("tok.json"));
  EXPECT_THAT(status.message(), HasSubstr("model"));
}

TEST(BpeTokenizerErrors, UnknownSplitPatternIsNamed) {
  Status status = ParseError(Edited([](nlohmann::json& c) {
    c["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+|\\s+";
  }));
  EXPECT_EQ(status.code(), StatusCode::kUnimplemented);
  EXPECT_THAT(status.message(), HasSubstr("tok.json"));
  EXPECT_THAT(status.message(), HasSubstr("pre_tokenizer.pretokenizers[0].pattern.Regex"));
  EXPECT_THAT(status.message(), HasSubstr("\\w+|\\s+"));
}

TEST(BpeTokenizerErrors, MergeOfUnknownTokenIsNamed) {
  Status status = ParseError(Edited([](nlohmann::json& c) {
    c["model"]["merges"][5] = nlohmann::json::array({"Ġ", "nosuchtoken"});
  }));
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("tok.json"));
  EXPECT_THAT(status.message(), HasSubstr("model.merges[5]"));
  EXPECT_THAT(status.message(), HasSubstr("nosuchtoken"));
}

TEST(BpeTokenizerErrors, MalformedMergeStringIsNamed) {
  Status status = ParseError(Edited([](nlohmann::json& c) { c["model"]["merges"][2] = "abc"; }));
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("model.merges[2]"));
}

TEST(BpeTokenizerErrors, TruncatedJsonNamesTheFile) {
  const std::string text = ReadFixture("gpt2.json");
  Status status = ParseError(text.substr(0, text.size() / 2));
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("tok.json"));
  EXPECT_THAT(status.message(), HasSubstr("not valid JSON"));
}

TEST(BpeTokenizerErrors, NumberOutOfRangeIsAnErrorNotAnException) {
  Status status = ParseError("{\"model\": 1e999}");
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("tok.json"));
}

TEST(BpeTokenizerErrors, FlagOfTheWrongTypeNamesTheField) {
  Status status =
      ParseError(Edited([](nlohmann::json& c) { c["model"]["ignore_merges"] = "yes"; }));
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("model.ignore_merges"));
  status = ParseError(Edited([](nlohmann::json& c) { c["added_tokens"][0]["lstrip"] = 1; }));
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("added_tokens[0].lstrip"));
}

TEST(BpeTokenizerErrors, NormalizerIsUnsupported) {
  Status status = ParseError(Edited([](nlohmann::json& c) {
    c["normalizer"] = {{"type", "NFC"}};
  }));
  EXPECT_EQ(status.code(), StatusCode::kUnimplemented);
  EXPECT_THAT(status.message(), HasSubstr("normalizer"));
}

TEST(BpeTokenizer, PostProcessorGivesTheSpecialTokensAroundAText) {
  // Llama 3's: <|begin_of_text|> before, in a Sequence after ByteLevel as Llama 3.1 writes it.
  const nlohmann::json llama3 = {
      {"type", "Sequence"},
      {"processors",
       {{{"type", "ByteLevel"}, {"trim_offsets", false}},
        {{"type", "TemplateProcessing"},
         {"single",
          {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
           {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
         {"special_tokens",
          {{"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {7}}}},
           {"</s>", {{"id", "</s>"}, {"ids", {8, 9}}}}}}}}}};
  auto tokenizer = BpeTokenizer::Parse(
      Edited([&](nlohmann::json& c) { c["post_processor"] = llama3; }), "tok.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  EXPECT_EQ((*tokenizer)->special_prefix(), std::vector<int32_t>{7});
  EXPECT_TRUE((*tokenizer)->special_suffix().empty());
  // A token after the text too.
  nlohmann::json both = llama3;
  both["processors"][1]["single"].push_back({{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}});
  tokenizer = BpeTokenizer::Parse(Edited([&](nlohmann::json& c) { c["post_processor"] = both; }),
                                  "tok.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  EXPECT_EQ((*tokenizer)->special_suffix(), (std::vector<int32_t>{8, 9}));
  // GPT-2's ByteLevel adds none.
  tokenizer = BpeTokenizer::Parse(Edited([&](nlohmann::json& c) {
                                    c["post_processor"] = {{"type", "ByteLevel"}};
                                  }),
                                  "tok.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  EXPECT_TRUE((*tokenizer)->special_prefix().empty());
}

TEST(BpeTokenizer, OffsetsOfAnAddedTokenAreItsOwnText) {
  // "é" and "Ġx" are characters of the byte alphabet, but an added token is found as its UTF-8
  // text: 2 and 3 bytes, not the 1 and 2 bytes they would stand for in the alphabet.
  auto tokenizer = BpeTokenizer::Parse(Edited([](nlohmann::json& c) {
                                         c["added_tokens"].push_back({{"content", "é"}});
                                         c["added_tokens"].push_back({{"content", "Ġx"}});
                                       }),
                                       "tok.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  // " x" is the model's token "Ġx" too, whose id the added token takes: the same id stands for
  // 2 bytes there and 3 where the text holds "Ġx".
  const std::string text = "aéb Ġx c x";
  std::vector<int64_t> offsets;
  const std::vector<int32_t> ids = (*tokenizer)->Encode(text, &offsets);
  ASSERT_EQ(offsets.size(), ids.size() + 1);
  EXPECT_EQ(offsets.back(), static_cast<int64_t>(text.size()));
  for (const char* added : {"é", "Ġx"}) {
    const std::optional<int32_t> id = (*tokenizer)->AddedTokenId(added);
    ASSERT_TRUE(id.has_value());
    const auto at = std::find(ids.begin(), ids.end(), *id) - ids.begin();
    ASSERT_LT(at, static_cast<std::ptrdiff_t>(ids.size()));
    const size_t begin = text.find(added);
    EXPECT_EQ(offsets[at], static_cast<int64_t>(begin)) << added;
    EXPECT_EQ(offsets[at + 1], static_cast<int64_t>(begin + std::string(added).size())) << added;
  }
  // The plain text after the last added token, " c x", is its tokens alone, placed after it.
  std::vector<int64_t> tail_offsets;
  const std::vector<int32_t> tail = (*tokenizer)->Encode(" c x", &tail_offsets);
  ASSERT_LE(tail.size(), ids.size());
  const size_t from = ids.size() - tail.size();
  EXPECT_EQ(std::vector<int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(from), ids.end()), tail);
  for (size_t i = 0; i <= tail.size(); ++i) {
    EXPECT_EQ(offsets[from + i], static_cast<int64_t>(text.size()) - 4 + tail_offsets[i]) << i;
  }
}

TEST(BpeTokenizerErrors, PostProcessorsNotReadAreNamedWhenAsked) {
  Status status = ParseError(Edited([](nlohmann::json& c) {
    c["post_processor"] = {{"type", "RobertaProcessing"}};
  }));
  EXPECT_TRUE(status.ok()) << status.ToString();  // Encode and Decode do without it
  auto tokenizer = BpeTokenizer::Parse(Edited([](nlohmann::json& c) {
                                         c["post_processor"] = {{"type", "RobertaProcessing"}};
                                       }),
                                       "tok.json");
  ASSERT_TRUE(tokenizer.ok());
  status = (*tokenizer)->CheckPostProcessor();
  EXPECT_EQ(status.code(), StatusCode::kUnimplemented);
  EXPECT_THAT(status.message(), HasSubstr("post_processor.type"));
  status = ParseError(Edited([](nlohmann::json& c) {
    c["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single", {{{"SpecialToken", {{"id", "<s>"}}}}}}};
  }));
  EXPECT_TRUE(status.ok()) << status.ToString();
  tokenizer = BpeTokenizer::Parse(Edited([](nlohmann::json& c) {
                                    c["post_processor"] = {
                                        {"type", "TemplateProcessing"},
                                        {"single", {{{"SpecialToken", {{"id", "<s>"}}}}}}};
                                  }),
                                  "tok.json");
  ASSERT_TRUE(tokenizer.ok());
  status = (*tokenizer)->CheckPostProcessor();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("post_processor.special_tokens"));
  EXPECT_THAT(status.message(), HasSubstr("<s>"));
}

TEST(BpeTokenizerErrors, VocabularyWithoutEveryByteIsNamed) {
  Status status = ParseError(Edited([](nlohmann::json& c) { c["model"]["vocab"].erase("Ġ"); }));
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("model.vocab"));
}

// Ids may leave gaps, up to the largest int32: a vocabulary whose largest id is near it is read
// without a table of that many entries (a fuzzed file once asked for 53 GB here).
TEST(BpeTokenizer, AnIdFarPastTheVocabularyNeedsNoTableOfItsSize) {
  auto tokenizer = BpeTokenizer::Parse(
      Edited([](nlohmann::json& c) { c["model"]["vocab"]["Ġthe"] = 1665000000; }), "tok.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  EXPECT_EQ((*tokenizer)->id_limit(), 1665000001);
  const std::vector<int32_t> ids = (*tokenizer)->Encode(" the");
  ASSERT_EQ(ids, (std::vector<int32_t>{1665000000}));
  EXPECT_EQ((*tokenizer)->Decode(ids), " the");
}

TEST(BpeTokenizerErrors, MissingFileIsNotFoundNamingIt) {
  StatusOr<std::unique_ptr<BpeTokenizer>> tokenizer =
      BpeTokenizer::Load(FixturePath("no_such_tokenizer.json"));
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("no_such_tokenizer.json"));
}

}  // namespace
}  // namespace hoist::runtime
