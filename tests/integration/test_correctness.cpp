// Suite 1: correctness matrix of cuFileRead / cuFileWrite.
//
// Random data is written and read back through the cuFile API and every byte is checked against
// a shadow copy of the file, over sizes around every threshold (small-IO inline path at 64 KiB,
// 4 MiB slabs), every alignment class of file offset, size and buffer offset, buffered and
// O_DIRECT fds, every memory kind, registered and unregistered buffers, both IO engines and the
// three O_DIRECT policies. Bytes next to each range (in the file and in memory) must stay intact.
//
// The full product would take hours; it is pruned so every value of every dimension meets every
// value of the two dimensions that matter most for it (size x file offset x memory kind), with
// buffer offset, registration and fd kind rotating. Small sizes run the full product.
#include <cinttypes>
#include <cstdio>
#include <filesystem>

#include "common.hpp"

namespace capi_test {
namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;
constexpr uint8_t kSentinel = 0xA5;

const uint64_t kFileOffsets[] = {0, 1, 511, 512, 4095, 4096 + 7};
const size_t kBufOffsets[] = {0, 1, 4096 + 3};
const size_t kSmallSizes[] = {1, 511, 4095, 4096, 4097, 64 * KiB - 1, 64 * KiB, 64 * KiB + 1};
const size_t kLargeSizes[] = {1 * MiB + 13, 4 * MiB - 1, 4 * MiB, 4 * MiB + 1, 16 * MiB + 4097};
constexpr size_t kMaxBufOffset = 4096 + 3;
constexpr size_t kGuard = 4096;  // bytes after a range that must stay untouched

struct MatrixParam {
  EngineConfig cfg;
  Mem mem;
};

std::string param_name(const ::testing::TestParamInfo<MatrixParam>& info) {
  return config_name(info.param.cfg) + "_" + mem_name(info.param.mem);
}

// Readable and stable in test listings (CTest names carry the printed parameter).
void PrintTo(const MatrixParam& p, std::ostream* os) { *os << config_name(p.cfg) << "/" << mem_name(p.mem); }

// One file, its shadow, a buffered and an O_DIRECT handle, and write/read buffers of one
// memory kind, registered (index 1) and not (index 0).
class Matrix : public CapiTest, public ::testing::WithParamInterface<MatrixParam> {
 protected:
  void SetUp() override {
    CapiTest::SetUp();
    session_ = std::make_unique<DriverSession>(GetParam().cfg);
    if (!session_->skip_reason().empty()) GTEST_SKIP() << session_->skip_reason();
    ASSERT_TRUE(session_->ok()) << session_->error();
    seed_ = test_seed();
    rng_ = std::make_unique<Rng>(seed_);
    have_direct_ = direct_io_works(dir_.path());
  }

  void TearDown() override {
    for (int i = 0; i < 2; ++i) {
      if (registered_[i]) {
        EXPECT_EQ(cuFileBufDeregister(registered_[i]).err, CU_FILE_SUCCESS);
      }
      registered_[i] = nullptr;
    }
    handles_[0].reset();
    handles_[1].reset();
    for (auto& b : wbuf_) b.reset();
    for (auto& b : rbuf_) b.reset();
    session_.reset();
    CapiTest::TearDown();
  }

  // Buffers of `bytes` for the parameter's memory kind; false (and a skip) when unavailable.
  bool make_buffers(size_t bytes) {
    std::string why;
    for (int i = 0; i < 2; ++i) {
      wbuf_[i] = Buffer::make(GetParam().mem, bytes, &why);
      rbuf_[i] = wbuf_[i] ? Buffer::make(GetParam().mem, bytes, &why) : nullptr;
      if (!wbuf_[i] || !rbuf_[i]) {
        skip_ = why;
        return false;
      }

    }
    // Index 1 is registered: writes and reads pass the registered base plus an offset.
    for (Buffer* b : {wbuf_[1].get(), rbuf_[1].get()}) {
      CUfileError_t st = cuFileBufRegister(b->ptr(), b->size(), 0);
      EXPECT_EQ(st.err, CU_FILE_SUCCESS) << "cuFileBufRegister of " << mem_name(b->kind());
      if (st.err != CU_FILE_SUCCESS) return false;
      (b == wbuf_[1].get() ? registered_[0] : registered_[1]) = b->ptr();
    }
    return true;
  }

