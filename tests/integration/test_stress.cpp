// Suite 7: stress. Many threads on ONE file at once, through an O_DIRECT handle and a buffered
// handle of it, mixing synchronous reads and writes of 1 byte to 2 MiB, batches, and buffer
// registration churn, into every memory kind, at neighbouring unaligned offsets: the file is cut
// into stripes of irregular lengths dealt to the threads in turn, so that every thread's bytes
// abut other threads' bytes inside the same pages and the same pieces. Each thread reads and
// writes only its own stripes and keeps a shadow of them (the model): every read must return
// exactly the shadow, every write must report all its bytes, and at the end the whole file must
// equal the union of the shadows. A failure names the seed (GPUFILE_TEST_SEED reruns it),
// thread, operation, offsets, memory and handle. GPUFILE_STRESS_OPS (default 60) sets the
// operations per thread, for longer runs on demand.
#include <fcntl.h>

#include <cinttypes>

#include "common.hpp"

namespace capi_test {
namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;
constexpr int kThreads = 8;
constexpr size_t kFileSize = 12 * MiB;
constexpr size_t kBufferSize = 2 * MiB + 8192;

struct Stripe {
  uint64_t off = 0;
  uint64_t len = 0;
};

int ops_per_thread() {
  const char* v = std::getenv("GPUFILE_STRESS_OPS");
  return v ? std::max(1, std::atoi(v)) : 60;
}

// Cuts the file into stripes: mostly small (inside one page, or across a page boundary), some
// of tens of KiB, some over 1 MiB (pieces of the executor), dealt to the threads in turn.
std::vector<std::vector<Stripe>> deal_stripes(Rng& rng) {
  std::vector<std::vector<Stripe>> owned(kThreads);
  static const uint64_t lengths[] = {1, 100, 3000, 4096, 5000, 65536 + 7, 300 * KiB, 1 * MiB + 13};
  uint64_t at = 0;
  for (int k = 0; at < kFileSize; ++k) {
    uint64_t len = lengths[rng.below(std::size(lengths))] + rng.below(512);
    len = std::min(len, kFileSize - at);
    owned[k % kThreads].push_back({at, len});
    at += len;
  }
  return owned;
}

class Stress : public CapiTest {
 protected:
  void SetUp() override {
    CapiTest::SetUp();
    session_ = std::make_unique<DriverSession>();
    ASSERT_TRUE(session_->ok()) << session_->error();
    seed_ = test_seed();
    Rng rng(seed_);
    path_ = dir_.file("stress.bin");
    initial_ = rng.bytes(kFileSize);
    ASSERT_NO_FATAL_FAILURE(write_file(path_, initial_.data(), kFileSize));
    stripes_ = deal_stripes(rng);
    direct_ = direct_io_works(dir_.path());
    handles_[0] = Handle(path_, O_RDWR);
    handles_[1] = Handle(path_, O_RDWR | (direct_ ? O_DIRECT : 0));
    ASSERT_TRUE(handles_[0].ok() && handles_[1].ok());
  }
  void TearDown() override {
    handles_[0].reset();
    handles_[1].reset();
    session_.reset();
    CapiTest::TearDown();
  }

  TempDir dir_;
  std::unique_ptr<DriverSession> session_;
  uint64_t seed_ = 0;
  std::string path_;
  std::vector<uint8_t> initial_;
  std::vector<std::vector<Stripe>> stripes_;
  bool direct_ = false;
  Handle handles_[2];  // [0] buffered, [1] O_DIRECT where the file system allows it
};

// One thread's life: its stripes, its shadow of them, its buffer.
class StressThread {
 public:
  StressThread(int t, uint64_t seed, const std::vector<Stripe>& stripes, const std::vector<uint8_t>& initial,
         const Handle* handles)
      : t_(t), rng_(seed * 977 + static_cast<uint64_t>(t)), stripes_(stripes), handles_(handles),
        shadow_(initial) {}

