#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace di {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// A JSON value as text for an error message, cut short so that a hostile header cannot make the
// message huge.
std::string brief(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 120) s = s.substr(0, 117) + "...";
  return s;
}

std::string brief(const std::string& s) { return s.size() > 120 ? s.substr(0, 117) + "..." : s; }

// The value of a JSON non-negative integer, or false when it is anything else (negative, float,
// string, ...). nlohmann stores every non-negative integer literal as number_unsigned.
bool as_u64(const json& j, uint64_t& out) {
  if (!j.is_number_unsigned()) return false;
  out = j.get<uint64_t>();
  return true;
}

constexpr uint64_t kMaxI64 = uint64_t(std::numeric_limits<int64_t>::max());

}  // namespace

// ---------------------------------------------------------------------------------------------
// MappedFile

MappedFile::MappedFile(const fs::path& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    fail("cannot open {} for reading: {}", path.string(), std::strerror(e));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail("cannot stat {}: {}", path.string(), std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("cannot map {}: expected a regular file, found something else (a directory or device)",
         path.string());
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {  // mmap of length 0 is EINVAL; an empty file maps to nothing
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail("cannot map {} ({} bytes): {}", path.string(), size_, std::strerror(e));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping stays valid without the descriptor
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

// ---------------------------------------------------------------------------------------------
// dtype names

DType parse_safetensors_dtype(const std::string& name, const std::string& where) {
  static const std::pair<const char*, DType> kNames[] = {
      {"F32", DType::f32}, {"BF16", DType::bf16}, {"F16", DType::f16}, {"F64", DType::f64},
      {"I32", DType::i32}, {"I64", DType::i64},   {"U8", DType::u8},
  };
  for (const auto& [n, t] : kNames)
    if (name == n) return t;
  fail("{}: unknown dtype \"{}\"; expected one of F32, BF16, F16, F64, I32, I64, U8", where, brief(name));
}

// ---------------------------------------------------------------------------------------------
// SafetensorsFile

SafetensorsFile::SafetensorsFile(const fs::path& path) : file_(std::make_shared<MappedFile>(path)) {
  const std::string p = path.string();
  const uint8_t* const base = file_->data();
  const size_t size = file_->size();

  if (size < 8)
    fail("safetensors file {}: expected at least 8 bytes (the header length), found a file of {} bytes", p,
         size);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(base[i]) << (8 * i);
  if (n > uint64_t(size) - 8)
    fail("safetensors file {}: header length {} past the end of the file of size {}", p, n, size);

  const char* header_begin = reinterpret_cast<const char*>(base + 8);
  json header;
  try {
    header = json::parse(header_begin, header_begin + n);
  } catch (const json::exception& e) {
    fail("safetensors file {}: the {}-byte header is not valid JSON: {}", p, n, e.what());
  }
  if (!header.is_object())
    fail("safetensors file {}: expected the header to be a JSON object, found {}", p, header.type_name());

  data_section_ = base + 8 + n;
  data_bytes_ = size - 8 - size_t(n);

  try {
    for (const auto& [name, value] : header.items()) {
      if (name == "__metadata__") {
        if (!value.is_object())
          fail("safetensors file {}: __metadata__ must be an object of string to string, found {}", p,
               value.type_name());
        for (const auto& [k, v] : value.items()) {
          if (!v.is_string())
            fail("safetensors file {}: __metadata__ must be an object of string to string, but key \"{}\" "
                 "has a {} value",
                 p, brief(k), v.type_name());
          metadata_[k] = v.get<std::string>();
        }
        continue;
      }

      if (!value.is_object())
        fail("safetensors file {}: tensor {}: expected the entry to be a JSON object, found {}", p, name,
             value.type_name());
      for (const char* field : {"dtype", "shape", "data_offsets"})
        if (!value.contains(field))
          fail("safetensors file {}: tensor {}: entry lacks the \"{}\" field", p, name, field);

      const json& jdtype = value.at("dtype");
      if (!jdtype.is_string())
        fail("safetensors file {}: tensor {}: expected dtype to be a string, found {}", p, name, brief(jdtype));
      const DType dtype =
          parse_safetensors_dtype(jdtype.get<std::string>(), fmt::format("safetensors file {}: tensor {}", p, name));

      const json& jshape = value.at("shape");
      if (!jshape.is_array())
        fail("safetensors file {}: tensor {}: expected shape to be an array of non-negative integers, found {}",
             p, name, brief(jshape));
      Shape shape;
      shape.reserve(jshape.size());
      uint64_t numel = 1;
      bool overflow = false;
      for (const json& d : jshape) {
        uint64_t dim = 0;
        if (!as_u64(d, dim) || dim > kMaxI64)
          fail("safetensors file {}: tensor {}: expected shape to be an array of non-negative integers, "
               "found {}",
               p, name, brief(jshape));
        shape.push_back(int64_t(dim));
        if (__builtin_mul_overflow(numel, dim, &numel)) overflow = true;
      }
      const uint64_t dsize = dtype_size(dtype);
      uint64_t expected = 0;
      if (overflow || numel > kMaxI64 || __builtin_mul_overflow(numel, dsize, &expected))
        fail("safetensors file {}: tensor {}: shape {} overflows: its element count times {} bytes does not "
             "fit in 64 bits",
             p, name, brief(jshape), dsize);

      const json& joff = value.at("data_offsets");
      uint64_t begin = 0, end = 0;
      if (!joff.is_array() || joff.size() != 2 || !as_u64(joff[0], begin) || !as_u64(joff[1], end))
        fail("safetensors file {}: tensor {}: expected data_offsets to be two non-negative integers "
             "[begin, end], found {}",
             p, name, brief(joff));
      if (begin > end)
        fail("safetensors file {}: tensor {}: data_offsets [{}, {}] have begin > end", p, name, begin, end);
      if (end > data_bytes_)
        fail("safetensors file {}: tensor {}: data_offsets end {} is past the end of the data section of {} "
             "bytes (file of {} bytes, header of {} bytes); is the file truncated?",
             p, name, end, data_bytes_, size, n);
      if (end - begin != expected)
        fail("safetensors file {}: tensor {}: dtype {} and shape {} need {} bytes, but data_offsets [{}, {}] "
             "span {} bytes",
             p, name, dtype_name(dtype), shape_str(shape), expected, begin, end, end - begin);

      SafetensorsEntry entry;
      entry.name = name;
      entry.begin = begin;
      entry.end = end;
      entry.view.data = data_section_ + begin;
      entry.view.dtype = dtype;
      entry.view.shape = std::move(shape);
      entry.view.device = Device::cpu;
      entries_.emplace(name, std::move(entry));
    }
  } catch (const json::exception& e) {  // a safety net: every access above checks the type first
    fail("safetensors file {}: malformed header: {}", p, e.what());
  }

  // No two tensors may share bytes. Sorted by begin, a non-empty range overlaps an earlier one exactly
  // when it starts before the furthest end seen so far.
  std::vector<const SafetensorsEntry*> order;
  order.reserve(entries_.size());
  for (const auto& [name, e] : entries_)
    if (e.end > e.begin) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  const SafetensorsEntry* furthest = nullptr;
  for (const SafetensorsEntry* e : order) {
    if (furthest && e->begin < furthest->end)
      fail("safetensors file {}: tensors {} (bytes [{}, {})) and {} (bytes [{}, {})) overlap in the data section",
           p, furthest->name, furthest->begin, furthest->end, e->name, e->begin, e->end);
    if (!furthest || e->end > furthest->end) furthest = e;
  }
}

// ---------------------------------------------------------------------------------------------
// Checkpoint

Checkpoint::Checkpoint(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) fail("checkpoint directory {} does not exist", dir.string());
  if (!fs::is_directory(dir, ec)) fail("checkpoint path {}: expected a directory, found a file", dir.string());

  const fs::path index_path = dir / "model.safetensors.index.json";
  const fs::path single_path = dir / "model.safetensors";

  if (fs::exists(index_path, ec)) {
    const std::string ip = index_path.string();
    std::ifstream in(index_path, std::ios::binary);
    if (!in) fail("checkpoint index {}: cannot open for reading", ip);
    std::stringstream ss;
    ss << in.rdbuf();
    if (in.bad()) fail("checkpoint index {}: read error", ip);
    json index;
    try {
      index = json::parse(ss.str());
    } catch (const json::exception& e) {
      fail("checkpoint index {}: not valid JSON: {}", ip, e.what());
    }
    if (!index.is_object()) fail("checkpoint index {}: expected a JSON object, found {}", ip, index.type_name());
    auto wm = index.find("weight_map");
    if (wm == index.end() || !wm->is_object())
      fail("checkpoint index {}: missing \"weight_map\" object (tensor name -> shard file)", ip);

    std::map<std::string, std::string> weight_map;  // tensor -> shard file name
    std::set<std::string> shard_names;
    for (const auto& [tensor, shard] : wm->items()) {
      if (!shard.is_string() || shard.get<std::string>().empty())
        fail("checkpoint index {}: weight_map entry for tensor {} must be a shard file name, found {}", ip, tensor,
             brief(shard));
      weight_map[tensor] = shard.get<std::string>();
      shard_names.insert(shard.get<std::string>());
    }
    for (const std::string& shard : shard_names)
      if (!fs::is_regular_file(dir / shard, ec))
        fail("checkpoint index {} names shard file {}, which does not exist or is not a regular file", ip,
             (dir / shard).string());

    // Each distinct shard once, in name order (model-00001-of-N, model-00002-of-N, ...).
    std::map<std::string, const SafetensorsFile*> by_shard;
    for (const std::string& shard : shard_names) {
      files_.push_back(std::make_unique<SafetensorsFile>(dir / shard));
      by_shard[shard] = files_.back().get();
    }

    std::map<std::string, const SafetensorsFile*> holder;  // tensor -> the shard that has it
    for (const auto& f : files_)
      for (const auto& [name, e] : f->entries()) {
        auto [it, inserted] = holder.emplace(name, f.get());
        if (!inserted)
          fail("checkpoint {}: tensor {} is in two shards, {} and {}", dir.string(), name,
               it->second->path().filename().string(), f->path().filename().string());
      }

    for (const auto& [tensor, shard] : weight_map) {
      const SafetensorsFile* f = by_shard.at(shard);
      auto it = f->entries().find(tensor);
      if (it == f->entries().end())
        fail("checkpoint index {}: tensor {} listed in index for shard {} but not found there", ip, tensor, shard);
      tensors_[tensor] = Located{f, &it->second};
    }
    for (const auto& f : files_)
      for (const auto& [name, e] : f->entries())
        if (!weight_map.count(name))
          fail("checkpoint {}: tensor {} is in shard {} but not listed in the index {}", dir.string(), name,
               f->path().filename().string(), ip);
  } else if (fs::exists(single_path, ec)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single_path));
    const SafetensorsFile* f = files_.back().get();
    for (const auto& [name, e] : f->entries()) tensors_[name] = Located{f, &e};
  } else {
    fail("no model.safetensors or model.safetensors.index.json in {}", dir.string());
  }
}