  // The file, filled with random bytes, and its handles.
  void make_file(size_t bytes) {
    path_ = dir_.file("matrix.bin");
    shadow_ = rng_->bytes(bytes);
    ASSERT_NO_FATAL_FAILURE(write_file(path_, shadow_.data(), shadow_.size()));
    handles_[0] = Handle(path_, O_RDWR);
    ASSERT_TRUE(handles_[0].ok()) << "register buffered fd: " << handles_[0].status().err;
    if (have_direct_) {
      handles_[1] = Handle(path_, O_RDWR | O_DIRECT);
      ASSERT_TRUE(handles_[1].ok()) << "register O_DIRECT fd: " << handles_[1].status().err;
    }
  }

  struct Case {
    size_t size;
    uint64_t foff;
    size_t boff;
    bool reg;
    bool direct;   // write through the O_DIRECT fd
    int variant;   // bit 0: unregistered buffers passed as base+off with offset 0
                   // bit 1: read back through the other fd
  };

  std::string describe(const Case& c) const {
    char s[256];
    snprintf(s, sizeof s,
             "[seed=%" PRIu64 " %s mem=%s size=%zu file_off=%" PRIu64 " buf_off=%zu %s fd=%s%s%s]", seed_,
             config_name(GetParam().cfg).c_str(), mem_name(GetParam().mem), c.size, c.foff, c.boff,
             c.reg ? "registered" : "unregistered", c.direct ? "O_DIRECT" : "buffered",
             !c.reg && (c.variant & 1) ? " base+off" : "", c.variant & 2 ? " read-other-fd" : "");
    return s;
  }

  ssize_t io(bool write, const Handle& h, Buffer& b, const Case& c) {
    errno = 0;
    if (!c.reg && (c.variant & 1))
      return write ? cuFileWrite(h.get(), b.at(c.boff), c.size, static_cast<off_t>(c.foff), 0)
                   : cuFileRead(h.get(), b.at(c.boff), c.size, static_cast<off_t>(c.foff), 0);
    return write ? cuFileWrite(h.get(), b.ptr(), c.size, static_cast<off_t>(c.foff), static_cast<off_t>(c.boff))
                 : cuFileRead(h.get(), b.ptr(), c.size, static_cast<off_t>(c.foff), static_cast<off_t>(c.boff));
  }

  // Writes random data, checks the file around the range, reads it back and checks the buffer
  // around the range. True when everything matched.
  bool run_case(Case c) {
    if (c.direct && !handles_[1].ok()) c.direct = false;
    const Handle& wh = handles_[c.direct ? 1 : 0];
    bool read_other = (c.variant & 2) && handles_[1].ok();
    const Handle& rh = handles_[read_other ? (c.direct ? 0 : 1) : (c.direct ? 1 : 0)];
    Buffer& wb = *wbuf_[c.reg];
    Buffer& rb = *rbuf_[c.reg];
    const std::string what = describe(c);

    // ---- write
    std::vector<uint8_t> data = rng_->bytes(c.size);
    wb.upload(c.boff, data.data(), c.size);
    ssize_t n = io(true, wh, wb, c);
    if (n != static_cast<ssize_t>(c.size)) {
      ADD_FAILURE() << "cuFileWrite returned " << n << " (errno " << errno_text(errno) << ") " << what;
      return false;
    }
    std::memcpy(shadow_.data() + c.foff, data.data(), c.size);
    const uint64_t lo = c.foff >= kGuard ? c.foff - kGuard : 0;
    const uint64_t hi = std::min<uint64_t>(shadow_.size(), c.foff + c.size + kGuard);
    std::vector<uint8_t> file = read_file(path_, lo, hi - lo);
    if (file.size() != hi - lo) {
      ADD_FAILURE() << "file too short after write " << what;
      return false;
    }
    if (std::string m = first_mismatch(file.data(), shadow_.data() + lo, hi - lo); !m.empty()) {
      ADD_FAILURE() << "file content after cuFileWrite (range [" << lo << "," << hi
                    << ") incl. neighbours): " << m << " " << what;
      return false;
    }

    // ---- read back into a buffer full of sentinel bytes
    const size_t span = std::min(rb.size(), c.boff + c.size + kGuard);
    rb.fill(0, span, kSentinel);
    n = io(false, rh, rb, c);
    if (n != static_cast<ssize_t>(c.size)) {
      ADD_FAILURE() << "cuFileRead returned " << n << " (errno " << errno_text(errno) << ") " << what;
      return false;
    }
    std::vector<uint8_t> got = rb.read_back(0, span);
    if (std::string m = not_filled(got.data(), c.boff, kSentinel); !m.empty()) {
      ADD_FAILURE() << "cuFileRead wrote before the buffer range: " << m << " " << what;
      return false;
    }
    if (std::string m = first_mismatch(got.data() + c.boff, shadow_.data() + c.foff, c.size); !m.empty()) {
      ADD_FAILURE() << "cuFileRead data: " << m << " " << what;
      return false;
    }
    if (std::string m = not_filled(got.data() + c.boff + c.size, span - c.boff - c.size, kSentinel);
        !m.empty()) {
      ADD_FAILURE() << "cuFileRead wrote past the buffer range: " << m << " " << what;
      return false;
    }
    return true;
  }

