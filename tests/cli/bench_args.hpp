// Shared by the bench unit tests: parse a `gpufile bench` command line given as strings.
#pragma once

#include <string>
#include <vector>

#include "cli/bench/options.hpp"

namespace gpufile::cli::benchmark::test_support {

// parse_options on "bench" followed by `args`.
inline bool parse(std::vector<std::string> args, Options* o) {
  args.insert(args.begin(), "bench");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return parse_options(static_cast<int>(args.size()), argv.data(), o);
}

}  // namespace gpufile::cli::benchmark::test_support
