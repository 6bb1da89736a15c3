// DataLoader: hands each rank its micro-batch of (inputs, targets) from token shards, in llm.c's
// layout, deterministically and without shuffling.
//
// Every micro-step all ranks look at the same window of world_size*B*T + 1 consecutive tokens at
// the shared position; rank r takes the B*T + 1 tokens starting at r*B*T, inputs are the first
// B*T of them and targets the same shifted by one. The position then advances by world_size*B*T.
// An optimizer step of `accumulation_steps` micro-steps so reads the accumulation*world*B
// consecutive sequences of T tokens at the position, whatever the split of that global batch
// into ranks, micro-batches and accumulation steps: a job resumed with another split (another
// number of ranks) continues the same sequence of global batches. That holds across a shard's
// end too, because the loader moves on to the next shard only between optimizer steps: when the
// current shard cannot supply a whole step's window (accumulation*world*B*T + 1 tokens) it moves
// to the start of the next shard in sorted order, and after the last shard back to the first
// (one epoch).
//
// Sources: a shard path (uint16 or uint32 tokens, see runtime/data/token_shard.h); a glob pattern
// (every match, sorted by name bytewise); or "builtin:demo", the corpus embedded in the binary,
// byte-tokenized, of which Split::kTrain is the first 90% of tokens and Split::kVal the last 10%.
// For file sources the split is ignored: train and validation data are configured as separate
// sources. A file source may instead be prepared shards (runtime/data/prepared_shard.h; all of
// its files one kind or the other): their documents follow one another as a token shard's tokens
// do, and a target is -1, off the loss, where the token's loss mask is 0 and where it is a
// document's first token (the previous document does not predict it), as transformers' packing
// collator labels them. Attention is not yet confined to a document.
//
// Shuffling (DataOrder): the documents of prepared shards are by default taken in a new order each
// epoch, all shards' documents together, drawn from the seed and the epoch number alone, so that
// every rank draws the same order and a resumed job the order it had. The epoch's documents follow
// one another as one stream that the windows are cut from, as above; when the stream cannot supply
// a whole step's window the rest is dropped and the next epoch starts. Token shards hold no
// documents and keep their order.
//
// Open validates every shard up front (header, size, every token below vocab_size, room for one
// window); this reads each shard once. Shard files stay open for the loader's life and Next reads
// its window with pread, so a shard truncated or rewritten in place while training is an error
// naming the file (never SIGBUS, never a token past the vocabulary); the embedded corpus's tokens
// live in tracked host memory (Place::kHost, Category::kWorkspace). Next blocks on the read.
// Not thread-safe: one loader is driven by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/status.h"
#include "runtime/data/prepared_shard.h"
#include "runtime/data/token_shard.h"

namespace hoist::runtime {

enum class Split { kTrain, kVal };

// Where the next micro-step's window starts; the same on every rank. What a checkpoint saves,
// between optimizer steps: the same state serves any split of the same global batch.
struct LoaderState {
  int64_t shard_index = 0;  // into the sorted shard list (0 with shuffled documents)
  int64_t position = 0;     // token offset of the window within that shard (or the epoch's stream)
  int64_t epoch = 0;        // passes over the data completed
  bool operator==(const LoaderState&) const = default;
};

// The order a loader reads prepared documents in.
struct DataOrder {
  // A new order of the documents each epoch. Unset: yes for prepared shards. Asking for it with
  // token shards (or the built-in corpus), which hold no documents, is an error.
  std::optional<bool> shuffle;
  uint64_t seed = 0;
};

class DataLoader {
 public:
  // The source name of the embedded corpus.
  static constexpr const char* kBuiltinDemo = "builtin:demo";

  // B sequences of T tokens per micro-step for `rank` of `world_size`, `accumulation_steps`
  // micro-steps per optimizer step. Errors name the bad argument, the pattern that matched
  // nothing (NotFound), or the shard that is invalid or too small for one step's window (with
  // the accumulation steps, B, T and world_size). The built-in data's tokens are counted in
  // `tracker` (the trainer's).
  static StatusOr<std::unique_ptr<DataLoader>> Open(
      const std::string& source, Split split, int B, int T, int rank, int world_size,
      int vocab_size, MemoryTracker* tracker = &MemoryTracker::Global(), int accumulation_steps = 1,
      const DataOrder& order = {});

  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Fills inputs (B, T) and targets (B, T) with this rank's next micro-batch and advances. A
  // shard file that cannot be read as it was validated (truncated, rewritten in place, an I/O
  // error) is an error naming it; the batch is then all token 0 and the position stays, so that
  // the caller may finish a collective step before every rank stops (comm::AgreeOnStatus).
  Status Next(int32_t* inputs, int32_t* targets);

  LoaderState state() const { return state_; }
  // Continues, at the start of an optimizer step, from a state that state() returned between
  // steps (by this loader or one with another split of the batch). A shard_index or position
  // outside the data is InvalidArgument naming the value and the shard. A position whose step
  // window no longer fits (the global batch or T changed since it was saved) moves on to the
  // next shard, as Next would.
  Status Restore(const LoaderState& state);
  // Back to the first window of the first shard (evaluation sees the same batches every time).
  void Reset() {
    state_ = LoaderState{};
    micro_step_ = 0;
  }