  TempDir dir_;
  std::unique_ptr<DriverSession> session_;
  uint64_t seed_ = 0;
  std::unique_ptr<Rng> rng_;
  bool have_direct_ = false;
  std::string path_;
  std::vector<uint8_t> shadow_;
  Handle handles_[2];
  std::unique_ptr<Buffer> wbuf_[2], rbuf_[2];
  void* registered_[2] = {nullptr, nullptr};
  std::string skip_;
};

constexpr int kMaxFailures = 5;

// Sizes up to just past the small-IO threshold: the full product of file offset, buffer offset,
// registration and fd kind.
TEST_P(Matrix, SmallSizesFullProduct) {
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  const size_t max = 64 * KiB + 1;
  if (!make_buffers(max + kMaxBufOffset + kGuard)) GTEST_SKIP() << skip_;
  ASSERT_NO_FATAL_FAILURE(make_file(8 * 8192 + 4096 + 8 + max + kGuard));
  Watchdog dog(std::chrono::seconds(240), "SmallSizesFullProduct");
  int failures = 0, n = 0;
  for (size_t size : kSmallSizes)
    for (uint64_t foff : kFileOffsets)
      for (size_t boff : kBufOffsets)
        for (int reg = 0; reg < 2; ++reg)
          for (int direct = 0; direct < 2; ++direct, ++n) {
            uint64_t base = 8192 * static_cast<uint64_t>(n % 8);
            Case c{size, base + foff, boff, reg == 1, direct == 1, n % 4};
            if (!run_case(c) && ++failures >= kMaxFailures) FAIL() << "stopping after " << failures << " failures";
          }
}

// Sizes around and past the 4 MiB slab: every (size, file offset) pair, with buffer offset,
// registration, fd kind and calling variant rotating.
TEST_P(Matrix, LargeSizes) {
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  const size_t max = 16 * MiB + 4097;
  if (!make_buffers(max + kMaxBufOffset + kGuard)) GTEST_SKIP() << skip_;
  ASSERT_NO_FATAL_FAILURE(make_file(3 * 8192 + 4096 + 8 + max + kGuard));
  Watchdog dog(std::chrono::seconds(240), "LargeSizes");
  int failures = 0, n = 0;
  for (size_t si = 0; si < std::size(kLargeSizes); ++si)
    for (size_t fi = 0; fi < std::size(kFileOffsets); ++fi, ++n) {
      uint64_t base = 8192 * static_cast<uint64_t>(n % 3);
      Case c{kLargeSizes[si], base + kFileOffsets[fi], kBufOffsets[(fi + si) % 3],
             /*reg=*/((fi >> 1) & 1) != 0, /*direct=*/(fi & 1) != 0, static_cast<int>((fi + si) % 4)};
      if (!run_case(c) && ++failures >= kMaxFailures) FAIL() << "stopping after " << failures << " failures";
    }
}

// Reads that straddle end of file return the short count, at or past it 0, size 0 gives 0; no
// byte past the short count is written.
TEST_P(Matrix, EndOfFile) {
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  const size_t bufsize = 8 * MiB + kMaxBufOffset + kGuard;
  if (!make_buffers(bufsize)) GTEST_SKIP() << skip_;
  const uint64_t N = 3 * MiB + 1234;  // file size, unaligned
  ASSERT_NO_FATAL_FAILURE(make_file(N));
  Watchdog dog(std::chrono::seconds(120), "EndOfFile");
  struct R {
    uint64_t off;
    size_t size;
    size_t expect;
  };
  const R reads[] = {
      {N - 100, 1000, 100},                       // small, straddling
      {N - 1, 1, 1},                              // last byte
      {N, 4096, 0},                               // at EOF
      {N + 5000, 4096, 0},                        // past EOF
      {N + 1, 1, 0},                              // just past EOF
      {0, 0, 0},                                  // size 0
      {N, 0, 0},                                  // size 0 at EOF
      {N - 65537, 65537 + 4096, 65537},           // straddling, crossing the small-IO threshold
      {N - (1 * MiB + 7), 5 * MiB, 1 * MiB + 7},  // multi-chunk, straddling
      {0, 8 * MiB, N},                            // the whole file and more
      {4096 + 7, 4 * MiB, N - 4096 - 7},          // unaligned start, ends in the second slab
      {1 * MiB + 511, 2 * MiB + 1, 2 * MiB + 1},  // not at EOF at all: full count
  };
  int n = 0;
  for (const R& r : reads)
    for (int reg = 0; reg < 2; ++reg)
      for (int direct = 0; direct < 2; ++direct, ++n) {
        if (direct && !handles_[1].ok()) continue;
        const size_t boff = kBufOffsets[n % 3];
        Buffer& b = *rbuf_[reg];
        char what[200];
        snprintf(what, sizeof what, "[read off=%" PRIu64 " size=%zu file=%" PRIu64 " buf_off=%zu %s %s %s]",
                 r.off, r.size, N, boff, reg ? "registered" : "unregistered",
                 direct ? "O_DIRECT" : "buffered", mem_name(GetParam().mem));
        const size_t span = std::min(b.size(), boff + r.size + kGuard);
        b.fill(0, span, kSentinel);
        errno = 0;
        ssize_t got = cuFileRead(handles_[direct].get(), b.ptr(), r.size, static_cast<off_t>(r.off),
                                 static_cast<off_t>(boff));
        ASSERT_EQ(got, static_cast<ssize_t>(r.expect)) << "errno " << errno_text(errno) << " " << what;
        std::vector<uint8_t> mem = b.read_back(0, span);
        ASSERT_EQ(not_filled(mem.data(), boff, kSentinel), "") << what;
        ASSERT_EQ(first_mismatch(mem.data() + boff, shadow_.data() + r.off, r.expect), "") << what;
        // The library never writes past what it reports: not past the short count either (a
        // plain O_DIRECT read into the caller's memory would fill the whole last block).
        ASSERT_EQ(not_filled(mem.data() + boff + r.expect, span - boff - r.expect, kSentinel), "")
            << "bytes past the short count were written " << what;
      }
}

// Unaligned writes of every shape keep the bytes around them: the whole file is compared with
// its shadow after each one.
TEST_P(Matrix, UnalignedWritesKeepNeighbours) {
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  const size_t bufsize = 6 * MiB + kMaxBufOffset + kGuard;
  if (!make_buffers(bufsize)) GTEST_SKIP() << skip_;
  const uint64_t N = 8 * MiB + 3;
  ASSERT_NO_FATAL_FAILURE(make_file(N));
  Watchdog dog(std::chrono::seconds(120), "UnalignedWritesKeepNeighbours");
  struct W {
    uint64_t off;
    size_t size;
    size_t boff;
  };
  const W writes[] = {
      {13, 777, 0},   {4097, 1000, 3}, {4095, 2, 1},      {511, 1, 0},         {4096 * 5 + 100, 4096, 0},
      {8191, 8194, 1}, {65535, 65538, 4099}, {4096 + 13, 5 * MiB + 777, 3}, {N - 10, 9, 0},
      {2 * MiB - 1, 4 * MiB + 2, 0},
  };
  int n = 0;
  for (const W& w : writes)
    for (int direct = 0; direct < 2; ++direct, ++n) {
      if (direct && !handles_[1].ok()) continue;
      const bool reg = n % 2 == 1;
      Buffer& b = *wbuf_[reg];
      std::vector<uint8_t> data = rng_->bytes(w.size);
      b.upload(w.boff, data.data(), w.size);
      errno = 0;
      ssize_t got = cuFileWrite(handles_[direct].get(), b.ptr(), w.size, static_cast<off_t>(w.off),
                                static_cast<off_t>(w.boff));
      char what[160];
      snprintf(what, sizeof what, "[write off=%" PRIu64 " size=%zu buf_off=%zu %s %s]", w.off, w.size, w.boff,
               direct ? "O_DIRECT" : "buffered", reg ? "registered" : "unregistered");
      ASSERT_EQ(got, static_cast<ssize_t>(w.size)) << "errno " << errno_text(errno) << " " << what;
      std::memcpy(shadow_.data() + w.off, data.data(), w.size);
      std::vector<uint8_t> file = read_file(path_, 0, N + 1);
      ASSERT_EQ(file.size(), N) << "file size changed " << what;
      ASSERT_EQ(first_mismatch(file.data(), shadow_.data(), N), "") << what;
    }
}

// Writes past end of file extend it; the gap reads back as zeros.
TEST_P(Matrix, WritesPastEndExtendFile) {
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  if (!make_buffers(3 * MiB + kMaxBufOffset)) GTEST_SKIP() << skip_;
  ASSERT_NO_FATAL_FAILURE(make_file(10000));
  struct W {
    uint64_t off;
    size_t size;
  };
  const W writes[] = {{20000, 5000}, {1 * MiB + 3, 2 * MiB + 5}};
  int n = 0;
  for (const W& w : writes) {
    const int direct = (n++ % 2 == 1 && handles_[1].ok()) ? 1 : 0;
    std::vector<uint8_t> data = rng_->bytes(w.size);
    wbuf_[0]->upload(0, data.data(), w.size);
    ssize_t got = cuFileWrite(handles_[direct].get(), wbuf_[0]->ptr(), w.size, static_cast<off_t>(w.off), 0);
    ASSERT_EQ(got, static_cast<ssize_t>(w.size)) << "errno " << errno_text(errno);
    if (shadow_.size() < w.off + w.size) shadow_.resize(w.off + w.size, 0);
    std::memcpy(shadow_.data() + w.off, data.data(), w.size);
    ASSERT_EQ(file_size(path_), shadow_.size());
    std::vector<uint8_t> file = read_file(path_, 0, shadow_.size());
    ASSERT_EQ(first_mismatch(file.data(), shadow_.data(), shadow_.size()), "") << "after write at " << w.off;
  }
}

const EngineConfig kUring{"io_uring", nullptr};
const EngineConfig kPosix{"posix", nullptr};
const EngineConfig kUringAlways{"io_uring", "always"};
const EngineConfig kUringNever{"io_uring", "never"};

std::vector<MatrixParam> engine_params() {
  std::vector<MatrixParam> v;
  for (const EngineConfig& c : {kUring, kPosix})
    for (Mem m : kAllMem) v.push_back({c, m});
  return v;
}

std::vector<MatrixParam> direct_io_params() {
  std::vector<MatrixParam> v;
  for (const EngineConfig& c : {kUringAlways, kUringNever})
    for (Mem m : {Mem::device, Mem::pageable}) v.push_back({c, m});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Engines, Matrix, ::testing::ValuesIn(engine_params()), param_name);
INSTANTIATE_TEST_SUITE_P(DirectIo, Matrix, ::testing::ValuesIn(direct_io_params()), param_name);

// ---- buffered head/tail and O_DIRECT body of one write must not share a page ----------------------
//
// An unaligned write is split into a buffered head and tail around an O_DIRECT body aligned to
// the file's DIO alignment (512 bytes on most block devices). When the body and a buffered tail
// share a 4 KiB page and run concurrently, the buffered write reads the page from disk before
// the direct write lands and writeback later puts the stale bytes back: data loss. The write
// below hits that case on purpose, cold cache each time, many times.
class DirectWritePageSharing : public CapiTest, public ::testing::WithParamInterface<Mem> {};

TEST_P(DirectWritePageSharing, UnalignedWriteKeepsItsOwnBytes) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  TempDir dir;
  if (!direct_io_works(dir.path())) GTEST_SKIP() << "no O_DIRECT in " << dir.path();
  DriverSession session(EngineConfig{"io_uring", "always"});
  if (!session.skip_reason().empty()) GTEST_SKIP() << session.skip_reason();
  ASSERT_TRUE(session.ok()) << session.error();
  std::string why;
  auto b = Buffer::make(GetParam(), 256 * KiB, &why);
  if (!b) GTEST_SKIP() << why;
  const size_t N = 4 * MiB;
  Rng rng(seed);
  std::vector<uint8_t> shadow = rng.bytes(N);
  const std::string path = dir.file("pages.bin");
  ASSERT_NO_FATAL_FAILURE(write_file(path, shadow.data(), N));
  Handle h(path, O_RDWR | O_DIRECT);
  ASSERT_TRUE(h.ok());
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  Watchdog dog(std::chrono::seconds(120), "UnalignedWriteKeepsItsOwnBytes");
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 300 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(6); ++i) {
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, N, POSIX_FADV_DONTNEED);  // the tail's page must come from disk
    // Past the small-IO threshold (executor path); starts on a 512-byte boundary, ends 1 byte
    // into a 512-byte block: body and tail share the last 4 KiB page.
    const size_t size = 64 * KiB + 1 + (i % 7) * 4096;
    const uint64_t off = 512 * (1 + i % 7) + 8192 * static_cast<uint64_t>(i % 50);
    std::vector<uint8_t> data = rng.bytes(size);
    b->upload(0, data.data(), size);
    ssize_t n = cuFileWrite(h.get(), b->ptr(), size, static_cast<off_t>(off), 0);
    ASSERT_EQ(n, static_cast<ssize_t>(size)) << errno_text(errno);
    std::memcpy(shadow.data() + off, data.data(), size);
    std::vector<uint8_t> file = read_file(path, 0, N);
    ASSERT_EQ(first_mismatch(file.data(), shadow.data(), N), "")
        << "iteration " << i << ": write of " << size << " bytes at " << off << " (O_DIRECT body ["
        << ((off + 511) / 512 * 512) << ", " << ((off + size) / 512 * 512) << "), buffered tail in the same page)";
  }
  ::close(fd);
}

