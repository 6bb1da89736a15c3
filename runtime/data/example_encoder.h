// Examples as a model trains on them: a dataset row (runtime/data/dataset_rows.h) turned into
// token ids and, per token, whether the loss counts it, as TRL's SFTTrainer prepares them:
//
//   text                the text, ended with the eos token unless it ends with it already; every
//                       token a target.
//   prompt_completion   strings: prompt + completion + eos, the completion's tokens the targets.
//                       Messages: the chat template over prompt + completion; the targets are what
//                       follows the prompt rendered with add_generation_prompt.
//   messages            the chat template over the conversation; the assistant's turns the targets.
//
// A plain text is tokenized as `tokenizer(text)` does, with the post-processor's special tokens
// around it (Llama 3's <|begin_of_text|>); a rendered chat as apply_chat_template(tokenize=True)
// does, the template writing its own. A token is a target when any of its bytes lies in a target
// span of the text (as transformers maps the assistant's characters to tokens): a token that
// holds the last bytes of a prompt and the first of its completion is a target (TRL, counting the
// prompt's tokens alone, would leave it out). Unlike TRL, whose SFTTrainer trains on every token of
// a conversation unless assistant_only_loss is set, the default here (kAuto) counts the
// assistant's turns only; kAll counts every token.
//
// The assistant's turns: with a template that marks them with {% generation %} blocks (what TRL's
// assistant_only_loss requires), what those blocks render. Otherwise, for each assistant message
// i, the text that rendering messages[:i+1] adds to messages[:i] rendered with
// add_generation_prompt: the message's content and the end of its turn ("Paris.<|eot_id|>",
// "Paris.<|im_end|>\n", " Paris.</s>"). That needs a template that renders the start of a
// conversation as the start of the whole; one that does not (Qwen3's drops the reasoning of turns
// before the last question) is refused for that row, naming the message, and can be given a
// template with generation blocks instead.
//
// Immutable after Create; Encode is thread-safe and allocates per call.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "runtime/data/dataset_rows.h"
#include "runtime/interchange/bpe_tokenizer.h"
#include "runtime/interchange/chat_template.h"

namespace hoist::runtime {

// Which tokens of an example the loss counts.
enum class LossTokens {
  kAuto,        // by the row's shape: text all, prompt_completion completion, messages assistant
  kAssistant,   // the assistant's turns of a conversation (TRL's assistant_only_loss)
  kCompletion,  // the completion of a prompt/completion row (TRL's completion_only_loss)
  kAll,         // every token
};

// "auto", "assistant", "completion", "all": the names the command line takes.
const char* LossTokensName(LossTokens loss);
StatusOr<LossTokens> LossTokensNamed(std::string_view name);

struct ExampleEncoderOptions {
  LossTokens loss = LossTokens::kAuto;
  // The end-of-sequence text put after a plain text or a string completion (TRL's default), and
  // whether to put it. Empty with append_eos: a row that needs it is refused, naming the fix.
  std::string eos_token;
  bool append_eos = true;
  // What the chat template sees besides the messages: the special tokens, variables
  // (enable_thinking, tools, ...), the clock. add_generation_prompt is set per render.
  ChatRenderOptions render;
};

// One example: its tokens and, per token, 1 where the loss counts it and 0 where not.
struct EncodedExample {
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> mask;
  int64_t targets() const;
};

class ExampleEncoder {
 public:
  // `tokenizer`: a byte-level BPE tokenizer, or null for one token per byte (ids 0..255).
  // `chat_template`: the template for conversational rows, or none (such rows are then refused).
  static StatusOr<ExampleEncoder> Create(std::shared_ptr<const BpeTokenizer> tokenizer,
                                         std::optional<ChatTemplate> chat_template,
                                         ExampleEncoderOptions options);

  // Encodes `row` into *out. Errors say what is wrong with the row (the loss asked of a shape
  // that has no such tokens, a template that refuses the conversation or renders its start
  // differently, a missing eos token) without naming the file: the caller knows it.
  Status Encode(const DatasetRow& row, EncodedExample* out) const;

  // One more than the largest id Encode may give, and the bytes a shard needs per token.
  int32_t id_limit() const;
  int token_bytes() const { return id_limit() > 65536 ? 4 : 2; }

 private:
  // A byte range [begin, end) of the text whose tokens the loss counts.
  struct Span {
    size_t begin = 0, end = 0;
  };
  ExampleEncoder(std::shared_ptr<const BpeTokenizer> tokenizer,
                 std::optional<ChatTemplate> chat_template, ExampleEncoderOptions options);

  // Tokenizes `text`, marking the tokens that touch `spans` (sorted, disjoint). `plain`: add the
  // post-processor's special tokens, as for a text that no template wrote.
  Status Tokenize(std::string_view text, const std::vector<Span>& spans, bool plain,
                  EncodedExample* out) const;
  StatusOr<RenderedChat> Render(const nlohmann::json& messages, bool add_generation_prompt) const;
  // The rendered conversation and the byte spans of its assistant turns.
  Status RenderAssistantTurns(const nlohmann::json& messages, std::string* text,
                              std::vector<Span>* spans) const;
  // The rendered prompt + completion and the span after the prompt.
  Status RenderCompletion(const nlohmann::json& prompt, const nlohmann::json& completion,
                          std::string* text, std::vector<Span>* spans) const;
  // text + eos, unless it ends with eos already or eos is off.
  StatusOr<std::string> WithEos(std::string text) const;

  std::shared_ptr<const BpeTokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_template_;
  ExampleEncoderOptions options_;
};

}  // namespace hoist::runtime
