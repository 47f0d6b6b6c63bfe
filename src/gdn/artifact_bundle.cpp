#include "gdn/artifact_bundle.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <set>

#include "core/sha256.h"

namespace di::gdn {

const BundlePin& flashinfer_gdn_sm90_pin() {
  // Written by tools/artifacts/flashinfer_gdn_sm90/generate.sh from the wheels of its pins.lock, with
  // CUDA 13.0 and Debian 12's gcc 12 / binutils 2.40 (two runs give these same hashes). A change to
  // the generator, its pins or that toolchain changes them: regenerate, check the bundle on the GPU
  // (docs/models/qwen35/external-gdn-backend.md), then update this table.
  static const BundlePin pin{
      "flashinfer-gdn-sm90",
      "tools/artifacts/flashinfer_gdn_sm90/generate.sh",
      {
          {"fi_gdn_sm90_kv.cubin", "2985ec3efdfbd360013ee3cf1a912ee45366407290d9bb2d66f0853b93170160"},
          {"fi_gdn_sm90_kv.h", "66b0ea6d8f1485b61ec3f6b3d8e49db9b9c743f7cfbebee4b9903b7e7c49cb60"},
          {"fi_gdn_sm90_kv.ptx", "e9a1be47c0b51425aa1e876c0a5296ff075c97a8f78ceb4c439b98a78735b9c4"},
          {"fi_gdn_sm90_kv.so", "c450bdc3a57d67f8366b26f4d08e1d17ebad78a56da0d6723e30fc20199eef69"},
          {"fi_gdn_sm90_vk.cubin", "662cee3f74a826fd0f47536ee07669386fef3a3c7b687946418395a7e7ba7a40"},
          {"fi_gdn_sm90_vk.h", "0d594e6776c9bf7af6e36d638bf3f78ecc67543611540e4b0e4a3dc79ae24161"},
          {"fi_gdn_sm90_vk.ptx", "14d94fcf9dd9429f984fd92229b8845590ce6109b2e24e40ffb7a338ae063baf"},
          {"fi_gdn_sm90_vk.so", "201462bf82729110f450d91f5f3acc456f28b770bd298350b2db86e243fe84ef"},
          {"manifest.json", "1a64f096b59728f2b34e9caac43b610293e4fa3211cad84e0f5fd04d7eabb2a1"},
      }};
  return pin;
}

std::vector<std::string> bundle_problems(const std::filesystem::path& dir, const BundlePin& pin) {
  namespace fs = std::filesystem;
  std::vector<std::string> problems;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    problems.push_back(fmt::format("{} is not a directory", dir.string()));
    return problems;
  }
  for (const auto& [name, want] : pin.sha256) {
    const fs::path file = dir / name;
    if (!fs::is_regular_file(file, ec)) {
      problems.push_back(fmt::format("{} is missing", name));
      continue;
    }
    const std::string got = sha256_file(file);
    if (got != want) problems.push_back(fmt::format("{} has SHA-256 {}, this build pins {}", name, got, want));
  }
  // The manifest's own list must agree with the pin too: it is what a reader of the bundle sees.
  const fs::path manifest_path = dir / "manifest.json";
  if (fs::is_regular_file(manifest_path, ec)) {
    nlohmann::json manifest;
    try {
      std::ifstream in(manifest_path);
      manifest = nlohmann::json::parse(in);
    } catch (const std::exception& e) {
      problems.push_back(fmt::format("manifest.json is not valid JSON: {}", e.what()));
      return problems;
    }
    if (!manifest.contains("sha256") || !manifest["sha256"].is_object()) {
      problems.push_back("manifest.json has no \"sha256\" object");
      return problems;
    }
    if (manifest.value("bundle", "") != pin.name)
      problems.push_back(fmt::format("manifest.json names bundle '{}', expected '{}'", manifest.value("bundle", ""),
                                     pin.name));
    std::set<std::string> listed;
    for (const auto& [name, value] : manifest["sha256"].items()) {
      listed.insert(name);
      const auto it = pin.sha256.find(name);
      if (it == pin.sha256.end()) {
        problems.push_back(fmt::format("manifest.json lists {}, which this build does not pin", name));
        continue;
      }
      const std::string claimed = value.is_string() ? value.get<std::string>() : value.dump();
      if (claimed != it->second)
        problems.push_back(fmt::format("manifest.json lists {} with SHA-256 {}, this build pins {}", name, claimed,
                                       it->second));
    }
    for (const auto& [name, _] : pin.sha256)
      if (name != "manifest.json" && !listed.count(name))
        problems.push_back(fmt::format("manifest.json does not list {}", name));
  }
  return problems;
}

std::string describe_problems(const std::filesystem::path& dir, const BundlePin& pin,
                              const std::vector<std::string>& problems) {
  std::string joined;
  for (const std::string& p : problems) joined += (joined.empty() ? "" : "; ") + p;
  return fmt::format("the {} bundle at {} is not the one this build pins ({}); make it with {}", pin.name,
                     dir.string(), joined, pin.generator);
}

}  // namespace di::gdn
