// Compressed datasets (runtime/data/byte_stream.h): gzip and zstd files read as their content,
// whatever the chunking, members and frames; damaged and truncated ones refused by name; and the
// dataset reader on them giving the rows of the plain file.
#include "runtime/data/byte_stream.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/data/dataset_rows.h"

namespace hoist::runtime {
namespace {

using ::testing::HasSubstr;

// `text` as one gzip member.
std::string Gzip(const std::string& text) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, static_cast<uLong>(text.size())) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// `text` as one zstd frame.
std::string Zstd(const std::string& text) {
  std::string out(ZSTD_compressBound(text.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), text.data(), text.size(), 3);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

// Lines of JSON rows, about `bytes` long, varied enough not to compress to nothing.
std::string Rows(size_t bytes) {
  std::string text;
  uint32_t x = 7;
  for (int i = 0; text.size() < bytes; ++i) {
    x = x * 1664525u + 1013904223u;
    text += "{\"text\": \"row " + std::to_string(i) + " " + std::to_string(x) + "\"}\n";
  }
  return text;
}

class ByteStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "hoist_byte_stream_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  // Everything the stream gives, read `chunk` bytes at a time, or its error.
  StatusOr<std::string> ReadAll(const std::string& path, int64_t chunk,
                                Compression* compression = nullptr) {
    HOIST_ASSIGN_OR_RETURN(auto file, FileSystem::Posix().NewRandomAccessFile(path));
    HOIST_ASSIGN_OR_RETURN(auto stream, ByteStream::Open(std::move(file), path));
    if (compression != nullptr) *compression = stream->compression();
    std::string out;
    std::string buffer(static_cast<size_t>(chunk), '\0');
    while (true) {
      HOIST_ASSIGN_OR_RETURN(int64_t got, stream->Read(buffer.data(), chunk));
      if (got == 0) break;
      out.append(buffer, 0, static_cast<size_t>(got));
    }
    return out;
  }

  std::string dir_;
};

TEST_F(ByteStreamTest, ContentComesBackWhateverTheChunkMembersAndFrames) {
  const std::string a = Rows(3 << 20), b = Rows(1000);  // a is several input chunks
  struct Case {
    std::string name, bytes;
    Compression compression;
  };
  const std::vector<Case> cases = {
      {"plain.jsonl", a + b, Compression::kNone},
      {"one.jsonl.gz", Gzip(a + b), Compression::kGzip},
      {"members.gz", Gzip(a) + Gzip(b) + Gzip(""), Compression::kGzip},  // as `cat` makes
      {"one.zst", Zstd(a + b), Compression::kZstd},
      {"frames.zst", Zstd(a) + Zstd("") + Zstd(b), Compression::kZstd},
  };
  for (const Case& c : cases) {
    const std::string path = Write(c.name, c.bytes);
    for (int64_t chunk : {int64_t{1} << 20, int64_t{4093}, int64_t{7}}) {
      SCOPED_TRACE(c.name + " in chunks of " + std::to_string(chunk));
      Compression found = Compression::kNone;
      StatusOr<std::string> got = ReadAll(path, chunk, &found);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(found, c.compression);
      EXPECT_TRUE(*got == a + b) << "content differs (" << got->size() << " bytes)";
    }
  }
  StatusOr<std::string> empty = ReadAll(Write("empty.gz", Gzip("")), 100);
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_TRUE(empty->empty());
}

TEST_F(ByteStreamTest, TruncatedOrDamagedFilesAreDataLossNamingThem) {
  const std::string text = Rows(200000);
  for (const auto& [name, bytes] : std::vector<std::pair<std::string, std::string>>{
           {"cut.gz", Gzip(text)}, {"cut.zst", Zstd(text)}}) {
    SCOPED_TRACE(name);
    StatusOr<std::string> cut = ReadAll(Write(name, bytes.substr(0, bytes.size() * 2 / 3)), 4096);
    ASSERT_FALSE(cut.ok());
    EXPECT_EQ(cut.status().code(), StatusCode::kDataLoss);
    EXPECT_THAT(cut.status().message(), HasSubstr(name));
    EXPECT_THAT(cut.status().message(), HasSubstr("ends inside"));
    std::string damaged = bytes;
    for (size_t i = damaged.size() / 3; i < damaged.size() / 3 + 64; ++i) damaged[i] ^= 0x5a;
    StatusOr<std::string> bad = ReadAll(Write("bad_" + name, damaged), 4096);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
    EXPECT_THAT(bad.status().message(), HasSubstr("bad_" + name));
  }
  // The gzip trailer's checksum catches damage the deflate data does not.
  std::string gz = Gzip(text);
  gz[gz.size() - 6] ^= 0x01;
  StatusOr<std::string> crc = ReadAll(Write("crc.gz", gz), 4096);
  ASSERT_FALSE(crc.ok());
  EXPECT_EQ(crc.status().code(), StatusCode::kDataLoss);
}

TEST_F(ByteStreamTest, CompressedDatasetsGiveThePlainFilesRows) {
  const std::string text = Rows(100000) + "{\"text\": \"last, without a line end\"}";
  auto rows_of = [&](const std::string& path) -> StatusOr<std::vector<std::string>> {
    HOIST_ASSIGN_OR_RETURN(auto reader, JsonlRowReader::Open(FileSystem::Posix(), path));
    std::vector<std::string> rows;
    DatasetRow row;
    while (true) {
      HOIST_ASSIGN_OR_RETURN(bool more, reader->Next(&row));
      if (!more) break;
      rows.push_back(std::to_string(row.line) + ":" + row.text);
    }
    return rows;
  };
  StatusOr<std::vector<std::string>> plain = rows_of(Write("d.jsonl", text));
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  for (const std::string& path :
       {Write("d.jsonl.gz", Gzip(text)), Write("d.jsonl.zst", Zstd(text))}) {
    StatusOr<std::vector<std::string>> rows = rows_of(path);
    ASSERT_TRUE(rows.ok()) << rows.status().ToString();
    EXPECT_EQ(*rows, *plain) << path;
  }
  // A malformed row in a compressed file names the file and the line as in a plain one.
  StatusOr<std::vector<std::string>> bad =
      rows_of(Write("bad.jsonl.gz", Gzip("{\"text\": \"a\"}\n{\"text\": 1}\n")));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("bad.jsonl.gz line 2"));
}

}  // namespace
}  // namespace hoist::runtime
