#include "runtime/interchange/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/json_reader.h"
#include "kernels/cpu/convert.h"

namespace hoist::runtime {
namespace {

// The format's dtypes in the order of the safetensors library's enum, which is also the order
// its writer sorts by (descending).
struct DTypeInfo {
  const char* name;
  int bytes;
};
constexpr DTypeInfo kDTypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
    {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8},
};

int DTypeRank(const std::string& dtype) {
  for (size_t i = 0; i < std::size(kDTypes); ++i) {
    if (dtype == kDTypes[i].name) return static_cast<int>(i);
  }
  return -1;
}

bool FloatDType(const std::string& dtype, DType* type) {
  if (dtype == "F32") {
    *type = DType::kFloat32;
  } else if (dtype == "BF16") {
    *type = DType::kBFloat16;
  } else if (dtype == "F16") {
    *type = DType::kFloat16;
  } else {
    return false;
  }
  return true;
}

uint64_t LittleEndian64(const unsigned char* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

// Elements of `shape`, or -1 when a dimension is negative or the product overflows.
int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

}  // namespace

int64_t SafetensorsTensor::elements() const { return Elements(shape); }

int SafetensorsDTypeSize(const std::string& dtype) {
  const int rank = DTypeRank(dtype);
  return rank < 0 ? 0 : kDTypes[rank].bytes;
}

const char* SafetensorsDTypeName(DType type) {
  switch (type) {
    case DType::kFloat32: return "F32";
    case DType::kBFloat16: return "BF16";
    case DType::kFloat16: return "F16";
  }
  return "F32";
}

StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path, FileSystem& fs) {
  SafetensorsFile file;
  file.path_ = path;
  HOIST_ASSIGN_OR_RETURN(file.file_, fs.NewRandomAccessFile(path));
  const int64_t size = file.file_->size_bytes();
  auto lost = [&](const std::string& what) {
    return DataLossError("safetensors file " + path + ": " + what +
                         "; the file is damaged or not a safetensors file: download or export "
                         "it again");
  };
  if (size < 8)
    return lost("holds " + std::to_string(size) + " bytes, fewer than its 8-byte header length");
  unsigned char prefix[8];
  HOIST_ASSIGN_OR_RETURN(int64_t got, file.file_->Read(0, prefix, 8));
  if (got != 8) return lost("its header length could not be read");
  // Unsigned in the format: a length of 2^64 - 1 is reported as such, not as -1.
  const uint64_t length = LittleEndian64(prefix);
  if (length < 2 || length > static_cast<uint64_t>(kSafetensorsMaxHeaderBytes)) {
    return lost("header length " + std::to_string(length) + " is outside [2, " +
                std::to_string(kSafetensorsMaxHeaderBytes) + "]");
  }
  const int64_t n = static_cast<int64_t>(length);
  if (n > size - 8) {
    return lost("header length " + std::to_string(n) + " runs past the end of the file (" +
                std::to_string(size) + " bytes): it is truncated");
  }
  file.header_bytes_ = n;
  std::string text(static_cast<size_t>(n), '\0');
  HOIST_ASSIGN_OR_RETURN(got, file.file_->Read(8, text.data(), n));
  if (got != n) return lost("its header could not be read whole");
  // The writer pads with spaces; JSON allows trailing whitespace.
  JsonFault fault;
  StatusOr<nlohmann::json> parsed =
      ParseJson(text, "its header", JsonLimits{kJsonMaxDepth, kSafetensorsMaxHeaderBytes}, &fault);
  if (!parsed.ok()) {
    return fault == JsonFault::kNotJson ? lost("its header is not a JSON object")
                                        : lost(parsed.status().message());
  }
  nlohmann::json header = std::move(parsed).value();
  if (!header.is_object()) return lost("its header is not a JSON object");

  const int64_t data_bytes = size - 8 - n;
  for (const auto& item : header.items()) {
    const std::string& name = item.key();
    const nlohmann::json& entry = item.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) return lost("__metadata__ is not an object");
      for (auto& [key, value] : entry.items()) {
        if (!value.is_string()) return lost("__metadata__." + key + " is not a string");
        file.metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) { return lost("tensor \"" + name + "\" " + what); };
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets")) {
      return bad("lacks dtype, shape or data_offsets");
    }
    SafetensorsTensor tensor;
    tensor.name = name;
    const nlohmann::json& dtype = entry["dtype"];
    if (!dtype.is_string() || DTypeRank(dtype.get<std::string>()) < 0) {
      return bad("has an unknown dtype " + dtype.dump());
    }
    tensor.dtype = dtype.get<std::string>();
    const nlohmann::json& shape = entry["shape"];
    if (!shape.is_array()) return bad("has a shape that is not an array");
    for (const nlohmann::json& d : shape) {
      if (!d.is_number_unsigned()) return bad("has a shape " + shape.dump() + " that is not sizes");
      tensor.shape.push_back(
          d.get<uint64_t>() > (uint64_t{1} << 62) ? -1 : static_cast<int64_t>(d.get<uint64_t>()));
    }
    const nlohmann::json& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      return bad("has data_offsets " + offsets.dump() + " that are not two offsets");
    }
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (begin > end || end > static_cast<uint64_t>(data_bytes)) {
      return bad("has data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                 "] outside the file's " + std::to_string(data_bytes) +
                 " bytes of data: the file is truncated or its header is wrong");
    }
    tensor.begin = static_cast<int64_t>(begin);
    tensor.end = static_cast<int64_t>(end);
    const int64_t elements = tensor.elements();
    const int size_of = SafetensorsDTypeSize(tensor.dtype);
    if (elements < 0 || elements > std::numeric_limits<int64_t>::max() / size_of ||
        elements * size_of != tensor.end - tensor.begin) {
      return bad("of shape " + shape.dump() + " and dtype " + tensor.dtype + " needs " +
                 (elements < 0 ? std::string("too many") : std::to_string(elements * size_of)) +
                 " bytes but its data_offsets hold " + std::to_string(tensor.end - tensor.begin));
    }
    file.tensors_.push_back(std::move(tensor));
  }
  // The data section is the tensors back to back: no overlap, no gap, nothing after.
  std::sort(file.tensors_.begin(), file.tensors_.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  int64_t cursor = 0;
  for (const SafetensorsTensor& tensor : file.tensors_) {
    if (tensor.begin != cursor) {
      return lost("tensor \"" + tensor.name + "\" starts at byte " + std::to_string(tensor.begin) +
                  " of the data where " + std::to_string(cursor) +
                  " was expected: the tensors overlap or leave a gap");
    }
    cursor = tensor.end;
  }
  if (cursor != data_bytes) {
    return lost("the tensors hold " + std::to_string(cursor) + " bytes but the file has " +
                std::to_string(data_bytes) + " after its header");
  }
  for (size_t i = 0; i < file.tensors_.size(); ++i) file.by_name_[file.tensors_[i].name] = i;
  return file;
}

