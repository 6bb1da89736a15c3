#include "runtime/data/example_encoder.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace hoist::runtime {
namespace {

using nlohmann::json;

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() && text.compare(0, prefix.size(), prefix) == 0;
}

// The first `n` messages of `messages`.
json Head(const json& messages, size_t n) {
  return json(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(n));
}

// Where two texts first differ, for an error message: a few bytes of each from there.
std::string FirstDifference(std::string_view a, std::string_view b) {
  size_t at = 0;
  while (at < a.size() && at < b.size() && a[at] == b[at]) ++at;
  auto excerpt = [&](std::string_view text) {
    std::string out =
        json(std::string(text.substr(at, 40))).dump(-1, ' ', false, json::error_handler_t::replace);
    return at + 40 < text.size() ? out + "..." : out;
  };
  return "at byte " + std::to_string(at) + ": " + excerpt(a) + " against " + excerpt(b);
}

}  // namespace

const char* LossTokensName(LossTokens loss) {
  switch (loss) {
    case LossTokens::kAuto: return "auto";
    case LossTokens::kAssistant: return "assistant";
    case LossTokens::kCompletion: return "completion";
    case LossTokens::kAll: return "all";
  }
  return "?";
}

StatusOr<LossTokens> LossTokensNamed(std::string_view name) {
  for (LossTokens loss :
       {LossTokens::kAuto, LossTokens::kAssistant, LossTokens::kCompletion, LossTokens::kAll}) {
    if (name == LossTokensName(loss)) return loss;
  }
  return InvalidArgumentError("the loss tokens '" + std::string(name) +
                              "' are none of auto, assistant, completion, all");
}

int64_t EncodedExample::targets() const {
  return std::accumulate(mask.begin(), mask.end(), int64_t{0});
}

ExampleEncoder::ExampleEncoder(std::shared_ptr<const BpeTokenizer> tokenizer,
                               std::optional<ChatTemplate> chat_template,
                               ExampleEncoderOptions options)
    : tokenizer_(std::move(tokenizer)),
      chat_template_(std::move(chat_template)),
      options_(std::move(options)) {}

StatusOr<ExampleEncoder> ExampleEncoder::Create(std::shared_ptr<const BpeTokenizer> tokenizer,
                                                std::optional<ChatTemplate> chat_template,
                                                ExampleEncoderOptions options) {
  return ExampleEncoder(std::move(tokenizer), std::move(chat_template), std::move(options));
}

int32_t ExampleEncoder::id_limit() const {
  return tokenizer_ != nullptr ? tokenizer_->id_limit() : 256;
}

Status ExampleEncoder::Tokenize(std::string_view text, const std::vector<Span>& spans, bool plain,
                                EncodedExample* out) const {
  std::vector<int32_t> ids;
  std::vector<int64_t> offsets;
  if (tokenizer_ != nullptr) {
    if (plain) HOIST_RETURN_IF_ERROR(tokenizer_->CheckPostProcessor());
    ids = tokenizer_->Encode(text, &offsets);
    if (offsets.back() != static_cast<int64_t>(text.size())) {
      return InternalError("the tokenizer's tokens cover " + std::to_string(offsets.back()) +
                           " bytes of a text of " + std::to_string(text.size()) +
                           "; the loss mask cannot be placed");
    }
  } else {
    ids.assign(text.begin(), text.end());
    for (int32_t& id : ids) id &= 0xff;
    offsets.resize(ids.size() + 1);
    std::iota(offsets.begin(), offsets.end(), int64_t{0});
  }
  // A token is a target when its bytes [offsets[i], offsets[i + 1]) meet a span; both are sorted,
  // so one pass over each.
  std::vector<uint8_t> mask(ids.size(), 0);
  size_t s = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto begin = static_cast<size_t>(offsets[i]);
    const auto end = static_cast<size_t>(offsets[i + 1]);
    while (s < spans.size() && (spans[s].end <= begin || spans[s].begin == spans[s].end)) ++s;
    mask[i] = s < spans.size() && spans[s].begin < end ? 1 : 0;
  }
  out->tokens.clear();
  out->mask.clear();
  const bool first_target = !mask.empty() && mask.front() == 1;
  const bool last_target = !mask.empty() && mask.back() == 1;
  if (plain && tokenizer_ != nullptr) {
    for (int32_t id : tokenizer_->special_prefix()) {
      out->tokens.push_back(static_cast<uint32_t>(id));
      out->mask.push_back(first_target ? 1 : 0);
    }
  }
  out->tokens.insert(out->tokens.end(), ids.begin(), ids.end());
  out->mask.insert(out->mask.end(), mask.begin(), mask.end());
  if (plain && tokenizer_ != nullptr) {
    for (int32_t id : tokenizer_->special_suffix()) {
      out->tokens.push_back(static_cast<uint32_t>(id));
      out->mask.push_back(last_target ? 1 : 0);
    }
  }
  return Status::Ok();
}

