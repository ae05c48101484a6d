// Shared tail of the bench/ tools that print JSON: write the document to stdout or a file, and a
// main() wrapper that turns crossword::Error into one stderr line and exit code 1.
#pragma once

#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "base/error.h"

namespace crossword::bench {

/// Writes `doc` pretty-printed (2 spaces) to stdout when `path` is empty, else to the file `path`.
/// Errors: crossword::Error when the file cannot be written.
inline void WriteJson(const nlohmann::json& doc, const std::string& path) {
  if (path.empty()) {
    std::cout << doc.dump(2) << "\n";
    return;
  }
  std::ofstream out(path);
  out << doc.dump(2) << "\n";
  if (!out) throw Error("cannot write " + path);
}

/// Runs `main_fn(argc, argv)`; a crossword::Error becomes "TOOL: message" on stderr and exit
/// code 1.
template <typename F>
int RunTool(const char* tool, F main_fn, int argc, char** argv) {
  try {
    return main_fn(argc, argv);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
    return 1;
  }
}

}  // namespace crossword::bench
