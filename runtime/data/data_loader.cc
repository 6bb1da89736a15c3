#include "runtime/data/data_loader.h"

#include <glob.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <utility>

#include "core/random.h"

extern const unsigned char kDemoCorpus[];
extern const size_t kDemoCorpus_size;

namespace hoist::runtime {
namespace {

// Tokens read from a shard file at once (512 KiB, widened to uint32): a micro-step's window is a
// few KiB, and a read per window costs a system call each.
constexpr int64_t kReadAheadTokens = int64_t{1} << 17;

bool IsPattern(const std::string& source) {
  return source.find_first_of("*?[") != std::string::npos;
}

// Every match of `pattern`, sorted bytewise so the order does not depend on the locale.
StatusOr<std::vector<std::string>> ExpandPattern(const std::string& pattern) {
  glob_t matches{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &matches);
  std::vector<std::string> paths;
  if (rc == 0) paths.assign(matches.gl_pathv, matches.gl_pathv + matches.gl_pathc);
  ::globfree(&matches);
  switch (rc) {
    case 0: break;
    case GLOB_NOMATCH:
      return NotFoundError("data source pattern '" + pattern +
                           "' matches no file; check the path and the shard names");
    case GLOB_NOSPACE:
      return ResourceExhaustedError("out of memory expanding data source pattern '" + pattern +
                                    "'");
    default:
      return IoError("could not read the directories of data source pattern '" + pattern + "'");
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

// Whether the file at `path` starts as a prepared shard does (else it is read as a token shard,
// whose reader names what is wrong with it).
StatusOr<bool> IsPreparedShard(const std::string& path) {
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file,
                         FileSystem::Posix().NewRandomAccessFile(path));
  char magic[sizeof(kPreparedShardMagic)] = {};
  HOIST_ASSIGN_OR_RETURN(const int64_t got, file->Read(0, magic, sizeof(magic)));
  return got == static_cast<int64_t>(sizeof(magic)) &&
         std::memcmp(magic, kPreparedShardMagic, sizeof(magic)) == 0;
}

// DataLoss naming the first of tokens [0, n) (the file's tokens from `first` on) that is not
// below vocab_size, or Ok: a file validated at Open may have been changed since.
Status CheckStillBelowVocab(const char* kind, const std::string& name, const uint32_t* tokens,
                            int64_t n, int64_t first, int vocab_size) {
  const auto vocab = static_cast<uint32_t>(vocab_size);
  const uint32_t* past = std::find_if(tokens, tokens + n, [&](uint32_t t) { return t >= vocab; });
  if (past == tokens + n) return Status::Ok();
  return DataLossError(std::string(kind) + " shard '" + name + "': token at index " +
                       std::to_string(first + (past - tokens)) + " is now " +
                       std::to_string(*past) + ", not below vocab_size " +
                       std::to_string(vocab_size) +
                       "; the file was changed while training: put the original back and "
                       "resume from the last checkpoint");
}

}  // namespace

DataLoader::DataLoader(int B, int T, int rank, int world_size, int accumulation_steps,
                       MemoryTracker* tracker)
    : B_(B),
      T_(T),
      rank_(rank),
      world_size_(world_size),
      stride_(int64_t{world_size} * B * T),
      accumulation_steps_(accumulation_steps),
      host_(Place::kHost, tracker) {}

StatusOr<std::unique_ptr<DataLoader>> DataLoader::Open(const std::string& source, Split split,
                                                       int B, int T, int rank, int world_size,
                                                       int vocab_size, MemoryTracker* tracker,
                                                       int accumulation_steps,
                                                       const DataOrder& order) {
  const std::string where = "data source '" + source + "': ";
  if (source.empty()) return InvalidArgumentError("the data source is empty; give a shard path");
  if (B <= 0) {
    return InvalidArgumentError(where + "micro-batch B must be positive, got " + std::to_string(B));
  }
  if (T <= 0) {
    return InvalidArgumentError(where + "sequence length T must be positive, got " +
                                std::to_string(T));
  }
  if (world_size <= 0) {
    return InvalidArgumentError(where + "world_size must be positive, got " +
                                std::to_string(world_size));
  }
  if (rank < 0 || rank >= world_size) {
    return InvalidArgumentError(where + "rank " + std::to_string(rank) + " is outside 0.." +
                                std::to_string(world_size - 1));
  }
  if (accumulation_steps <= 0) {
    return InvalidArgumentError(where + "gradient_accumulation_steps must be positive, got " +
                                std::to_string(accumulation_steps));
  }
  if (vocab_size <= 0) {
    return InvalidArgumentError(where + "vocab_size must be positive, got " +
                                std::to_string(vocab_size));
  }

  std::unique_ptr<DataLoader> loader(
      new DataLoader(B, T, rank, world_size, accumulation_steps, tracker));
  loader->vocab_size_ = vocab_size;
  if (source.starts_with("builtin:")) {
    if (source != kBuiltinDemo) {
      return NotFoundError("unknown built-in data source '" + source + "'; the only one is '" +
                           kBuiltinDemo + "'");
    }
    HOIST_RETURN_IF_ERROR(loader->LoadBuiltinDemo(split, vocab_size));
  } else {
    HOIST_RETURN_IF_ERROR(loader->LoadFiles(source, vocab_size));
  }

  if (loader->prepared_.empty() && order.shuffle.value_or(false)) {
    return InvalidArgumentError(
        where +
        "data.shuffle is set, but token shards hold no documents to shuffle; prepare the data "
        "into documents (hoist data prepare), or leave data.shuffle unset");
  }
  const int64_t window = loader->stride_ * accumulation_steps + 1;
  if (!loader->prepared_.empty() && order.shuffle.value_or(true)) {
    loader->shuffled_ = true;
    loader->seed_ = order.seed;
    for (size_t s = 0; s < loader->prepared_.size(); ++s) {
      const std::vector<int64_t>& starts = loader->starts_[s];
      const int64_t size = loader->prepared_[s].tokens();
      for (size_t d = 0; d < starts.size(); ++d) {
        const int64_t end = d + 1 < starts.size() ? starts[d + 1] : size;
        loader->documents_.push_back(Document{static_cast<int64_t>(s), starts[d], end - starts[d]});
      }
      loader->stream_tokens_ += size;
    }
    // The documents hold what the shards' start offsets said.
    loader->starts_.clear();
    loader->starts_.shrink_to_fit();
    if (loader->stream_tokens_ < window) {
      return InvalidArgumentError(
          where + "the prepared shards hold " + std::to_string(loader->stream_tokens_) +
          " tokens, fewer than the " + std::to_string(window) +
          " one optimizer step reads (gradient_accumulation_steps " +
          std::to_string(accumulation_steps) + " x world_size " + std::to_string(world_size) +
          " x B " + std::to_string(B) + " x T " + std::to_string(T) +
          " + 1); use a smaller batch or sequence length, or more data");
    }
    return loader;
  }
  for (const ShardView& shard : loader->shards_) {
    const int64_t n = shard.size;
    if (n < window) {
      return InvalidArgumentError(
          std::string(shard.prepared ? "prepared" : "token") + " shard '" + shard.name + "' has " +
          std::to_string(n) + " tokens, fewer than the " + std::to_string(window) +
          " one optimizer step reads (gradient_accumulation_steps " +
          std::to_string(accumulation_steps) + " x world_size " + std::to_string(world_size) +
          " x B " + std::to_string(B) + " x T " + std::to_string(T) +
          " + 1); use a smaller batch or sequence length, or a bigger shard");
    }
  }
  return loader;
}

namespace {

// The built-in corpus's tokens of `split`: the first 90% train, the rest validation.
std::pair<int64_t, int64_t> BuiltinRange(Split split) {
  const int64_t total = static_cast<int64_t>(kDemoCorpus_size);
  const int64_t train = total * 9 / 10;
  return split == Split::kTrain ? std::pair{int64_t{0}, train} : std::pair{train, total};
}

}  // namespace

int64_t DataLoader::TrackedHostBytes(const std::string& source, Split split) {
  if (source != kBuiltinDemo) return 0;
  const auto [begin, end] = BuiltinRange(split);
  return (end - begin) * int64_t{sizeof(uint16_t)};
}

Status DataLoader::LoadBuiltinDemo(Split split, int vocab_size) {
  const auto [begin, end] = BuiltinRange(split);
  HOIST_ASSIGN_OR_RETURN(builtin_tokens_, host_.Allocate((end - begin) * int64_t{sizeof(uint16_t)},
                                                         Category::kWorkspace));
  uint16_t* tokens = builtin_tokens_.as<uint16_t>();
  const std::string name =
      std::string(kBuiltinDemo) + (split == Split::kTrain ? " (train)" : " (val)");
  for (int64_t i = begin; i < end; ++i) {
    tokens[i - begin] = kDemoCorpus[i];
    if (tokens[i - begin] >= vocab_size) {
      return InvalidArgumentError(
          "data source '" + name + "': token at index " + std::to_string(i - begin) + " is " +
          std::to_string(tokens[i - begin]) + ", not below the model's vocab_size " +
          std::to_string(vocab_size) +
          "; the built-in corpus is byte-tokenized and needs vocab_size "
          ">= 256");
    }
  }
  shards_.push_back(ShardView{
      name, end - begin, std::span<const uint16_t>(tokens, static_cast<size_t>(end - begin)), -1});
  return Status::Ok();
}

Status DataLoader::LoadFiles(const std::string& source, int vocab_size) {
  std::vector<std::string> paths;
  if (IsPattern(source)) {
    HOIST_ASSIGN_OR_RETURN(paths, ExpandPattern(source));
  } else {
    paths.push_back(source);
  }
  // Prepared shards or token shards, by their first bytes; one kind per source.
  std::vector<std::string> prepared, plain;
  for (const std::string& path : paths) {
    HOIST_ASSIGN_OR_RETURN(const bool is_prepared, IsPreparedShard(path));
    (is_prepared ? prepared : plain).push_back(path);
  }
  if (!prepared.empty() && !plain.empty()) {
    return InvalidArgumentError("data source '" + source + "' mixes token shards ('" + plain[0] +
                                "') and prepared shards ('" + prepared[0] +
                                "'); give one kind per source");
  }
  if (!prepared.empty()) return LoadPrepared(prepared, vocab_size);
  files_.reserve(paths.size());
  for (const std::string& path : paths) {
    HOIST_ASSIGN_OR_RETURN(TokenShard shard, ReadTokenShard(path));
    HOIST_RETURN_IF_ERROR(shard.CheckTokensBelow(vocab_size));
    files_.push_back(std::move(shard));
  }
  for (size_t i = 0; i < files_.size(); ++i) {
    shards_.push_back(ShardView{files_[i].path(), files_[i].size(), {}, static_cast<int64_t>(i)});
  }
  buffer_.resize(static_cast<size_t>(std::max(int64_t{B_} * T_ + 1, kReadAheadTokens)));
  return Status::Ok();
}

Status DataLoader::LoadPrepared(const std::vector<std::string>& paths, int vocab_size) {
  int64_t trainable = 0;
  for (const std::string& path : paths) {
    HOIST_ASSIGN_OR_RETURN(PreparedShard shard, PreparedShard::Open(path));
    HOIST_RETURN_IF_ERROR(shard.Verify(vocab_size));
    std::vector<int64_t> starts(static_cast<size_t>(shard.documents()));
    HOIST_RETURN_IF_ERROR(shard.ReadDocuments(0, shard.documents(), starts.data()));
    trainable += shard.header().trainable;
    shards_.push_back(ShardView{path,
                                shard.tokens(),
                                {},
                                static_cast<int64_t>(prepared_.size()),
                                /*prepared=*/true});
    starts_.push_back(std::move(starts));
    prepared_.push_back(std::move(shard));
  }
  if (trainable == 0) {
    return InvalidArgumentError("prepared shard" + std::string(paths.size() > 1 ? "s" : "") + " '" +
                                paths[0] + "'" + (paths.size() > 1 ? " and the others" : "") +
                                ": no token counts in the loss (every loss mask is 0); prepare "
                                "the data with the answers unmasked");
  }
  buffer_.resize(static_cast<size_t>(std::max(int64_t{B_} * T_ + 1, kReadAheadTokens)));
  mask_buffer_.resize(buffer_.size());
  return Status::Ok();
}

Status DataLoader::ReadAhead(const ShardView& shard, int64_t first, int64_t count) {
  if (!shard.prepared) return files_[shard.file].Read(first, count, buffer_.data());
  const PreparedShard& prepared = prepared_[shard.file];
  HOIST_RETURN_IF_ERROR(prepared.ReadTokens(first, count, buffer_.data()));
  return prepared.ReadMask(first, count, mask_buffer_.data());
}

void DataLoader::MaskTargets(const ShardView& shard, int64_t first, int32_t* targets) const {
  const int64_t n = int64_t{B_} * T_;
  const uint8_t* mask = mask_buffer_.data() + (first - buffered_first_);
  for (int64_t i = 0; i < n; ++i) {
    if (mask[i + 1] == 0) targets[i] = -1;
  }
  // The documents starting inside the window after its first token.
  const std::vector<int64_t>& starts = starts_[shard.file];
  for (auto it = std::upper_bound(starts.begin(), starts.end(), first);
       it != starts.end() && *it <= first + n; ++it) {
    targets[*it - first - 1] = -1;
  }
}

Status DataLoader::Next(int32_t* inputs, int32_t* targets) {
  HOIST_CHECK(inputs != nullptr && targets != nullptr);
  if (shuffled_) return NextShuffled(inputs, targets);
  const ShardView& shard = shards_[state_.shard_index];
  HOIST_CHECK_LE(state_.position + stride_ + 1, shard.size);
  const int64_t n = int64_t{B_} * T_;
  const int64_t first = state_.position + rank_ * n;
  if (shard.file < 0) {
    const uint16_t* window = shard.tokens.data() + first;
    for (int64_t i = 0; i < n; ++i) {
      inputs[i] = window[i];
      targets[i] = window[i + 1];
    }
  } else {
    // Read ahead in chunks: one pread serves many micro-steps' windows.
    const bool buffered = shard.file == buffered_file_ && first >= buffered_first_ &&
                          first + n + 1 <= buffered_first_ + buffered_count_;
    Status read = Status::Ok();
    if (!buffered) {
      buffered_file_ = -1;
      const int64_t count =
          std::min<int64_t>(static_cast<int64_t>(buffer_.size()), shard.size - first);
      read = ReadAhead(shard, first, count);
      if (read.ok()) {
        buffered_file_ = shard.file;
        buffered_first_ = first;
        buffered_count_ = count;
      }
    }
    const uint32_t* window = buffer_.data() + (first - buffered_first_);
    if (read.ok()) {
      read = CheckStillBelowVocab(shard.prepared ? "prepared" : "token", shard.name, window, n + 1,
                                  first, vocab_size_);
    }
    if (!read.ok()) {
      buffered_file_ = -1;
      std::fill(inputs, inputs + n, 0);
      std::fill(targets, targets + n, 0);
      return read;
    }
    for (int64_t i = 0; i < n; ++i) {
      inputs[i] = static_cast<int32_t>(window[i]);
      targets[i] = static_cast<int32_t>(window[i + 1]);
    }
    if (shard.prepared) MaskTargets(shard, first, targets);
  }
  Advance();
  return Status::Ok();
}

void DataLoader::Advance() {
  state_.position += stride_;
  // Between optimizer steps only: a step never spans two shards or epochs, whatever its split.
  if (++micro_step_ == accumulation_steps_) {
    micro_step_ = 0;
    SkipExhaustedShard();
  }
}

void DataLoader::SkipExhaustedShard() {
  const int64_t size = shuffled_ ? stream_tokens_ : shards_[state_.shard_index].size;
  if (state_.position + stride_ * accumulation_steps_ + 1 <= size) return;
  state_.position = 0;
  if (shuffled_) {
    ++state_.epoch;
    return;
  }
  state_.shard_index = (state_.shard_index + 1) % num_shards();
  if (state_.shard_index == 0) ++state_.epoch;
}

int64_t DataLoader::steps_per_epoch() const {
  const int64_t step = stride_ * accumulation_steps_;
  if (shuffled_) return (stream_tokens_ - 1) / step;
  int64_t steps = 0;
  for (const ShardView& shard : shards_) steps += (shard.size - 1) / step;
  return steps;
}

void DataLoader::OrderEpoch() {
  if (ordered_epoch_ == state_.epoch) return;
  const size_t n = documents_.size();
  documents_order_.resize(n);
  for (size_t i = 0; i < n; ++i) documents_order_[i] = static_cast<int64_t>(i);
  // Fisher-Yates from a stream of the seed and the epoch alone.
  Rng random(seed_ ^ (0xD1B54A32D192ED03ull * static_cast<uint64_t>(state_.epoch + 1)));
  for (size_t i = n; i > 1; --i) {
    std::swap(documents_order_[i - 1], documents_order_[random.Below(i)]);
  }
  documents_stream_.resize(n + 1);
  documents_stream_[0] = 0;
  for (size_t i = 0; i < n; ++i) {
    documents_stream_[i + 1] = documents_stream_[i] + documents_[documents_order_[i]].tokens;
  }
  ordered_epoch_ = state_.epoch;
}

Status DataLoader::ReadStream(int64_t first, int64_t count, std::vector<int64_t>* starts) {
  starts->clear();
  // The document holding `first`, then each after it until the window is full.
  auto at_doc = std::upper_bound(documents_stream_.begin(), documents_stream_.end(), first);
  size_t i = static_cast<size_t>(at_doc - documents_stream_.begin()) - 1;
  for (int64_t at = first; at < first + count; ++i) {
    const Document& doc = documents_[documents_order_[i]];
    const int64_t offset = at - documents_stream_[i];
    const int64_t n = std::min(doc.tokens - offset, first + count - at);
    if (offset == 0 && at > first) starts->push_back(at);
    const PreparedShard& shard = prepared_[doc.shard];
    uint32_t* tokens = buffer_.data() + (at - first);
    HOIST_RETURN_IF_ERROR(shard.ReadTokens(doc.first + offset, n, tokens));
    HOIST_RETURN_IF_ERROR(
        shard.ReadMask(doc.first + offset, n, mask_buffer_.data() + (at - first)));
    HOIST_RETURN_IF_ERROR(
        CheckStillBelowVocab("prepared", shard.path(), tokens, n, doc.first + offset, vocab_size_));
    at += n;
  }
  return Status::Ok();
}

Status DataLoader::NextShuffled(int32_t* inputs, int32_t* targets) {
  HOIST_CHECK_LE(state_.position + stride_ + 1, stream_tokens_);
  OrderEpoch();
  const int64_t n = int64_t{B_} * T_;
  const int64_t first = state_.position + rank_ * n;
  Status read = ReadStream(first, n + 1, &window_starts_);
  if (!read.ok()) {
    std::fill(inputs, inputs + n, 0);
    std::fill(targets, targets + n, 0);
    return read;
  }
  for (int64_t i = 0; i < n; ++i) {
    inputs[i] = static_cast<int32_t>(buffer_[i]);
    targets[i] = mask_buffer_[i + 1] != 0 ? static_cast<int32_t>(buffer_[i + 1]) : -1;
  }
  // A document's first token is not predicted by the one before it.
  for (int64_t start : window_starts_) targets[start - first - 1] = -1;
  Advance();
  return Status::Ok();
}

Status DataLoader::Restore(const LoaderState& state) {
  if (state.epoch < 0) {
    return InvalidArgumentError("data loader state: epoch " + std::to_string(state.epoch) +
                                " is negative; the checkpoint is damaged");
  }
  if (shuffled_) {
    if (state.shard_index != 0 || state.position < 0 || state.position > stream_tokens_) {
      return InvalidArgumentError(
          "data loader state: shard " + std::to_string(state.shard_index) + ", position " +
          std::to_string(state.position) + " is not a place in the shuffled documents (" +
          std::to_string(stream_tokens_) +
          " tokens); the checkpoint was written for other data, or without data.shuffle");
    }
    state_ = state;
    micro_step_ = 0;
    SkipExhaustedShard();
    return Status::Ok();
  }
  if (state.shard_index < 0 || state.shard_index >= num_shards()) {
    return InvalidArgumentError(
        "data loader state: shard_index " + std::to_string(state.shard_index) + " is outside 0.." +
        std::to_string(num_shards() - 1) + " (this source has " + std::to_string(num_shards()) +
        " shards); the checkpoint was written for other data");
  }
  const ShardView& shard = shards_[state.shard_index];
  const int64_t size = shard.size;
  if (state.position < 0 || state.position > size) {
    return InvalidArgumentError("data loader state: position " + std::to_string(state.position) +
                                " is outside 0.." + std::to_string(size) + " of shard '" +
                                shard.name + "'; the checkpoint was written for other data");
  }
  state_ = state;
  micro_step_ = 0;
  SkipExhaustedShard();
  return Status::Ok();
}

const std::string& DataLoader::shard_name(int64_t index) const {
  HOIST_CHECK(index >= 0 && index < num_shards()) << index;
  return shards_[index].name;
}

int64_t DataLoader::shard_tokens(int64_t index) const {
  HOIST_CHECK(index >= 0 && index < num_shards()) << index;
  return shards_[index].size;
}

}  // namespace hoist::runtime
