// The tokenizer.json reader on arbitrary file contents: BpeTokenizer::Parse must accept a
// well-formed byte-level BPE tokenizer or return an error. An accepted one must encode a text of
// every kind of character to ids below its id_limit, decode them, and give the same ids when the
// text arrives in small chunks.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/interchange/bpe_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  auto tokenizer = hoist::runtime::BpeTokenizer::Parse(json, "fuzz.json");
  if (!tokenizer.ok()) return 0;
  const std::string text =
      "It's THEY'LL 12345 \t\n\n  x\xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD "
      "<|endoftext|>\xff\xfe\r\n end  ";
  const std::vector<int32_t> ids = (*tokenizer)->Encode(text);
  for (int32_t id : ids) {
    if (id < 0 || id >= (*tokenizer)->id_limit()) std::abort();
  }
  (void)(*tokenizer)->Decode(ids);
  hoist::runtime::BpeStreamEncoder encoder(**tokenizer);
  std::vector<int32_t> streamed;
  for (size_t at = 0; at < text.size(); at += 3) {
    encoder.Add(std::string_view(text).substr(at, 3), &streamed);
  }
  encoder.Finish(&streamed);
  if (streamed != ids) std::abort();
  return 0;
}
