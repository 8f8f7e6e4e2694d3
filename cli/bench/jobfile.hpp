// gdsio's job files (spec §6.4), the text layer: `gpufile bench JOBFILE.gdsio`.
//
//   [global]                 # settings every job starts from
//   xfer_type=0
//   rw=randread
//   bs=4K                    # or MIN:MAX:STEP
//   size=1G
//   runtime=30
//   [job1]                   # one section per job; the jobs run at the same time
//   gpu_dev_id=0
//   num_threads=8
//   directory=/mnt/nvme0/gds_dir
//
// Lines are `[section]`, `key=value`, blank, or comments starting with '#' or ';' (whole
// lines only: gdsio's samples put comments on lines of their own). Spaces around keys,
// values and section names are ignored. [global] comes before the jobs, at most once; any
// other section is a job, named by its header. A key set in a job overrides the [global] one:
// that is fio's rule, and NVIDIA's guide likens gdsio's files to fio's; it does not say more.
//
// This layer knows the keys but not what their values mean; jobs.hpp turns a parsed file into
// options. Every error names the file and the line: "jobs.gdsio:7: ...".
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace gpufile::cli::benchmark {

struct JobSetting {
  std::string value;
  int line = 0;
};

struct JobSection {
  std::string name;
  int line = 0;  // of the [name] header
  std::map<std::string, JobSetting> settings;
};

struct JobFile {
  std::string path;
  JobSection global;  // no settings when the file has no [global]
  std::vector<JobSection> jobs;

  // The job's own setting of `key`, else the [global] one; null when neither sets it.
  const JobSetting* find(const JobSection& job, const std::string& key) const;
  // "PATH:LINE: message", the form of every error about the file.
  std::string at(int line, const std::string& message) const;
};

// The keys a job file may set (spec §6.4): global ones (name, xfer_type, rw, bs, size,
// runtime, do_verify, enable_nvlinks) and per-job ones (numa_node, gpu_dev_id, num_threads,
// directory, filename). Any of them may appear in either kind of section.
const std::vector<std::string>& job_file_keys();

// Parses the text of a job file read from `path` (used in messages). False with the first
// error, "PATH:LINE: message", in `error`.
bool parse_job_file(std::string_view text, const std::string& path, JobFile* out,
                    std::string* error);

// Reads and parses the file at `path`.
bool load_job_file(const std::string& path, JobFile* out, std::string* error);

}  // namespace gpufile::cli::benchmark