  std::string run(int ops) {
    bind_context();
    const Mem kind = has_driver() ? kAllMem[rng_.below(std::size(kAllMem))] : Mem::pageable;
    std::string why;
    buf_ = Buffer::make(kind, kBufferSize, &why);
    if (!buf_) buf_ = Buffer::make(has_driver() ? Mem::device : Mem::pageable, kBufferSize, &why);
    if (!buf_) return why;
    for (int i = 0; i < ops && error_.empty(); ++i) {
      switch (rng_.below(8)) {
        case 0: toggle_registration(); break;
        case 1: batch(); break;
        case 2: case 3: case 4: write(); break;
        default: read(); break;
      }
    }
    if (registered_) cuFileBufDeregister(buf_->ptr());
    return error_;
  }

  const std::vector<uint8_t>& shadow() const { return shadow_; }

 private:
  // A random range inside one of this thread's stripes, and a random buffer offset for it.
  struct Pick {
    uint64_t off = 0;
    size_t size = 0;
    size_t boff = 0;
    int handle = 0;
  };
  Pick pick() {
    const Stripe& s = stripes_[rng_.below(stripes_.size())];
    Pick p;
    const uint64_t a = rng_.below(s.len);
    p.size = static_cast<size_t>(std::min<uint64_t>(1 + rng_.below(s.len - a), 2 * MiB));
    p.off = s.off + a;
    p.boff = rng_.below(kBufferSize - p.size + 1);
    p.handle = static_cast<int>(rng_.below(2));
    return p;
  }

  std::string what(const char* op, const Pick& p) const {
    char s[200];
    snprintf(s, sizeof s, "thread %d %s off=%" PRIu64 " size=%zu buf_off=%zu %s%s handle=%s", t_, op,
             p.off, p.size, p.boff, mem_name(buf_->kind()), registered_ ? " registered" : "",
             p.handle ? "O_DIRECT" : "buffered");
    return s;
  }

  void fail(const std::string& msg) {
    if (error_.empty()) error_ = msg;
  }

  void toggle_registration() {
    if (registered_) {
      if (cuFileBufDeregister(buf_->ptr()).err != CU_FILE_SUCCESS) fail("BufDeregister");
    } else if (cuFileBufRegister(buf_->ptr(), buf_->size(), 0).err != CU_FILE_SUCCESS) {
      fail("BufRegister");
    }
    registered_ = !registered_;
  }

  void write() {
    Pick p = pick();
    std::vector<uint8_t> data = rng_.bytes(p.size);
    buf_->upload(p.boff, data.data(), p.size);
    ssize_t n = cuFileWrite(handles_[p.handle].get(), buf_->ptr(), p.size, static_cast<off_t>(p.off),
                            static_cast<off_t>(p.boff));
    if (n != static_cast<ssize_t>(p.size))
      return fail(what("write", p) + ": returned " + std::to_string(n) + " errno " + errno_text(errno));
    std::memcpy(shadow_.data() + p.off, data.data(), p.size);
  }

  void check_read(const Pick& p, const char* op) {
    std::vector<uint8_t> got = buf_->read_back(p.boff, p.size);
    std::string m = first_mismatch(got.data(), shadow_.data() + p.off, p.size);
    if (!m.empty()) fail(what(op, p) + ": " + m);
  }

  void read() {
    Pick p = pick();
    ssize_t n = cuFileRead(handles_[p.handle].get(), buf_->ptr(), p.size, static_cast<off_t>(p.off),
                           static_cast<off_t>(p.boff));
    if (n != static_cast<ssize_t>(p.size))
      return fail(what("read", p) + ": returned " + std::to_string(n) + " errno " + errno_text(errno));
    check_read(p, "read");
  }

