#include "runtime/data/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <ostream>

#include "core/file_system.h"
#include "runtime/data/progress_line.h"
#include "runtime/data/token_shard.h"
#include "runtime/interchange/bpe_tokenizer.h"

namespace hoist::runtime {

std::vector<uint16_t> EncodeBytes(std::string_view text) {
  std::vector<uint16_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

std::string DecodeToken(int32_t token) {
  if (token >= 0 && token < kByteVocabSize) return std::string(1, static_cast<char>(token));
  return "<|" + std::to_string(token) + "|>";
}

std::string DecodeTokens(std::span<const int32_t> tokens) {
  std::string text;
  text.reserve(tokens.size());
  for (int32_t token : tokens) {
    if (token >= 0 && token < kByteVocabSize) {
      text.push_back(static_cast<char>(token));
    } else {
      text += DecodeToken(token);
    }
  }
  return text;
}

Status TokenizeFile(const std::string& input_path, const std::string& output_path,
                    const TokenizeOptions& options) {
  FileSystem& fs = FileSystem::Posix();
  std::unique_ptr<BpeTokenizer> tokenizer;
  if (!options.tokenizer_path.empty()) {
    HOIST_ASSIGN_OR_RETURN(tokenizer, BpeTokenizer::Load(options.tokenizer_path, fs));
  }
  HOIST_ASSIGN_OR_RETURN(FileInfo info, fs.Stat(input_path));
  if (info.type != FileType::kRegular) {
    return InvalidArgumentError("'" + input_path + "' is not a regular file; give a text file");
  }
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file,
                         fs.NewRandomAccessFile(input_path));
  const int64_t size = file->size_bytes();
  if (size == 0) {
    return InvalidArgumentError("'" + input_path + "' is empty; there is nothing to tokenize");
  }
  const int token_bytes = tokenizer != nullptr && tokenizer->id_limit() > 65536 ? 4 : 2;
  HOIST_ASSIGN_OR_RETURN(TokenShardWriter writer,
                         TokenShardWriter::Create(output_path, token_bytes, fs));

  constexpr int64_t kChunkBytes = int64_t{1} << 20;
  std::string chunk(static_cast<size_t>(std::min(size, kChunkBytes)), '\0');
  std::optional<BpeStreamEncoder> encoder;
  if (tokenizer != nullptr) encoder.emplace(*tokenizer);
  std::vector<int32_t> ids;
  std::vector<uint32_t> tokens;
  auto write = [&]() -> Status {
    tokens.assign(ids.begin(), ids.end());
    ids.clear();
    return writer.Append(tokens);
  };
  ProgressLine progress(options.progress, "tokenized", size);
  int64_t done = 0;
  while (done < size) {
    HOIST_ASSIGN_OR_RETURN(
        int64_t n,
        file->Read(done, chunk.data(), std::min(size - done, static_cast<int64_t>(chunk.size()))));
    // The size was taken at open; a file that shrinks under us would lose its end.
    if (n == 0) {
      return IoError("'" + input_path + "' became shorter while it was read (" +
                     std::to_string(done) + " of " + std::to_string(size) +
                     " bytes); tokenize it again when nothing is writing to it");
    }
    const std::string_view piece(chunk.data(), static_cast<size_t>(n));
    if (encoder) {
      encoder->Add(piece, &ids);
    } else {
      for (unsigned char byte : piece) ids.push_back(byte);
    }
    HOIST_RETURN_IF_ERROR(write());
    done += n;
    if (done < size) progress.Update(done, std::to_string(writer.count()) + " tokens", false);
  }
  if (encoder) encoder->Finish(&ids);
  HOIST_RETURN_IF_ERROR(write());
  progress.Update(done, std::to_string(writer.count()) + " tokens", /*last=*/true);
  return writer.Finish();
}

}  // namespace hoist::runtime
