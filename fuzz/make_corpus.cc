// Writes the generated seeds of the fuzz targets: fuzz_make_corpus fuzz/corpus (rerun when a file
// format changes). The other JSON seeds are plain files kept by hand.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/file_system.h"
#include "fuzz/fuzz_util.h"
#include "runtime/data/prepared_shard.h"
#include "runtime/data/token_shard.h"

namespace {

void Copy(const std::string& from, const std::string& to) {
  auto bytes = hoist::ReadFileToString(hoist::FileSystem::Posix(), from);
  if (!bytes.ok()) {
    std::fprintf(stderr, "%s\n", bytes.status().ToString().c_str());
    std::exit(1);
  }
  hoist::fuzz::WriteBytes(to, reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_corpus <corpus dir>\n");
    return 2;
  }
  const std::string out = argv[1];
  const std::vector<uint16_t> tokens = {50256, 15496, 11, 995, 0, 13};
  hoist::Status s =
      hoist::runtime::WriteTokenShard(out + "/fuzz_token_shard/six_tokens.bin", tokens);
  if (s.ok()) {
    s = hoist::runtime::WriteTokenShard(out + "/fuzz_token_shard/empty.bin",
                                        std::span<const uint16_t>());
  }
  const std::vector<uint32_t> wide = {1, 70000, 2};
  if (s.ok()) {
    s = hoist::runtime::WriteTokenShard(out + "/fuzz_token_shard/three_wide_tokens.bin", wide);
  }
  // A prepared shard of two documents, a prompt and an answer each, in either token width.
  const std::vector<uint32_t> narrow = {50256, 15496, 11};
  for (int token_bytes : {2, 4}) {
    if (!s.ok()) break;
    const std::vector<uint32_t>& ids = token_bytes == 2 ? narrow : wide;
    auto writer = hoist::runtime::PreparedShardWriter::Create(
        out + "/fuzz_prepared_shard/two_documents_" + std::to_string(token_bytes) + ".prepared",
        token_bytes);
    s = writer.status();
    if (s.ok()) s = writer->Append(ids, std::vector<uint8_t>{0, 1, 1});
    if (s.ok()) s = writer->Append(ids, std::vector<uint8_t>{0, 0, 1});
    if (s.ok()) s = writer->Finish();
  }
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  // 150,000 nested brackets, as deep as the documents that once overflowed the stack, for every
  // target that reads JSON; the safetensors one as a header.
  const std::string deep = "{\"x\": " + std::string(150000, '[') + std::string(150000, ']') + "}";
  for (const char* target :
       {"fuzz_config", "fuzz_checkpoint_manifest", "fuzz_hf_config", "fuzz_tokenizer_json"}) {
    hoist::fuzz::WriteBytes(out + "/" + target + "/deep.json",
                            reinterpret_cast<const uint8_t*>(deep.data()), deep.size());
  }
  std::string header = deep;
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string safetensors(8, '\0');
  for (size_t i = 0; i < 8; ++i) safetensors[i] = static_cast<char>(header.size() >> (8 * i));
  safetensors += header;
  hoist::fuzz::WriteBytes(out + "/fuzz_safetensors/deep.safetensors",
                          reinterpret_cast<const uint8_t*>(safetensors.data()), safetensors.size());
  const std::string step_dir = hoist::fuzz::WriteTinyCheckpoint(hoist::fuzz::ScratchDir());
  Copy(step_dir + "/manifest.json", out + "/fuzz_checkpoint_manifest/tiny.json");
  Copy(step_dir + "/rank_00000.bin", out + "/fuzz_checkpoint_shard/tiny.bin");
  return 0;
}
