// Chat templates (the Jinja source a tokenizer_config.json carries) on arbitrary text: Parse
// must return a template or an error naming the construct, and Render a text or an error within
// its limits, never crash or hang.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "runtime/interchange/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  auto parsed = hoist::runtime::ChatTemplate::Parse(source);
  if (!parsed.ok()) return 0;
  static const nlohmann::json messages = nlohmann::json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi \"there\"\n"},
    {"role": "assistant", "content": "Hello", "reasoning_content": "think"},
    {"role": "user", "content": "2+2?"}])");
  hoist::runtime::ChatRenderOptions options;
  options.add_generation_prompt = true;
  options.special_tokens = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  options.now = std::tm{};
  // Small limits keep each input well under the fuzzer's per-input timeout.
  options.limits.max_steps = 200000;
  options.limits.max_output_bytes = size_t{1} << 20;
  (void)parsed->Render(messages, options);
  return 0;
}