StatusOr<RenderedChat> ExampleEncoder::Render(const json& messages,
                                              bool add_generation_prompt) const {
  ChatRenderOptions options = options_.render;
  options.add_generation_prompt = add_generation_prompt;
  return chat_template_->Render(messages, options);
}

Status ExampleEncoder::RenderAssistantTurns(const json& messages, std::string* text,
                                            std::vector<Span>* spans) const {
  HOIST_ASSIGN_OR_RETURN(RenderedChat whole, Render(messages, /*add_generation_prompt=*/false));
  spans->clear();
  if (chat_template_->has_generation_blocks()) {
    for (const ChatSpan& span : whole.generation_spans) {
      spans->push_back(Span{span.begin, span.end});
    }
    *text = std::move(whole.text);
    return Status::Ok();
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i]["role"] != "assistant") continue;
    const std::string which = "message " + std::to_string(i) + " (an assistant turn)";
    StatusOr<RenderedChat> before = Render(Head(messages, i), /*add_generation_prompt=*/true);
    if (!before.ok()) {
      return before.status().WithContext("rendering the conversation before " + which);
    }
    StatusOr<RenderedChat> through = Render(Head(messages, i + 1), false);
    if (!through.ok()) {
      return through.status().WithContext("rendering the conversation through " + which);
    }
    const char* fix =
        "; the assistant's tokens cannot be told from the text: give a chat template with "
        "{% generation %} blocks (--chat-template), or train on every token (--loss all)";
    if (!StartsWith(through->text, before->text)) {
      return InvalidArgumentError(
          "the chat template renders the conversation before " + which +
          " with a generation prompt differently from the conversation through it (" +
          FirstDifference(before->text, through->text) + ")" + fix);
    }
    if (!StartsWith(whole.text, through->text)) {
      return InvalidArgumentError("the chat template renders the conversation through " + which +
                                  " differently from the whole conversation (" +
                                  FirstDifference(through->text, whole.text) + ")" + fix);
    }
    if (through->text.size() > before->text.size()) {
      spans->push_back(Span{before->text.size(), through->text.size()});
    }
  }
  *text = std::move(whole.text);
  return Status::Ok();
}

Status ExampleEncoder::RenderCompletion(const json& prompt, const json& completion,
                                        std::string* text, std::vector<Span>* spans) const {
  json both = prompt;
  for (const json& message : completion) both.push_back(message);
  StatusOr<RenderedChat> head = Render(prompt, /*add_generation_prompt=*/true);
  if (!head.ok()) return head.status().WithContext("rendering the prompt");
  StatusOr<RenderedChat> whole = Render(both, /*add_generation_prompt=*/false);
  if (!whole.ok()) return whole.status().WithContext("rendering the prompt and completion");
  if (!StartsWith(whole->text, head->text)) {
    return InvalidArgumentError(
        "the chat template renders the prompt with a generation prompt differently from the "
        "prompt followed by the completion (" +
        FirstDifference(head->text, whole->text) +
        "); the completion's tokens cannot be told from the text: train on every token (--loss "
        "all)");
  }
  spans->clear();
  if (whole->text.size() > head->text.size()) {
    spans->push_back(Span{head->text.size(), whole->text.size()});
  }
  *text = std::move(whole->text);
  return Status::Ok();
}

