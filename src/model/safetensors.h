#pragma once
// safetensors files: a little-endian u64 header length N, N bytes of JSON
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data section. Reading maps the file and checks every entry before any tensor is used,
// so that a corrupt file is an error naming the file and the tensor, never a crash or a read out of
// bounds. A checkpoint is one file or several shards listed by model.safetensors.index.json.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace di {

// A read-only memory map of a whole file.
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

struct SafetensorsEntry {
  std::string name;
  TensorView view;        // points into the mapped data section
  uint64_t begin = 0;     // offsets within the data section, as the header gives them
  uint64_t end = 0;
};

// One validated safetensors file.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return file_->path(); }
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  size_t data_bytes() const { return data_bytes_; }
  // Start of the data section (for touching pages while showing load progress).
  const uint8_t* data_section() const { return data_section_; }

 private:
  std::shared_ptr<MappedFile> file_;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
  const uint8_t* data_section_ = nullptr;
  size_t data_bytes_ = 0;
};

// Every tensor of a checkpoint directory: model.safetensors, or the shards named by
// model.safetensors.index.json (each listed tensor must be in the shard the index names).
class Checkpoint {
 public:
  explicit Checkpoint(const std::filesystem::path& dir);

  struct Located {
    const SafetensorsFile* file;
    const SafetensorsEntry* entry;
  };
  const std::map<std::string, Located>& tensors() const { return tensors_; }
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  size_t total_bytes() const;

  // Reads every page of every file once, calling progress(bytes_done, bytes_total) as it goes.
  void prefault(const std::function<void(size_t, size_t)>& progress) const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Located> tensors_;
};

// Writing, for make-tiny-model and tests. Tensors are laid out in the given order.
struct TensorToWrite {
  std::string name;
  DType dtype;
  Shape shape;
  std::vector<uint8_t> bytes;  // exactly numel * dtype_size bytes
};
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// Parses a safetensors dtype name ("BF16", "F32", ...); unknown names are an error naming `where`.
DType parse_safetensors_dtype(const std::string& name, const std::string& where);

}  // namespace di
