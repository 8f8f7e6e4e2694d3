// Subcommands of the `gpufile` tool.
#pragma once

namespace gpufile::cli {

int demo(int argc, char** argv);   // the main job: write a scratch file, read it into the GPU
int check(int argc, char** argv);  // which path a file would take, and why
int bench(int argc, char** argv);  // gdsio-compatible benchmark
int stats_pid(int argc, char** argv);  // the live counters of another gpufile process

// "1G", "64M", "4096", "1.5G" -> bytes; binary units. False on junk.
bool parse_size(const char* text, unsigned long long* out);

}  // namespace gpufile::cli