INSTANTIATE_TEST_SUITE_P(Mem, DirectWritePageSharing, ::testing::Values(Mem::pageable, Mem::device),
                         [](const ::testing::TestParamInfo<Mem>& i) { return std::string(mem_name(i.param)); });

// ---- an O_WRONLY | O_DIRECT fd: unaligned writes need no read access ------------------------------

TEST(WriteOnly, DirectFdUnalignedWrites) {
  drain_driver();
  TempDir dir;
  if (!direct_io_works(dir.path())) GTEST_SKIP() << "no O_DIRECT";
  DriverSession session;
  ASSERT_TRUE(session.ok()) << session.error();
  Rng rng(test_seed());
  const std::string path = dir.file("wo.bin");
  std::vector<uint8_t> shadow = rng.bytes(10 * MiB);
  write_file(path, shadow.data(), shadow.size());
  {
    Handle h(path, O_WRONLY | O_DIRECT);
    ASSERT_TRUE(h.ok()) << h.status().err;
    for (Mem kind : {Mem::device, Mem::pageable}) {
      std::string why;
      auto b = Buffer::make(kind, 5 * MiB, &why);
      if (!b) continue;
      for (auto [off, size] : {std::pair<uint64_t, size_t>{13, 777}, {4097, 70000}, {1 * MiB + 511, 5 * MiB - 7}}) {
        SCOPED_TRACE(std::string(mem_name(kind)) + " off " + std::to_string(off) + " size " + std::to_string(size));
        std::vector<uint8_t> data = rng.bytes(size);
        b->upload(1, data.data(), size);
        ASSERT_EQ(cuFileWrite(h.get(), b->ptr(), size, static_cast<off_t>(off), 1), static_cast<ssize_t>(size))
            << errno_text(errno);
        std::memcpy(shadow.data() + off, data.data(), size);
        std::vector<uint8_t> file = read_file(path, 0, shadow.size());
        ASSERT_EQ(first_mismatch(file.data(), shadow.data(), shadow.size()), "");
      }
    }
  }
  drain_driver();
}