const SafetensorsTensor* SafetensorsFile::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

Status SafetensorsFile::ReadBytes(const SafetensorsTensor& tensor, int64_t offset, int64_t bytes,
                                  void* out) const {
  if (offset < 0 || bytes < 0 || offset > tensor.end - tensor.begin - bytes) {
    return InvalidArgumentError("safetensors file " + path_ + ": bytes [" + std::to_string(offset) +
                                ", +" + std::to_string(bytes) + ") are outside tensor \"" +
                                tensor.name + "\"");
  }
  const int64_t at = 8 + header_bytes_ + tensor.begin + offset;
  auto* cursor = static_cast<char*>(out);
  while (bytes > 0) {
    HOIST_ASSIGN_OR_RETURN(int64_t got, file_->Read(at, cursor, bytes));
    if (got <= 0) {
      return DataLossError("safetensors file " + path_ + " ended at byte " + std::to_string(at) +
                           " inside tensor \"" + tensor.name +
                           "\": it was truncated after it was opened");
    }
    cursor += got;
    bytes -= got;
  }
  return Status::Ok();
}

Status SafetensorsFile::ReadFloat(const SafetensorsTensor& tensor, int64_t first, int64_t count,
                                  float* out) const {
  DType type;
  if (!FloatDType(tensor.dtype, &type)) {
    return InvalidArgumentError("safetensors file " + path_ + ": tensor \"" + tensor.name +
                                "\" is " + tensor.dtype +
                                "; hoist reads weights stored as F32, BF16 or F16");
  }
  const int64_t n = tensor.elements();
  if (first < 0 || count < 0 || first > n - count) {
    return InvalidArgumentError("safetensors file " + path_ + ": elements [" +
                                std::to_string(first) + ", +" + std::to_string(count) +
                                ") are outside tensor \"" + tensor.name + "\" of " +
                                std::to_string(n));
  }
  const int64_t size_of = static_cast<int64_t>(DTypeSize(type));
  if (type == DType::kFloat32) return ReadBytes(tensor, first * size_of, count * size_of, out);
  // 16-bit values: read a block at a time and widen each into `out`.
  constexpr int64_t kBlock = int64_t{1} << 16;
  std::vector<uint16_t> narrow(static_cast<size_t>(std::min(count, kBlock)));
  for (int64_t done = 0; done < count; done += kBlock) {
    const int64_t piece = std::min(kBlock, count - done);
    HOIST_RETURN_IF_ERROR(
        ReadBytes(tensor, (first + done) * size_of, piece * size_of, narrow.data()));
    kernels::cpu::ToFloat(narrow.data(), type, out + done, piece);
  }
  return Status::Ok();
}

