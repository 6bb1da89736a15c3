// Examples from dataset rows (runtime/data/example_encoder.h): the tokens and loss masks of each
// row shape. The assistant's turns found by rendering a template's prefixes are checked against
// the spans transformers reported for the same conversations through a template marked with
// {% generation %} blocks (tests/data/chat_templates/expected.json, made by
// scripts/reference/chat_templates.py), and the tokens of a rendered chat against the ids the
// tokenizers library gave (tokens.json).
#include "runtime/data/example_encoder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/runtime/chat_fixture_util.h"

namespace hoist::runtime {
namespace {

using nlohmann::json;
using testing::ChatFixtureNow;
using testing::ChatFixturePath;
using ::testing::HasSubstr;
using testing::ReadChatFixture;

const json& Expected() {
  static const json expected = json::parse(ReadChatFixture("expected.json"));
  return expected;
}

struct Chat {
  ChatTemplate tmpl;
  std::map<std::string, std::string> special_tokens;
};

Chat LoadChat(const std::string& family) {
  StatusOr<TokenizerChatConfig> config = ReadTokenizerChatConfig(
      FileSystem::Posix(), ChatFixturePath(family + "/tokenizer_config.json"));
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  if (!config.ok()) std::abort();
  StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(config->chat_template);
  EXPECT_TRUE(tmpl.ok()) << tmpl.status().ToString();
  if (!tmpl.ok()) std::abort();
  return Chat{*tmpl, config->special_tokens};
}

ExampleEncoder MakeEncoder(std::shared_ptr<const BpeTokenizer> tokenizer,
                           std::optional<ChatTemplate> tmpl,
                           const std::map<std::string, std::string>& special_tokens = {},
                           LossTokens loss = LossTokens::kAuto, const json& variables = {}) {
  ExampleEncoderOptions options;
  options.loss = loss;
  options.render.special_tokens = special_tokens;
  options.render.now = ChatFixtureNow();
  if (variables.is_object()) {
    for (auto it = variables.begin(); it != variables.end(); ++it) {
      if (it.key() != "add_generation_prompt") options.render.variables[it.key()] = it.value();
    }
  }
  auto it = special_tokens.find("eos_token");
  if (it != special_tokens.end()) options.eos_token = it->second;
  StatusOr<ExampleEncoder> encoder =
      ExampleEncoder::Create(std::move(tokenizer), std::move(tmpl), options);
  EXPECT_TRUE(encoder.ok()) << encoder.status().ToString();
  if (!encoder.ok()) std::abort();
  return *encoder;
}

DatasetRow MessagesRow(const json& messages) {
  DatasetRow row;
  row.shape = RowShape::kMessages;
  row.messages = messages;
  return row;
}

// The bytes of a byte-level example and its mask as one byte a token.
std::string Bytes(const EncodedExample& example) {
  return std::string(example.tokens.begin(), example.tokens.end());
}
// The bytes of a byte-level example's targets, in order.
std::string TargetBytes(const EncodedExample& example) {
  std::string targets;
  for (size_t i = 0; i < example.tokens.size(); ++i) {
    if (example.mask[i] == 1) targets += static_cast<char>(example.tokens[i]);
  }
  return targets;
}
std::vector<uint8_t> MaskOfSpans(size_t size, const json& spans) {
  std::vector<uint8_t> mask(size, 0);
  for (const json& span : spans) {
    for (size_t i = span[0].get<size_t>(); i < span[1].get<size_t>(); ++i) mask[i] = 1;
  }
  return mask;
}

// Conversations a dataset row may hold: system, user and assistant messages, ending with the
// assistant, and no tools.
bool Trainable(const json& conversation) {
  const json& messages = conversation["messages"];
  if (conversation["options"].contains("tools") || messages.empty() ||
      messages.back()["role"] != "assistant") {
    return false;
  }
  for (const json& message : messages) {
    const std::string role = message["role"];
    if (role != "system" && role != "user" && role != "assistant") return false;
    if (message.contains("tool_calls")) return false;
  }
  return true;
}

TEST(ExampleEncoder, AssistantTurnsOfAPlainTemplateAreWhatTransformersMarks) {
  // Llama 3.2's own template has no generation blocks; the one derived from it does, and
  // transformers reported the bytes they render. One token per byte, so the mask is per byte.
  const Chat llama = LoadChat("llama3_2");
  int checked = 0;
  for (const auto& [name, conversation] : Expected()["conversations"].items()) {
    if (!Trainable(conversation)) continue;
    SCOPED_TRACE(name);
    const json& want = Expected()["families"]["llama3_2_generation"][name];
    ASSERT_TRUE(want.contains("generation_spans"));
    const ExampleEncoder encoder = MakeEncoder(nullptr, llama.tmpl, llama.special_tokens,
                                               LossTokens::kAuto, conversation["options"]);
    EncodedExample example;
    ASSERT_TRUE(encoder.Encode(MessagesRow(conversation["messages"]), &example).ok());
    const std::string text = want["text"];
    EXPECT_EQ(Bytes(example), text);
    EXPECT_EQ(example.mask, MaskOfSpans(text.size(), want["generation_spans"]));
    ++checked;
  }
  EXPECT_GE(checked, 4);
}

TEST(ExampleEncoder, GenerationBlocksGiveTheSameMaskAsPrefixes) {
  const Chat llama = LoadChat("llama3_2");
  StatusOr<ChatTemplate> marked =
      ChatTemplate::Parse(ReadChatFixture("generation/llama3_2_generation.jinja"));
  ASSERT_TRUE(marked.ok()) << marked.status().ToString();
  ASSERT_TRUE(marked->has_generation_blocks());
  ASSERT_FALSE(llama.tmpl.has_generation_blocks());
  const ExampleEncoder by_blocks = MakeEncoder(nullptr, *marked, llama.special_tokens);
  const ExampleEncoder by_prefixes = MakeEncoder(nullptr, llama.tmpl, llama.special_tokens);
  const DatasetRow row =
      MessagesRow(Expected()["conversations"]["multi_turn_generation_prompt"]["messages"]);
  EncodedExample a, b;
  ASSERT_TRUE(by_blocks.Encode(row, &a).ok());
  ASSERT_TRUE(by_prefixes.Encode(row, &b).ok());
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.mask, b.mask);
  EXPECT_GT(a.targets(), 0);
}

TEST(ExampleEncoder, ChatmlTurnsEndWithTheirTurnEnd) {
  // Qwen 2.5: an assistant turn is its content, <|im_end|> and the newline the template writes
  // after it; the template's default system prompt and the user turns are not targets.
  const Chat qwen = LoadChat("qwen2_5");
  const ExampleEncoder encoder = MakeEncoder(nullptr, qwen.tmpl, qwen.special_tokens);
  const json messages = json::parse(R"([{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "2+2?"},
      {"role": "assistant", "content": "4"}])");
  EncodedExample example;
  ASSERT_TRUE(encoder.Encode(MessagesRow(messages), &example).ok());
  EXPECT_EQ(TargetBytes(example), "Hello!<|im_end|>\n4<|im_end|>\n");
  EXPECT_THAT(Bytes(example), HasSubstr("<|im_start|>system\n"));
}

