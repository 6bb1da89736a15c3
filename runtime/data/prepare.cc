#include "runtime/data/prepare.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <set>
#include <span>
#include <utility>

#include "runtime/data/prepared_shard.h"
#include "runtime/data/progress_line.h"
#include "runtime/interchange/chat_template.h"
#include "runtime/interchange/jinja_parser.h"

namespace hoist::runtime {
namespace {

constexpr const char* kManifestName = "prepare.json";

std::string Join(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string ShardName(const char* set, size_t index) {
  char name[40];
  std::snprintf(name, sizeof(name), "%s_%06zu.bin", set, index);
  return name;
}

// Whether `name` is a file a prepared dataset consists of.
bool IsPreparedFile(const std::string& name) {
  auto shard = [&](const char* prefix) {
    const std::string p = prefix;
    return name.size() > p.size() + 4 && name.compare(0, p.size(), p) == 0 &&
           name.compare(name.size() - 4, 4, ".bin") == 0;
  };
  return name == kManifestName || shard("train_") || shard("val_");
}

// A set's shards, written one after another under the staging directory.
class SetWriter {
 public:
  SetWriter(FileSystem& fs, std::string staging, const char* name, int token_bytes,
            int64_t shard_tokens, PreparedSet* set)
      : fs_(fs),
        staging_(std::move(staging)),
        name_(name),
        token_bytes_(token_bytes),
        shard_tokens_(shard_tokens),
        set_(set) {}

  Status Append(std::span<const uint32_t> tokens, std::span<const uint8_t> mask) {
    if (writer_.has_value() && writer_->header().tokens >= shard_tokens_) {
      HOIST_RETURN_IF_ERROR(FinishShard());
    }
    if (!writer_.has_value()) {
      const std::string shard = ShardName(name_, set_->shards.size());
      HOIST_ASSIGN_OR_RETURN(PreparedShardWriter writer,
                             PreparedShardWriter::Create(Join(staging_, shard), token_bytes_, fs_));
      writer_.emplace(std::move(writer));
      set_->shards.push_back(shard);
    }
    HOIST_RETURN_IF_ERROR(writer_->Append(tokens, mask));
    ++set_->documents;
    set_->tokens += static_cast<int64_t>(tokens.size());
    for (uint8_t m : mask) set_->targets += m;
    return Status::Ok();
  }

  Status Finish() { return writer_.has_value() ? FinishShard() : Status::Ok(); }

 private:
  Status FinishShard() {
    Status status = writer_->Finish();
    writer_.reset();
    return status;
  }

  FileSystem& fs_;
  std::string staging_;
  const char* name_;
  int token_bytes_;
  int64_t shard_tokens_;
  PreparedSet* set_;
  std::optional<PreparedShardWriter> writer_;
};

// The tokenizer, the chat template and the special tokens `options` name.
struct Vocabulary {
  std::shared_ptr<const BpeTokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;
  std::map<std::string, std::string> special_tokens;
  std::string config_path;  // the tokenizer_config.json read, if any
};

StatusOr<Vocabulary> LoadVocabulary(const PrepareOptions& options, FileSystem& fs) {
  Vocabulary out;
  std::string config_text;
  if (!options.tokenizer.empty()) {
    HOIST_ASSIGN_OR_RETURN(FileInfo info, fs.Stat(options.tokenizer));
    std::string tokenizer_json = options.tokenizer;
    std::string dir;
    if (info.type == FileType::kDirectory) {
      dir = options.tokenizer;
      tokenizer_json = Join(dir, "tokenizer.json");
    } else {
      const size_t slash = tokenizer_json.rfind('/');
      dir = slash == std::string::npos ? "." : tokenizer_json.substr(0, slash);
    }
    HOIST_ASSIGN_OR_RETURN(std::unique_ptr<BpeTokenizer> tokenizer,
                           BpeTokenizer::Load(tokenizer_json, fs));
    out.tokenizer = std::move(tokenizer);
    const std::string config = Join(dir, "tokenizer_config.json");
    StatusOr<FileInfo> config_info = fs.Stat(config);
    if (config_info.ok() && config_info->type == FileType::kRegular) {
      out.config_path = config;
      // The template and the special tokens in one read, or the special tokens alone (eos_token
      // for plain texts) where the template is given apart or the config has none.
      std::optional<TokenizerChatConfig> chat;
      if (options.chat_template.empty()) {
        StatusOr<TokenizerChatConfig> read =
            ReadTokenizerChatConfig(fs, config, options.template_name);
        if (read.ok()) {
          chat = std::move(read).value();
        } else if (read.status().code() != StatusCode::kNotFound) {
          return read.status();
        }
      }
      if (chat.has_value()) {
        out.special_tokens = chat->special_tokens;
        StatusOr<ChatTemplate> parsed = ChatTemplate::Parse(chat->chat_template);
        if (!parsed.ok()) return parsed.status().WithContext("the chat template of " + config);
        out.chat_template = std::move(parsed).value();
      } else {
        HOIST_ASSIGN_OR_RETURN(out.special_tokens, ReadTokenizerSpecialTokens(fs, config));
      }
    }
  }
  if (!options.chat_template.empty()) {
    HOIST_ASSIGN_OR_RETURN(std::string source,
                           ReadFileToString(fs, options.chat_template,
                                            static_cast<int64_t>(jinja::kMaxTemplateBytes)));
    StatusOr<ChatTemplate> parsed = ChatTemplate::Parse(source);
    if (!parsed.ok())
      return parsed.status().WithContext("the chat template " + options.chat_template);
    out.chat_template = std::move(parsed).value();
  }
  return out;
}

// Whether the row at `line` of input `file` is held out: a hash of the seed and the row's place,
// below the fraction.
bool HeldOut(uint64_t seed, size_t file, int64_t line, double fraction) {
  if (fraction <= 0) return false;
  const uint64_t key[2] = {static_cast<uint64_t>(file), static_cast<uint64_t>(line)};
  const uint64_t hash = XXH64(key, sizeof(key), seed);
  return static_cast<double>(hash >> 11) * 0x1.0p-53 < fraction;
}

Status CheckOptions(const PrepareOptions& options) {
  if (options.inputs.empty()) return InvalidArgumentError("no dataset file to prepare; name one");
  if (options.output_dir.empty()) {
    return InvalidArgumentError("no output directory; name one (-o DIR)");
  }
  if (!(options.val_fraction >= 0 && options.val_fraction < 1)) {
    return InvalidArgumentError("the held-out fraction " + std::to_string(options.val_fraction) +
                                " is not in [0, 1)");
  }
  if (options.val_fraction > 0 && !options.val_inputs.empty()) {
    return InvalidArgumentError(
        "both a held-out fraction and held-out files were given; give one of them");
  }
  if (options.max_length < 0) {
    return InvalidArgumentError("the longest example, " + std::to_string(options.max_length) +
                                " tokens, is negative; give 0 for no limit");
  }
  if (options.shard_tokens < 1) {
    return InvalidArgumentError("the tokens per shard, " + std::to_string(options.shard_tokens) +
                                ", must be positive");
  }
  return Status::Ok();
}

// The existing prepared files in the output directory (refused unless overwrite).
StatusOr<std::vector<std::string>> ExistingPreparedFiles(const PrepareOptions& options,
                                                         FileSystem& fs) {
  std::vector<std::string> found;
  StatusOr<FileInfo> info = fs.Stat(options.output_dir);
  if (!info.ok()) {
    if (info.status().code() == StatusCode::kNotFound) return found;
    return info.status();
  }
  if (info->type != FileType::kDirectory) {
    return InvalidArgumentError("the output '" + options.output_dir +
                                "' is not a directory; name a directory to prepare into");
  }
  HOIST_ASSIGN_OR_RETURN(std::vector<std::string> names, fs.ListDirectory(options.output_dir));
  for (const std::string& name : names) {
    if (IsPreparedFile(name)) found.push_back(name);
  }
  if (!found.empty() && !options.overwrite) {
    return FailedPreconditionError(
        "'" + options.output_dir + "' already holds a prepared dataset (" + found.front() +
        (found.size() > 1 ? " and more" : "") +
        "); prepare into another directory, or replace it (--overwrite)");
  }
  return found;
}

nlohmann::ordered_json Manifest(const PrepareOptions& options, const Vocabulary& vocabulary,
                                const ExampleEncoderOptions& encoder,
                                const PrepareSummary& summary) {
  auto set = [](const PreparedSet& s) {
    return nlohmann::ordered_json{{"documents", s.documents},
                                  {"tokens", s.tokens},
                                  {"targets", s.targets},
                                  {"shards", s.shards}};
  };
  nlohmann::ordered_json manifest;
  manifest["format"] = "hoist prepared dataset";
  manifest["version"] = 1;
  manifest["inputs"] = options.inputs;
  manifest["val_inputs"] = options.val_inputs;
  manifest["tokenizer"] = options.tokenizer.empty() ? "bytes" : options.tokenizer;
  manifest["chat_template"] = !options.chat_template.empty() ? options.chat_template
                              : vocabulary.chat_template     ? vocabulary.config_path
                                                             : "";
  manifest["loss"] = LossTokensName(options.encoder.loss);
  manifest["eos_token"] = encoder.append_eos ? encoder.eos_token : "";
  manifest["template_variables"] = encoder.render.variables;
  char rendered_at[32] = {};
  std::strftime(rendered_at, sizeof(rendered_at), "%Y-%m-%d %H:%M:%S", &*encoder.render.now);
  manifest["rendered_at"] = rendered_at;
  manifest["max_length"] = options.max_length;
  manifest["overflow"] = OverflowName(options.overflow);
  manifest["val_fraction"] = options.val_fraction;
  manifest["seed"] = options.seed;
  manifest["token_bytes"] = summary.token_bytes;
  manifest["rows"] = summary.rows.rows;
  manifest["skipped_rows"] = summary.rows.skipped;
  manifest["skipped_reasons"] = summary.rows.reasons;
  manifest["empty_examples"] = summary.empty;
  manifest["examples_without_target"] = summary.no_target;
  manifest["truncated"] = summary.truncated;
  manifest["truncated_tokens"] = summary.truncated_tokens;
  manifest["split"] = summary.split;
  manifest["train"] = set(summary.train);
  manifest["val"] = set(summary.val);
  return manifest;
}

}  // namespace

const char* OverflowName(Overflow overflow) {
  return overflow == Overflow::kSplit ? "split" : "truncate";
}

StatusOr<Overflow> OverflowNamed(std::string_view name) {
  if (name == "truncate") return Overflow::kTruncate;
  if (name == "split") return Overflow::kSplit;
  return InvalidArgumentError("the overflow '" + std::string(name) +
                              "' is neither truncate nor split");
}

StatusOr<PrepareSummary> PrepareDataset(const PrepareOptions& options, FileSystem& fs) {
  HOIST_RETURN_IF_ERROR(CheckOptions(options));
  HOIST_ASSIGN_OR_RETURN(std::vector<std::string> existing, ExistingPreparedFiles(options, fs));
  HOIST_ASSIGN_OR_RETURN(Vocabulary vocabulary, LoadVocabulary(options, fs));
  ExampleEncoderOptions encoder_options = options.encoder;
  for (const auto& [name, text] : vocabulary.special_tokens) {
    encoder_options.render.special_tokens.emplace(name, text);
  }
  // One clock for every row: a template that prints the date renders every prefix of a
  // conversation alike, and the whole dataset with one date.
  if (!encoder_options.render.now.has_value()) {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    encoder_options.render.now = local;
  }
  if (encoder_options.eos_token.empty()) {
    auto eos = vocabulary.special_tokens.find("eos_token");
    if (eos != vocabulary.special_tokens.end()) encoder_options.eos_token = eos->second;
  }
  HOIST_ASSIGN_OR_RETURN(
      ExampleEncoder encoder,
      ExampleEncoder::Create(vocabulary.tokenizer, vocabulary.chat_template, encoder_options));

  // Every input, training files first; a file's size counts toward the progress.
  struct Input {
    std::string path;
    bool val = false;
    int64_t bytes = 0;
  };
  std::vector<Input> inputs;
  for (const std::string& path : options.inputs) inputs.push_back({path, false, 0});
  for (const std::string& path : options.val_inputs) inputs.push_back({path, true, 0});
  PrepareSummary summary;
  summary.token_bytes = encoder.token_bytes();
  for (Input& input : inputs) {
    StatusOr<FileInfo> info = fs.Stat(input.path);
    if (!info.ok()) return info.status().WithContext("the dataset file '" + input.path + "'");
    input.bytes = info->size_bytes;
    summary.input_bytes += input.bytes;
  }

  const bool created = fs.Stat(options.output_dir).status().code() == StatusCode::kNotFound;
  HOIST_RETURN_IF_ERROR(fs.CreateDirs(options.output_dir));
  const std::string staging = UniqueTempPath(Join(options.output_dir, ".staging"));
  // The staging directory goes however this ends, and the output directory too when this run
  // made it and failed.
  struct Cleanup {
    FileSystem& fs;
    std::string staging, output;
    bool remove_output;
    ~Cleanup() {
      (void)fs.RemoveAll(staging);
      if (remove_output) (void)fs.Remove(output);
    }
  } cleanup{fs, staging, options.output_dir, created};
  HOIST_RETURN_IF_ERROR(fs.CreateDirs(staging));

  SetWriter train(fs, staging, "train", summary.token_bytes, options.shard_tokens, &summary.train);
  SetWriter val(fs, staging, "val", summary.token_bytes, options.shard_tokens, &summary.val);
  ProgressLine progress(options.progress, "prepared", summary.input_bytes);
  auto counts = [&summary](int64_t rows) {
    return std::to_string(rows) + " rows, " +
           std::to_string(summary.train.tokens + summary.val.tokens) + " tokens";
  };
  int64_t done_bytes = 0;
  EncodedExample example;
  DatasetRow row;
  for (size_t file = 0; file < inputs.size(); ++file) {
    const Input& input = inputs[file];
    HOIST_ASSIGN_OR_RETURN(std::unique_ptr<JsonlRowReader> reader,
                           JsonlRowReader::Open(fs, input.path, options.rows));
    while (true) {
      HOIST_ASSIGN_OR_RETURN(bool more, reader->Next(&row));
      if (!more) break;
      const std::string where = input.path + " line " + std::to_string(row.line);
      Status encoded = encoder.Encode(row, &example);
      if (!encoded.ok()) return encoded.WithContext(where);
      if (example.tokens.empty()) {
        ++summary.empty;
        continue;
      }
      const int64_t n = static_cast<int64_t>(example.tokens.size());
      const bool held_out =
          input.val || HeldOut(options.seed, file, row.line, options.val_fraction);
      SetWriter& set = held_out ? val : train;
      int64_t piece = n;
      if (options.max_length > 0 && n > options.max_length) {
        piece = options.max_length;
        if (options.overflow == Overflow::kTruncate) {
          ++summary.truncated;
          summary.truncated_tokens += n - piece;
          example.tokens.resize(static_cast<size_t>(piece));
          example.mask.resize(static_cast<size_t>(piece));
        } else {
          ++summary.split;
        }
      }
      if (example.targets() == 0) ++summary.no_target;
      const std::span<const uint32_t> tokens(example.tokens);
      const std::span<const uint8_t> mask(example.mask);
      for (size_t at = 0; at < tokens.size(); at += static_cast<size_t>(piece)) {
        const size_t count = std::min(tokens.size() - at, static_cast<size_t>(piece));
        Status appended = set.Append(tokens.subspan(at, count), mask.subspan(at, count));
        if (!appended.ok()) return appended.WithContext("writing the example of " + where);
      }
      progress.Update(done_bytes + reader->bytes_read(),
                      counts(summary.rows.rows + reader->summary().rows), /*last=*/false);
    }
    const RowReaderSummary& rows = reader->summary();
    summary.rows.rows += rows.rows;
    summary.rows.skipped += rows.skipped;
    summary.rows.blank_lines += rows.blank_lines;
    for (const std::string& reason : rows.reasons) {
      if (static_cast<int>(summary.rows.reasons.size()) < options.rows.max_reasons) {
        summary.rows.reasons.push_back(reason);
      }
    }
    done_bytes += input.bytes;
  }
  HOIST_RETURN_IF_ERROR(train.Finish());
  HOIST_RETURN_IF_ERROR(val.Finish());
  progress.Update(done_bytes, counts(summary.rows.rows), /*last=*/true);

  std::string inputs_named;
  for (const std::string& path : options.inputs) {
    inputs_named += (inputs_named.empty() ? "" : ", ") + path;
  }
  if (summary.train.documents == 0) {
    return InvalidArgumentError("no training example came of " + inputs_named + " (" +
                                std::to_string(summary.rows.rows) + " rows read, " +
                                std::to_string(summary.val.documents) + " held out)");
  }
  if (summary.train.targets == 0) {
    return InvalidArgumentError(
        "no token of the training examples of " + inputs_named + " is a target of the loss (" +
        LossTokensName(options.encoder.loss) +
        " tokens): there is nothing to train on; check the rows' roles, or --loss");
  }
  if (summary.val.documents > 0 && summary.val.targets == 0) {
    return InvalidArgumentError("no token of the held-out examples is a target of the loss (" +
                                std::string(LossTokensName(options.encoder.loss)) +
                                " tokens): they could not be evaluated; check their rows");
  }
  if (options.val_fraction > 0 && summary.val.documents == 0) {
    return InvalidArgumentError("the held-out fraction " + std::to_string(options.val_fraction) +
                                " chose none of the " + std::to_string(summary.rows.rows) +
                                " rows; raise it or give held-out files");
  }

  // Into place: the new shards renamed over the old names, then the old dataset's other files
  // removed, the manifest last.
  if (std::find(existing.begin(), existing.end(), kManifestName) != existing.end()) {
    HOIST_RETURN_IF_ERROR(fs.Remove(Join(options.output_dir, kManifestName)));
  }
  std::set<std::string> placed;
  for (const PreparedSet* set : {&summary.train, &summary.val}) {
    for (const std::string& shard : set->shards) {
      HOIST_RETURN_IF_ERROR(fs.Rename(Join(staging, shard), Join(options.output_dir, shard)));
      placed.insert(shard);
    }
  }
  for (const std::string& name : existing) {
    if (placed.count(name) == 0) HOIST_RETURN_IF_ERROR(fs.Remove(Join(options.output_dir, name)));
  }
  const std::string manifest =
      Manifest(options, vocabulary, encoder_options, summary).dump(2) + "\n";
  const std::string_view pieces[] = {manifest};
  HOIST_RETURN_IF_ERROR(WriteFileAtomically(fs, Join(options.output_dir, kManifestName), pieces));
  HOIST_RETURN_IF_ERROR(fs.SyncDir(options.output_dir));
  cleanup.remove_output = false;
  return summary;
}

std::string DescribePrepareSummary(const PrepareSummary& summary) {
  auto set = [](const char* name, const PreparedSet& s) {
    return std::string(name) + ": " + std::to_string(s.documents) + " documents, " +
           std::to_string(s.tokens) + " tokens, " + std::to_string(s.targets) +
           " of them targets of the loss, in " + std::to_string(s.shards.size()) + " shard" +
           (s.shards.size() == 1 ? "" : "s") + "\n";
  };
  std::string out = "rows: " + std::to_string(summary.rows.rows) + " read, " +
                    std::to_string(summary.rows.skipped) + " malformed skipped, " +
                    std::to_string(summary.rows.blank_lines) + " blank lines\n";
  for (const std::string& reason : summary.rows.reasons) out += "  skipped: " + reason + "\n";
  out += set("train", summary.train);
  if (summary.val.documents > 0) out += set("val", summary.val);
  if (summary.empty > 0) out += std::to_string(summary.empty) + " examples had no token: skipped\n";
  if (summary.no_target > 0) {
    out += std::to_string(summary.no_target) +
           " examples have no target token (kept as context the loss does not count)\n";
  }
  if (summary.truncated > 0) {
    out += std::to_string(summary.truncated) + " examples truncated, " +
           std::to_string(summary.truncated_tokens) + " tokens cut off\n";
  }
  if (summary.split > 0) {
    out += std::to_string(summary.split) + " examples split into pieces\n";
  }
  return out;
}

}  // namespace hoist::runtime