size_t Checkpoint::total_bytes() const {
  size_t total = 0;
  for (const auto& f : files_) total += f->data_bytes();
  return total;
}

void Checkpoint::prefault(const std::function<void(size_t, size_t)>& progress) const {
  constexpr size_t kPage = 4096;
  const size_t total = total_bytes();
  const size_t step = std::max<size_t>(total / 100, 1);
  size_t base = 0;
  size_t next_report = step;
  volatile uint64_t sum = 0;
  for (const auto& f : files_) {
    const uint8_t* d = f->data_section();
    const size_t bytes = f->data_bytes();
    for (size_t off = 0; off < bytes; off += kPage) {
      sum = sum + d[off];
      const size_t done = base + std::min(off + kPage, bytes);
      if (progress && done >= next_report && done < total) {
        progress(done, total);
        next_report = done + step;
      }
    }
    // The last page may hold bytes past the last touched offset.
    if (bytes > 0) sum = sum + d[bytes - 1];
    base += bytes;
  }
  (void)sum;
  if (progress) progress(total, total);
}

// ---------------------------------------------------------------------------------------------
// Writing

void write_safetensors(const fs::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string p = path.string();
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    if (t.name == "__metadata__")
      fail("write_safetensors {}: \"__metadata__\" is reserved and cannot name a tensor", p);
    if (!seen.insert(t.name).second) fail("write_safetensors {}: tensor {} is given twice", p, t.name);
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) fail("write_safetensors {}: tensor {}: negative dimension in shape {}", p, t.name, shape_str(t.shape));
      if (__builtin_mul_overflow(numel, uint64_t(d), &numel))
        fail("write_safetensors {}: tensor {}: shape {} overflows", p, t.name, shape_str(t.shape));
    }
    uint64_t expected = 0;
    if (__builtin_mul_overflow(numel, uint64_t(dtype_size(t.dtype)), &expected))
      fail("write_safetensors {}: tensor {}: shape {} overflows", p, t.name, shape_str(t.shape));
    if (t.bytes.size() != expected)
      fail("write_safetensors {}: tensor {}: dtype {} and shape {} need {} bytes, but {} bytes were given", p, t.name,
           dtype_name(t.dtype), shape_str(t.shape), expected, t.bytes.size());
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = std::string(dtype_name(t.dtype));
    entry["shape"] = t.shape;
    entry["data_offsets"] = {offset, offset + expected};
    header[t.name] = std::move(entry);
    offset += expected;
  }

  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    fail("write_safetensors {}: cannot encode the header (tensor names and metadata must be UTF-8): {}", p, e.what());
  }
  // Pad with spaces so the data section starts 8-byte aligned, as the reference implementation does.
  text.append((8 - text.size() % 8) % 8, ' ');

  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(text.size()) >> (8 * i));

  const std::string tmp = p + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    int e = errno;
    fail("write_safetensors: cannot create {}: {}", tmp, std::strerror(e));
  }
  auto give_up = [&](const char* what) {
    int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    fail("write_safetensors: {} {} failed: {}", what, tmp, std::strerror(e));
  };
  auto write_all = [&](const void* data, size_t n) {
    const char* c = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = ::write(fd, c, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        give_up("writing");
      }
      c += w;
      n -= size_t(w);
    }
  };
  write_all(len, sizeof len);
  write_all(text.data(), text.size());
  for (const TensorToWrite& t : tensors) write_all(t.bytes.data(), t.bytes.size());
  if (::fsync(fd) != 0) give_up("syncing");
  if (::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail("write_safetensors: closing {} failed: {}", tmp, std::strerror(e));
  }
  if (::rename(tmp.c_str(), p.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail("write_safetensors: renaming {} to {} failed: {}", tmp, p, std::strerror(e));
  }
}

}  // namespace di