TEST(ExampleEncoder, ATemplateThatRewritesEarlierTurnsIsRefusedNamingTheMessage) {
  // Qwen3 drops the reasoning of assistant turns before the last question: the conversation cut
  // after the first answer renders it, the whole does not.
  const Chat qwen3 = LoadChat("qwen3");
  const ExampleEncoder encoder = MakeEncoder(nullptr, qwen3.tmpl, qwen3.special_tokens);
  EncodedExample example;
  const Status status =
      encoder.Encode(MessagesRow(Expected()["conversations"]["thinking"]["messages"]), &example);
  ASSERT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_THAT(status.message(), HasSubstr("message 1"));
  EXPECT_THAT(status.message(), HasSubstr("{% generation %}"));
  EXPECT_THAT(status.message(), HasSubstr("--loss all"));
  // Trained on every token, the same row is fine.
  const ExampleEncoder all =
      MakeEncoder(nullptr, qwen3.tmpl, qwen3.special_tokens, LossTokens::kAll);
  ASSERT_TRUE(
      all.Encode(MessagesRow(Expected()["conversations"]["thinking"]["messages"]), &example).ok());
  EXPECT_EQ(Bytes(example), Expected()["families"]["qwen3"]["thinking"]["text"].get<std::string>());
  EXPECT_EQ(example.targets(), static_cast<int64_t>(example.tokens.size()));
}

