// gdsio job files for `gpufile bench JOBFILE`: the text layer (sections, keys, lines, every
// class of error with its file:line), then the options each job gets (overrides, values,
// what a job must have, what the jobs must share), and how the command line takes a file.
#include <gtest/gtest.h>

#include <sched.h>

#include <string>
#include <vector>

#include "cli/bench/jobfile.hpp"
#include "cli/bench/jobs.hpp"
#include "cli/bench/numa.hpp"
#include "cli/bench/options.hpp"
#include "tests/cli/bench_args.hpp"

namespace gpufile::cli::benchmark {
namespace {

constexpr uint64_t KiB = 1024;

// The NAS sample of NVIDIA's configuration guide, in its shape: comments, [global], jobs.
const char* kTwoJobs =
    "# two GPUs, random reads\n"
    "[global]\n"
    "name=nfs_random_read\n"
    "#0,1,2,3,4,5\n"
    "xfer_type=0\n"
    "rw=randread\n"
    "bs=4k\n"
    "size=500M\n"
    "runtime=120\n"
    "\n"
    "[job1]\n"
    "numa_node=0\n"
    "gpu_dev_id=0\n"
    "num_threads=16\n"
    "directory=/mnt/a\n"
    "[job3]\n"
    "gpu_dev_id=2\n"
    "num_threads=8\n"
    "bs=1M:4M:1M\n"
    "directory=/mnt/b\n";

JobFile parsed(const std::string& text) {
  JobFile f;
  std::string error;
  EXPECT_TRUE(parse_job_file(text, "t.gdsio", &f, &error)) << error;
  return f;
}

// The error of a file that must not parse.
std::string parse_error(const std::string& text) {
  JobFile f;
  std::string error;
  EXPECT_FALSE(parse_job_file(text, "t.gdsio", &f, &error)) << text;
  return error;
}

// The error of a file that parses but does not make runnable jobs.
std::string options_error(const std::string& text) {
  const JobFile f = parsed(text);
  std::vector<Options> jobs;
  std::string error;
  EXPECT_FALSE(job_options(f, &jobs, &error)) << text;
  return error;
}

std::vector<Options> options_of(const std::string& text) {
  const JobFile f = parsed(text);
  std::vector<Options> jobs;
  std::string error;
  EXPECT_TRUE(job_options(f, &jobs, &error)) << error;
  return jobs;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

// ---- the text ----------------------------------------------------------------------------

TEST(BenchJobFile, SectionsKeysAndLines) {
  const JobFile f = parsed(kTwoJobs);
  EXPECT_EQ(f.path, "t.gdsio");
  EXPECT_EQ(f.global.line, 2);
  EXPECT_EQ(f.global.settings.at("rw").value, "randread");
  EXPECT_EQ(f.global.settings.at("rw").line, 6);
  ASSERT_EQ(f.jobs.size(), 2u);
  EXPECT_EQ(f.jobs[0].name, "job1");
  EXPECT_EQ(f.jobs[0].line, 11);
  EXPECT_EQ(f.jobs[1].name, "job3");  // any names; gdsio's own sample skips numbers
  EXPECT_EQ(f.jobs[1].settings.at("directory").value, "/mnt/b");
}

TEST(BenchJobFile, JobSettingOverridesGlobal) {
  const JobFile f = parsed(kTwoJobs);
  EXPECT_EQ(f.find(f.jobs[0], "bs")->value, "4k");  // from [global]
  EXPECT_EQ(f.find(f.jobs[0], "bs")->line, 7);
  EXPECT_EQ(f.find(f.jobs[1], "bs")->value, "1M:4M:1M");  // its own
  EXPECT_EQ(f.find(f.jobs[1], "bs")->line, 19);
  EXPECT_EQ(f.find(f.jobs[1], "numa_node"), nullptr);  // neither sets it
}

TEST(BenchJobFile, SpacesCommentsAndCrlfAreIgnored) {
  const JobFile f = parsed(
      "  ; a comment\r\n"
      "[ global ]\r\n"
      "  rw =  write  \r\n"
      "\t\r\n"
      "[job1]\r\n"
      "filename = /data/f \r\n");
  EXPECT_EQ(f.global.settings.at("rw").value, "write");
  ASSERT_EQ(f.jobs.size(), 1u);
  EXPECT_EQ(f.jobs[0].settings.at("filename").value, "/data/f");
}

TEST(BenchJobFile, GlobalIsOptional) {
  const JobFile f = parsed("[only]\nfilename=/f\nrw=read\nbs=4K\nsize=1M\n");
  EXPECT_TRUE(f.global.settings.empty());
  ASSERT_EQ(f.jobs.size(), 1u);
}

TEST(BenchJobFile, EveryKeyOfTheSpecIsKnown) {
  std::string text = "[global]\n";
  for (const std::string& key : job_file_keys()) text += key + "=1\n";
  text += "[job1]\n";
  EXPECT_EQ(parsed(text).global.settings.size(), 13u);
}

TEST(BenchJobFile, UnknownKeyNamesItsLine) {
  const std::string e = parse_error("[global]\nrw=read\nblocksize=4K\n[job1]\n");
  EXPECT_TRUE(starts_with(e, "t.gdsio:3: unknown key 'blocksize'")) << e;
  EXPECT_NE(e.find("bs"), std::string::npos);  // the known keys are listed
}

TEST(BenchJobFile, MalformedLinesNameTheirLine) {
  EXPECT_TRUE(starts_with(parse_error("[global]\nbs 4K\n"), "t.gdsio:2: expected [section]"));
  EXPECT_TRUE(starts_with(parse_error("[global\n"), "t.gdsio:1: malformed section header"));
  EXPECT_TRUE(starts_with(parse_error("[job1]x\n"), "t.gdsio:1: malformed section header"));
  EXPECT_TRUE(starts_with(parse_error("[]\n"), "t.gdsio:1: empty section name"));
  EXPECT_TRUE(starts_with(parse_error("[job 1]\n"), "t.gdsio:1: section name 'job 1'"));
  EXPECT_TRUE(starts_with(parse_error("[j\"1]\n"), "t.gdsio:1: section name"));
  EXPECT_TRUE(starts_with(parse_error("[job1]\n=4K\n"), "t.gdsio:2: missing key"));
  EXPECT_TRUE(starts_with(parse_error("[job1]\nbs=\n"), "t.gdsio:2: bs has no value"));
  // A NUL byte would cut the value short where it becomes a C string (found by fuzzing).
  EXPECT_TRUE(starts_with(parse_error(std::string("[job1]\nnum_threads=16\0x\n", 24)),
                          "t.gdsio:2: a NUL byte at column 15"));
}

TEST(BenchJobFile, SettingsNeedASection) {
  EXPECT_TRUE(starts_with(parse_error("# hello\nbs=4K\n[job1]\n"),
                          "t.gdsio:2: 'bs=4K' comes before any section"));
}

TEST(BenchJobFile, RepeatsAreRefused) {
  EXPECT_TRUE(starts_with(parse_error("[global]\nbs=4K\nbs=8K\n[job1]\n"),
                          "t.gdsio:3: bs set twice in [global] (first at line 2)"));
  EXPECT_TRUE(starts_with(parse_error("[job1]\n[job2]\n[job1]\n"),
                          "t.gdsio:3: [job1] appears twice (first at line 1)"));
  EXPECT_TRUE(starts_with(parse_error("[global]\n[global]\n[job1]\n"),
                          "t.gdsio:2: [global] appears twice"));
}

TEST(BenchJobFile, GlobalComesFirst) {
  EXPECT_TRUE(starts_with(parse_error("[job1]\nfilename=/f\n[global]\nrw=read\n"),
                          "t.gdsio:3: [global] must come before the first job ([job1] at line 1)"));
}

TEST(BenchJobFile, AFileWithoutJobsIsRefused) {
  EXPECT_EQ(parse_error(""), "t.gdsio: no job section: add one, e.g. [job1] with a directory or "
                             "filename");
  EXPECT_TRUE(starts_with(parse_error("[global]\nrw=read\n"), "t.gdsio: no job section"));
}

TEST(BenchJobFile, UnreadableFileIsNamed) {
  JobFile f;
  std::string error;
  EXPECT_FALSE(load_job_file("/nonexistent/jobs.gdsio", &f, &error));
  EXPECT_EQ(error, "/nonexistent/jobs.gdsio: cannot read the job file: No such file or directory");
  EXPECT_FALSE(load_job_file("/", &f, &error));
  EXPECT_NE(error.find("Is a directory"), std::string::npos);
}

// ---- the jobs' options -----------------------------------------------------------------

TEST(BenchJobFile, JobsGetGlobalSettingsAndTheirOwn) {
  const std::vector<Options> jobs = options_of(kTwoJobs);
  ASSERT_EQ(jobs.size(), 2u);
  const Options& a = jobs[0];
  EXPECT_EQ(a.xfer, Xfer::gpu_direct);
  EXPECT_EQ(a.io_type, IoType::randread);
  EXPECT_EQ(a.size, 500 * KiB * KiB);
  EXPECT_EQ(a.seconds, 120);
  EXPECT_EQ(a.threads, 16);
  EXPECT_EQ(a.numa_node, 0);
  EXPECT_EQ(a.gpu, 0);
  EXPECT_EQ(a.dir, "/mnt/a");
  EXPECT_EQ(a.io_size, 4 * KiB);
  EXPECT_FALSE(io_sizes_of(a).varies());
  const Options& b = jobs[1];
  EXPECT_EQ(b.threads, 8);
  EXPECT_EQ(b.gpu, 2);
  EXPECT_EQ(b.numa_node, -1);
  EXPECT_EQ(b.dir, "/mnt/b");
  const IoSizes sizes = io_sizes_of(b);  // its own bs, a range
  EXPECT_TRUE(sizes.varies());
  EXPECT_EQ(sizes.min, 1024 * KiB);
  EXPECT_EQ(sizes.max, 4096 * KiB);
  EXPECT_EQ(sizes.step, 1024 * KiB);
}

TEST(BenchJobFile, ValuesOfEveryKeyAreRead) {
  const std::vector<Options> jobs = options_of(
      "[global]\nxfer_type=6\nrw=write\nbs=64K\nsize=1G\nruntime=0\ndo_verify=1\n"
      "enable_nvlinks=1\nname=all keys\n[j]\nfilename=/data/f\nnum_threads=128\n");
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].xfer, Xfer::gpu_batch);
  EXPECT_EQ(jobs[0].io_type, IoType::write);
  EXPECT_TRUE(jobs[0].verify);
  EXPECT_EQ(jobs[0].seconds, 0);
  EXPECT_EQ(jobs[0].file, "/data/f");
  EXPECT_EQ(jobs[0].threads, 128);
  EXPECT_EQ(jobs[0].size, KiB * KiB * KiB);
}

const char* kBase = "[global]\nrw=read\nbs=64K\nsize=1M\n";

std::string with(const std::string& global_extra, const std::string& job) {
  return std::string(kBase) + global_extra + "[job1]\n" + job;
}

TEST(BenchJobFile, BadValuesNameTheirLine) {
  const std::string dir = "directory=/d\n";
  EXPECT_TRUE(starts_with(options_error(with("xfer_type=8\n", dir)),
                          "t.gdsio:5: xfer_type=8: no such transfer type (0 to 7)"));
  EXPECT_TRUE(starts_with(options_error(with("", dir + "rw=randomread\n")),
                          "t.gdsio:7: rw=randomread: expected read, write, randread"));
  EXPECT_TRUE(starts_with(options_error(with("runtime=soon\n", dir)),
                          "t.gdsio:5: runtime=soon: expected a whole number"));
  EXPECT_TRUE(starts_with(options_error(with("do_verify=2\n", dir)), "t.gdsio:5: do_verify=2"));
  EXPECT_TRUE(starts_with(options_error(with("enable_nvlinks=yes\n", dir)),
                          "t.gdsio:5: enable_nvlinks=yes"));
  EXPECT_TRUE(starts_with(options_error(with("", dir + "num_threads=0\n")),
                          "t.gdsio:7: num_threads=0"));
  EXPECT_TRUE(starts_with(options_error(with("", dir + "gpu_dev_id=-1\n")),
                          "t.gdsio:7: gpu_dev_id=-1"));
  EXPECT_TRUE(starts_with(options_error(with("", dir + "numa_node=x\n")),
                          "t.gdsio:7: numa_node=x"));
  EXPECT_TRUE(starts_with(options_error(with("", dir + "size=big\n")),
                          "t.gdsio:7: size=big: expected a size"));
  EXPECT_TRUE(starts_with(options_error(with("", dir + "bs=64K:4K:4K\n")),
                          "t.gdsio:7: bs=64K:4K:4K: MIN (64K) is larger than MAX (4K)"));
}

TEST(BenchJobFile, AJobNeedsOneTargetAndTheBasics) {
  EXPECT_EQ(options_error(with("", "num_threads=2\n")),
            "t.gdsio:5: [job1]: no directory or filename: give the job one");
  EXPECT_EQ(options_error(with("directory=/d\n", "filename=/f\n")),
            "t.gdsio:6: [job1]: directory and filename are both set; a job takes one");
  EXPECT_EQ(options_error("[global]\nbs=4K\nsize=1M\n[job1]\nfilename=/f\n"),
            "t.gdsio:4: [job1]: no rw in the job or in [global]");
  EXPECT_EQ(options_error("[job1]\nrw=read\nsize=1M\nfilename=/f\n"),
            "t.gdsio:1: [job1]: no bs in the job or in [global]");
  EXPECT_EQ(options_error("[job1]\nrw=read\nbs=4K\nfilename=/f\n"),
            "t.gdsio:1: [job1]: no size in the job or in [global]");
}

TEST(BenchJobFile, CombinationsARunCannotTakeAreRefused) {
  EXPECT_NE(options_error(with("xfer_type=7\n", "num_threads=129\ndirectory=/d\n"))
                .find("at most 128"),
            std::string::npos);
  // O_DIRECT keeps ranges in whole 4 KiB; the page-cache type takes any.
  EXPECT_NE(options_error(with("", "bs=4K:12K:2K\ndirectory=/d\n")).find("4 KiB"),
            std::string::npos);
  EXPECT_EQ(options_of(with("xfer_type=4\n", "bs=4K:12K:2K\ndirectory=/d\n")).size(), 1u);
}

TEST(BenchJobFile, JobsShareRwXferTypeAndVerify) {
  const std::string two = std::string(kBase) + "[job1]\ndirectory=/a\n[job2]\ndirectory=/b\n";
  EXPECT_EQ(options_of(two).size(), 2u);
  const std::string rw = std::string(kBase) + "[job1]\ndirectory=/a\n[job2]\nrw=write\n"
                                              "directory=/b\n";
  EXPECT_EQ(options_error(rw),
            "t.gdsio:8: rw=write in [job2] differs from rw=read in [job1]; the jobs of a file "
            "report one line together, so they share rw, xfer_type and do_verify");
  const std::string xfer = std::string(kBase) + "[job1]\nxfer_type=1\ndirectory=/a\n"
                                                "[job2]\ndirectory=/b\n";
  EXPECT_TRUE(starts_with(options_error(xfer),
                          "t.gdsio:8: xfer_type left at its default in [job2] differs from "
                          "xfer_type=1 in [job1]"));
  const std::string verify = std::string(kBase) + "[job1]\ndirectory=/a\n[job2]\n"
                                                  "do_verify=1\ndirectory=/b\n";
  EXPECT_TRUE(starts_with(options_error(verify), "t.gdsio:8: do_verify=1 in [job2]"));
}

// ---- the command line ---------------------------------------------------------------------

using test_support::parse;

TEST(BenchJobFile, CommandLineTakesOneFileWithJAndJson) {
  Options o;
  ASSERT_TRUE(parse({"-J", "jobs.gdsio", "--json"}, &o));
  EXPECT_EQ(o.job_file, "jobs.gdsio");
  EXPECT_TRUE(o.per_job_stats);
  EXPECT_TRUE(o.json);
  Options two;
  EXPECT_FALSE(parse({"a.gdsio", "b.gdsio"}, &two));
  for (const char* flag : {"-V", "-T", "--progress", "--csv"}) {
    Options mixed;
    std::vector<std::string> args = {"jobs.gdsio", flag};
    if (std::string(flag) == "-T" || std::string(flag) == "--csv") args.push_back("1");
    EXPECT_FALSE(parse(args, &mixed)) << flag;
  }
}

// ---- numa_node / -n --------------------------------------------------------------------

TEST(BenchJobFile, CpuListsOfTheKernelsFormat) {
  cpu_set_t set;
  ASSERT_TRUE(parse_cpu_list("0-3,8,10-11\n", &set));
  EXPECT_EQ(CPU_COUNT(&set), 7);
  EXPECT_TRUE(CPU_ISSET(8, &set));
  EXPECT_FALSE(CPU_ISSET(9, &set));
  EXPECT_FALSE(parse_cpu_list("", &set));
  EXPECT_FALSE(parse_cpu_list("3-1", &set));
  EXPECT_FALSE(parse_cpu_list("a", &set));
  EXPECT_FALSE(parse_cpu_list("1,,2", &set));
}

TEST(BenchJobFile, NodeZeroExistsAndNodesBeyondDoNot) {
  cpu_set_t set;
  std::string why;
  EXPECT_TRUE(numa_node_cpus(0, &set, &why)) << why;
  EXPECT_GT(CPU_COUNT(&set), 0);
  EXPECT_FALSE(numa_node_cpus(1000, &set, &why));
  EXPECT_NE(why.find("no NUMA node 1000"), std::string::npos);
}

}  // namespace
}  // namespace gpufile::cli::benchmark
