// The HDF5 driver's configuration string (hdf5/driver_config.hpp): what each entry becomes, and
// that staged entries land in the settings the next gpufile session resolves.
#include <gtest/gtest.h>

#include "core/config.hpp"
#include "driver_config.hpp"

namespace gpufile::hdf5 {
namespace {

std::vector<Setting> parse_ok(std::string_view text) {
  std::vector<Setting> out;
  std::string why = parse_config(text, &out);
  EXPECT_EQ(why, "") << text;
  return out;
}

std::string parse_error(std::string_view text) {
  std::vector<Setting> out{{"untouched", "1"}};
  std::string why = parse_config(text, &out);
  EXPECT_EQ(out.size(), 1u) << "a refused string changes nothing";
  return why;
}

TEST(Hdf5Config, PaperKnobsMapOntoGpufileSettings) {
  auto s = parse_ok("workers=8;block_size=4M");
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].key, "gpufile.workers");
  EXPECT_EQ(s[0].value_json, "8");
  EXPECT_EQ(s[1].key, "gpufile.slab_size_kb");
  EXPECT_EQ(s[1].value_json, "4096");
}

TEST(Hdf5Config, SizesSeparatorsAndSpaces) {
  EXPECT_EQ(parse_ok("block_size=1g")[0].value_json, "1048576");
  EXPECT_EQ(parse_ok("block_size=512KiB")[0].value_json, "512");
  EXPECT_EQ(parse_ok("block_size=65536")[0].value_json, "64");
  auto s = parse_ok("  io_threads = 3 , engine=POSIX;; direct_io=never ;");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].key, "gpufile.workers");
  EXPECT_EQ(s[1].value_json, "\"posix\"");
  EXPECT_EQ(s[2].key, "gpufile.direct_io");
  EXPECT_TRUE(parse_ok("").empty());
  EXPECT_TRUE(parse_ok(" ; ").empty());
}

TEST(Hdf5Config, DottedKeysPassThroughAsJson) {
  auto s = parse_ok("gpufile.ring_depth=128;properties.allow_compat_mode=TRUE;"
                    "logging.level=INFO");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].value_json, "128");
  EXPECT_EQ(s[1].value_json, "true");
  EXPECT_EQ(s[2].value_json, "\"INFO\"");
}

TEST(Hdf5Config, RefusalsSayWhy) {
  EXPECT_NE(parse_error("alignment=4096").find("H5Pset_alignment"), std::string::npos);
  EXPECT_NE(parse_error("threads=4").find("unknown key \"threads\""), std::string::npos);
  EXPECT_NE(parse_error("workers").find("want key=value"), std::string::npos);
  EXPECT_NE(parse_error("workers=").find("want key=value"), std::string::npos);
  EXPECT_NE(parse_error("workers=-1").find("whole number"), std::string::npos);
  EXPECT_NE(parse_error("block_size=1000").find("whole KiB"), std::string::npos);
  EXPECT_NE(parse_error("block_size=4T").find("whole KiB"), std::string::npos);
  EXPECT_NE(parse_error("block_size=9999999999999999M").find("whole KiB"), std::string::npos);
}

TEST(Hdf5Config, StagedSettingsReachTheNextSession) {
  config::clear_staged();
  ASSERT_EQ(stage_settings(parse_ok("workers=7;block_size=2M;direct_io=never")), "");
  const Settings s = config::resolve().settings;
  EXPECT_EQ(s.workers, 7u);
  EXPECT_EQ(s.slab_size_kb, 2048u);
  EXPECT_EQ(s.direct_io, DirectIoPolicy::never);
  config::clear_staged();
}

TEST(Hdf5Config, OutOfRangeValuesAreRefusedWhenStaged) {
  config::clear_staged();
  const std::string why = stage_settings(parse_ok("gpufile.workers=100000"));
  EXPECT_NE(why.find("gpufile.workers"), std::string::npos) << why;
  EXPECT_NE(stage_settings(parse_ok("gpufile.no_such_key=1")).find("unknown setting"),
            std::string::npos);
  config::clear_staged();
}

}  // namespace
}  // namespace gpufile::hdf5
