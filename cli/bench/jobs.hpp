// Running a job file (jobfile.hpp): each job's options, and the jobs side by side.
//
// As gdsio does (NVIDIA's configuration guide: "with multiple jobs running, gdsio will
// aggregate the results"), the jobs run at the same time and one result line sums them up;
// -J adds each job's own line before it ("[job1] IoType: ..."). Every job sets up its
// buffers on its own, then all start together, so the total time is the longest job's. With
// do_verify a write is followed by "Verifying data" and the read-back of every job, reported
// the same way.
#pragma once

#include <string>
#include <vector>

#include "cli/bench/jobfile.hpp"
#include "cli/bench/options.hpp"

namespace gpufile::cli::benchmark {

// The options of every job: [global] settings overridden by the job's own. Each job needs rw,
// bs, size and one of directory or filename; the jobs share one result line, so they must
// agree on rw, xfer_type and do_verify. False with "PATH:LINE: message" in `error`.
bool job_options(const JobFile& file, std::vector<Options>* out, std::string* error);

// `gpufile bench [-J] [--json] JOBFILE`: loads, checks and runs the file named in `cli`;
// returns the exit status (2 for a bad file, 1 when a run failed).
int run_job_file(const Options& cli);

}  // namespace gpufile::cli::benchmark