  // Up to four entries of this thread's ranges, reads and writes, into disjoint parts of the
  // buffer; the writes change the shadow only once they report every byte.
  void batch() {
    const unsigned n = 1 + static_cast<unsigned>(rng_.below(4));
    std::vector<Pick> picks;
    std::vector<bool> writes;
    std::vector<std::vector<uint8_t>> data;
    for (unsigned i = 0; i < n; ++i) {
      Pick p = pick();
      p.size = std::min<size_t>(p.size, kBufferSize / 4 - 64);
      p.boff = i * (kBufferSize / 4) + rng_.below(64);
      // Entries must not overlap in the file either: one range each, checked here.
      bool clash = false;
      for (const Pick& q : picks) clash |= p.off < q.off + q.size && q.off < p.off + p.size;
      if (clash) continue;
      picks.push_back(p);
      writes.push_back(rng_.below(2) == 1);
      data.push_back(writes.back() ? rng_.bytes(p.size) : std::vector<uint8_t>());
      if (writes.back()) buf_->upload(p.boff, data.back().data(), p.size);
    }
    CUfileBatchHandle_t b = nullptr;
    if (cuFileBatchIOSetUp(&b, static_cast<unsigned>(picks.size())).err != CU_FILE_SUCCESS)
      return fail("BatchIOSetUp");
    std::vector<CUfileIOParams_t> io(picks.size());
    for (size_t i = 0; i < picks.size(); ++i) {
      io[i].mode = CUFILE_BATCH;
      io[i].fh = handles_[picks[i].handle].get();
      io[i].opcode = writes[i] ? CUFILE_WRITE : CUFILE_READ;
      io[i].cookie = reinterpret_cast<void*>(i + 1);
      io[i].u.batch.devPtr_base = buf_->ptr();
      io[i].u.batch.file_offset = static_cast<off_t>(picks[i].off);
      io[i].u.batch.devPtr_offset = static_cast<off_t>(picks[i].boff);
      io[i].u.batch.size = picks[i].size;
    }
    if (cuFileBatchIOSubmit(b, static_cast<unsigned>(io.size()), io.data(), 0).err != CU_FILE_SUCCESS) {
      cuFileBatchIODestroy(b);
      return fail("BatchIOSubmit");
    }
    std::vector<CUfileIOEvents_t> ev(io.size());
    size_t seen = 0;
    while (seen < io.size() && error_.empty()) {
      unsigned nr = static_cast<unsigned>(io.size() - seen);
      timespec t{30, 0};
      if (cuFileBatchIOGetStatus(b, nr, &nr, ev.data() + seen, &t).err != CU_FILE_SUCCESS || nr == 0)
        fail("BatchIOGetStatus returned nothing within 30 s");
      seen += nr;
    }
    cuFileBatchIODestroy(b);
    for (size_t k = 0; k < seen && error_.empty(); ++k) {
      const size_t i = reinterpret_cast<uintptr_t>(ev[k].cookie) - 1;
      const Pick& p = picks[i];
      const char* op = writes[i] ? "batch write" : "batch read";
      if (ev[k].status != CUFILE_COMPLETE || ev[k].ret != p.size)
        return fail(what(op, p) + ": status " + std::to_string(ev[k].status) + " ret " + std::to_string(ev[k].ret));
      if (writes[i])
        std::memcpy(shadow_.data() + p.off, data[i].data(), p.size);
      else
        check_read(p, op);
    }
  }

  int t_;
  Rng rng_;
  const std::vector<Stripe>& stripes_;
  const Handle* handles_;
  std::vector<uint8_t> shadow_;  // the whole file's size; only this thread's stripes matter
  std::unique_ptr<Buffer> buf_;
  bool registered_ = false;
  std::string error_;
};

TEST_F(Stress, ManyThreadsMixEveryOperationOnOneFile) {
  SCOPED_TRACE("seed=" + std::to_string(seed_) + " (rerun: GPUFILE_TEST_SEED=" + std::to_string(seed_) + ")");
  Watchdog dog(std::chrono::seconds(300), "Stress.ManyThreadsMixEveryOperationOnOneFile");
  const int ops = ops_per_thread();
  std::vector<std::unique_ptr<StressThread>> workers;
  for (int t = 0; t < kThreads; ++t)
    workers.push_back(std::make_unique<StressThread>(t, seed_, stripes_[t], initial_, handles_));
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([&, t] { errors[t] = workers[t]->run(ops); });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
  // The file is the union of the shadows, each thread's over its own stripes.
  std::vector<uint8_t> want(kFileSize);
  for (int t = 0; t < kThreads; ++t)
    for (const Stripe& s : stripes_[t])
      std::memcpy(want.data() + s.off, workers[t]->shadow().data() + s.off, s.len);
  std::vector<uint8_t> file = read_file(path_, 0, kFileSize);
  EXPECT_EQ(first_mismatch(file.data(), want.data(), kFileSize), "") << "the file at the end";
}

}  // namespace
}  // namespace capi_test
