#include "runtime/data/dataset_rows.h"

#include <algorithm>
#include <utility>

#include "core/json_reader.h"

namespace hoist::runtime {
namespace {

constexpr int64_t kChunkBytes = int64_t{1} << 20;

// The JSON type of `value` in words, for messages.
std::string TypeOf(const nlohmann::json& value) {
  if (value.is_null()) return "null";
  if (value.is_string()) return "a string";
  if (value.is_boolean()) return "a boolean";
  if (value.is_number()) return "a number";
  if (value.is_array()) return "a list";
  return "an object";
}

bool IsBlank(std::string_view line) {
  return std::all_of(line.begin(), line.end(),
                     [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; });
}

// A row's field error: `field: what`.
Status FieldError(std::string_view field, const std::string& what) {
  return InvalidArgumentError("field `" + std::string(field) + "`: " + what);
}

Status ReadString(const nlohmann::json& row, std::string_view key, std::string* out) {
  const auto it = row.find(key);
  if (it == row.end()) return FieldError(key, "missing");
  if (!it->is_string()) return FieldError(key, "must be a string, found " + TypeOf(*it));
  *out = it->get<std::string>();
  return Status::Ok();
}

// Checks a list of messages at `field` (each {role, content} with a role hoist trains on) and
// copies it into *out.
Status ReadMessages(const nlohmann::json& row, std::string_view key, nlohmann::json* out) {
  const auto it = row.find(key);
  if (it == row.end()) return FieldError(key, "missing");
  if (!it->is_array()) return FieldError(key, "must be a list of messages, found " + TypeOf(*it));
  if (it->empty()) return FieldError(key, "is empty: a conversation needs at least one message");
  for (size_t i = 0; i < it->size(); ++i) {
    const nlohmann::json& message = (*it)[i];
    const std::string at = std::string(key) + "[" + std::to_string(i) + "]";
    if (!message.is_object()) {
      return FieldError(
          at, "must be an object with \"role\" and \"content\", found " + TypeOf(message));
    }
    const auto role = message.find("role");
    if (role == message.end()) return FieldError(at + ".role", "missing");
    if (!role->is_string()) {
      return FieldError(at + ".role", "must be a string, found " + TypeOf(*role));
    }
    const std::string& name = role->get_ref<const std::string&>();
    if (name != "system" && name != "user" && name != "assistant") {
      return FieldError(at + ".role",
                        "\"" + name +
                            "\" is not a role hoist trains on (system, user, assistant); tool "
                            "and function messages are not supported: drop those rows or "
                            "rewrite them as user and assistant turns");
    }
    const auto content = message.find("content");
    if (content == message.end()) return FieldError(at + ".content", "missing");
    if (!content->is_string()) {
      return FieldError(at + ".content", "must be a string, found " + TypeOf(*content));
    }
  }
  *out = *it;
  return Status::Ok();
}

}  // namespace

const char* RowShapeName(RowShape shape) {
  switch (shape) {
    case RowShape::kText: return "text";
    case RowShape::kPromptCompletion: return "prompt_completion";
    case RowShape::kMessages: return "messages";
  }
  return "unknown";
}

StatusOr<RowShape> RowShapeNamed(std::string_view name) {
  for (RowShape shape : {RowShape::kText, RowShape::kPromptCompletion, RowShape::kMessages}) {
    if (name == RowShapeName(shape)) return shape;
  }
  return InvalidArgumentError("dataset row shape \"" + std::string(name) +
                              "\" is not one of \"text\", \"prompt_completion\", \"messages\"");
}

StatusOr<std::unique_ptr<JsonlRowReader>> JsonlRowReader::Open(FileSystem& fs,
                                                               const std::string& path,
                                                               const RowReaderOptions& options) {
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, fs.NewRandomAccessFile(path));
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<ByteStream> stream,
                         ByteStream::Open(std::move(file), path));
  return std::unique_ptr<JsonlRowReader>(new JsonlRowReader(std::move(stream), path, options));
}

JsonlRowReader::JsonlRowReader(std::unique_ptr<ByteStream> stream, std::string path,
                               RowReaderOptions options)
    : stream_(std::move(stream)),
      path_(std::move(path)),
      options_(options),
      shape_(options.shape) {}

