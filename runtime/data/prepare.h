// `hoist data prepare`: a fine-tuning dataset tokenized, templated and masked once, into prepared
// shards (runtime/data/prepared_shard.h) that training reads as it reads token shards.
//
// The JSONL files (runtime/data/dataset_rows.h) are read a row at a time; each row becomes one
// example (runtime/data/example_encoder.h), which goes to the held-out set or the training set
// and is appended to the current shard of that set. Memory is bounded by a row, an example and the
// writers' staging buffers, not by the dataset. The output directory receives
//
//   train_000000.bin, train_000001.bin, ...   a new shard after shard_tokens tokens
//   val_000000.bin, ...                        when a held-out set is asked for
//   prepare.json                               what was read, how, and what came of it
//
// at the end: the shards are written under a staging directory inside it, and moved into place
// only when every row has been prepared, so that a failed run (a malformed row, a full disk)
// leaves the directory as it was (one it created is removed). A directory that already holds a
// prepared dataset is refused unless `overwrite`; then the old prepare.json is removed first,
// the new shards renamed over the old names, the old shards left over removed, and the new
// prepare.json written last: a directory without prepare.json holds no complete dataset.
//
// The held-out set: the rows of val_inputs, or a fraction of the rows chosen by a hash of the
// seed, the file's position among the inputs and the row's line: the same rows whatever the
// shard size, and a row's choice does not depend on any other row.
//
// Chat templates that print the date (Llama 3.1's) see the time the run started, the same for
// every row (recorded in prepare.json), unless the options give one.
//
// Examples longer than max_length tokens are truncated to it or split into pieces of it (each a
// document of its own), and counted. An example with no token is skipped and counted; one with
// no target token is kept (it is context the loss does not see) and counted. A dataset with no
// target token at all is refused before anything is moved into place.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "core/file_system.h"
#include "core/status.h"
#include "runtime/data/dataset_rows.h"
#include "runtime/data/example_encoder.h"

namespace hoist::runtime {

enum class Overflow { kTruncate, kSplit };
const char* OverflowName(Overflow overflow);
StatusOr<Overflow> OverflowNamed(std::string_view name);

struct PrepareOptions {
  std::vector<std::string> inputs;      // JSONL files of training rows
  std::vector<std::string> val_inputs;  // JSONL files of held-out rows (or use val_fraction)
  std::string output_dir;
  // A directory holding tokenizer.json (and tokenizer_config.json, for the chat template and
  // the special tokens), or a tokenizer.json; empty: one token per byte.
  std::string tokenizer;
  // A Jinja file to use instead of the tokenizer_config.json's chat template; its name among a
  // config's several templates.
  std::string chat_template;
  std::string template_name = "default";
  RowReaderOptions rows;
  // The loss tokens, the eos handling and the template's variables. An eos_token left empty is
  // taken from the tokenizer_config.json.
  ExampleEncoderOptions encoder;
  int64_t max_length = 0;  // tokens of an example; 0: no limit
  Overflow overflow = Overflow::kTruncate;
  double val_fraction = 0;  // of the inputs' rows, held out; with val_inputs it must be 0
  uint64_t seed = 0;
  int64_t shard_tokens = int64_t{1} << 27;
  bool overwrite = false;
  std::ostream* progress = nullptr;  // the progress line ('\r'-rewritten), or none
};

// One set's (training or held-out) share of the outcome.
struct PreparedSet {
  int64_t documents = 0;  // examples, each piece of a split one apart
  int64_t tokens = 0;
  int64_t targets = 0;  // tokens the loss counts
  std::vector<std::string> shards;
};

struct PrepareSummary {
  RowReaderSummary rows;  // over every input file
  PreparedSet train, val;
  int64_t empty = 0;             // examples with no token, skipped
  int64_t no_target = 0;         // examples with no target token, kept
  int64_t truncated = 0;         // examples cut at max_length
  int64_t truncated_tokens = 0;  // the tokens cut off them
  int64_t split = 0;             // examples split into pieces of max_length
  int64_t input_bytes = 0;
  int token_bytes = 2;
};

// Prepares the dataset; see above. Errors name the file and line of a bad row, the file that
// cannot be read or written, and the option that is wrong.
StatusOr<PrepareSummary> PrepareDataset(const PrepareOptions& options,
                                        FileSystem& fs = FileSystem::Posix());

// The summary as `hoist data prepare` prints it, a few lines.
std::string DescribePrepareSummary(const PrepareSummary& summary);

}  // namespace hoist::runtime
