#pragma once
// Bundles of kernels compiled ahead of time elsewhere (tools/artifacts/), checked against hashes
// pinned in this source tree before anything in them is loaded. A bundle is a directory holding the
// artifacts and manifest.json; the pin lists every file with its SHA-256, the manifest included, so a
// changed artifact fails even when its manifest was rewritten to match it.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace di::gdn {

struct BundlePin {
  std::string name;                           // "flashinfer-gdn-sm90"
  std::string generator;                      // how to make the bundle, for the error messages
  std::map<std::string, std::string> sha256;  // file name -> lowercase hex SHA-256
};

// The FlashInfer SM90 GDN prefill bundle this build accepts (tools/artifacts/flashinfer_gdn_sm90).
const BundlePin& flashinfer_gdn_sm90_pin();

// Every way `dir` differs from the pin, one sentence each naming the file and both hashes; empty
// when the bundle is exactly the pinned one. Reads every file (a few MB).
std::vector<std::string> bundle_problems(const std::filesystem::path& dir, const BundlePin& pin);

// The problems joined into one message (for supports() reasons and errors).
std::string describe_problems(const std::filesystem::path& dir, const BundlePin& pin,
                              const std::vector<std::string>& problems);

}  // namespace di::gdn
