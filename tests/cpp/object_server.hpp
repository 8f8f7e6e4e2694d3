// A small HTTP/1.1 server on 127.0.0.1 for the C++ API's remote tests (test_remote.cpp,
// test_unload.cpp): HEAD and ranged GETs of one object at /object, 404 for anything else;
// refuse_head() makes HEAD fail as some servers' does.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace cpp_test {

class ObjectServer {
 public:
  explicit ObjectServer(std::vector<std::uint8_t> object) : object_(std::move(object)) {
    listener_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (bind(listener_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(listener_, 64) != 0 ||
        getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      throw std::runtime_error("cannot listen on 127.0.0.1");
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~ObjectServer() {
    stopping_ = true;
    shutdown(listener_, SHUT_RDWR);
    acceptor_.join();
    std::lock_guard lock(mu_);
    for (int fd : conns_) shutdown(fd, SHUT_RDWR);  // wakes their recv()
    for (std::thread& t : workers_) t.join();
    for (int fd : conns_) close(fd);  // only now: no thread uses them any more
    close(listener_);
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  int gets() const { return gets_; }
  // From now on HEAD is answered with `status` (403 as to a URL presigned for GET, 405, 501).
  void refuse_head(int status) { head_status_ = status; }

 private:
  void accept_loop() {
    while (!stopping_) {
      int fd = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      std::lock_guard lock(mu_);
      conns_.push_back(fd);
      workers_.emplace_back([this, fd] { serve(fd); });
    }
  }

  void serve(int fd) {
    std::string in;
    char chunk[4096];
    for (;;) {
      size_t end;
      while ((end = in.find("\r\n\r\n")) == std::string::npos) {
        ssize_t n = recv(fd, chunk, sizeof chunk, 0);
        if (n <= 0) return;  // the client hung up; the destructor closes the socket
        in.append(chunk, static_cast<size_t>(n));
      }
      std::string request = in.substr(0, end);
      in.erase(0, end + 4);
      respond(fd, request);
    }
  }

  void respond(int fd, const std::string& request) {
    const bool head = request.rfind("HEAD ", 0) == 0;
    const bool ours = request.find(" /object ") != std::string::npos;
    std::string reply, body;
    unsigned long long first = 0, last = 0;
    const size_t range = request.find("Range: bytes=");
    if (head && head_status_ != 0) {  // whatever the path, as such servers do
      reply = "HTTP/1.1 " + std::to_string(head_status_.load()) + " Refused\r\nContent-Length: 0\r\n\r\n";
    } else if (!ours) {
      reply = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
    } else if (head) {
      reply = "HTTP/1.1 200 OK\r\nETag: \"e1\"\r\nContent-Length: " + std::to_string(object_.size()) + "\r\n\r\n";
    } else if (range != std::string::npos &&
               std::sscanf(request.c_str() + range, "Range: bytes=%llu-%llu", &first, &last) == 2) {
      ++gets_;
      body.assign(reinterpret_cast<const char*>(object_.data()) + first, last - first + 1);
      reply = "HTTP/1.1 206 Partial Content\r\nETag: \"e1\"\r\nContent-Range: bytes " + std::to_string(first) +
              "-" + std::to_string(last) + "/" + std::to_string(object_.size()) +
              "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n";
    } else {
      reply = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
    }
    reply += body;
    for (size_t sent = 0; sent < reply.size();) {
      ssize_t n = send(fd, reply.data() + sent, reply.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return;
      sent += static_cast<size_t>(n);
    }
  }

  std::vector<std::uint8_t> object_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> gets_{0};
  std::atomic<int> head_status_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> conns_;
  std::vector<std::thread> workers_;
};

}  // namespace cpp_test
