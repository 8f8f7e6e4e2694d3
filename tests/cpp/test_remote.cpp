// gpufile::RemoteFile against a small HTTP/1.1 server on 127.0.0.1 inside the test (HEAD and
// ranged GETs of one object, 404 for anything else). The fault modes and S3 are tested from
// Python (tests/python/test_remote*.py); this checks the public C++ surface over the same code.
#include <string>
#include <vector>

#include "object_server.hpp"
#include "support.hpp"

namespace cpp_test {
namespace {

class RemoteFileTest : public CppApiTest, public ::testing::WithParamInterface<Mem> {
 protected:
  void SetUp() override {
    CppApiTest::SetUp();
    gpufile::set_setting("gpufile.remote_part_kb", 64);  // many parts for a 1 MiB object
    gpufile::set_setting("gpufile.remote_concurrency", 4);
  }
};

TEST_P(RemoteFileTest, ReadsAndPreadsAreByteExact) {
  const auto bytes = random_bytes((1 << 20) + 5, 42);
  ObjectServer server(bytes);
  gpufile::RemoteFile f(server.url("/object"));
  EXPECT_EQ(f.size(), bytes.size());
  EXPECT_EQ(f.etag(), "\"e1\"");
  Memory mem(GetParam(), bytes.size());
  EXPECT_EQ(f.read(mem.get(), bytes.size()), bytes.size());
  EXPECT_EQ(mismatch(mem.to_host(), bytes), "");
  EXPECT_EQ(server.gets(), 17);  // 1 MiB + 5 in 64 KiB parts

  Memory half(GetParam(), bytes.size() / 2);
  gpufile::Future later = f.pread(half.get(), half.size(), bytes.size() - half.size());
  EXPECT_EQ(later.get(), half.size());
  EXPECT_EQ(mismatch(half.to_host(), slice(bytes, bytes.size() - half.size(), half.size())), "");
  EXPECT_EQ(f.read(half.get(), 100, bytes.size() - 10), 10u);  // short only at the end
}

INSTANTIATE_TEST_SUITE_P(Memory, RemoteFileTest, ::testing::ValuesIn(kAllMem));

// A server that refuses HEAD (403 to a URL presigned for GET, 405, 501): the size and ETag come
// from a GET of the first byte, and the object reads as usual.
TEST_F(CppApiTest, ARefusedHeadIsReplacedByAFirstByteGet) {
  const auto bytes = random_bytes((256 << 10) + 3, 7);
  for (int status : {403, 405, 501}) {
    ObjectServer server(bytes);
    server.refuse_head(status);
    gpufile::RemoteFile f(server.url("/object"));
    EXPECT_EQ(f.size(), bytes.size()) << status;
    EXPECT_EQ(f.etag(), "\"e1\"") << status;
    EXPECT_EQ(server.gets(), 1) << status;  // the probe
    std::vector<std::uint8_t> out(bytes.size());
    EXPECT_EQ(f.read(out.data(), out.size()), bytes.size()) << status;
    EXPECT_EQ(mismatch(out, bytes), "") << status;
  }
  ObjectServer server(bytes);
  server.refuse_head(405);
  try {
    gpufile::RemoteFile f(server.url("/missing"));
    ADD_FAILURE() << "opened a missing object";
  } catch (const gpufile::Exception& e) {  // the GET's answer, the HEAD's named after it
    const std::string what = e.what();
    EXPECT_NE(what.find("HTTP 404 (GET bytes=0-0"), std::string::npos) << what;
    EXPECT_NE(what.find("HEAD was refused too (HTTP 405)"), std::string::npos) << what;
  }
}

TEST_F(CppApiTest, RemoteErrorsAreExceptions) {
  ObjectServer server(random_bytes(100, 1));
  EXPECT_GPUFILE_ERROR(gpufile::RemoteFile(server.url("/missing")), std::errc::no_such_file_or_directory);
  EXPECT_GPUFILE_ERROR(gpufile::RemoteFile("ftp://host/x"), std::errc::invalid_argument);
  try {
    gpufile::RemoteFile f(server.url("/missing"));
  } catch (const gpufile::Exception& e) {
    EXPECT_NE(std::string(e.what()).find("no such object"), std::string::npos) << e.what();
  }
  gpufile::RemoteFile f(server.url("/object"));
  f.close();
  std::vector<char> out(10);
  EXPECT_GPUFILE_ERROR(f.read(out.data(), out.size()), std::errc::bad_file_descriptor);
}

// A presigned URL and a password in the userinfo are credentials: what() names the URL without
// them (core/redact.hpp), whether the message came from the remote layer or from the API's own
// checks (the closed file's read).
TEST_F(CppApiTest, RemoteErrorsHideTheUrlsCredentials) {
  ObjectServer server(random_bytes(100, 1));
  const std::string secrets[] = {"pw-SECRET-1", "sig-SECRET-2", "tok-SECRET-3"};
  auto with_secrets = [&](const std::string& path, const std::string& query) {
    std::string url = server.url(path) + query;
    return url.insert(url.find("127.0.0.1"), "alice:" + secrets[0] + "@");
  };
  auto expect_hidden = [&](const gpufile::Exception& e) {
    const std::string what = e.what();
    for (const std::string& s : secrets) EXPECT_EQ(what.find(s), std::string::npos) << what;
    EXPECT_NE(what.find("alice:REDACTED@127.0.0.1"), std::string::npos) << what;
  };
  const std::string query = "?X-Amz-Signature=" + secrets[1] + "&X-Amz-Security-Token=" + secrets[2];
  bool thrown = false;
  try {
    gpufile::RemoteFile f(with_secrets("/missing", query));
  } catch (const gpufile::Exception& e) {
    thrown = true;
    EXPECT_EQ(e.code(), std::errc::no_such_file_or_directory);
    EXPECT_NE(std::string(e.what()).find("X-Amz-Signature=REDACTED&X-Amz-Security-Token=REDACTED"),
              std::string::npos) << e.what();
    expect_hidden(e);
  }
  EXPECT_TRUE(thrown);
  gpufile::RemoteFile f(with_secrets("/object", ""));  // the server wants no query
  f.close();
  std::vector<char> out(10);
  thrown = false;
  try {
    f.read(out.data(), out.size());
  } catch (const gpufile::Exception& e) {
    thrown = true;
    expect_hidden(e);
  }
  EXPECT_TRUE(thrown);
  EXPECT_EQ(f.url(), with_secrets("/object", ""));  // the API still gives back what it was given
}

}  // namespace
}  // namespace cpp_test
