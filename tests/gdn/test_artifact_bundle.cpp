// Bundles of kernels compiled ahead of time are checked against the hashes pinned in the source,
// file by file and through their manifest: a changed artifact is refused with both hashes named, also
// when its manifest was rewritten to match it; a missing file, an unpinned file or a broken manifest
// is refused too. The real pin is checked against a generated bundle when DI_GDN_ARTIFACTS names one.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <random>

#include "core/sha256.h"
#include "gdn/artifact_bundle.h"
#include "support/seed.h"
#include "support/temp_dir.h"

namespace di::gdn {
namespace {

namespace fs = std::filesystem;

class ArtifactBundle : public testing::TempDirTest {
 protected:
  // A bundle of random files with its manifest, and a pin that matches it exactly.
  void SetUp() override {
    TempDirTest::SetUp();
    const uint32_t seed = testing::fresh_seed();
    SCOPED_TRACE(testing::seed_trace(seed));
    std::mt19937 rng(seed);
    pin_.name = "test-bundle";
    pin_.generator = "tools/artifacts/test/generate.sh";
    nlohmann::json manifest{{"bundle", pin_.name}, {"sha256", nlohmann::json::object()}};
    for (const char* name : {"kernel.ptx", "kernel.cubin", "launcher.so"}) {
      std::string bytes(1000 + rng() % 3000, '\0');
      for (char& c : bytes) c = char(rng());
      write(name, bytes);
      pin_.sha256[name] = sha256_file(dir_ / name);
      manifest["sha256"][name] = pin_.sha256[name];
    }
    write("manifest.json", manifest.dump(2));
    pin_.sha256["manifest.json"] = sha256_file(dir_ / "manifest.json");
  }
  void write(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
  }
  std::string read(const std::string& name) {
    std::ifstream in(dir_ / name, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // Rewrites the manifest's hashes to the files as they are now (what a forger would do).
  void recompute_manifest() {
    nlohmann::json manifest = nlohmann::json::parse(read("manifest.json"));
    for (auto& [name, value] : manifest["sha256"].items()) value = sha256_file(dir_ / name);
    write("manifest.json", manifest.dump(2));
  }
  static bool mentions(const std::vector<std::string>& problems, const std::vector<std::string>& words) {
    for (const std::string& p : problems) {
      bool all = true;
      for (const std::string& w : words) all = all && p.find(w) != std::string::npos;
      if (all) return true;
    }
    return false;
  }
  BundlePin pin_;
};

TEST_F(ArtifactBundle, TheExactBundleIsAccepted) { EXPECT_TRUE(bundle_problems(dir_, pin_).empty()); }

TEST_F(ArtifactBundle, AChangedArtifactIsRefusedNamingBothHashes) {
  std::string ptx = read("kernel.ptx");
  ptx[ptx.size() / 2] ^= 1;
  write("kernel.ptx", ptx);
  const std::string changed = sha256_file(dir_ / "kernel.ptx");
  const std::vector<std::string> problems = bundle_problems(dir_, pin_);
  EXPECT_TRUE(mentions(problems, {"kernel.ptx", changed, pin_.sha256["kernel.ptx"]}));
  // The manifest still lists the pinned hash, so only the file itself is wrong.
  EXPECT_EQ(problems.size(), 1u);
  const std::string message = describe_problems(dir_, pin_, problems);
  EXPECT_NE(message.find(pin_.generator), std::string::npos) << message;
}

TEST_F(ArtifactBundle, RecomputingTheManifestDoesNotHelp) {
  std::string ptx = read("kernel.ptx");
  ptx += "\n// patched\n";
  write("kernel.ptx", ptx);
  recompute_manifest();
  const std::string changed = sha256_file(dir_ / "kernel.ptx");
  const std::vector<std::string> problems = bundle_problems(dir_, pin_);
  EXPECT_TRUE(mentions(problems, {"kernel.ptx has SHA-256", changed, pin_.sha256["kernel.ptx"]}));
  EXPECT_TRUE(mentions(problems, {"manifest.json lists kernel.ptx", changed, pin_.sha256["kernel.ptx"]}));
  EXPECT_TRUE(mentions(problems, {"manifest.json has SHA-256"}));
}

TEST_F(ArtifactBundle, MissingUnpinnedAndBrokenPiecesAreRefused) {
  fs::remove(dir_ / "launcher.so");
  EXPECT_TRUE(mentions(bundle_problems(dir_, pin_), {"launcher.so is missing"}));

  nlohmann::json manifest = nlohmann::json::parse(read("manifest.json"));
  manifest["sha256"]["extra.so"] = std::string(64, '0');
  manifest["bundle"] = "another";
  write("manifest.json", manifest.dump());
  const std::vector<std::string> problems = bundle_problems(dir_, pin_);
  EXPECT_TRUE(mentions(problems, {"extra.so", "does not pin"}));
  EXPECT_TRUE(mentions(problems, {"names bundle 'another'"}));

  write("manifest.json", "{\"bundle\": ");
  EXPECT_TRUE(mentions(bundle_problems(dir_, pin_), {"manifest.json is not valid JSON"}));
  EXPECT_TRUE(mentions(bundle_problems(dir_ / "nowhere", pin_), {"is not a directory"}));
}

TEST(ArtifactBundlePin, TheFlashInferBundleIsPinnedFileByFile) {
  const BundlePin& pin = flashinfer_gdn_sm90_pin();
  EXPECT_EQ(pin.name, "flashinfer-gdn-sm90");
  for (const char* name : {"fi_gdn_sm90_vk.so", "fi_gdn_sm90_kv.so", "fi_gdn_sm90_vk.cubin", "fi_gdn_sm90_kv.cubin",
                           "fi_gdn_sm90_vk.ptx", "fi_gdn_sm90_kv.ptx", "manifest.json"}) {
    ASSERT_TRUE(pin.sha256.count(name)) << name;
    EXPECT_EQ(pin.sha256.at(name).size(), 64u) << name;
  }
  // Where a generated bundle is at hand (the GPU round carries one), it is exactly the pinned one.
  const char* dir = std::getenv("DI_GDN_ARTIFACTS");
  if (dir == nullptr) GTEST_SKIP() << "DI_GDN_ARTIFACTS unset: no generated bundle to check";
  const std::vector<std::string> problems = bundle_problems(dir, pin);
  EXPECT_TRUE(problems.empty()) << describe_problems(dir, pin, problems);
}

}  // namespace
}  // namespace di::gdn
