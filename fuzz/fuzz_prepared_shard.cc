// The prepared shard reader on arbitrary file contents: PreparedShard::Open must accept a
// well-formed header or return an error; an opened shard's Verify must pass or return an error;
// and a verified shard's every token, mask byte and document offset must be readable.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "runtime/data/prepared_shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = hoist::fuzz::ScratchDir() + "/shard.prepared";
  hoist::fuzz::WriteBytes(path, data, size);
  auto shard = hoist::runtime::PreparedShard::Open(path);
  if (!shard.ok()) return 0;
  if (!shard->Verify(50257).ok()) return 0;
  std::vector<uint32_t> tokens(static_cast<size_t>(shard->tokens()));
  std::vector<uint8_t> mask(tokens.size());
  std::vector<int64_t> starts(static_cast<size_t>(shard->documents()));
  if (!shard->ReadTokens(0, shard->tokens(), tokens.data()).ok()) return 0;
  if (!shard->ReadMask(0, shard->tokens(), mask.data()).ok()) return 0;
  if (!shard->ReadDocuments(0, shard->documents(), starts.data()).ok()) return 0;
  uint64_t sum = 0;
  for (uint32_t token : tokens) sum += token;
  return sum == UINT64_MAX ? 1 : 0;  // keeps the loop; never true
}
