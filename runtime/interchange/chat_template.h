// Chat templates: the Jinja template a model ships in its tokenizer_config.json ("chat_template")
// that turns a conversation into the text the model was trained on, rendered byte for byte as
// transformers' apply_chat_template(..., tokenize=False) renders it. The messages are prepared
// as apply_chat_template prepares them (keys whose value is null are dropped; a message's
// "reasoning_content", "thinking" or "reasoning" is also given under the other names), and the
// template sees `messages`, `tools` and `documents` (none unless given), `add_generation_prompt`,
// the tokenizer's named special tokens (bos_token, eos_token, ...) and any extra variables.
//
// The interpreter (runtime/jinja_*.h) covers what the chat templates of Llama 3.x, Qwen 2.5 and 3,
// Mistral and Gemma 2 use, and more: {{ }}, if/elif/else, for with loop.* and else, set
// (namespace attributes and set blocks too), macros, with, break/continue, whitespace control with
// trim_blocks and lstrip_blocks, comments, raw, Python's operators, subscripts and slices, the
// common filters and tests, str and dict methods, raise_exception, strftime_now, namespace, range
// and dict. A template using anything else is refused by Parse, naming the construct and its line
// and column ("chat template line 3:14: the filter 'foo' is not supported").
//
// {% generation %}...{% endgeneration %} (transformers' marker of the assistant's tokens) is
// rendered as its body, and the byte ranges it produced are reported, for masking the loss.
//
// A ChatTemplate is immutable and cheap to copy; Render is thread-safe and allocates per call.
// Rendering never blocks; the reader of tokenizer_config.json blocks on the file.
#pragma once

#include <ctime>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/file_system.h"
#include "core/status.h"
#include "runtime/interchange/jinja_eval.h"

namespace hoist::runtime {

struct ChatRenderOptions {
  // Ends the text with the header of an assistant turn, for generation.
  bool add_generation_prompt = false;
  // The tokenizer's named special tokens as the template sees them ("bos_token" ->
  // "<|begin_of_text|>"); see TokenizerChatConfig.
  std::map<std::string, std::string> special_tokens;
  // More variables for the template, a JSON object: tools, documents, enable_thinking,
  // date_string, ... Objects keep their order when given as ordered_json.
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
  // The local time strftime_now formats; the machine's clock when absent.
  std::optional<std::tm> now;
  jinja::RenderLimits limits;
};

// A byte range [begin, end) of a rendered text.
struct ChatSpan {
  size_t begin = 0;
  size_t end = 0;
  bool operator==(const ChatSpan&) const = default;
};

struct RenderedChat {
  std::string text;
  // What {% generation %} blocks rendered, in order (empty when the template has none).
  std::vector<ChatSpan> generation_spans;
};

class ChatTemplate {
 public:
  // Parses the template's source. Unsupported constructs are Unimplemented, malformed templates
  // InvalidArgument; both name the line and column.
  static StatusOr<ChatTemplate> Parse(std::string_view source);

  // Renders `messages`, a JSON array of message objects. A conversation the template refuses
  // (raise_exception) is InvalidArgument carrying the template's message; a render past its
  // limits is ResourceExhausted.
  StatusOr<RenderedChat> Render(const nlohmann::ordered_json& messages,
                                const ChatRenderOptions& options) const;
  StatusOr<RenderedChat> Render(const nlohmann::json& messages,
                                const ChatRenderOptions& options) const;

  // Whether the template marks the assistant's text with {% generation %} blocks.
  bool has_generation_blocks() const { return template_->has_generation; }

 private:
  explicit ChatTemplate(std::shared_ptr<const jinja::Template> tmpl) : template_(std::move(tmpl)) {}
  StatusOr<RenderedChat> RenderValue(const jinja::Value& messages,
                                     const ChatRenderOptions& options) const;

  std::shared_ptr<const jinja::Template> template_;
};

// What a tokenizer_config.json says about chat: the template and the named special tokens.
struct TokenizerChatConfig {
  std::string chat_template;
  // bos_token, eos_token, unk_token, sep_token, pad_token, cls_token and mask_token, those the file
  // sets (as a string or as an added token's {"content": ...}), as apply_chat_template passes them.
  std::map<std::string, std::string> special_tokens;
};

// Reads the text of a tokenizer_config.json; `source` names it in errors. "chat_template" is a
// string, or a list of {"name", "template"} from which `template_name` is taken. A file without a
// chat template is NotFound.
StatusOr<TokenizerChatConfig> ParseTokenizerChatConfig(
    std::string_view json_text, const std::string& source,
    const std::string& template_name = "default");

// Reads the tokenizer_config.json at `path`. When it has no "chat_template" and a
// chat_template.jinja lies beside it (as newer transformers save one), that file is the template.
StatusOr<TokenizerChatConfig> ReadTokenizerChatConfig(FileSystem& fs, const std::string& path,
                                                      const std::string& template_name = "default");

// The named special tokens of the tokenizer_config.json at `path`, as TokenizerChatConfig has
// them, whether or not it has a chat template.
StatusOr<std::map<std::string, std::string>> ReadTokenizerSpecialTokens(FileSystem& fs,
                                                                        const std::string& path);

}  // namespace hoist::runtime
