// gpufile::RemoteWriter against versitygw (an S3 server; its POSIX backend on a temporary
// directory, 127.0.0.1 only), started and stopped by each test, which checks every signature.
// scripts/test.sh builds versitygw (scripts/deps.sh: gpufile_install_versitygw) and passes its
// path in GPUFILE_VERSITYGW; without it these tests skip, saying so. Objects are read back from
// the backend's directory: a bucket is a folder, an object a file.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

extern char** environ;

namespace cpp_test {
namespace {

constexpr const char* kAccess = "gpufiletestkey";
constexpr const char* kSecret = "gpufiletestsecret1234";
constexpr std::size_t kPart = 5u << 20;  // S3's smallest part: the writer's part size here

int free_port() {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(s, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw std::runtime_error("no free port on 127.0.0.1");
  close(s);
  return ntohs(addr.sin_port);
}

bool accepts(int port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(s);
  return ok;
}

// versitygw on a port of its own, serving the folders of root_ as buckets.
class Versitygw {
 public:
  Versitygw(const std::string& binary, const std::string& root) : root_(root) {
    const int port = free_port();
    endpoint_ = "http://127.0.0.1:" + std::to_string(port);
    const std::string listen = "127.0.0.1:" + std::to_string(port), log = root + ".log";
    std::vector<std::string> args = {binary, "--port", listen, "--access", kAccess, "--secret", kSecret,
                                     "--region", "us-east-1", "--quiet", "posix", root};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    const int rc = posix_spawn(&pid_, binary.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) throw std::runtime_error("cannot start " + binary + ": " + std::strerror(rc));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!accepts(port)) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_ || std::chrono::steady_clock::now() > deadline) {
        pid_ = -1;
        throw std::runtime_error("versitygw did not start: see " + log);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~Versitygw() {
    if (pid_ <= 0) return;
    kill(pid_, SIGCONT);  // a test that failed while the server was paused
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  const std::string& endpoint() const { return endpoint_; }
  // The server stopped (SIGSTOP): connections queue and no request is answered until resume(),
  // which keeps a request in flight for as long as a test needs.
  void pause() { kill(pid_, SIGSTOP); }
  void resume() { kill(pid_, SIGCONT); }

 private:
  std::string root_, endpoint_;
  pid_t pid_ = -1;
};

class RemoteWriterTest : public CppApiTest {
 protected:
  void SetUp() override {
    CppApiTest::SetUp();
    const char* binary = std::getenv("GPUFILE_VERSITYGW");
    if (binary == nullptr || *binary == '\0')
      GTEST_SKIP() << "GPUFILE_VERSITYGW is not set (scripts/test.sh builds versitygw and sets it)";
    root_ = dir_.file("s3");
    std::filesystem::create_directories(root_ + "/data");
    server_ = std::make_unique<Versitygw>(binary, root_);
    for (const char* var : {"AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_CA_BUNDLE",
                            "AWS_DEFAULT_REGION"})
      unsetenv(var);
    setenv("HOME", dir_.file("home").c_str(), 1);  // no ~/.aws of the machine's
    setenv("AWS_ENDPOINT_URL", server_->endpoint().c_str(), 1);
    setenv("AWS_ACCESS_KEY_ID", kAccess, 1);
    setenv("AWS_SECRET_ACCESS_KEY", kSecret, 1);
    setenv("AWS_REGION", "us-east-1", 1);
    gpufile::set_setting("gpufile.remote_part_kb", 1024);   // parts of S3's smallest, kPart
    gpufile::set_setting("gpufile.remote_concurrency", 8);  // 2 parts in flight
  }
  void TearDown() override {
    server_.reset();
    CppApiTest::TearDown();
  }

  // The object as the backend holds it.
  std::vector<std::uint8_t> stored(const std::string& key) const { return read_file(root_ + "/data/" + key); }
  bool exists(const std::string& key) const { return std::filesystem::exists(root_ + "/data/" + key); }
  // Regular files anywhere in the bucket's folder: objects, and parts of unfinished uploads.
  std::vector<std::string> files_in_bucket() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::recursive_directory_iterator(root_ + "/data"))
      if (e.is_regular_file()) out.push_back(e.path().string());
    return out;
  }

  std::string root_;
  std::unique_ptr<Versitygw> server_;
};

class RemoteWriterSizes : public RemoteWriterTest, public ::testing::WithParamInterface<std::size_t> {};

// Each size written in three pieces (of which some are empty for the small ones) round trips;
// tell() counts them.
TEST_P(RemoteWriterSizes, RoundTrip) {
  const std::size_t size = GetParam();
  const auto bytes = random_bytes(size, size + 1);
  {
    gpufile::RemoteWriter w("s3://data/dir/obj.bin");
    const std::size_t a = size / 3, b = size / 2;
    w.write(bytes.data(), a);
    w.write(bytes.data() + a, b - a);
    w.write(bytes.data() + b, size - b);
    EXPECT_EQ(w.tell(), size);
    EXPECT_FALSE(w.closed());
    EXPECT_FALSE(exists("dir/obj.bin"));  // not before close
    w.close();
    EXPECT_TRUE(w.closed());
    w.close();  // again: nothing
  }
  ASSERT_TRUE(exists("dir/obj.bin"));
  EXPECT_EQ(mismatch(stored("dir/obj.bin"), bytes), "");
  if (size > 0) {  // and through the API's reads
    gpufile::RemoteFile f("s3://data/dir/obj.bin");
    std::vector<std::uint8_t> back(size);
    EXPECT_EQ(f.read(back.data(), size), size);
    EXPECT_EQ(mismatch(back, bytes), "");
  }
}

INSTANTIATE_TEST_SUITE_P(S3, RemoteWriterSizes,
                         ::testing::Values(0, 1, kPart - 1, kPart, kPart + 1, 3 * kPart + 7));

class RemoteWriterMemory : public RemoteWriterTest, public ::testing::WithParamInterface<Mem> {};

// From every kind of memory (device memory through the CUDA driver double), with write and
// write_async mixed: the pieces land in the order they were made.
TEST_P(RemoteWriterMemory, WritesAndAsyncWritesInOrder) {
  const std::size_t size = 2 * kPart + 12345;
  const auto bytes = random_bytes(size, 7);
  Memory mem(GetParam(), size);
  mem.from_host(bytes);
  gpufile::RemoteWriter w("s3://data/from-memory");
  const std::size_t piece = 1 << 20;
  std::vector<gpufile::Future> futures;
  std::size_t at = 0;
  for (int i = 0; at < size; ++i) {
    const std::size_t n = std::min(piece + i, size - at);
    if (i % 3 == 2)
      w.write(mem.at(at), n);  // waits for the async writes before it
    else
      futures.push_back(w.write_async(mem.at(at), n));
    at += n;
  }
  w.close();  // waits for the writes in flight first
  for (gpufile::Future& f : futures) {
    EXPECT_TRUE(f.done());
    EXPECT_GT(f.get(), 0u);
  }
  EXPECT_EQ(w.tell(), size);
  EXPECT_EQ(mismatch(stored("from-memory"), bytes), "");
}

INSTANTIATE_TEST_SUITE_P(S3, RemoteWriterMemory, ::testing::ValuesIn(kAllMem));

// A write_async's Future is done once its bytes are taken: the buffer may then be overwritten
// without changing the object.
TEST_F(RemoteWriterTest, AsyncWriteTakesTheBytesBeforeItIsDone) {
  const auto bytes = random_bytes(kPart + 100, 3);
  std::vector<std::uint8_t> buf(bytes);
  gpufile::RemoteWriter w("s3://data/taken");
  gpufile::Future f = w.write_async(buf.data(), buf.size());
  EXPECT_EQ(f.get(), buf.size());
  std::fill(buf.begin(), buf.end(), 0);
  w.close();
  EXPECT_EQ(mismatch(stored("taken"), bytes), "");
}

TEST_F(RemoteWriterTest, AbortAndAnUnclosedWriterLeaveNothing) {
  const auto bytes = random_bytes(2 * kPart + 1, 5);
  {
    gpufile::RemoteWriter w("s3://data/aborted");
    w.write(bytes.data(), bytes.size());  // a multipart upload with parts sent
    gpufile::Future f = w.write_async(bytes.data(), 1);  // waits for the parts in flight
    f.get();
    EXPECT_NE(files_in_bucket(), std::vector<std::string>{});  // the parts, held by the server
    w.abort();
    EXPECT_TRUE(w.closed());
    EXPECT_GPUFILE_ERROR(w.write(bytes.data(), 1), std::errc::bad_file_descriptor);
    EXPECT_GPUFILE_ERROR(w.write_async(bytes.data(), 1), std::errc::bad_file_descriptor);
    EXPECT_GPUFILE_ERROR(w.close(), std::errc::bad_file_descriptor);
  }
  {
    gpufile::RemoteWriter w("s3://data/dropped");
    w.write(bytes.data(), bytes.size());
    gpufile::Future pending = w.write_async(bytes.data(), bytes.size());
  }  // ~Future waits for its write; ~RemoteWriter aborts
  {
    gpufile::RemoteWriter w("s3://data/small");
    w.write(bytes.data(), 10);  // one part: nothing sent before close
  }
  {
    gpufile::RemoteWriter w("s3://data/moved");
    w.write(bytes.data(), bytes.size());
    w = gpufile::RemoteWriter();  // assigning over it aborts it
    EXPECT_TRUE(w.closed());
  }
  EXPECT_EQ(files_in_bucket(), std::vector<std::string>{});
}

// Writes started and not yet begun when abort() comes fail with operation_canceled; none is
// appended after the abort, and each Future ends.
TEST_F(RemoteWriterTest, AbortCancelsAsyncWritesNotStarted) {
  const auto bytes = random_bytes(kPart, 9);
  gpufile::RemoteWriter w("s3://data/cancelled");
  std::vector<gpufile::Future> futures;
  for (int i = 0; i < 8; ++i) futures.push_back(w.write_async(bytes.data(), bytes.size()));
  w.abort();
  bool cancelled = false;  // from the first cancelled write on, every later one is too
  for (gpufile::Future& f : futures) {
    ASSERT_TRUE(f.done());  // abort waited for the one running
    try {
      EXPECT_EQ(f.get(), bytes.size());
      EXPECT_FALSE(cancelled) << "a write ran after one before it was cancelled";
    } catch (const gpufile::Exception& e) {
      EXPECT_TRUE(e.code() == std::errc::operation_canceled) << e.what();
      cancelled = true;
    }
  }
  EXPECT_EQ(files_in_bucket(), std::vector<std::string>{});
}

TEST_F(RemoteWriterTest, MissingBucketFailsAtTheFirstRequest) {
  const auto bytes = random_bytes(kPart + 1, 11);
  {
    gpufile::RemoteWriter w("s3://no-such-bucket/x");  // sends nothing
    w.write(bytes.data(), 10);
    EXPECT_GPUFILE_ERROR(w.close(), std::errc::no_such_file_or_directory);
    EXPECT_TRUE(w.closed());
    EXPECT_GPUFILE_ERROR(w.close(), std::errc::no_such_file_or_directory);  // the same failure
  }
  {
    gpufile::RemoteWriter w("s3://no-such-bucket/y");
    EXPECT_GPUFILE_ERROR(w.write(bytes.data(), bytes.size()), std::errc::no_such_file_or_directory);
    EXPECT_GPUFILE_ERROR(w.write(bytes.data(), 1), std::errc::bad_file_descriptor);
  }
  {
    gpufile::RemoteWriter w("s3://no-such-bucket/z");  // the failure comes through the Future
    gpufile::Future f = w.write_async(bytes.data(), bytes.size());
    EXPECT_GPUFILE_ERROR(f.get(), std::errc::no_such_file_or_directory);
    EXPECT_GPUFILE_ERROR(w.close(), std::errc::no_such_file_or_directory);
  }
  try {
    gpufile::RemoteWriter w("s3://no-such-bucket/x");
    w.write(bytes.data(), 1);
    w.close();
    ADD_FAILURE() << "no failure";
  } catch (const gpufile::Exception& e) {
    EXPECT_NE(std::string(e.what()).find("s3://no-such-bucket/x"), std::string::npos) << e.what();
  }
}

TEST_F(RemoteWriterTest, WrongSecretIsPermissionDenied) {
  setenv("AWS_SECRET_ACCESS_KEY", "wrong", 1);
  gpufile::RemoteWriter w("s3://data/denied");
  const char byte = 1;
  w.write(&byte, 1);
  EXPECT_GPUFILE_ERROR(w.close(), std::errc::permission_denied);
  EXPECT_FALSE(exists("denied"));
}

// ---- close_async -----------------------------------------------------------------------------

// close_async after write_async calls: its Future gives the object's size once the object exists;
// from the call on, the writer is closed and refuses writes at once; later closes give the same.
TEST_F(RemoteWriterTest, CloseAsyncGivesTheSizeOfTheObjectItMade) {
  const std::size_t size = 3 * kPart + 7;
  const auto bytes = random_bytes(size, 21);
  gpufile::RemoteWriter w("s3://data/closed-async");
  std::vector<gpufile::Future> writes;
  const std::size_t half = size / 2;
  writes.push_back(w.write_async(bytes.data(), half));
  writes.push_back(w.write_async(bytes.data() + half, size - half));
  gpufile::Future closing = w.close_async();
  EXPECT_TRUE(w.closed());
  EXPECT_GPUFILE_ERROR(w.write(bytes.data(), 1), std::errc::bad_file_descriptor);
  EXPECT_GPUFILE_ERROR(w.write_async(bytes.data(), 1), std::errc::bad_file_descriptor);
  EXPECT_EQ(closing.get(), size);
  for (gpufile::Future& f : writes) EXPECT_TRUE(f.done());  // ran before the close
  EXPECT_EQ(writes[0].get(), half);
  EXPECT_EQ(w.tell(), size);
  EXPECT_EQ(closing.get(), size);          // again: the same
  EXPECT_EQ(w.close_async().get(), size);  // a second close_async: the same result
  w.close();                               // nothing
  w.abort();                               // nothing either: the object stays
  EXPECT_GPUFILE_ERROR(w.write(bytes.data(), 1), std::errc::bad_file_descriptor);
  EXPECT_EQ(files_in_bucket(), std::vector<std::string>{root_ + "/data/closed-async"});
  gpufile::RemoteFile f("s3://data/closed-async");
  ASSERT_EQ(f.size(), size);
  std::vector<std::uint8_t> back(size);
  EXPECT_EQ(f.read(back.data(), size), size);
  EXPECT_EQ(mismatch(back, bytes), "");
}

// An object within one part (one PUT at the close), and an empty one.
TEST_F(RemoteWriterTest, CloseAsyncOfSmallObjects) {
  const auto bytes = random_bytes(1000, 22);
  {
    gpufile::RemoteWriter w("s3://data/small-async");
    w.write(bytes.data(), bytes.size());
    gpufile::Future closing = w.close_async();
    w.close();  // waits for the close_async and gives its result: no error
    EXPECT_TRUE(closing.done());
    EXPECT_EQ(closing.get(), bytes.size());
  }
  EXPECT_EQ(mismatch(stored("small-async"), bytes), "");
  {
    gpufile::RemoteWriter w("s3://data/empty-async");
    EXPECT_EQ(w.close_async().get(), 0u);
  }
  EXPECT_TRUE(exists("empty-async"));
  EXPECT_EQ(stored("empty-async").size(), 0u);
  gpufile::RemoteWriter none;
  EXPECT_GPUFILE_ERROR(none.close_async(), std::errc::bad_file_descriptor);
}

// What failed the upload fails close_async's Future: a failed write_async before it, a failed
// PUT at the close itself; after abort(), bad_file_descriptor. Nothing is left in the bucket.
TEST_F(RemoteWriterTest, CloseAsyncReportsWhatFailedTheUpload) {
  const auto bytes = random_bytes(kPart + 1, 23);
  {
    gpufile::RemoteWriter w("s3://no-such-bucket/a");
    gpufile::Future write = w.write_async(bytes.data(), bytes.size());  // its first part fails
    gpufile::Future closing = w.close_async();
    EXPECT_GPUFILE_ERROR(closing.get(), std::errc::no_such_file_or_directory);
    EXPECT_GPUFILE_ERROR(write.get(), std::errc::no_such_file_or_directory);
    EXPECT_GPUFILE_ERROR(w.close(), std::errc::no_such_file_or_directory);  // the same failure
    EXPECT_GPUFILE_ERROR(w.close_async().get(), std::errc::no_such_file_or_directory);
  }
  {
    gpufile::RemoteWriter w("s3://no-such-bucket/b");
    w.write(bytes.data(), 10);  // one part: the PUT at the close fails
    try {
      w.close_async().get();
      ADD_FAILURE() << "no failure";
    } catch (const gpufile::Exception& e) {
      EXPECT_TRUE(e.code() == std::errc::no_such_file_or_directory) << e.what();
      EXPECT_NE(std::string(e.what()).find("s3://no-such-bucket/b"), std::string::npos) << e.what();
    }
  }
  {
    gpufile::RemoteWriter w("s3://data/aborted-then-closed");
    w.write(bytes.data(), bytes.size());
    w.abort();
    EXPECT_GPUFILE_ERROR(w.close_async().get(), std::errc::bad_file_descriptor);
  }
  EXPECT_EQ(files_in_bucket(), std::vector<std::string>{});
}

// abort(), the destructor and assigning over the writer, while close_async's close is queued
// behind a write held at a paused server: each waits for the close (it does not return before
// the server answers), cancels neither, and leaves the object the close made.
TEST_F(RemoteWriterTest, AbortDestructorAndAssignmentWaitForCloseAsync) {
  const std::size_t size = 2 * kPart + 5;
  const auto bytes = random_bytes(size, 24);
  for (const char* how : {"abort", "destructor", "assignment"}) {
    SCOPED_TRACE(how);
    const std::string key = std::string("held-") + how;
    std::optional<gpufile::RemoteWriter> w(std::in_place, "s3://data/" + key);
    w->write(bytes.data(), kPart + 1);  // the upload begun, its first part sent
    server_->pause();
    // Queued behind a write held at the server: abort must not cancel the close either.
    gpufile::Future rest = w->write_async(bytes.data() + kPart + 1, size - kPart - 1);
    gpufile::Future closing = w->close_async();
    std::atomic<bool> refused{false}, returned{false};
    std::thread ender([&] {
      try {
        w->write(bytes.data(), 1);
      } catch (const gpufile::Exception& e) {
        refused = e.code() == std::errc::bad_file_descriptor;
      }
      if (std::string(how) == "abort")
        w->abort();
      else if (std::string(how) == "destructor")
        w.reset();
      else
        *w = gpufile::RemoteWriter();
      returned = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_TRUE(refused.load());   // a write after close_async: refused at once, not queued
    EXPECT_FALSE(closing.done());  // the server holds the close...
    EXPECT_FALSE(returned.load());  // ... and the writer's end waits for it
    server_->resume();
    ender.join();
    ASSERT_TRUE(closing.done());
    EXPECT_EQ(rest.get(), size - kPart - 1);
    EXPECT_EQ(closing.get(), size);
    ASSERT_TRUE(exists(key));
    EXPECT_EQ(mismatch(stored(key), bytes), "");
  }
}

TEST_F(CppApiTest, RemoteWriterRefusesWhatIsNotS3) {
  EXPECT_GPUFILE_ERROR(gpufile::RemoteWriter("http://127.0.0.1:1/x"), std::errc::read_only_file_system);
  EXPECT_GPUFILE_ERROR(gpufile::RemoteWriter("s3://bucket-only"), std::errc::invalid_argument);
  gpufile::RemoteWriter none;
  EXPECT_TRUE(none.closed());
  EXPECT_EQ(none.tell(), 0u);
  const char byte = 1;
  EXPECT_GPUFILE_ERROR(none.write(&byte, 1), std::errc::bad_file_descriptor);
}

}  // namespace
}  // namespace cpp_test
