// Chat templates (runtime/interchange/chat_template.h) against transformers: every family's real
// template renders every reference conversation byte for byte as apply_chat_template does, and the
// interpreter matches Python's jinja2 on the semantics fixture (tests/data/chat_templates/, made
// by scripts/reference/chat_templates.py).
#include "runtime/interchange/chat_template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/interchange/bpe_tokenizer.h"
#include "tests/runtime/chat_fixture_util.h"

namespace hoist::runtime {
namespace {

using ::testing::HasSubstr;
using ordered_json = nlohmann::ordered_json;
using jinja::RenderLimits;

using testing::ChatFixtureNow;

std::string FixturePath(const std::string& name) { return testing::ChatFixturePath(name); }
std::string ReadFixture(const std::string& name) { return testing::ReadChatFixture(name); }
const ordered_json& Expected() { return testing::ChatExpected(); }
std::tm FixtureNow() { return ChatFixtureNow(); }

struct Family {
  ChatTemplate tmpl;
  std::map<std::string, std::string> special_tokens;
};

// A family's template and special tokens: a tokenizer_config.json, or for the templates with
// {% generation %} blocks, the .jinja file and the tokens of the family it derives from.
Family LoadFamily(const std::string& name) {
  TokenizerChatConfig config;
  if (name == "llama3_2_generation" || name == "chatml_generation") {
    if (name == "llama3_2_generation") {
      StatusOr<TokenizerChatConfig> base = ReadTokenizerChatConfig(
          FileSystem::Posix(), FixturePath("llama3_2/tokenizer_config.json"));
      EXPECT_TRUE(base.ok()) << base.status().ToString();
      if (base.ok()) config.special_tokens = base->special_tokens;
    } else {
      config.special_tokens["eos_token"] = "<|im_end|>";
    }
    config.chat_template = ReadFixture("generation/" + name + ".jinja");
  } else {
    StatusOr<TokenizerChatConfig> read =
        ReadTokenizerChatConfig(FileSystem::Posix(), FixturePath(name + "/tokenizer_config.json"));
    EXPECT_TRUE(read.ok()) << read.status().ToString();
    if (read.ok()) config = *read;
  }
  StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(config.chat_template);
  EXPECT_TRUE(tmpl.ok()) << name << ": " << tmpl.status().ToString();
  if (!tmpl.ok()) std::abort();
  return Family{*tmpl, config.special_tokens};
}

ChatRenderOptions OptionsFor(const ordered_json& fixture_options, const Family& family) {
  ChatRenderOptions options;
  options.special_tokens = family.special_tokens;
  options.now = FixtureNow();
  for (auto it = fixture_options.begin(); it != fixture_options.end(); ++it) {
    if (it.key() == "add_generation_prompt") {
      options.add_generation_prompt = it.value().get<bool>();
    } else {
      options.variables[it.key()] = it.value();
    }
  }
  return options;
}

class FamilyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FamilyTest, RendersEveryConversationAsTransformers) {
  const Family family = LoadFamily(GetParam());
  const ordered_json& conversations = Expected()["conversations"];
  const ordered_json& expected = Expected()["families"][GetParam()];
  ASSERT_FALSE(expected.empty());
  int checked = 0;
  for (auto it = conversations.begin(); it != conversations.end(); ++it) {
    SCOPED_TRACE(GetParam() + " / " + it.key());
    const ordered_json& want = expected[it.key()];
    StatusOr<RenderedChat> got =
        family.tmpl.Render(it.value()["messages"], OptionsFor(it.value()["options"], family));
    if (want.contains("error")) {
      ASSERT_FALSE(got.ok()) << "rendered instead of failing:\n" << got->text;
      EXPECT_THAT(got.status().message(), HasSubstr(want["error"].get<std::string>()));
      EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
    } else {
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(got->text, want["text"].get<std::string>());
      std::vector<ChatSpan> spans;
      if (want.contains("generation_spans")) {
        for (const auto& span : want["generation_spans"]) {
          spans.push_back(ChatSpan{span[0].get<size_t>(), span[1].get<size_t>()});
        }
      }
      EXPECT_EQ(got->generation_spans, spans);
    }
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(conversations.size()));
}

INSTANTIATE_TEST_SUITE_P(ChatTemplate, FamilyTest,
                         ::testing::Values("llama3_1", "llama3_2", "qwen2_5", "qwen3",
                                           "mistral_v0_1", "mistral_v0_3", "gemma2",
                                           "llama3_2_generation", "chatml_generation"));

TEST(ChatTemplate, MatchesJinjaOnTheSemanticsFixture) {
  const ordered_json semantics = ordered_json::parse(ReadFixture("semantics.json"));
  ASSERT_GE(semantics.size(), 20u);
  for (auto it = semantics.begin(); it != semantics.end(); ++it) {
    SCOPED_TRACE(it.key());
    const ordered_json& c = it.value();
    StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(c["template"].get<std::string>());
    ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
    ChatRenderOptions options;
    options.now = FixtureNow();
    options.variables = c["variables"];
    StatusOr<RenderedChat> got =
        tmpl->Render(ordered_json::parse(R"([{"role": "user"}])"), options);
    if (c.contains("error")) {
      EXPECT_FALSE(got.ok()) << "rendered instead of failing: " << got->text;
    } else {
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(got->text, c["text"].get<std::string>());
    }
  }
}

// Renders `source` with the variables of `variables` (a JSON object) and one user message.
StatusOr<RenderedChat> RenderWith(const std::string& source,
                                  const ordered_json& variables = ordered_json::object()) {
  HOIST_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::Parse(source));
  ChatRenderOptions options;
  options.variables = variables;
  return tmpl.Render(ordered_json::parse(R"([{"role": "user", "content": "hi"}])"), options);
}

