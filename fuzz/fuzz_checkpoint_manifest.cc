// The checkpoint manifest reader on arbitrary text: CheckpointReader::Open reads the input as
// manifest.json of a step directory whose rank-0 shard is valid (fuzz_util.h), and must open it
// or return an error; an opened checkpoint's blobs must all read.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "runtime/checkpoint/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string step_dir =
      hoist::fuzz::WriteTinyCheckpoint(hoist::fuzz::ScratchDir() + "/ckpt");
  hoist::fuzz::WriteBytes(step_dir + "/manifest.json", data, size);
  auto reader = hoist::runtime::CheckpointReader::Open(step_dir, /*rank=*/0);
  if (!reader.ok()) return 0;
  std::vector<std::byte> buffer;
  for (const hoist::runtime::ShardBlobEntry& entry : reader->blobs()) {
    buffer.resize(static_cast<size_t>(entry.bytes));
    (void)reader->Read(entry.name, buffer.data(), entry.bytes);
  }
  return 0;
}
