#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cli/commands.hpp"

namespace gpufile::cli {

bool parse_size(const char* text, unsigned long long* out) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (end == text || v < 0) return false;
  double mult = 1;
  switch (*end) {
    case 'k': case 'K': mult = 1024.0; ++end; break;
    case 'm': case 'M': mult = 1024.0 * 1024; ++end; break;
    case 'g': case 'G': mult = 1024.0 * 1024 * 1024; ++end; break;
    case 't': case 'T': mult = 1024.0 * 1024 * 1024 * 1024; ++end; break;
    default: break;
  }
  if (*end == 'i' || *end == 'B' || *end == 'b') ++end;
  if (*end == 'B') ++end;
  if (*end != '\0') return false;
  *out = static_cast<unsigned long long>(std::llround(v * mult));
  return true;
}

}  // namespace gpufile::cli

namespace {

void usage(FILE* f) {
  std::fputs(
      "usage: gpufile <command> [options]\n"
      "\n"
      "commands:\n"
      "  demo  [--size N] [--dir DIR] [--keep]\n"
      "        the main job: write a scratch file of N bytes (default 1G), read it into GPU\n"
      "        memory (host memory where there is no GPU) through the cuFile API, check every\n"
      "        byte, write it back, and report GiB/s and the path the bytes took\n"
      "  check FILE|URL\n"
      "        which path reads of FILE would take, and why; for an http(s):// or s3:// URL,\n"
      "        whether it opens and how its reads travel\n"
      "  stats PID [--once] [--json] [--interval SECONDS]\n"
      "        the live IO counters of gpufile process PID (its stats level 1 or more),\n"
      "        refreshed every second\n"
      "  version\n",
      f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "demo") return gpufile::cli::demo(argc - 1, argv + 1);
  if (cmd == "check") return gpufile::cli::check(argc - 1, argv + 1);
  if (cmd == "bench") return gpufile::cli::bench(argc - 1, argv + 1);
  if (cmd == "stats") return gpufile::cli::stats_pid(argc - 1, argv + 1);
  if (cmd == "version" || cmd == "--version") {
    std::printf("gpufile %s (cuFile API 1.15)\n", GPUFILE_VERSION);
    return 0;
  }
  if (cmd == "help" || cmd == "--help" || cmd == "-h") {
    usage(stdout);
    return 0;
  }
  std::fprintf(stderr, "gpufile: unknown command '%s'\n", cmd.c_str());
  usage(stderr);
  return 2;
}
