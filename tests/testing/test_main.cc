// main() for every GoogleTest binary: gives each test process its own temporary folder and
// removes it at exit, because ctest runs the tests of one binary as parallel processes that
// would otherwise overwrite (and mmap while truncating) each other's files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  const char* parent = std::getenv("TEST_TMPDIR");
  std::error_code ec;
  const fs::path base = parent && *parent ? fs::path(parent) : fs::temp_directory_path(ec);
  const fs::path dir = base / ("crossword-test-" + std::to_string(::getpid()));
  fs::create_directories(dir, ec);
  if (!ec) ::setenv("TEST_TMPDIR", dir.c_str(), 1);  // read by ::testing::TempDir()
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  if (!ec) fs::remove_all(dir, ec);
  return rc;
}