  int B() const { return B_; }
  int T() const { return T_; }
  // The tracked host bytes a loader of `source` holds (the built-in data's tokens, as
  // Place::kHost workspace; token shard files are read ahead into a buffer of 512 KiB or one
  // window, untracked, and prepared shards besides into 128 Ki mask bytes, with their documents'
  // offsets, 8 bytes a document (40 when shuffled), untracked too): what the memory estimate
  // counts for it.
  static int64_t TrackedHostBytes(const std::string& source, Split split);

  int64_t num_shards() const { return static_cast<int64_t>(shards_.size()); }
  // The shard's file path, or "builtin:demo (train)" / "builtin:demo (val)".
  const std::string& shard_name(int64_t index) const;
  int64_t shard_tokens(int64_t index) const;
  // Tokens all ranks together consume per micro-step: world_size * B * T.
  int64_t tokens_per_step() const { return stride_; }
  // Whether targets may be -1 (prepared shards).
  bool masked() const { return !prepared_.empty(); }
  // Whether the documents are shuffled each epoch.
  bool shuffled() const { return shuffled_; }
  // Optimizer steps an epoch holds (every shard's, or the shuffled stream's, whole step windows).
  int64_t steps_per_epoch() const;

 private:
  struct ShardView {
    std::string name;
    int64_t size = 0;                  // tokens
    std::span<const uint16_t> tokens;  // builtin:demo, in memory
    int64_t file = -1;                 // else: index into files_, or prepared_ where prepared
    bool prepared = false;
  };

  DataLoader(int B, int T, int rank, int world_size, int accumulation_steps,
             MemoryTracker* tracker);
  Status LoadBuiltinDemo(Split split, int vocab_size);
  Status LoadFiles(const std::string& source, int vocab_size);
  Status LoadPrepared(const std::vector<std::string>& paths, int vocab_size);
  // Reads tokens (and for a prepared shard mask bytes) [first, first + count) of the shard into
  // the buffers.
  Status ReadAhead(const ShardView& shard, int64_t first, int64_t count);
  // targets[i] = -1 where the token after position first + i is masked or starts a document.
  void MaskTargets(const ShardView& shard, int64_t first, int32_t* targets) const;
  // Moves to the next shard (wrapping, and then counting an epoch) when the current one cannot
  // supply a step's window at state_.
  void SkipExhaustedShard();
  // Shuffled documents: the stream of state_.epoch's order in documents_order_ and
  // documents_stream_ (drawn again only when the epoch changed).
  void OrderEpoch();
  // Reads the shuffled stream's tokens [first, first + count) and their mask into the buffers
  // (each checked against the vocabulary), and the stream offsets of the documents starting in
  // (first, first + count) into *starts.
  Status ReadStream(int64_t first, int64_t count, std::vector<int64_t>* starts);
  // Next's window from the shuffled stream.
  Status NextShuffled(int32_t* inputs, int32_t* targets);
  // Moves past the micro-step just read.
  void Advance();

  const int B_;
  const int T_;
  const int rank_;
  const int world_size_;
  const int64_t stride_;  // world_size * B * T
  const int accumulation_steps_;
  int micro_step_ = 0;  // micro-steps of the current optimizer step already read
  CpuDevice host_;
  Buffer builtin_tokens_;  // (corpus bytes,) uint16; only for builtin:demo
  std::vector<TokenShard> files_;
  std::vector<PreparedShard> prepared_;
  // Per prepared shard, its documents' first tokens (read in order; empty when shuffled).
  std::vector<std::vector<int64_t>> starts_;
  // Shuffled documents: every prepared document (shard, first token, tokens); the order drawn
  // for ordered_epoch_ (indices into documents_), and where each lies in the epoch's stream
  // (documents + 1 offsets).
  struct Document {
    int64_t shard = 0;
    int64_t first = 0;
    int64_t tokens = 0;
  };
  bool shuffled_ = false;
  uint64_t seed_ = 0;
  std::vector<Document> documents_;
  std::vector<int64_t> documents_order_;
  std::vector<int64_t> documents_stream_;
  int64_t ordered_epoch_ = -1;
  int64_t stream_tokens_ = 0;           // every document's tokens
  std::vector<int64_t> window_starts_;  // scratch of Next
  std::vector<ShardView> shards_;
  int vocab_size_ = 0;
  // Tokens read ahead from a shard file: [buffered_first_, + buffered_count_) of files_ entry
  // buffered_file_ (-1: none). At least B*T + 1 tokens, so that a window always fits.
  std::vector<uint32_t> buffer_;      // widened from uint16 shards
  std::vector<uint8_t> mask_buffer_;  // prepared shards: the same tokens' loss mask
  int64_t buffered_file_ = -1;
  int64_t buffered_first_ = 0;
  int64_t buffered_count_ = 0;
  LoaderState state_;
};

}  // namespace hoist::runtime
