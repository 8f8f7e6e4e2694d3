#include "sim_plan.hpp"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>

#include "sim_support.hpp"

namespace sim {

using gpufile::sys::FaultAction;
using gpufile::sys::FaultOp;
using gpufile::sys::FaultRule;

std::string Plan::describe() const {
  std::string s = "  " + std::to_string(actors) + " threads, " + std::to_string(phases.size()) +
                  " phases of " + std::to_string(ops_per_phase) + " ops each, " +
                  (hard ? "hard" : "benign") + " faults, files of";
  for (uint64_t z : file_sizes) s += " " + std::to_string(z);
  s += " bytes\n";
  for (size_t i = 0; i < phases.size(); ++i)
    s += "  phase " + std::to_string(i) + (phases[i].reopen || i == 0 ? ": open " : ": same ") +
         phases[i].session.describe() + (phases[i].fork_before ? ", fork first" : "") + "\n";
  for (size_t i = 0; i < rules.size(); ++i) s += "  rule " + std::to_string(i) + ": "
      + rules[i].name + "\n";
  if (cuda_faults) s += "  threads make the driver's async copies fail now and then\n";
  return s;
}

std::string errno_name(int e) {
  switch (e) {
    case EIO: return "EIO";
    case EINTR: return "EINTR";
    case EAGAIN: return "EAGAIN";
    case EINVAL: return "EINVAL";
    case ENOSPC: return "ENOSPC";
    case EPERM: return "EPERM";
    case ENOSYS: return "ENOSYS";
    case ENOMEM: return "ENOMEM";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    default: return std::to_string(e);
  }
}

namespace {

SessionConfig draw_session(Rng& r, bool uring_refused) {
  SessionConfig c;
  static const char* engines[] = {"auto", "posix", "io_uring"};
  c.engine = engines[r.below(3)];
  if (uring_refused && c.engine == std::string("io_uring")) c.engine = "auto";
  static const char* direct[] = {"auto", "always", "never"};
  c.direct_io = r.pick(direct);
  static const int slabs[] = {4, 16, 64, 256};
  c.slab_kb = r.pick(slabs);
  c.workers = static_cast<int>(r.between(1, 4));
  static const int small[] = {0, 4, 16, 64};
  c.small_io_kb = r.pick(small);
  static const int chunks[] = {4, 8, 16, 64};
  c.min_chunk_kb = std::min(r.pick(chunks), c.slab_kb);
  c.slabs_per_worker = static_cast<int>(r.between(1, 3));
  static const int rings[] = {1, 2, 8, 64};
  c.ring_depth = r.pick(rings);
  // Rings that grow once long reads go direct (0: they never do).
  static const int cold[] = {0, 3, 6};
  c.cold_slabs_per_worker = r.pick(cold);
  // Smaller pieces than the slab, tied to that draw so that every seed keeps its other draws:
  // O_DIRECT pieces where rings grow to 3, staged pieces of a shared host where they grow to 6.
  const int quarter = std::max(4, c.slab_kb / 4);
  c.cold_piece_kb = c.cold_slabs_per_worker == 3 ? quarter : 0;
  c.shared_piece_kb = c.cold_slabs_per_worker == 6 ? quarter : 0;
  return c;
}

const char* op_name(FaultOp op) {
  static const char* names[] = {"open",       "pread",      "pwrite",      "fstat",
                                "uring_init", "uring_read", "uring_write", "cachestat",
                                "dio_align",  "any_read",   "any_write",   "pread_cached"};
  return names[static_cast<int>(op)];
}

void add_rule(Plan& p, FaultRule r) {
  char s[200];
  const char* what[] = {"fail", "short", "delay", "corrupt"};
  std::snprintf(s, sizeof s, "%s%s p=%.3f nth=%" PRIu64 " times=%s %s %s", op_name(r.op),
                r.direct_only ? " (O_DIRECT)" : "", r.probability, r.nth,
                r.times == FaultRule::persistent ? "all" : std::to_string(r.times).c_str(),
                what[static_cast<int>(r.action)],
                r.action == FaultAction::fail       ? errno_name(r.err).c_str()
                : r.action == FaultAction::short_io ? std::to_string(r.limit).c_str()
                : r.action == FaultAction::delay    ? (std::to_string(r.delay_us) + "us").c_str()
                                                    : "");
  p.rules.push_back({s, std::move(r)});
}

FaultRule prob_rule(FaultOp op, double p, FaultAction a) {
  FaultRule r;
  r.op = op;
  r.probability = p;
  r.times = FaultRule::persistent;
  r.action = a;
  return r;
}

// Faults the library must hide from its callers entirely.
void draw_benign_faults(Rng& r, Plan& p) {
  for (FaultOp op : {FaultOp::any_read, FaultOp::any_write}) {
    if (r.chance(0.5)) {  // short transfers (a limit of 0 would read as end of file: not a fault)
      FaultRule f = prob_rule(op, r.uniform(0.05, 0.5), FaultAction::short_io);
      f.limit = r.chance(0.5) ? r.between(1, 16) : r.between(1, 8192);
      add_rule(p, f);
    }
    if (r.chance(0.35)) {  // interrupted calls
      FaultRule f = prob_rule(op, r.uniform(0.05, 0.4), FaultAction::fail);
      f.err = r.chance(0.5) ? EINTR : EAGAIN;
      add_rule(p, f);
    }
    if (r.chance(0.3)) {  // a file that took O_DIRECT at open refuses it at IO time
      FaultRule f = prob_rule(op, r.uniform(0.1, 1.0), FaultAction::fail);
      f.direct_only = true;
      f.err = EINVAL;
      add_rule(p, f);
    }
    if (r.chance(0.2)) {  // slow storage: widens every race
      FaultRule f = prob_rule(op, r.uniform(0.01, 0.1), FaultAction::delay);
      f.delay_us = static_cast<uint32_t>(r.between(50, 2000));
      add_rule(p, f);
    }
  }
  if (r.chance(0.2)) {  // O_DIRECT refused when the library reopens a file
    FaultRule f = prob_rule(FaultOp::open, r.uniform(0.3, 1.0), FaultAction::fail);
    f.direct_only = true;
    f.err = EINVAL;
    add_rule(p, f);
  }
  if (r.chance(0.25)) {  // io_uring refused (seccomp, sysctl, memlock)
    FaultRule f = prob_rule(FaultOp::uring_init, 1.0, FaultAction::fail);
    static const int errs[] = {EPERM, ENOSYS, ENOMEM};
    f.err = r.pick(errs);
    p.uring_refused = r.chance(0.6);
    if (!p.uring_refused) f.probability = r.uniform(0.2, 0.8);  // some workers' rings only
    add_rule(p, f);
  }
  if (r.chance(0.15)) add_rule(p, [&] {  // the kernel cannot say (older kernels)
    FaultRule f = prob_rule(r.chance(0.5) ? FaultOp::dio_align : FaultOp::cachestat, 1.0,
                            FaultAction::fail);
    f.err = EOPNOTSUPP;
    return f;
  }());
}

// Faults that may make calls fail.
void draw_hard_faults(Rng& r, Plan& p) {
  for (FaultOp op : {FaultOp::any_read, FaultOp::any_write}) {
    if (r.chance(0.6)) {
      FaultRule f = prob_rule(op, r.uniform(0.005, 0.08), FaultAction::fail);
      f.err = EIO;
      add_rule(p, f);
    }
    if (r.chance(0.25)) {  // an EAGAIN storm longer than the library's retry bound
      FaultRule f = prob_rule(op, 1.0, FaultAction::fail);
      f.err = EAGAIN;
      f.nth = r.between(1, 200);
      f.times = r.between(70, 300);
      add_rule(p, f);
    }
  }
  if (r.chance(0.5)) {
    FaultRule f = prob_rule(FaultOp::any_write, r.uniform(0.01, 0.1), FaultAction::fail);
    f.err = ENOSPC;
    if (r.chance(0.3)) f.nth = r.between(1, 100), f.times = r.between(1, 20);
    add_rule(p, f);
  }
  if (r.chance(0.15)) {
    FaultRule f = prob_rule(FaultOp::fstat, r.uniform(0.01, 0.05), FaultAction::fail);
    f.err = EIO;
    add_rule(p, f);
    p.fstat_faults = true;
  }
  if (r.chance(0.15)) {
    FaultRule f = prob_rule(FaultOp::open, r.uniform(0.05, 0.3), FaultAction::fail);
    f.err = EIO;
    add_rule(p, f);
  }
}

}  // namespace

Plan make_plan(uint64_t seed) {
  Rng r(seed ^ 0x5157'0000'0000'0001ull);
  Plan p;
  p.seed = seed;
  p.actors = static_cast<int>(r.between(2, 4));
  p.ops_per_phase = static_cast<int>(r.between(6, 24));
  const int files = static_cast<int>(r.between(1, 3));
  for (int i = 0; i < files; ++i)
    p.file_sizes.push_back(r.chance(0.3) ? r.between(1, 20000) : r.between(16 * KiB, 1024 * KiB));
  p.hard = r.chance(0.4);
  p.forks = r.chance(0.1);
  draw_benign_faults(r, p);
  if (p.hard) draw_hard_faults(r, p);
  // From a stream of its own, so that the plans of older seeds stay what they were.
  p.cuda_faults = p.hard && Rng(seed ^ 0xc0da'0000'0000'0002ull).chance(0.35);
  const int phases = static_cast<int>(r.between(1, 4));
  for (int i = 0; i < phases; ++i) {
    PhasePlan ph;
    ph.reopen = i == 0 || r.chance(0.5);
    ph.fork_before = i > 0 && r.chance(0.1);
    ph.session = ph.reopen ? draw_session(r, p.uring_refused) : p.phases.back().session;
    p.phases.push_back(ph);
  }
  return p;
}

}  // namespace sim
