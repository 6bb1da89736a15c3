// The Hugging Face config.json reader (what `model.init_from` and `hoist export` read) on
// arbitrary file contents: ReadHfConfig must return a model or an error, never crash; a config
// nested 150,000 deep once overflowed the stack.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "runtime/interchange/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = hoist::fuzz::ScratchDir() + "/config.json";
  hoist::fuzz::WriteBytes(path, data, size);
  (void)hoist::runtime::ReadHfConfig(path);
  return 0;
}
