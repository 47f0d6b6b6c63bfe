#pragma once
// SHA-256 (through OpenSSL's libcrypto) of files and byte ranges, as lowercase hex.
#include <cstddef>
#include <filesystem>
#include <string>

namespace di {
std::string sha256_hex(const void* data, size_t size);
std::string sha256_file(const std::filesystem::path& path);
}  // namespace di