TEST(ExampleEncoder, TokensOfARenderedChatAreTheTokenizersIds) {
  StatusOr<std::unique_ptr<BpeTokenizer>> tokenizer =
      BpeTokenizer::Load(ChatFixturePath("chat_tokenizer.json"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  std::shared_ptr<const BpeTokenizer> shared = std::move(tokenizer).value();
  const json tokens = json::parse(ReadChatFixture("tokens.json"));
  const Chat llama = LoadChat("llama3_2");
  const ExampleEncoder encoder =
      MakeEncoder(shared, llama.tmpl, llama.special_tokens, LossTokens::kAll);
  // The fixture's text is a rendered conversation; as a text row without eos and prefix it is
  // tokenized as apply_chat_template(tokenize=True) tokenizes it.
  DatasetRow row;
  row.shape = RowShape::kText;
  row.text = tokens["llama3_2"]["text"];
  ExampleEncoderOptions options;
  options.loss = LossTokens::kAll;
  options.append_eos = false;
  StatusOr<ExampleEncoder> plain = ExampleEncoder::Create(shared, std::nullopt, options);
  ASSERT_TRUE(plain.ok());
  EncodedExample example;
  ASSERT_TRUE(plain->Encode(row, &example).ok());
  const std::vector<uint32_t> want = tokens["llama3_2"]["ids"].get<std::vector<uint32_t>>();
  EXPECT_EQ(example.tokens, want);

  // A conversation: the targets are whole tokens covering the assistant's text.
  const json messages = json::parse(R"([{"role": "user", "content": "Capital of France?"},
      {"role": "assistant", "content": "Paris is the capital."}])");
  const ExampleEncoder assistant = MakeEncoder(shared, llama.tmpl, llama.special_tokens);
  ASSERT_TRUE(assistant.Encode(MessagesRow(messages), &example).ok());
  std::vector<int32_t> ids(example.tokens.begin(), example.tokens.end());
  std::vector<int32_t> target_ids;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (example.mask[i] == 1) target_ids.push_back(ids[i]);
  }
  EXPECT_EQ(shared->Decode(target_ids), "Paris is the capital.<|eot_id|>");
  EXPECT_EQ(shared->Decode(ids).rfind("<|begin_of_text|>", 0), 0u);
}