StatusOr<bool> JsonlRowReader::NextLine(std::string* line) {
  while (true) {
    const size_t end = chunk_.find('\n', chunk_start_);
    if (end != std::string::npos) {
      line->assign(chunk_, chunk_start_, end - chunk_start_);
      chunk_start_ = end + 1;
      ++line_number_;
      return true;
    }
    if (static_cast<int64_t>(chunk_.size() - chunk_start_) > kMaxDatasetLineBytes) {
      return ResourceExhaustedError(path_ + " line " + std::to_string(line_number_ + 1) +
                                    ": longer than " + std::to_string(kMaxDatasetLineBytes >> 20) +
                                    " MiB without a line end; is this a JSONL file?");
    }
    if (at_end_) {
      if (chunk_start_ >= chunk_.size()) return false;
      // The last line, without a line end.
      line->assign(chunk_, chunk_start_, std::string::npos);
      chunk_start_ = chunk_.size();
      ++line_number_;
      return true;
    }
    // Drop what was handed out and read the next chunk after what is left.
    chunk_.erase(0, chunk_start_);
    chunk_start_ = 0;
    const size_t kept = chunk_.size();
    chunk_.resize(kept + static_cast<size_t>(kChunkBytes));
    StatusOr<int64_t> got = stream_->Read(chunk_.data() + kept, kChunkBytes);
    if (!got.ok()) {
      chunk_.resize(kept);
      return got.status();
    }
    chunk_.resize(kept + static_cast<size_t>(*got));
    if (*got == 0) at_end_ = true;
  }
}

Status JsonlRowReader::ReadRow(const nlohmann::json& value, DatasetRow* row) {
  if (!value.is_object()) {
    return InvalidArgumentError("a row must be a JSON object, found " + TypeOf(value));
  }
  if (!shape_.has_value()) {
    if (value.contains("messages")) {
      shape_ = RowShape::kMessages;
    } else if (value.contains("prompt") && value.contains("completion")) {
      shape_ = RowShape::kPromptCompletion;
    } else if (value.contains("text")) {
      shape_ = RowShape::kText;
    } else {
      std::string keys;
      for (const auto& item : value.items()) keys += (keys.empty() ? "" : ", ") + item.key();
      return InvalidArgumentError(
          "the first row has none of the keys a dataset row is read by (\"messages\"; "
          "\"prompt\" and \"completion\"; \"text\"), it has: " +
          (keys.empty() ? std::string("nothing") : keys) +
          "; rename the column or name the shape in the config");
    }
  }
  DatasetRow out;
  out.shape = *shape_;
  out.line = line_number_;
  switch (*shape_) {
    case RowShape::kText: HOIST_RETURN_IF_ERROR(ReadString(value, "text", &out.text)); break;
    case RowShape::kMessages:
      HOIST_RETURN_IF_ERROR(ReadMessages(value, "messages", &out.messages));
      break;
    case RowShape::kPromptCompletion: {
      const auto prompt = value.find("prompt");
      if (prompt != value.end() && prompt->is_array()) {
        out.conversational = true;
        HOIST_RETURN_IF_ERROR(ReadMessages(value, "prompt", &out.messages));
        HOIST_RETURN_IF_ERROR(ReadMessages(value, "completion", &out.completion_messages));
      } else {
        HOIST_RETURN_IF_ERROR(ReadString(value, "prompt", &out.prompt));
        HOIST_RETURN_IF_ERROR(ReadString(value, "completion", &out.completion));
      }
      break;
    }
  }
  *row = std::move(out);
  return Status::Ok();
}

StatusOr<bool> JsonlRowReader::Next(DatasetRow* row) {
  std::string line;
  while (true) {
    HOIST_ASSIGN_OR_RETURN(bool more, NextLine(&line));
    if (!more) return false;
    if (IsBlank(line)) {
      ++summary_.blank_lines;
      continue;
    }
    const std::string where = path_ + " line " + std::to_string(line_number_);
    JsonLimits limits;
    limits.max_bytes = kMaxDatasetLineBytes;
    StatusOr<nlohmann::json> value = ParseJson(line, where, limits);
    Status status = value.ok() ? ReadRow(*value, row) : value.status();
    if (status.ok()) {
      ++summary_.rows;
      return true;
    }
    // ParseJson's errors name `where` already; a row's own errors get it here.
    std::string message = status.message();
    if (message.rfind(where, 0) != 0) message = where + ": " + message;
    if (!options_.skip_malformed) return Status(status.code(), message);
    ++summary_.skipped;
    if (static_cast<int>(summary_.reasons.size()) < options_.max_reasons) {
      summary_.reasons.push_back(std::move(message));
    }
  }
}

}  // namespace hoist::runtime
