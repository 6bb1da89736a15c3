// The config reader on arbitrary text: ParseConfig must answer every input with a Config or an
// error, never crash, hang or read out of bounds.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = hoist::runtime::ParseConfigQuietly(text, {}, /*world_size=*/2, "fuzz.json");
  if (config.ok()) (void)config->precision();
  return 0;
}
