// The safetensors reader and writer: the writer's bytes against files the safetensors library
// wrote (tests/data/gpt2_hf/, scripts/reference/gpt2_hf.py), and every way a file can lie about
// itself refused with an error that names it.
#include "runtime/interchange/safetensors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;

const std::string kData = std::string(HOIST_SOURCE_DIR) + "/tests/data/gpt2_hf";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string TempPath(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / "hoist_safetensors_test";
  fs::create_directories(dir);
  return (dir / name).string();
}

// A file of the format's layout around `json` (padded) and `data`.
std::string Assemble(std::string json, const std::string& data) {
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  return out + json + data;
}

TEST(Safetensors, ReadsTheFixtureItsLibraryWrote) {
  auto file = SafetensorsFile::Open(kData + "/fp32/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->metadata().at("format"), "pt");
  const SafetensorsTensor* wte = file->Find("transformer.wte.weight");
  ASSERT_NE(wte, nullptr);
  EXPECT_EQ(wte->dtype, "F32");
  EXPECT_EQ(wte->shape, (std::vector<int64_t>{96, 16}));
  std::vector<float> values(static_cast<size_t>(wte->elements()));
  ASSERT_TRUE(file->ReadFloat(*wte, 0, wte->elements(), values.data()).ok());
  // The same elements read as a range in the middle.
  std::vector<float> part(40);
  ASSERT_TRUE(file->ReadFloat(*wte, 100, 40, part.data()).ok());
  EXPECT_EQ(std::memcmp(part.data(), values.data() + 100, 40 * sizeof(float)), 0);
  EXPECT_EQ(file->Find("no.such.tensor"), nullptr);
}

TEST(Safetensors, Bf16ReadsWidenExactly) {
  auto fp32 = SafetensorsFile::Open(kData + "/fp32/model.safetensors");
  auto bf16 = SafetensorsFile::Open(kData + "/bf16/model.safetensors");
  ASSERT_TRUE(fp32.ok() && bf16.ok());
  const SafetensorsTensor* a = fp32->Find("transformer.h.1.mlp.c_fc.weight");
  const SafetensorsTensor* b = bf16->Find("transformer.h.1.mlp.c_fc.weight");
  ASSERT_TRUE(a != nullptr && b != nullptr);
  EXPECT_EQ(b->dtype, "BF16");
  std::vector<float> wide(static_cast<size_t>(a->elements())), narrow(wide.size());
  ASSERT_TRUE(fp32->ReadFloat(*a, 0, a->elements(), wide.data()).ok());
  ASSERT_TRUE(bf16->ReadFloat(*b, 0, b->elements(), narrow.data()).ok());
  for (size_t i = 0; i < wide.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &narrow[i], 4);
    EXPECT_EQ(bits & 0xffffu, 0u) << i;  // a bf16 value widened: the low half is zero
    EXPECT_NEAR(narrow[i], wide[i], std::abs(wide[i]) / 256) << i;
  }
}

