// The live counters of this process, published for other processes: `gpufile stats PID` reads
// them, as NVIDIA's `gds_stats -p PID` reads cuFile's.
//
// While stats are collected (level 1-3 and started, core/stats.hpp), the process keeps a small
// POSIX shared-memory segment, /dev/shm/gpufile-stats-PID, and a thread that copies a snapshot
// into it every 100 ms; every snapshot() the process takes of its own counters is copied there
// too, so a reader sees at least what the process last saw. With stats off there is no segment
// and no thread: the data path does not know about any of this. The segment goes when stats go
// off and when the process exits; one left by a process that was killed is removed by the next
// reader that finds its process gone. A second copy of the runtime in the same process (the
// HDF5 plugin's) publishes as gpufile-stats-PID.1 and so on; a reader adds them up.
//
// The segment is a header and a stats::Snapshot, written under a sequence counter (odd while
// the publisher writes), so a reader retries instead of taking a torn copy. Reader and writer
// must be the same build of gpufile: the header carries a version and the snapshot's size.
#pragma once

#include <cstdint>
#include <string>

#include "core/stats.hpp"

namespace gpufile::stats {

inline constexpr int kMaxSegmentsPerProcess = 8;
// The segment layout's version (its header's `version`): raised with every change of Snapshot.
inline constexpr uint32_t kSegmentVersion = 3;

// "/gpufile-stats-PID" (index 0) or "/gpufile-stats-PID.N": shm_open's name, under /dev/shm.
std::string segment_name(int pid, int index);

// Called by stats.cpp when collection turns on or off (under its control lock): makes or
// removes this process's segment and its publishing thread.
void publishing(bool on);
// Copies `s` into the segment now, if there is one (snapshot() calls it).
void publish(const Snapshot& s);

enum class ReadStatus {
  ok,           // `out` holds the sum of the process's segments
  no_segment,   // the process runs but publishes nothing (stats off)
  not_running,  // no such process; its leftover segments, if any, were removed (`removed`)
  mismatch,     // a segment of another layout version (`found_version`) or build, or torn
                // beyond retrying
  error,        // the OS refused (errno in `error`)
};

struct ReadResult {
  ReadStatus status = ReadStatus::error;
  Snapshot snapshot;
  int segments = 0;  // how many were added up
  int removed = 0;   // stale segments removed
  int error = 0;
  uint64_t published_unix_ns = 0;  // the newest segment's last publication
  uint32_t found_version = 0;      // mismatch: the segment's version when it is not ours (else 0)
};

// Reads the published counters of process `pid`.
ReadResult read_published(int pid);

}  // namespace gpufile::stats
