// The fuzz targets' main() where the compiler has no libFuzzer (g++): runs
// LLVMFuzzerTestOneInput once on every file named, or on every file of every directory named.
// No mutation, no coverage: a replay of the corpus, under whatever sanitizers the build has.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

int run_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return 1;
  }
  const std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int failed = 0, ran = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    if (std::filesystem::is_directory(arg)) {
      for (const auto& entry : std::filesystem::directory_iterator(arg))
        if (entry.is_regular_file()) failed += run_file(entry.path()), ++ran;
    } else {
      failed += run_file(arg), ++ran;
    }
  }
  std::printf("replayed %d inputs, %d unreadable\n", ran, failed);
  return failed == 0 && ran > 0 ? 0 : 1;
}
