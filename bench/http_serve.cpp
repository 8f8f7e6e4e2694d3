// A native HTTP server for remote-read benchmarks, and a client that measures what it can send.
//
//   gpufile_http_serve serve FILE
//       Serves FILE at every path on 127.0.0.1 (a free port, printed as "port N" on stdout), until
//       stdin closes: HEAD (size, ETag), GET with or without one "Range: bytes=A-B" (206 with
//       Content-Range, or 200), If-Match (412 for another ETag), HTTP/1.1 keep-alive unless the
//       client asks to close. A thread per connection; the body goes from the page cache to the
//       socket by sendfile.
//   gpufile_http_serve sink PORT SIZE THREADS PART_MIB [ROUNDS]
//       THREADS keep-alive connections to 127.0.0.1:PORT share ranged GETs of PART_MIB over
//       [0, SIZE), each body received into a buffer of the thread's and dropped. Prints
//       "round K: N bytes in S s, X GiB/s" per round (default 2).
//
// Why it exists: remote_gpu.py's Python server (a thread per connection, HTTP/1.0, the GIL
// between requests) moved 17 to 24 GiB/s depending on the machine, so it, not the clients,
// bounded and blurred the comparison; and a Python client could not say how much the server
// sends. This server costs one sendfile per range and no copy; the sink's figure is what it
// sends to a client that does the least a client must (one recv copy per byte).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr size_t kMaxHead = 16 << 10;

