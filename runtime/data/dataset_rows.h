// The rows of fine-tuning datasets as people keep them: JSONL files, one JSON object a line, in
// one of the shapes TRL's SFTTrainer reads:
//
//   text                {"text": "..."}                                (continued pretraining)
//   prompt_completion   {"prompt": "...", "completion": "..."}, or both lists of messages
//   messages            {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}]}
//
// The shape is named by the caller or found from the first row (messages, then prompt and
// completion, then text); every row must then have it. Other keys of a row are ignored; a
// message's other keys are kept (a chat template may read them). Roles other than system, user
// and assistant (tool, function, ipython, ...) are refused by name: hoist does not train on tool
// calls.
//
// A row that breaks these rules is an error naming the file, the line and the field. With
// skip_malformed the reader passes over it instead and counts it, keeping the first reasons for
// the run's summary. Blank lines hold no row and are counted apart. Nothing else is dropped.
//
// The file is read in chunks through FileSystem (a non-regular file is refused there), and
// decompressed on the way when it is gzip or zstd (runtime/data/byte_stream.h; found by its first
// bytes, so data.jsonl.gz and data.jsonl.zst need no option), each line parsed with the bounded
// JSON reader (core/json_reader.h), so memory is bounded by a chunk and the longest line
// (kMaxDatasetLineBytes). Not thread-safe: one reader, one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/file_system.h"
#include "core/status.h"
#include "runtime/data/byte_stream.h"

namespace hoist::runtime {

enum class RowShape { kText, kPromptCompletion, kMessages };

// "text", "prompt_completion", "messages": the names the config takes.
const char* RowShapeName(RowShape shape);
// The shape named `name`; InvalidArgument naming the three otherwise.
StatusOr<RowShape> RowShapeNamed(std::string_view name);

// The longest line a dataset may have: far beyond any conversation a model trains on.
inline constexpr int64_t kMaxDatasetLineBytes = int64_t{64} << 20;

struct DatasetRow {
  RowShape shape = RowShape::kText;
  int64_t line = 0;  // 1-based line of the file
  std::string text;  // kText
  // kPromptCompletion with strings.
  std::string prompt, completion;
  // kMessages: the conversation. kPromptCompletion with lists: prompt_messages then
  // completion_messages. Each message an object with string "role" and "content".
  nlohmann::json messages = nlohmann::json::array();
  nlohmann::json completion_messages = nlohmann::json::array();
  // Whether a kPromptCompletion row holds messages (else strings).
  bool conversational = false;
};

struct RowReaderOptions {
  std::optional<RowShape> shape;  // empty: found from the first row
  bool skip_malformed = false;
  // How many skipped rows' reasons the summary keeps.
  int max_reasons = 5;
};

struct RowReaderSummary {
  int64_t rows = 0;                  // rows handed out
  int64_t skipped = 0;               // malformed rows passed over (skip_malformed)
  int64_t blank_lines = 0;           // lines of only whitespace
  std::vector<std::string> reasons;  // the first skipped rows' errors
};

class JsonlRowReader {
 public:
  static StatusOr<std::unique_ptr<JsonlRowReader>> Open(FileSystem& fs, const std::string& path,
                                                        const RowReaderOptions& options = {});

  // The next row into *row: true, or false at the end of the file. A malformed row (without
  // skip_malformed) or a read error is an error naming the file and line; the reader is then
  // at the next line.
  StatusOr<bool> Next(DatasetRow* row);

  // The shape of the rows: the one named, or found from the first row once Next has read it.
  std::optional<RowShape> shape() const { return shape_; }
  const RowReaderSummary& summary() const { return summary_; }
  // The bytes of the file read so far (compressed, for a compressed file; for a progress line).
  int64_t bytes_read() const { return stream_->file_bytes_read(); }
  Compression compression() const { return stream_->compression(); }
  const std::string& path() const { return path_; }

 private:
  JsonlRowReader(std::unique_ptr<ByteStream> stream, std::string path, RowReaderOptions options);
  // The next line without its end into *line: false at the end of the file.
  StatusOr<bool> NextLine(std::string* line);
  // Fills *row from the parsed line, or says what is wrong with it.
  Status ReadRow(const nlohmann::json& value, DatasetRow* row);

  std::unique_ptr<ByteStream> stream_;
  std::string path_;
  RowReaderOptions options_;
  std::optional<RowShape> shape_;
  RowReaderSummary summary_;
  std::string chunk_;        // bytes read and not yet handed out
  size_t chunk_start_ = 0;   // first byte of chunk_ not yet handed out
  int64_t line_number_ = 0;  // of the last line handed out
  bool at_end_ = false;      // the file has been read to its end
};

}  // namespace hoist::runtime
