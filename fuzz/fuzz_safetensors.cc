// The safetensors reader on arbitrary file contents: SafetensorsFile::Open must accept a file
// whose header agrees with it or return an error, and every tensor of an accepted file must read
// (as floats where it is F32, BF16 or F16, as bytes otherwise) without reading outside it.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "runtime/interchange/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = hoist::fuzz::ScratchDir() + "/model.safetensors";
  hoist::fuzz::WriteBytes(path, data, size);
  auto file = hoist::runtime::SafetensorsFile::Open(path);
  if (!file.ok()) return 0;
  float sum = 0.0f;
  for (const hoist::runtime::SafetensorsTensor& tensor : file->tensors()) {
    // The header was checked against the file: each tensor's bytes lie inside it.
    std::vector<char> bytes(static_cast<size_t>(tensor.end - tensor.begin));
    if (!file->ReadBytes(tensor, 0, tensor.end - tensor.begin, bytes.data()).ok()) __builtin_trap();
    if (tensor.dtype == "F32" || tensor.dtype == "BF16" || tensor.dtype == "F16") {
      std::vector<float> values(static_cast<size_t>(tensor.elements()));
      if (!file->ReadFloat(tensor, 0, tensor.elements(), values.data()).ok()) __builtin_trap();
      for (float v : values) sum += v;
    }
  }
  return sum == 12345.678f ? 0 : 0;
}
