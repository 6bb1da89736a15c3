// A Hugging Face checkpoint whose weights hold an inf or a NaN is refused where it is read,
// naming the file and the tensor: it used to train, and the first loss of NaN was reported as a
// learning rate too high.
#include "runtime/interchange/hf_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "runtime/interchange/safetensors.h"
#include "runtime/model/model.h"

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string kData = std::string(HOIST_SOURCE_DIR) + "/tests/data/gpt2_hf/fp32";

// Every unit of `source`, read whole.
Status ReadAllUnits(const WeightSource& source) {
  const std::vector<zero::UnitSpec> units = ModelUnits(source.model());
  for (size_t u = 0; u < units.size(); ++u) {
    std::vector<float> values(static_cast<size_t>(units[u].size));
    HOIST_RETURN_IF_ERROR(source.FillRange(static_cast<int>(u), 0, units[u].size, values.data()));
  }
  return Status::Ok();
}

TEST(HfCheckpoint, AWeightThatIsNotFiniteIsRefusedNamingTheTensor) {
  const fs::path dir = fs::path(::testing::TempDir()) / "hoist_hf_checkpoint_test" / "nan";
  fs::remove_all(dir);
  fs::create_directories(dir.parent_path());
  fs::copy(kData, dir, fs::copy_options::recursive);
  const std::string file = (dir / "model.safetensors").string();
  for (const float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    fs::copy_file(kData + "/model.safetensors", file, fs::copy_options::overwrite_existing);
    std::string name;
    int64_t at = 0;
    {
      auto opened = SafetensorsFile::Open(file);
      ASSERT_TRUE(opened.ok()) << opened.status().ToString();
      const SafetensorsTensor* tensor = opened->Find("transformer.wte.weight");
      ASSERT_NE(tensor, nullptr);
      ASSERT_EQ(tensor->dtype, "F32");
      name = tensor->name;
      at = 8 + opened->header_bytes() + tensor->begin + 3 * int64_t{sizeof(float)};
    }
    {
      std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(at);
      f.write(reinterpret_cast<const char*>(&bad), sizeof(bad));
    }
    auto source = OpenWeightSource(dir.string());
    ASSERT_TRUE(source.ok()) << source.status().ToString();
    const Status read = ReadAllUnits(**source);
    ASSERT_EQ(read.code(), StatusCode::kInvalidArgument) << read.ToString();
    EXPECT_THAT(read.message(), AllOf(HasSubstr(file), HasSubstr("tensor \"" + name + "\""),
                                      HasSubstr(std::isnan(bad) ? "holds nan" : "holds inf"),
                                      HasSubstr("must be finite")));
  }
  // The untouched file reads whole: the refusal above is the NaN's alone.
  fs::copy_file(kData + "/model.safetensors", file, fs::copy_options::overwrite_existing);
  auto source = OpenWeightSource(dir.string());
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  EXPECT_TRUE(ReadAllUnits(**source).ok());
}

}  // namespace
}  // namespace hoist::runtime