void SortSafetensorsOutputs(std::vector<SafetensorsOutput>* tensors) {
  std::stable_sort(tensors->begin(), tensors->end(),
                   [](const SafetensorsOutput& a, const SafetensorsOutput& b) {
                     const int ra = DTypeRank(a.dtype), rb = DTypeRank(b.dtype);
                     return ra != rb ? ra > rb : a.name < b.name;
                   });
}

StatusOr<std::string> SafetensorsHeader(const std::vector<SafetensorsOutput>& tensors,
                                        const std::map<std::string, std::string>& metadata) {
  // nlohmann's objects sort their keys; the format's writer keeps metadata first and the
  // tensors in data order, so the JSON is assembled by hand, each piece dumped compactly.
  std::string json = "{";
  bool first = true;
  if (!metadata.empty()) {
    nlohmann::json meta = nlohmann::json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    json += "\"__metadata__\":" + meta.dump();
    first = false;
  }
  int64_t offset = 0;
  for (const SafetensorsOutput& tensor : tensors) {
    const int size_of = SafetensorsDTypeSize(tensor.dtype);
    const int64_t elements = Elements(tensor.shape);
    if (size_of == 0 || elements < 0) {
      return InvalidArgumentError("safetensors tensor \"" + tensor.name + "\": dtype " +
                                  tensor.dtype + " or its shape is not writable");
    }
    const int64_t bytes = elements * size_of;
    nlohmann::json shape = nlohmann::json::array();
    for (int64_t d : tensor.shape) shape.push_back(d);
    if (!first) json += ",";
    first = false;
    json += nlohmann::json(tensor.name).dump() + ":{\"dtype\":\"" + tensor.dtype +
            "\",\"shape\":" + shape.dump() + ",\"data_offsets\":[" + std::to_string(offset) + "," +
            std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  json += "}";
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json;
}

Status WriteSafetensors(const std::string& path, std::vector<SafetensorsOutput> tensors,
                        const std::map<std::string, std::string>& metadata, FileSystem& fs) {
  HOIST_ASSIGN_OR_RETURN(std::string header, SafetensorsHeader(tensors, metadata));
  const std::string temporary = path + ".tmp";
  Status written = [&]() -> Status {
    HOIST_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, fs.NewWritableFile(temporary));
    HOIST_RETURN_IF_ERROR(file->Append(header.data(), static_cast<int64_t>(header.size())));
    for (const SafetensorsOutput& tensor : tensors) {
      const int64_t expected = Elements(tensor.shape) * SafetensorsDTypeSize(tensor.dtype);
      int64_t emitted = 0;
      const SafetensorsOutput::Emit emit = [&](const void* data, int64_t bytes) -> Status {
        if (bytes < 0 || bytes > expected - emitted) {
          return InternalError("safetensors tensor \"" + tensor.name +
                               "\" produced more than its " + std::to_string(expected) + " bytes");
        }
        emitted += bytes;
        return file->Append(data, bytes);
      };
      HOIST_RETURN_IF_ERROR(tensor.produce(emit));
      if (emitted != expected) {
        return InternalError("safetensors tensor \"" + tensor.name + "\" produced " +
                             std::to_string(emitted) + " of its " + std::to_string(expected) +
                             " bytes");
      }
    }
    HOIST_RETURN_IF_ERROR(file->Sync());
    return file->Close();
  }();
  if (written.ok()) written = fs.Rename(temporary, path);
  if (!written.ok()) (void)fs.Remove(temporary);
  return written;
}

}  // namespace hoist::runtime