TEST(ChatTemplate, RaiseExceptionCarriesTheTemplatesMessage) {
  StatusOr<RenderedChat> got = RenderWith(
      "{% if messages[0].role == 'user' %}{{ raise_exception('No users here!') }}"
      "{% endif %}");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(got.status().message(),
            "chat template line 1:39: the template refuses this conversation: No users here!");
}

TEST(ChatTemplate, UnsupportedConstructsAreRefusedAtParseNamingThem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{{ x }}\n{{ y | wordcount }}", "line 2:8: the filter 'wordcount' is not supported"},
      {"{% if x is escaped %}{% endif %}", "line 1:12: the test 'escaped' is not supported"},
      {"{{ 'a{}'.format(1) }}", "line 1:10: the method 'format' is not supported"},
      {"{{ lipsum(2) }}", "line 1:4: the function 'lipsum' is not supported"},
      {"  {% include 'other.jinja' %}", "line 1:6: the statement 'include' is not supported"},
      {"{% extends 'base' %}", "the statement 'extends' is not supported"},
      {"{% for x in xs recursive %}{% endfor %}", "a recursive for loop is not supported"},
      {"{% filter upper %}x{% endfilter %}", "the statement 'filter' is not supported"},
      {"{{ f(*args) }}", "the function 'f' is not supported"},
      {"{% macro m() %}{% generation %}x{% endgeneration %}{% endmacro %}",
       "a generation block inside a macro or a set block is not supported"},
      {"{% if x %}{% macro m() %}{% endmacro %}{% endif %}",
       "a macro defined inside another statement is not supported"},
  };
  for (const auto& [source, message] : cases) {
    SCOPED_TRACE(source);
    StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(source);
    ASSERT_FALSE(tmpl.ok());
    EXPECT_EQ(tmpl.status().code(), StatusCode::kUnimplemented) << tmpl.status().ToString();
    EXPECT_THAT(tmpl.status().message(), HasSubstr(message));
    EXPECT_EQ(tmpl.status().message().rfind("chat template line ", 0), 0u);
  }
}

TEST(ChatTemplate, MalformedTemplatesNameWhere) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{% if x %}never closed", "chat template line 1:23: the template ends where 'endif'"},
      {"ok\n{{ 1 + }}", "chat template line 2:8: unexpected '}}'"},
      {"{% endfor %}", "chat template line 1:4: 'endfor' without the statement it closes"},
      {"{{ 'unterminated }}", "chat template line 1:4: a string is never closed"},
      {"{{ x", "chat template line 1:1: the tag {{ is never closed with }}"},
      {"{# open comment", "chat template line 1:1: a comment {# has no closing #}"},
      {"{% for x in y %}{% break %}{% endfor %}{% continue %}", "'continue' outside a for loop"},
  };
  for (const auto& [source, message] : cases) {
    SCOPED_TRACE(source);
    StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(source);
    ASSERT_FALSE(tmpl.ok());
    EXPECT_EQ(tmpl.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(tmpl.status().message(), HasSubstr(message));
  }
}

