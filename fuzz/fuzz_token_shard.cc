// The token shard reader on arbitrary file contents: ReadTokenShard must accept a well-formed
// shard or return an error, and an accepted shard's tokens must all be readable.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_util.h"
#include "runtime/data/token_shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = hoist::fuzz::ScratchDir() + "/shard.bin";
  hoist::fuzz::WriteBytes(path, data, size);
  auto shard = hoist::runtime::ReadTokenShard(path);
  if (!shard.ok()) return 0;
  (void)shard->CheckTokensBelow(50257);
  auto tokens = shard->ReadAll();
  if (!tokens.ok()) return 0;
  uint64_t sum = 0;
  for (uint16_t token : *tokens) sum += token;
  return sum == UINT64_MAX ? 1 : 0;  // keeps the loop; never true
}
