#pragma once
// A fresh, empty directory per test, removed afterwards.
#include <gtest/gtest.h>

#include <filesystem>
#include <system_error>

#include "support/tiny_model_fixture.h"

namespace di::testing {

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = fresh_temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name()); }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::filesystem::path dir_;
};

}  // namespace di::testing