// ---- files on a file system without O_DIRECT support (tmpfs) -----------------------------------

TEST(PageCacheOnly, TmpfsFileWorks) {
  drain_driver();
  const char* shm = "/dev/shm";
  struct stat st {};
  if (::stat(shm, &st) != 0 || !S_ISDIR(st.st_mode)) GTEST_SKIP() << "no /dev/shm";
  char tmpl[] = "/dev/shm/gpufile-capi-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) GTEST_SKIP() << "cannot create a directory in /dev/shm";
  const std::string dir = tmpl;
  DriverSession session;
  ASSERT_TRUE(session.ok()) << session.error();
  const std::string path = dir + "/t.bin";
  Rng rng(test_seed());
  std::vector<uint8_t> shadow = rng.bytes(6 * MiB);
  write_file(path, shadow.data(), shadow.size());
  {
    Handle h(path, O_RDWR);
    ASSERT_TRUE(h.ok()) << "tmpfs files register (the page cache path serves them): " << h.status().err;
    for (Mem kind : {Mem::device, Mem::pageable}) {
      std::string why;
      auto b = Buffer::make(kind, 5 * MiB, &why);
      if (!b) continue;
      for (size_t size : {size_t(1), size_t(4097), size_t(64 * KiB + 1), size_t(5 * MiB - 3)}) {
        SCOPED_TRACE(std::string(mem_name(kind)) + " size " + std::to_string(size));
        std::vector<uint8_t> data = rng.bytes(size);
        b->upload(0, data.data(), size);
        ASSERT_EQ(cuFileWrite(h.get(), b->ptr(), size, 513, 0), static_cast<ssize_t>(size)) << errno_text(errno);
        std::memcpy(shadow.data() + 513, data.data(), size);
        b->fill(0, size, 0);
        ASSERT_EQ(cuFileRead(h.get(), b->ptr(), size, 513, 0), static_cast<ssize_t>(size)) << errno_text(errno);
        EXPECT_EQ(first_mismatch(b->read_back(0, size).data(), data.data(), size), "");
      }
    }
    std::vector<uint8_t> file = read_file(path, 0, shadow.size());
    EXPECT_EQ(first_mismatch(file.data(), shadow.data(), shadow.size()), "");
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// ---- one 256 MiB transfer -----------------------------------------------------------------------

class Huge : public CapiTest {};

TEST_F(Huge, Transfer256MiB) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  DriverSession session;
  ASSERT_TRUE(session.ok()) << session.error();
  TempDir dir;
  const size_t size = 256 * MiB;
  const Mem kind = has_driver() ? Mem::device : Mem::pageable;
  std::string why;
  auto src = Buffer::make(kind, size, &why);
  ASSERT_TRUE(src) << why;
  auto dst = Buffer::make(kind, size + 8, &why);
  ASSERT_TRUE(dst) << why;
  Rng rng(seed);
  std::vector<uint8_t> data = rng.bytes(size);
  src->upload(0, data.data(), size);
  const std::string path = dir.file("huge.bin");
  const bool direct = direct_io_works(dir.path());
  Handle h(path, O_CREAT | O_RDWR | (direct ? O_DIRECT : 0));
  ASSERT_TRUE(h.ok()) << h.status().err;
  Watchdog dog(std::chrono::seconds(180), "Transfer256MiB");
  ASSERT_EQ(cuFileBufRegister(src->ptr(), size, 0).err, CU_FILE_SUCCESS);
  ssize_t n = cuFileWrite(h.get(), src->ptr(), size, 4096, 0);
  EXPECT_EQ(n, static_cast<ssize_t>(size)) << "errno " << errno_text(errno);
  EXPECT_EQ(cuFileBufDeregister(src->ptr()).err, CU_FILE_SUCCESS);
  ASSERT_EQ(file_size(path), 4096 + size);
  {
    std::vector<uint8_t> file = read_file(path, 4096, size);
    ASSERT_EQ(first_mismatch(file.data(), data.data(), size), "") << "file after 256 MiB cuFileWrite";
  }
  dst->fill(0, 8, kSentinel);
  n = cuFileRead(h.get(), dst->ptr(), size, 4096, 8);
  EXPECT_EQ(n, static_cast<ssize_t>(size)) << "errno " << errno_text(errno);
  std::vector<uint8_t> got = dst->read_back(0, size + 8);
  EXPECT_EQ(not_filled(got.data(), 8, kSentinel), "");
  EXPECT_EQ(first_mismatch(got.data() + 8, data.data(), size), "") << "256 MiB cuFileRead";
}

}  // namespace
}  // namespace capi_test
