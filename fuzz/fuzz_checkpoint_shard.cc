// The checkpoint shard reader on arbitrary file contents: ShardFile's index and blob reads must
// return data or an error (a bad checksum, a truncated file), never crash or read out of bounds.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "runtime/checkpoint/checkpoint_shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = hoist::fuzz::ScratchDir() + "/rank_00000.bin";
  hoist::fuzz::WriteBytes(path, data, size);
  auto file = hoist::runtime::ShardFile::Open(path);
  if (!file.ok()) return 0;
  auto index = file->ReadIndex();
  if (!index.ok()) return 0;
  std::vector<std::byte> buffer;
  for (const hoist::runtime::ShardBlobEntry& entry : index->blobs) {
    // The index was checked against the file's size, so no blob is larger than the input.
    if (entry.bytes < 0 || entry.bytes > static_cast<int64_t>(size)) __builtin_trap();
    buffer.resize(static_cast<size_t>(entry.bytes));
    (void)file->ReadBlob(entry, buffer.data());
  }
  return 0;
}
