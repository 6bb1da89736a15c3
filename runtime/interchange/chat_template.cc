#include "runtime/interchange/chat_template.h"

#include <utility>

#include "core/json_reader.h"
#include "runtime/interchange/jinja_parser.h"

namespace hoist::runtime {
namespace {

using jinja::Map;
using jinja::Value;

// The names apply_chat_template gives the tokenizer's special tokens.
constexpr const char* kSpecialTokenNames[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                              "pad_token", "cls_token", "mask_token"};
// The names a message's reasoning may come under, the first the one templates read.
constexpr const char* kReasoningFields[] = {"reasoning_content", "thinking", "reasoning"};

Status InTemplate(const Status& status) {
  return Status(status.code(), "chat template " + status.message());
}

// A message as apply_chat_template hands it to the template.
StatusOr<Value> PrepareMessage(const Value& message, size_t index) {
  if (!message.is_map()) {
    return InvalidArgumentError("chat message " + std::to_string(index) + " is a " +
                                jinja::TypeName(message) +
                                "; every message must be a JSON object such as "
                                "{\"role\": \"user\", \"content\": \"...\"}");
  }
  std::vector<std::pair<std::string, Value>> entries;
  for (const auto& entry : message.as_map().entries) {
    if (!entry.second.is_none()) entries.push_back(entry);
  }
  auto find = [&](std::string_view key) -> Value* {
    for (auto& entry : entries) {
      if (entry.first == key) return &entry.second;
    }
    return nullptr;
  };
  const Value* reasoning = nullptr;
  for (const char* field : kReasoningFields) {
    if ((reasoning = find(field)) != nullptr) break;
  }
  if (reasoning == nullptr) return Value::MakeMap(std::move(entries));
  // {"thinking": r, **message, "reasoning_content": r}, in that order.
  const Value r = *reasoning;
  std::vector<std::pair<std::string, Value>> aliased;
  aliased.emplace_back("thinking", r);
  for (auto& entry : entries) {
    if (entry.first == "thinking") {
      aliased[0].second = std::move(entry.second);
    } else {
      aliased.push_back(std::move(entry));
    }
  }
  bool set = false;
  for (auto& entry : aliased) {
    if (entry.first == "reasoning_content") {
      entry.second = r;
      set = true;
    }
  }
  if (!set) aliased.emplace_back("reasoning_content", r);
  return Value::MakeMap(std::move(aliased));
}

// A special token's text: a string, or an added token {"content": ...}; absent when null.
StatusOr<std::optional<std::string>> SpecialToken(const nlohmann::json& value,
                                                  const std::string& source,
                                                  const std::string& key) {
  if (value.is_null()) return std::optional<std::string>();
  if (value.is_string()) return std::optional<std::string>(value.get<std::string>());
  if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    return std::optional<std::string>(value["content"].get<std::string>());
  }
  return InvalidArgumentError(source + ": " + key +
                              ": expected a string or an object with a string \"content\", found " +
                              value.dump().substr(0, 80));
}

Status ReadSpecialTokens(const nlohmann::json& root, const std::string& source,
                         TokenizerChatConfig* config) {
  for (const char* key : kSpecialTokenNames) {
    if (!root.contains(key)) continue;
    HOIST_ASSIGN_OR_RETURN(std::optional<std::string> token, SpecialToken(root[key], source, key));
    if (token) config->special_tokens[key] = *token;
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source) {
  StatusOr<std::unique_ptr<jinja::Template>> parsed = jinja::ParseTemplate(source);
  if (!parsed.ok()) return InTemplate(parsed.status());
  return ChatTemplate(std::shared_ptr<const jinja::Template>(std::move(parsed).value()));
}

StatusOr<RenderedChat> ChatTemplate::Render(const nlohmann::ordered_json& messages,
                                            const ChatRenderOptions& options) const {
  HOIST_ASSIGN_OR_RETURN(Value value, jinja::FromJson(messages));
  return RenderValue(value, options);
}

StatusOr<RenderedChat> ChatTemplate::Render(const nlohmann::json& messages,
                                            const ChatRenderOptions& options) const {
  HOIST_ASSIGN_OR_RETURN(Value value, jinja::FromJson(messages));
  return RenderValue(value, options);
}

StatusOr<RenderedChat> ChatTemplate::RenderValue(const Value& messages,
                                                 const ChatRenderOptions& options) const {
  if (!messages.is_list()) {
    return InvalidArgumentError("the messages to render are a " + jinja::TypeName(messages) +
                                "; give a JSON array of message objects");
  }
  if (messages.as_list().items.empty()) {
    return InvalidArgumentError("there are no messages to render; a conversation needs one");
  }
  std::vector<Value> prepared;
  prepared.reserve(messages.as_list().items.size());
  for (size_t i = 0; i < messages.as_list().items.size(); ++i) {
    HOIST_ASSIGN_OR_RETURN(Value message, PrepareMessage(messages.as_list().items[i], i));
    prepared.push_back(std::move(message));
  }
  if (!options.variables.is_object()) {
    return InvalidArgumentError("the chat template's extra variables must be a JSON object");
  }
  std::vector<std::pair<std::string, Value>> variables;
  variables.emplace_back("messages", Value::MakeList(std::move(prepared)));
  variables.emplace_back("tools", Value::None());
  variables.emplace_back("documents", Value::None());
  variables.emplace_back("add_generation_prompt", Value::Bool(options.add_generation_prompt));
  auto put = [&](const std::string& name, Value value) {
    for (auto& var : variables) {
      if (var.first == name) {
        var.second = std::move(value);
        return;
      }
    }
    variables.emplace_back(name, std::move(value));
  };
  for (const auto& [name, token] : options.special_tokens) put(name, Value::String(token));
  for (auto it = options.variables.begin(); it != options.variables.end(); ++it) {
    if (it.key() == "messages" || it.key() == "add_generation_prompt") {
      return InvalidArgumentError("the chat template variable '" + it.key() +
                                  "' is set by Render itself; it cannot be an extra variable");
    }
    HOIST_ASSIGN_OR_RETURN(Value value, jinja::FromJson(it.value()));
    put(it.key(), std::move(value));
  }
  StatusOr<jinja::RenderOutput> out =
      jinja::RenderTemplate(*template_, variables, options.now, options.limits);
  if (!out.ok()) return InTemplate(out.status());
  RenderedChat chat;
  chat.text = std::move(out->text);
  for (const auto& [begin, end] : out->generation_spans) {
    chat.generation_spans.push_back(ChatSpan{begin, end});
  }
  return chat;
}

StatusOr<TokenizerChatConfig> ParseTokenizerChatConfig(std::string_view json_text,
                                                       const std::string& source,
                                                       const std::string& template_name) {
  HOIST_ASSIGN_OR_RETURN(nlohmann::json root, ParseJson(json_text, source));
  if (!root.is_object()) return InvalidArgumentError(source + ": expected a JSON object");
  TokenizerChatConfig config;
  HOIST_RETURN_IF_ERROR(ReadSpecialTokens(root, source, &config));
  if (!root.contains("chat_template") || root["chat_template"].is_null()) {
    return NotFoundError(source +
                         " has no chat_template; give the model's tokenizer_config.json (or a "
                         "chat_template.jinja beside it)");
  }
  const nlohmann::json& field = root["chat_template"];
  if (field.is_string()) {
    config.chat_template = field.get<std::string>();
    return config;
  }
  if (!field.is_array()) {
    return InvalidArgumentError(source +
                                ": chat_template: expected a string or a list of "
                                "{\"name\": ..., \"template\": ...}");
  }
  std::string names;
  for (size_t i = 0; i < field.size(); ++i) {
    const nlohmann::json& entry = field[i];
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
        !entry.contains("template") || !entry["template"].is_string()) {
      return InvalidArgumentError(source + ": chat_template[" + std::to_string(i) +
                                  "]: expected {\"name\": string, \"template\": string}");
    }
    const std::string name = entry["name"].get<std::string>();
    if (name == template_name) {
      config.chat_template = entry["template"].get<std::string>();
      return config;
    }
    names += (names.empty() ? "'" : ", '") + name + "'";
  }
  return InvalidArgumentError(source + ": chat_template has no template named '" + template_name +
                              "' (it has " + (names.empty() ? std::string("none") : names) + ")");
}

StatusOr<TokenizerChatConfig> ReadTokenizerChatConfig(FileSystem& fs, const std::string& path,
                                                      const std::string& template_name) {
  HOIST_ASSIGN_OR_RETURN(std::string text, ReadFileToString(fs, path, kJsonMaxBytes));
  StatusOr<TokenizerChatConfig> config = ParseTokenizerChatConfig(text, path, template_name);
  if (config.ok() || config.status().code() != StatusCode::kNotFound) return config;
  const size_t slash = path.rfind('/');
  const std::string jinja_path =
      (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) +
      "chat_template.jinja";
  StatusOr<FileInfo> info = fs.Stat(jinja_path);
  if (!info.ok() || info->type != FileType::kRegular) return config;
  // The special tokens still come from the config; only the template is elsewhere.
  HOIST_ASSIGN_OR_RETURN(nlohmann::json root, ParseJson(text, path));
  TokenizerChatConfig found;
  HOIST_RETURN_IF_ERROR(ReadSpecialTokens(root, path, &found));
  HOIST_ASSIGN_OR_RETURN(
      found.chat_template,
      ReadFileToString(fs, jinja_path, static_cast<int64_t>(jinja::kMaxTemplateBytes)));
  return found;
}

StatusOr<std::map<std::string, std::string>> ReadTokenizerSpecialTokens(FileSystem& fs,
                                                                        const std::string& path) {
  HOIST_ASSIGN_OR_RETURN(std::string text, ReadFileToString(fs, path, kJsonMaxBytes));
  HOIST_ASSIGN_OR_RETURN(nlohmann::json root, ParseJson(text, path));
  if (!root.is_object()) return InvalidArgumentError(path + ": expected a JSON object");
  TokenizerChatConfig config;
  HOIST_RETURN_IF_ERROR(ReadSpecialTokens(root, path, &config));
  return config.special_tokens;
}

}  // namespace hoist::runtime