TEST(ChatTemplate, HostileTemplatesEndWithAnErrorNotACrash) {
  // Nesting past any stack: statements, parentheses, unary operators, a chain of attributes.
  std::string deep_if;
  for (int i = 0; i < 100000; ++i) deep_if += "{% if x %}";
  std::string deep_parens =
      "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  std::string deep_not = "{{ " + std::string(100000, '-') + "1 }}";
  std::string long_chain = "{{ x";
  for (int i = 0; i < 100000; ++i) long_chain += ".a";
  long_chain += " }}";
  std::string long_sum = "{{ 1";
  for (int i = 0; i < 100000; ++i) long_sum += " + 1";
  long_sum += " }}";
  for (const std::string* source : {&deep_if, &deep_parens, &deep_not, &long_chain, &long_sum}) {
    StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(*source);
    ASSERT_FALSE(tmpl.ok());
    EXPECT_EQ(tmpl.status().code(), StatusCode::kResourceExhausted) << tmpl.status().ToString();
    EXPECT_THAT(tmpl.status().message(), HasSubstr("levels deep"));
  }

  struct Runaway {
    std::string source;
    std::string message;
    int64_t max_steps = RenderLimits().max_steps;
  };
  const std::vector<Runaway> runaway = {
      // A loop that would run for hours (with a smaller budget than the default's 10M steps, to
      // keep the test quick).
      {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
       "ran more than 1000000 steps", 1'000'000},
      // Output and values past the limits.
      {"{{ 'x' * 1000000000000 }}", "a chat template may make"},
      {"{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(60) %}"
       "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}",
       "a chat template may make"},
      {"{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}", "the output passes"},
      // Recursion without end.
      {"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recurses more than"},
      // Values nested past every walker's depth.
      {"{% set ns = namespace(v=[]) %}{% for i in range(100000) %}{% set ns.v = [ns.v] %}"
       "{% endfor %}{{ ns.v|tojson }}",
       "levels deep"},
      {"{{ range(10000000)|length }}", "sandbox allows"},
  };
  for (const Runaway& c : runaway) {
    SCOPED_TRACE(c.source);
    StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(c.source);
    ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
    ChatRenderOptions options;
    options.limits.max_steps = c.max_steps;
    options.limits.max_output_bytes = size_t{16} << 20;
    StatusOr<RenderedChat> got =
        tmpl->Render(ordered_json::parse(R"([{"role": "user", "content": "hi"}])"), options);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), StatusCode::kResourceExhausted) << got.status().ToString();
    EXPECT_THAT(got.status().message(), HasSubstr(c.message));
  }
}

TEST(ChatTemplate, GenerationBlocksReportTheirByteRanges) {
  StatusOr<RenderedChat> got = RenderWith(
      "{%- for m in messages %}<{{ m.role }}>{% generation %}{{ m.content }}é{% endgeneration %}"
      "{%- endfor %}!");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->text, "<user>hié!");
  ASSERT_EQ(got->generation_spans.size(), 1u);
  EXPECT_EQ(got->generation_spans[0], (ChatSpan{6, 10}));
  EXPECT_EQ(got->text.substr(6, 4), "hié");
}

TEST(ChatTemplate, MessagesArePreparedAsApplyChatTemplateDoes) {
  // Null values are dropped (so `is defined` is false), and reasoning gets its other names.
  StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(
      "{% for m in messages %}{{ m.content is defined }} {{ m|tojson }}\n{% endfor %}"
      "{{ tools }} {{ documents }} {{ bos_token }}");
  ASSERT_TRUE(tmpl.ok());
  ChatRenderOptions options;
  options.special_tokens["bos_token"] = "<s>";
  StatusOr<RenderedChat> got =
      tmpl->Render(ordered_json::parse(R"([{"role": "assistant", "content": null, "reasoning": "r"},
                              {"role": "user", "content": "x", "thinking": "t"}])"),
                   options);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->text,
            "False {\"thinking\": \"r\", \"role\": \"assistant\", \"reasoning\": \"r\", "
            "\"reasoning_content\": \"r\"}\n"
            "True {\"thinking\": \"t\", \"role\": \"user\", \"content\": \"x\", "
            "\"reasoning_content\": \"t\"}\n"
            "None None <s>");

  EXPECT_FALSE(tmpl->Render(ordered_json::array(), options).ok());
  EXPECT_FALSE(tmpl->Render(ordered_json::parse("[1]"), options).ok());
  options.variables["messages"] = ordered_json::array();
  EXPECT_FALSE(tmpl->Render(ordered_json::parse(R"([{"role": "user"}])"), options).ok());
}

TEST(ChatTemplate, StrftimeNowFormatsTheInjectedTime) {
  StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse("{{ strftime_now('%d %b %Y %H:%M') }}");
  ASSERT_TRUE(tmpl.ok());
  ChatRenderOptions options;
  options.now = FixtureNow();
  StatusOr<RenderedChat> got = tmpl->Render(ordered_json::parse(R"([{"role": "user"}])"), options);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->text, "26 Sep 2024 10:30");
}

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::path(::testing::TempDir()) /
            ("hoist_chat_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string Write(const std::string& name, const std::string& text) const {
    const std::string file = (path_ / name).string();
    std::ofstream(file, std::ios::binary) << text;
    return file;
  }

 private:
  std::filesystem::path path_;
};