StatusOr<std::string> ExampleEncoder::WithEos(std::string text) const {
  if (!options_.append_eos) return text;
  if (options_.eos_token.empty()) {
    return InvalidArgumentError(
        std::string("no end-of-sequence token is known to end the text with (") +
        (tokenizer_ != nullptr ? "the tokenizer's tokenizer_config.json names no eos_token"
                               : "there is no tokenizer") +
        "); name it (--eos-token) or leave the texts as they are (--no-eos)");
  }
  if (text.size() < options_.eos_token.size() ||
      text.compare(text.size() - options_.eos_token.size(), std::string::npos,
                   options_.eos_token) != 0) {
    text += options_.eos_token;
  }
  return text;
}

Status ExampleEncoder::Encode(const DatasetRow& row, EncodedExample* out) const {
  const LossTokens loss = options_.loss;
  auto refuse = [&](const char* needs) {
    return InvalidArgumentError(std::string("the loss on the ") + LossTokensName(loss) +
                                " tokens needs " + needs + ", and the rows are " +
                                RowShapeName(row.shape) + "; choose another --loss");
  };
  const bool conversational = row.shape == RowShape::kMessages || row.conversational;
  if (conversational && !chat_template_.has_value()) {
    return FailedPreconditionError(
        std::string("the rows are conversations (") + RowShapeName(row.shape) +
        ") and no chat template is known: the tokenizer_config.json has none; give one "
        "(--chat-template FILE)");
  }
  std::string text;
  std::vector<Span> spans;
  switch (row.shape) {
    case RowShape::kText: {
      if (loss == LossTokens::kAssistant) return refuse("conversations (messages rows)");
      if (loss == LossTokens::kCompletion) return refuse("prompt_completion rows");
      HOIST_ASSIGN_OR_RETURN(text, WithEos(row.text));
      spans.push_back(Span{0, text.size()});
      return Tokenize(text, spans, /*plain=*/true, out);
    }
    case RowShape::kPromptCompletion: {
      if (loss == LossTokens::kAssistant && !row.conversational) {
        return refuse("conversations (prompt and completion as messages)");
      }
      if (row.conversational) {
        json both = row.messages;
        for (const json& message : row.completion_messages) both.push_back(message);
        if (loss == LossTokens::kAll) {
          HOIST_ASSIGN_OR_RETURN(RenderedChat whole, Render(both, false));
          text = std::move(whole.text);
          spans.push_back(Span{0, text.size()});
        } else if (loss == LossTokens::kAssistant) {
          HOIST_RETURN_IF_ERROR(RenderAssistantTurns(both, &text, &spans));
        } else {
          HOIST_RETURN_IF_ERROR(
              RenderCompletion(row.messages, row.completion_messages, &text, &spans));
        }
        return Tokenize(text, spans, /*plain=*/false, out);
      }
      HOIST_ASSIGN_OR_RETURN(text, WithEos(row.prompt + row.completion));
      const size_t from = loss == LossTokens::kAll ? 0 : row.prompt.size();
      if (text.size() > from) spans.push_back(Span{from, text.size()});
      return Tokenize(text, spans, /*plain=*/true, out);
    }
    case RowShape::kMessages: {
      if (loss == LossTokens::kCompletion) return refuse("prompt_completion rows");
      if (loss == LossTokens::kAll) {
        HOIST_ASSIGN_OR_RETURN(RenderedChat whole, Render(row.messages, false));
        text = std::move(whole.text);
        spans.push_back(Span{0, text.size()});
      } else {
        HOIST_RETURN_IF_ERROR(RenderAssistantTurns(row.messages, &text, &spans));
      }
      return Tokenize(text, spans, /*plain=*/false, out);
    }
  }
  return InternalError("unknown row shape");
}

}  // namespace hoist::runtime