TEST(Safetensors, RewritingTheFixtureGivesItsBytes) {
  auto file = SafetensorsFile::Open(kData + "/fp32/model.safetensors");
  ASSERT_TRUE(file.ok());
  std::vector<SafetensorsOutput> outputs;
  for (const SafetensorsTensor& t : file->tensors()) {
    SafetensorsOutput out{t.name, t.dtype, t.shape, nullptr};
    const SafetensorsFile* source = &*file;
    out.produce = [source, t](const SafetensorsOutput::Emit& emit) {
      std::string bytes(static_cast<size_t>(t.end - t.begin), '\0');
      HOIST_RETURN_IF_ERROR(source->ReadBytes(t, 0, t.end - t.begin, bytes.data()));
      // In two pieces, as a producer of a large tensor would.
      const int64_t half = static_cast<int64_t>(bytes.size() / 2);
      HOIST_RETURN_IF_ERROR(emit(bytes.data(), half));
      return emit(bytes.data() + half, static_cast<int64_t>(bytes.size()) - half);
    };
    outputs.push_back(std::move(out));
  }
  std::reverse(outputs.begin(), outputs.end());  // the writer's order must not depend on ours
  SortSafetensorsOutputs(&outputs);
  const std::string path = TempPath("rewritten.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, std::move(outputs), file->metadata()).ok());
  EXPECT_EQ(ReadFile(path), ReadFile(kData + "/fp32/model.safetensors"));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(Safetensors, SortsByDtypeThenNameAsItsLibraryDoes) {
  std::vector<SafetensorsOutput> outputs = {{"b", "BF16", {2}, nullptr},
                                            {"a", "F32", {3}, nullptr},
                                            {"c", "I64", {1}, nullptr},
                                            {"z", "F16", {2, 2}, nullptr},
                                            {"y", "F32", {1}, nullptr}};
  SortSafetensorsOutputs(&outputs);
  std::vector<std::string> names;
  for (const auto& o : outputs) names.push_back(o.name);
  // safetensors 0.8 (torch save_file) writes I64, then F32, then BF16, then F16, by name within.
  EXPECT_EQ(names, (std::vector<std::string>{"c", "a", "y", "b", "z"}));
  auto header = SafetensorsHeader(outputs, {{"format", "pt"}});
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->substr(8, 42), R"({"__metadata__":{"format":"pt"},"c":{"dtyp)");
  EXPECT_EQ(header->size() % 8, 0u);
}

// Each damaged file is DataLoss naming the file, and the tensor where one is at fault.
TEST(Safetensors, RefusesFilesThatLie) {
  const std::string good_data(24, '\x01');
  struct Case {
    const char* what;
    std::string bytes;
    std::string expect;  // in the message
  };
  const std::string ok_json =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})";
  std::vector<Case> cases = {
      {"short", std::string(5, '\0'), "fewer than its 8-byte header length"},
      {"header past end", Assemble(ok_json, good_data).substr(0, 40), "truncated"},
      {"truncated data", Assemble(ok_json, good_data.substr(0, 20)), "tensor \"b\""},
      {"not json", Assemble("{\"a\":", good_data), "not a JSON object"},
      {"overlap",
       Assemble(
           R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
           good_data),
       "overlap or leave a gap"},
      {"gap at end",
       Assemble(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", good_data),
       "the tensors hold 8 bytes but the file has 24"},
      {"shape lies",
       Assemble(
           R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
           good_data),
       "tensor \"a\" of shape [3]"},
      {"unknown dtype",
       Assemble(
           R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
           good_data),
       "unknown dtype"},
      {"negative offsets",
       Assemble(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", good_data),
       "not two offsets"},
      {"huge shape",
       Assemble(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,24]}})",
                good_data),
       "tensor \"a\""},
      {"a tensor named twice",
       Assemble(
           R"({"a":{"dtype":"F32","shape":[6],"data_offsets":[0,24]},"a":{"dtype":"F32","shape":[6],"data_offsets":[0,24]}})",
           good_data),
       "its header: a: the key appears twice"},
      // Unsigned in the format: it used to be printed as -1.
      {"header length 2^64 - 1", std::string(8, '\xff') + ok_json,
       "header length 18446744073709551615 is outside [2, "},
      {"metadata not strings",
       Assemble(
           R"({"__metadata__":{"format":1},"a":{"dtype":"F32","shape":[6],"data_offsets":[0,24]}})",
           good_data),
       "__metadata__.format"},
  };
  for (const Case& c : cases) {
    const std::string path = TempPath("bad.safetensors");
    WriteFile(path, c.bytes);
    auto file = SafetensorsFile::Open(path);
    ASSERT_FALSE(file.ok()) << c.what;
    EXPECT_EQ(file.status().code(), StatusCode::kDataLoss) << c.what;
    EXPECT_NE(file.status().message().find(path), std::string::npos) << c.what;
    EXPECT_NE(file.status().message().find(c.expect), std::string::npos)
        << c.what << ": " << file.status().message();
  }
  // The same layout with consistent claims opens: the cases above fail for their lie alone.
  const std::string path = TempPath("good.safetensors");
  WriteFile(path, Assemble(ok_json, good_data));
  EXPECT_TRUE(SafetensorsFile::Open(path).ok());
}

TEST(Safetensors, EveryTruncationOfARealFileIsRefused) {
  const std::string bytes = ReadFile(kData + "/bf16/model.safetensors");
  const std::string path = TempPath("cut.safetensors");
  for (size_t size : {size_t{0}, size_t{7}, size_t{8}, size_t{100}, bytes.size() / 2,
                      bytes.size() - 2, bytes.size() - 1}) {
    WriteFile(path, bytes.substr(0, size));
    auto file = SafetensorsFile::Open(path);
    ASSERT_FALSE(file.ok()) << size;
    EXPECT_EQ(file.status().code(), StatusCode::kDataLoss) << size;
  }
}

TEST(Safetensors, ReadsOutsideATensorAndNonFloatReadsAreRefused) {
  const std::string path = TempPath("ints.safetensors");
  WriteFile(path, Assemble(R"({"i":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})",
                           std::string(16, '\0')));
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  float out[2];
  Status read = file->ReadFloat(file->tensors()[0], 0, 2, out);
  EXPECT_EQ(read.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(read.message().find("\"i\" is I64"), std::string::npos) << read.message();
  char raw[32];
  EXPECT_EQ(file->ReadBytes(file->tensors()[0], 8, 16, raw).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(file->ReadBytes(file->tensors()[0], 8, 8, raw).ok());
}

TEST(Safetensors, AFullDiskLeavesNoFileBehind) {
  FaultInjectingFileSystem faulty(FileSystem::Posix());
  faulty.SetWriteBudget(1000);  // the header fits, the tensor does not
  std::vector<float> values(1000, 1.0f);
  std::vector<SafetensorsOutput> outputs = {
      {"w", "F32", {1000}, [&](const SafetensorsOutput::Emit& emit) {
         return emit(values.data(), 4000);
       }}};
  const std::string path = TempPath("full.safetensors");
  fs::remove(path);
  Status written = WriteSafetensors(path, std::move(outputs), {}, faulty);
  EXPECT_EQ(written.code(), StatusCode::kResourceExhausted) << written.ToString();
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(Safetensors, AProducerThatMisCountsItsBytesIsAnError) {
  std::vector<float> values(4, 1.0f);
  std::vector<SafetensorsOutput> outputs = {
      {"w", "F32", {4}, [&](const SafetensorsOutput::Emit& emit) {
         return emit(values.data(), 12);
       }}};
  const std::string path = TempPath("short.safetensors");
  Status written = WriteSafetensors(path, std::move(outputs), {});
  EXPECT_EQ(written.code(), StatusCode::kInternal);
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
}  // namespace hoist::runtime