TEST(TokenizerChatConfig, ReadsTheTemplateAndSpecialTokensInEveryForm) {
  StatusOr<TokenizerChatConfig> config = ParseTokenizerChatConfig(
      R"({"bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
          "eos_token": "</s>", "pad_token": null, "unk_token": "<unk>", "model_max_length": 5,
          "chat_template": [{"name": "tool_use", "template": "T"},
                            {"name": "default", "template": "D"}]})",
      "tokenizer_config.json");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->chat_template, "D");
  EXPECT_EQ(config->special_tokens,
            (std::map<std::string, std::string>{
                {"bos_token", "<s>"}, {"eos_token", "</s>"}, {"unk_token", "<unk>"}}));

  StatusOr<TokenizerChatConfig> tool_use = ParseTokenizerChatConfig(
      R"({"chat_template": [{"name": "tool_use", "template": "T"}]})", "c.json", "tool_use");
  ASSERT_TRUE(tool_use.ok());
  EXPECT_EQ(tool_use->chat_template, "T");

  StatusOr<TokenizerChatConfig> no_default = ParseTokenizerChatConfig(
      R"({"chat_template": [{"name": "tool_use", "template": "T"}]})", "c.json");
  ASSERT_FALSE(no_default.ok());
  EXPECT_THAT(no_default.status().message(),
              HasSubstr("c.json: chat_template has no template named 'default' (it has "
                        "'tool_use')"));

  StatusOr<TokenizerChatConfig> missing =
      ParseTokenizerChatConfig(R"({"eos_token": "x"})", "c.json");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  StatusOr<TokenizerChatConfig> bad_token =
      ParseTokenizerChatConfig(R"({"eos_token": 5, "chat_template": "x"})", "c.json");
  ASSERT_FALSE(bad_token.ok());
  EXPECT_THAT(bad_token.status().message(), HasSubstr("c.json: eos_token: expected a string"));
  EXPECT_FALSE(ParseTokenizerChatConfig(R"({"chat_template": 3})", "c.json").ok());
  EXPECT_FALSE(ParseTokenizerChatConfig("[", "c.json").ok());
}

TEST(TokenizerChatConfig, TakesChatTemplateJinjaBesideTheConfig) {
  TempDir dir;
  const std::string config = dir.Write("tokenizer_config.json", R"({"eos_token": "<e>"})");
  StatusOr<TokenizerChatConfig> without = ReadTokenizerChatConfig(FileSystem::Posix(), config);
  EXPECT_EQ(without.status().code(), StatusCode::kNotFound);
  dir.Write("chat_template.jinja", "{{ eos_token }}");
  StatusOr<TokenizerChatConfig> with = ReadTokenizerChatConfig(FileSystem::Posix(), config);
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  EXPECT_EQ(with->chat_template, "{{ eos_token }}");
  EXPECT_EQ(with->special_tokens.at("eos_token"), "<e>");
}

// The rendered text goes to the tokenizer as one string; the chat special tokens in it are the
// tokenizer's added tokens and must come out as their single ids (tokens.json holds the ids the
// tokenizers library gives, chat_tokenizer.json the tokenizer).
TEST(ChatTokens, SpecialTokensInRenderedTextEncodeToTheirAddedTokenIds) {
  StatusOr<std::unique_ptr<BpeTokenizer>> tokenizer =
      BpeTokenizer::Load(FixturePath("chat_tokenizer.json"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  const ordered_json expected = ordered_json::parse(ReadFixture("tokens.json"));
  const ordered_json& conversation = Expected()["conversations"]["multi_turn_generation_prompt"];
  for (const std::string family : {"llama3_2", "qwen2_5"}) {
    SCOPED_TRACE(family);
    const Family f = LoadFamily(family);
    StatusOr<RenderedChat> chat =
        f.tmpl.Render(conversation["messages"], OptionsFor(conversation["options"], f));
    ASSERT_TRUE(chat.ok()) << chat.status().ToString();
    ASSERT_EQ(chat->text, expected[family]["text"].get<std::string>());
    const std::vector<int32_t> ids = (*tokenizer)->Encode(chat->text);
    EXPECT_EQ(ids, expected[family]["ids"].get<std::vector<int32_t>>());
    // Each special token string in the text is exactly one id, the added token's.
    for (auto it = expected["added"].begin(); it != expected["added"].end(); ++it) {
      const std::string& token = it.key();
      const int32_t id = it.value().get<int32_t>();
      EXPECT_EQ((*tokenizer)->AddedTokenId(token), std::optional<int32_t>(id)) << token;
      size_t occurrences = 0;
      for (size_t at = chat->text.find(token); at != std::string::npos;
           at = chat->text.find(token, at + token.size())) {
        ++occurrences;
      }
      EXPECT_EQ(static_cast<size_t>(std::count(ids.begin(), ids.end(), id)), occurrences) << token;
    }
  }
  EXPECT_EQ((*tokenizer)->AddedTokenId("<|not_a_token|>"), std::nullopt);
}

}  // namespace
}  // namespace hoist::runtime