// Llama 3's post-processor puts <|begin_of_text|> before a text, as `tokenizer(text)` does; a
// rendered chat has it from the template and gets no second one.
TEST(ExampleEncoder, APlainTextGetsThePostProcessorsTokensAndAChatDoesNot) {
  nlohmann::json config = json::parse(ReadChatFixture("chat_tokenizer.json"));
  config["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {0}}}}}}};
  StatusOr<std::unique_ptr<BpeTokenizer>> parsed = BpeTokenizer::Parse(config.dump(), "tok.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  std::shared_ptr<const BpeTokenizer> tokenizer = std::move(parsed).value();
  const Chat llama = LoadChat("llama3_2");
  const ExampleEncoder encoder = MakeEncoder(tokenizer, llama.tmpl, llama.special_tokens);
  DatasetRow text;
  text.shape = RowShape::kText;
  text.text = "Hello there";
  EncodedExample example;
  ASSERT_TRUE(encoder.Encode(text, &example).ok());
  ASSERT_GE(example.tokens.size(), 3u);
  EXPECT_EQ(example.tokens[0], 0u);
  EXPECT_EQ(std::count(example.tokens.begin(), example.tokens.end(), 0u), 1);
  EXPECT_EQ(example.targets(), static_cast<int64_t>(example.tokens.size()));
  EXPECT_EQ(example.tokens.back(), 4u);  // <|eot_id|>, the config's eos_token
  // A prompt/completion: the prefix is off the loss with the prompt.
  DatasetRow pc;
  pc.shape = RowShape::kPromptCompletion;
  pc.prompt = "Q: hi ";
  pc.completion = "A: yo";
  ASSERT_TRUE(encoder.Encode(pc, &example).ok());
  EXPECT_EQ(example.tokens[0], 0u);
  EXPECT_EQ(example.mask[0], 0);
  EXPECT_EQ(example.mask.back(), 1);
  // A conversation: one <|begin_of_text|>, the template's.
  ASSERT_TRUE(encoder
                  .Encode(MessagesRow(json::parse(R"([{"role": "user", "content": "Hi"},
                      {"role": "assistant", "content": "Yo"}])")),
                          &example)
                  .ok());
  EXPECT_EQ(example.tokens[0], 0u);
  EXPECT_EQ(std::count(example.tokens.begin(), example.tokens.end(), 0u), 1);
}

TEST(ExampleEncoder, TextRowsEndWithEosAndCountEveryToken) {
  ExampleEncoderOptions options;
  options.eos_token = "</s>";
  StatusOr<ExampleEncoder> encoder = ExampleEncoder::Create(nullptr, std::nullopt, options);
  ASSERT_TRUE(encoder.ok());
  DatasetRow row;
  row.shape = RowShape::kText;
  row.text = "abc";
  EncodedExample example;
  ASSERT_TRUE(encoder->Encode(row, &example).ok());
  EXPECT_EQ(Bytes(example), "abc</s>");
  EXPECT_EQ(example.targets(), 7);
  row.text = "abc</s>";  // not doubled
  ASSERT_TRUE(encoder->Encode(row, &example).ok());
  EXPECT_EQ(Bytes(example), "abc</s>");

  options.eos_token.clear();
  encoder = ExampleEncoder::Create(nullptr, std::nullopt, options);
  ASSERT_TRUE(encoder.ok());
  Status status = encoder->Encode(row, &example);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("--eos-token"));
  options.append_eos = false;
  encoder = ExampleEncoder::Create(nullptr, std::nullopt, options);
  ASSERT_TRUE(encoder.ok());
  ASSERT_TRUE(encoder->Encode(row, &example).ok());
  EXPECT_EQ(Bytes(example), "abc</s>");
}

TEST(ExampleEncoder, PromptCompletionCountsTheCompletion) {
  ExampleEncoderOptions options;
  options.eos_token = "<e>";
  StatusOr<ExampleEncoder> encoder = ExampleEncoder::Create(nullptr, std::nullopt, options);
  ASSERT_TRUE(encoder.ok());
  DatasetRow row;
  row.shape = RowShape::kPromptCompletion;
  row.prompt = "2+2=";
  row.completion = "4";
  EncodedExample example;
  ASSERT_TRUE(encoder->Encode(row, &example).ok());
  EXPECT_EQ(Bytes(example), "2+2=4<e>");
  EXPECT_EQ(example.mask, (std::vector<uint8_t>{0, 0, 0, 0, 1, 1, 1, 1}));

  options.loss = LossTokens::kAll;
  encoder = ExampleEncoder::Create(nullptr, std::nullopt, options);
  ASSERT_TRUE(encoder.ok());
  ASSERT_TRUE(encoder->Encode(row, &example).ok());
  EXPECT_EQ(example.targets(), 8);
}

TEST(ExampleEncoder, ConversationalPromptCompletionCountsWhatFollowsTheGenerationPrompt) {
  const Chat llama = LoadChat("llama3_2");
  const ExampleEncoder encoder = MakeEncoder(nullptr, llama.tmpl, llama.special_tokens);
  DatasetRow row;
  row.shape = RowShape::kPromptCompletion;
  row.conversational = true;
  row.messages = json::parse(R"([{"role": "user", "content": "Hi"}])");
  row.completion_messages = json::parse(R"([{"role": "assistant", "content": "Hello"}])");
  EncodedExample example;
  ASSERT_TRUE(encoder.Encode(row, &example).ok());
  EXPECT_EQ(TargetBytes(example), "Hello<|eot_id|>");
}

TEST(ExampleEncoder, ALossTheRowsCannotHaveIsRefused) {
  const Chat llama = LoadChat("llama3_2");
  EncodedExample example;
  DatasetRow text;
  text.shape = RowShape::kText;
  text.text = "x";
  Status status = MakeEncoder(nullptr, llama.tmpl, llama.special_tokens, LossTokens::kAssistant)
                      .Encode(text, &example);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("assistant tokens needs conversations"));
  const DatasetRow chat = MessagesRow(json::parse(R"([{"role": "user", "content": "Hi"}])"));
  status = MakeEncoder(nullptr, llama.tmpl, llama.special_tokens, LossTokens::kCompletion)
               .Encode(chat, &example);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("prompt_completion rows"));
  // Every token of a conversational prompt/completion, even where the template renders the
  // prompt with a generation prompt otherwise than before its completion.
  DatasetRow pc;
  pc.shape = RowShape::kPromptCompletion;
  pc.conversational = true;
  pc.messages = json::parse(R"([{"role": "user", "content": "Hi"}])");
  pc.completion_messages = json::parse(R"([{"role": "assistant", "content": "Yo"}])");
  StatusOr<ChatTemplate> odd = ChatTemplate::Parse(
      "{% for m in messages %}[{{ m.content }}]{% endfor %}"
      "{% if add_generation_prompt %}<gen>{% endif %}");
  ASSERT_TRUE(odd.ok());
  status = MakeEncoder(nullptr, *odd).Encode(pc, &example);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("--loss all"));
  ASSERT_TRUE(MakeEncoder(nullptr, *odd, {}, LossTokens::kAll).Encode(pc, &example).ok());
  EXPECT_EQ(Bytes(example), "[Hi][Yo]");
  EXPECT_EQ(example.targets(), 8);
  // A conversation without a template.
  status = MakeEncoder(nullptr, std::nullopt).Encode(chat, &example);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("--chat-template"));
  // A conversation the template refuses: its message, with the turn rendered.
  const Chat mistral = LoadChat("mistral_v0_1");
  status = MakeEncoder(nullptr, mistral.tmpl, mistral.special_tokens)
               .Encode(MessagesRow(json::parse(R"([{"role": "user", "content": "a"},
                   {"role": "user", "content": "b"}, {"role": "assistant", "content": "c"}])")),
                       &example);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("alternate"));
}

}  // namespace
}  // namespace hoist::runtime