bool send_all(int fd, const std::string& text, int flags) {
  size_t at = 0;
  while (at < text.size()) {
    const ssize_t n = send(fd, text.data() + at, text.size() - at, flags | MSG_NOSIGNAL);
    if (n <= 0) return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

// The value of header `name` (case-insensitive) in a request or response head, or nullopt.
std::optional<std::string> header(const std::string& head, const char* name) {
  const size_t len = std::strlen(name);
  for (size_t at = head.find("\r\n"); at != std::string::npos && at + 2 < head.size();) {
    const size_t line = at + 2, end = head.find("\r\n", line);
    if (end == std::string::npos) break;
    if (end - line > len && head[line + len] == ':' && strncasecmp(head.c_str() + line, name, len) == 0) {
      size_t v = line + len + 1;
      while (v < end && head[v] == ' ') ++v;
      return head.substr(v, end - v);
    }
    at = end;
  }
  return std::nullopt;
}

// Reads from `fd` into `buf` until it holds a whole head ("\r\n\r\n"); returns the head's length
// including that, 0 at a clean end of the connection, -1 on an error or an oversized head.
ssize_t read_head(int fd, std::string& buf) {
  for (;;) {
    if (size_t end = buf.find("\r\n\r\n"); end != std::string::npos) return static_cast<ssize_t>(end + 4);
    if (buf.size() > kMaxHead) return -1;
    char chunk[4096];
    const ssize_t n = recv(fd, chunk, sizeof chunk, 0);
    if (n == 0 && buf.empty()) return 0;
    if (n <= 0) return -1;
    buf.append(chunk, static_cast<size_t>(n));
  }
}

// ---- serve ------------------------------------------------------------------------------------

struct Served {
  int fd;
  uint64_t size;
  std::string etag;
};

bool send_range(int sock, const Served& file, uint64_t first, uint64_t count) {
  off_t at = static_cast<off_t>(first);
  while (count > 0) {
    const ssize_t n = sendfile(sock, file.fd, &at, std::min<uint64_t>(count, 1u << 30));
    if (n <= 0) return false;
    count -= static_cast<uint64_t>(n);
  }
  return true;
}

// One request; returns whether the connection stays open for the next.
bool answer(int sock, const Served& file, const std::string& head) {
  const bool is_head = head.compare(0, 5, "HEAD ") == 0;
  const bool http10 = head.find(" HTTP/1.0\r\n") != std::string::npos;
  const auto connection = header(head, "Connection");
  const bool keep = !http10 && !(connection && strcasecmp(connection->c_str(), "close") == 0);
  // The reply's head: status, length, the file's ETag, then `extra` header lines.
  auto reply_head = [&](const char* status, uint64_t length, const std::string& extra) {
    return std::string("HTTP/1.1 ") + status + "\r\nContent-Length: " + std::to_string(length) +
           "\r\nETag: " + file.etag + "\r\nAccept-Ranges: bytes\r\n" + extra +
           (keep ? "" : "Connection: close\r\n") + "\r\n";
  };
  auto bodiless = [&](const char* status, const std::string& extra = "") {
    return send_all(sock, reply_head(status, 0, extra), 0) && keep;
  };
  if (!is_head && head.compare(0, 4, "GET ") != 0) return bodiless("405 Method Not Allowed");
  if (auto match = header(head, "If-Match"); match && *match != file.etag && *match != "*")
    return bodiless("412 Precondition Failed");
  uint64_t first = 0, count = file.size;
  const char* status = "200 OK";
  std::string content_range;
  if (auto range = header(head, "Range")) {
    unsigned long long a = 0, b = 0;
    if (std::sscanf(range->c_str(), "bytes=%llu-%llu", &a, &b) != 2 || a > b || a >= file.size)
      return bodiless("416 Range Not Satisfiable",
                      "Content-Range: bytes */" + std::to_string(file.size) + "\r\n");
    const uint64_t last = std::min<uint64_t>(b, file.size - 1);
    first = a;
    count = last + 1 - first;
    status = "206 Partial Content";
    content_range = "Content-Range: bytes " + std::to_string(first) + "-" + std::to_string(last) + "/" +
                    std::to_string(file.size) + "\r\n";
  }
  const std::string reply = reply_head(status, count, content_range);
  if (is_head) return send_all(sock, reply, 0) && keep;
  // MSG_MORE: the head leaves in the same segment as the body's first bytes.
  return send_all(sock, reply, MSG_MORE) && send_range(sock, file, first, count) && keep;
}

void serve_connection(int sock, const Served& file) {
  std::string buf;
  for (;;) {
    const ssize_t head_len = read_head(sock, buf);
    if (head_len <= 0) break;
    const std::string head = buf.substr(0, static_cast<size_t>(head_len));
    buf.erase(0, static_cast<size_t>(head_len));  // requests have no body here
    if (!answer(sock, file, head)) break;
  }
  close(sock);
}

int listen_loopback(uint16_t* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int on = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd, 1024) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return -1;
  *port = ntohs(addr.sin_port);
  return fd;
}

int serve(const char* path) {
  Served file{open(path, O_RDONLY | O_CLOEXEC), 0, ""};
  struct stat st{};
  if (file.fd < 0 || fstat(file.fd, &st) != 0) return std::fprintf(stderr, "cannot open %s\n", path), 1;
  file.size = static_cast<uint64_t>(st.st_size);
  file.etag = "\"" + std::to_string(st.st_size) + "-" + std::to_string(st.st_mtim.tv_sec) + "." +
              std::to_string(st.st_mtim.tv_nsec) + "\"";
  uint16_t port = 0;
  const int listener = listen_loopback(&port);
  if (listener < 0) return std::perror("listen on 127.0.0.1"), 1;
  std::printf("port %u\n", port);
  std::fflush(stdout);
  // The parent ends the server by closing our stdin (or by killing it).
  std::thread([] {
    char c;
    while (read(0, &c, 1) > 0) {
    }
    _exit(0);
  }).detach();
  for (;;) {
    const int sock = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (sock < 0) continue;
    std::thread(serve_connection, sock, std::cref(file)).detach();
  }
}

// ---- sink ---------------------------------------------------------------------------------------

int connect_loopback(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// GETs parts taken from `next` on one connection; returns the body bytes received, or -1.
int64_t sink_parts(uint16_t port, uint64_t size, uint64_t part, std::atomic<uint64_t>& next) {
  const int sock = connect_loopback(port);
  if (sock < 0) return -1;
  std::vector<char> body(1 << 20);
  std::string buf;
  int64_t got = 0;
  for (uint64_t k; (k = next.fetch_add(1)) * part < size;) {
    const uint64_t first = k * part, last = std::min(size, first + part) - 1;
    const std::string ask = "GET /object HTTP/1.1\r\nHost: 127.0.0.1\r\nRange: bytes=" +
                            std::to_string(first) + "-" + std::to_string(last) + "\r\n\r\n";
    buf.clear();
    const ssize_t head_len = send_all(sock, ask, 0) ? read_head(sock, buf) : -1;
    const auto length = head_len > 0 ? header(buf.substr(0, static_cast<size_t>(head_len)), "Content-Length")
                                     : std::nullopt;
    if (!length || std::strtoull(length->c_str(), nullptr, 10) != last + 1 - first) return close(sock), -1;
    const uint64_t extra = buf.size() - static_cast<size_t>(head_len);  // body bytes read with the head
    if (extra > last + 1 - first) return close(sock), -1;
    uint64_t left = last + 1 - first - extra;
    while (left > 0) {
      const ssize_t n = recv(sock, body.data(), std::min<uint64_t>(left, body.size()), 0);
      if (n <= 0) return close(sock), -1;
      left -= static_cast<uint64_t>(n);
    }
    got += static_cast<int64_t>(last + 1 - first);
  }
  close(sock);
  return got;
}

int sink(uint16_t port, uint64_t size, unsigned threads, uint64_t part, int rounds) {
  for (int round = 1; round <= rounds; ++round) {
    std::atomic<uint64_t> next{0};
    std::vector<int64_t> got(threads);
    std::vector<std::thread> pool;
    const auto t0 = std::chrono::steady_clock::now();
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back([&, t] { got[t] = sink_parts(port, size, part, next); });
    for (auto& t : pool) t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    int64_t total = 0;
    for (int64_t g : got) total = g < 0 || total < 0 ? -1 : total + g;
    if (total != static_cast<int64_t>(size))
      return std::fprintf(stderr, "round %d: a connection failed or bytes are missing\n", round), 1;
    std::printf("round %d: %llu bytes in %.4f s, %.2f GiB/s\n", round,
                static_cast<unsigned long long>(total), s, static_cast<double>(total) / s / (1 << 30));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "serve") == 0) return serve(argv[2]);
  if ((argc == 6 || argc == 7) && std::strcmp(argv[1], "sink") == 0) {
    const uint64_t part = std::strtoull(argv[5], nullptr, 10) << 20;
    const unsigned threads = static_cast<unsigned>(std::strtoul(argv[4], nullptr, 10));
    if (part == 0 || threads == 0) return std::fprintf(stderr, "THREADS and PART_MIB must be > 0\n"), 2;
    return sink(static_cast<uint16_t>(std::atoi(argv[2])), std::strtoull(argv[3], nullptr, 10), threads,
                part, argc == 7 ? std::atoi(argv[6]) : 2);
  }
  std::fprintf(stderr,
               "usage: gpufile_http_serve serve FILE\n"
               "       gpufile_http_serve sink PORT SIZE THREADS PART_MIB [ROUNDS]\n");
  return 2;
}
