// Shared test fixture: a host device and a leak check on live handles.
#ifndef SLUICE_CPP_TESTS_SLUICE_TEST_HPP
#define SLUICE_CPP_TESTS_SLUICE_TEST_HPP

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

#include <sluice/sluice.hpp>

/// Opens host device 0 for each test and checks that every handle the test
/// created was destroyed again (the wrappers' destructors did their job).
class SluiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    baseline_ = sluice::live_handles();
    dev_ = sluice::Device::open(sluice::Backend::host, 0);
  }

  void TearDown() override {
    dev_ = sluice::Device();
    EXPECT_EQ(sluice::live_handles(), baseline_) << "the test leaked sluice handles";
  }

  sluice::Device dev_;
  std::uint64_t baseline_ = 0;
};

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

inline void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

/// Expects `stmt` to throw sluice::Error with `code`.
#define EXPECT_SLUICE_THROW(stmt, expected_code)                                   \
  do {                                                                             \
    bool thrown_ = false;                                                          \
    try {                                                                          \
      stmt;                                                                        \
    } catch (const sluice::Error& e_) {                                            \
      thrown_ = true;                                                              \
      EXPECT_EQ(e_.code(), expected_code) << e_.code_name() << ": " << e_.what(); \
    }                                                                              \
    EXPECT_TRUE(thrown_) << #stmt " did not throw";                                \
  } while (0)

#endif  // SLUICE_CPP_TESTS_SLUICE_TEST_HPP
