#include "io/remote/object.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <thread>

#include "io/remote/address.hpp"
#include "io/remote/aws.hpp"
#include "io/remote/curl.hpp"

namespace gpufile::remote {
namespace {

using Clock = std::chrono::steady_clock;

std::string range_text(const Part& p) {
  return std::to_string(p.offset) + "-" + std::to_string(p.offset + p.length - 1);
}

bool starts_with_nocase(std::string_view line, std::string_view prefix) {
  if (line.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(line[i])) != prefix[i]) return false;
  return true;
}

std::string_view header_value(std::string_view line, size_t name_len) {
  line.remove_prefix(name_len);
  while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n' || line.back() == ' '))
    line.remove_suffix(1);
  return line;
}

// "bytes FIRST-LAST/TOTAL": FIRST and LAST, or false.
bool parse_content_range(std::string_view v, uint64_t* first, uint64_t* last) {
  if (!starts_with_nocase(v, "bytes ")) return false;
  v.remove_prefix(6);
  const size_t dash = v.find('-'), slash = v.find('/');
  if (dash == std::string_view::npos || slash == std::string_view::npos || slash < dash) return false;
  auto num = [](std::string_view s, uint64_t* out) {
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
    return ec == std::errc() && end == s.data() + s.size();
  };
  return num(v.substr(0, dash), first) && num(v.substr(dash + 1, slash - dash - 1), last);
}

Transport transport_of(CURLcode rc) {
  switch (rc) {
    case CURLE_OK:
      return Transport::ok;
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return Transport::dropped;
    case CURLE_COULDNT_CONNECT:
      return Transport::refused;
    case CURLE_OPERATION_TIMEDOUT:
      return Transport::timed_out;
    default:
      return Transport::other;
  }
}

// What one response said, gathered by the header and body callbacks.
struct Response {
  long status = 0;
  std::string etag;
  bool has_range = false;
  uint64_t range_first = 0, range_last = 0;

  void on_header(std::string_view line) {
    if (starts_with_nocase(line, "http/")) {  // a new response (after a redirect or a 100)
      *this = Response();
      const size_t sp = line.find(' ');
      if (sp != std::string_view::npos) std::from_chars(line.data() + sp + 1, line.data() + line.size(), status);
    } else if (starts_with_nocase(line, "etag:")) {
      etag = std::string(header_value(line, 5));
    } else if (starts_with_nocase(line, "content-range:")) {
      has_range = parse_content_range(header_value(line, 14), &range_first, &range_last);
    }
  }
};

size_t on_header(char* data, size_t size, size_t n, void* user) {
  static_cast<Response*>(user)->on_header(std::string_view(data, size * n));
  return size * n;
}

size_t discard_body(char*, size_t size, size_t n, void*) { return size * n; }

const char* verdict_text(Verdict v) {
  switch (v) {
    case Verdict::not_found:
      return "no such object or bucket";
    case Verdict::denied:
      return "access denied (check the credentials)";
    case Verdict::changed:
      return "the object was replaced during the read (its ETag changed)";
    case Verdict::timed_out:
      return "the server sent nothing within the timeout (gpufile.remote_timeout_s)";
    default:
      return "failed";
  }
}

}  // namespace

// ---- how requests are made -------------------------------------------------------------------

struct Object::Request {
  std::string http_url;
  bool follow_redirects = false;
  std::string sigv4;  // "aws:amz:REGION:s3"; empty: unsigned
  std::string user, password;
  std::string ca_bundle;             // CURLOPT_CAINFO; empty: libcurl's default (the system's)
  std::vector<std::string> headers;  // besides If-Match
  curl_slist* list = nullptr;        // headers + If-Match, once the ETag is known
  std::string describe;              // the URL the user gave, for messages

  ~Request() {
    if (list != nullptr) curl()->slist_free_all(list);
  }

  void build_list(const std::string& etag) {
    const Curl& c = *curl();
    for (const std::string& h : headers) list = c.slist_append(list, h.c_str());
    if (!etag.empty()) list = c.slist_append(list, ("If-Match: " + etag).c_str());
  }

  // The options every request to the object shares; `r` collects the response's headers.
  void apply(CURL* e, const Options& o, Response* r) const {
    const Curl& c = *curl();
    c.easy_setopt(e, CURLOPT_URL, http_url.c_str());
    c.easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    c.easy_setopt(e, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_2TLS));
    c.easy_setopt(e, CURLOPT_PIPEWAIT, 1L);  // HTTP/2: wait to share a connection rather than open more
    c.easy_setopt(e, CURLOPT_CONNECTTIMEOUT, static_cast<long>(o.timeout_s));
    // A stalled server: less than one byte a second for timeout_s seconds ends the transfer.
    c.easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    c.easy_setopt(e, CURLOPT_LOW_SPEED_TIME, static_cast<long>(o.timeout_s));
    c.easy_setopt(e, CURLOPT_FOLLOWLOCATION, follow_redirects ? 1L : 0L);
    c.easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
    c.easy_setopt(e, CURLOPT_HTTPHEADER, list);
    if (!ca_bundle.empty()) c.easy_setopt(e, CURLOPT_CAINFO, ca_bundle.c_str());
    if (!sigv4.empty()) {
      c.easy_setopt(e, CURLOPT_AWS_SIGV4, sigv4.c_str());
      c.easy_setopt(e, CURLOPT_USERNAME, user.c_str());
      c.easy_setopt(e, CURLOPT_PASSWORD, password.c_str());
    }
    c.easy_setopt(e, CURLOPT_HEADERFUNCTION, &on_header);
    c.easy_setopt(e, CURLOPT_HEADERDATA, r);
  }
};

struct Object::Client {
  CURLM* multi = nullptr;
  std::vector<CURL*> easies;
  ~Client() {
    const Curl& c = *curl();
    for (CURL* e : easies) c.easy_cleanup(e);
    if (multi != nullptr) c.multi_cleanup(multi);
  }
};

// ---- open ------------------------------------------------------------------------------------

Failure Object::open(const std::string& url, const Options& options, std::shared_ptr<Object>* out) {
  std::string why;
  std::optional<Url> parsed = parse_url(url, &why);
  if (!parsed) return {EINVAL, url + ": " + why};
  if (curl() == nullptr) return {ELIBACC, url + ": " + why_no_curl()};
  std::shared_ptr<Object> obj(new Object());
  obj->url_ = url;
  obj->options_ = options;
  obj->options_.concurrency = std::max(1u, options.concurrency);
  obj->options_.timeout_s = std::max(1u, options.timeout_s);
  auto req = std::make_unique<Request>();
  req->describe = url;
  if (parsed->scheme == Scheme::s3) {
    std::optional<S3Object> s3 = parse_s3(*parsed, &why);
    if (!s3) return {EINVAL, url + ": " + why};
    const AwsConfig aws = resolve_aws(process_sources());
    const S3Address addr = s3_address(*s3, aws.region, aws.endpoint);
    req->http_url = addr.url;
    req->ca_bundle = aws.ca_bundle;
    if (aws.has_credentials()) {
      if (!curl()->aws_sigv4)
        return {ENOTSUP, url + ": signed S3 requests need libcurl 7.75 or newer"};
      req->sigv4 = "aws:amz:" + addr.region + ":s3";
      req->user = aws.access_key;
      req->password = aws.secret_key;
      // S3 wants the payload's hash signed; reads have none to hash.
      req->headers.push_back("x-amz-content-sha256: UNSIGNED-PAYLOAD");
      if (!aws.session_token.empty())
        req->headers.push_back("x-amz-security-token: " + aws.session_token);
    }
  } else {
    req->http_url = url;
    req->follow_redirects = true;
    // As the curl tool reads it: certificates for https:// servers outside the system's store.
    if (const char* bundle = std::getenv("CURL_CA_BUNDLE"); bundle != nullptr) req->ca_bundle = bundle;
  }
  req->build_list("");
  obj->request_ = std::move(req);
  if (Failure f = obj->head(); !f.ok()) return f;
  // From here on every request carries If-Match: the version the read began on, or nothing.
  // Not for a weak ETag ("W/..."): If-Match compares strongly, so it would never match; the
  // ETag of each reply is still compared.
  curl()->slist_free_all(obj->request_->list);
  obj->request_->list = nullptr;
  const bool weak = obj->etag_.rfind("W/", 0) == 0;
  obj->request_->build_list(weak ? std::string() : obj->etag_);
  *out = std::move(obj);
  return {};
}

Object::~Object() = default;

// Size and ETag, from a HEAD request, retried as parts are.
Failure Object::head() {
  const Curl& c = *curl();
  std::unique_ptr<CURL, void (*)(CURL*)> e(c.easy_init(), c.easy_cleanup);
  if (!e) return {ENOMEM, url_ + ": curl_easy_init failed"};
  for (unsigned attempt = 0;; ++attempt) {
    Response r;
    request_->apply(e.get(), options_, &r);
    c.easy_setopt(e.get(), CURLOPT_NOBODY, 1L);
    c.easy_setopt(e.get(), CURLOPT_WRITEFUNCTION, &discard_body);
    const CURLcode rc = c.easy_perform(e.get());
    long status = 0;
    c.easy_getinfo(e.get(), CURLINFO_RESPONSE_CODE, &status);
    curl_off_t length = -1;
    c.easy_getinfo(e.get(), CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
    const Verdict v = judge(transport_of(rc), status, length >= 0);
    if (v == Verdict::done) {
      size_ = static_cast<uint64_t>(length);
      etag_ = r.etag;
      return {};
    }
    if (v == Verdict::retry && attempt < options_.retries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms(attempt, options_.backoff_ms)));
      continue;
    }
    std::string what = url_ + ": ";
    if (v != Verdict::retry && v != Verdict::failed) what += std::string(verdict_text(v)) + ": ";
    if (rc != CURLE_OK)
      what += c.easy_strerror(rc);
    else if (status >= 200 && status < 300)
      what += "the reply has no Content-Length";
    else
      what += "HTTP " + std::to_string(status);
    what += " (HEAD, " + std::to_string(attempt + 1) + (attempt ? " tries)" : " try)");
    return {verdict_errno(v), what};
  }
}

std::unique_ptr<Object::Client> Object::take_client() {
  {
    std::lock_guard lock(clients_mu_);
    if (!clients_.empty()) {
      auto c = std::move(clients_.back());
      clients_.pop_back();
      return c;
    }
  }
  auto client = std::make_unique<Client>();
  client->multi = curl()->multi_init();
  if (client->multi != nullptr)
    curl()->multi_setopt(client->multi, CURLMOPT_PIPELINING, static_cast<long>(CURLPIPE_MULTIPLEX));
  return client;
}

void Object::give_client(std::unique_ptr<Client> c) {
  std::lock_guard lock(clients_mu_);
  clients_.push_back(std::move(c));
}

// ---- fetch -----------------------------------------------------------------------------------

// One fetch: parts waiting, in flight and waiting out a backoff, on one multi handle.
class Object::Fetch {
 public:
  Fetch(Object& obj, Client& client, const Options& o, std::vector<Part> parts, PartSink& sink)
      : obj_(obj), client_(client), c_(*curl()), o_(o), parts_(std::move(parts)),
        limit_(std::max(1u, o.concurrency)), sink_(sink), tries_(parts_.size(), 0),
        idle_(client.easies) {
    for (size_t i = 0; i < parts_.size(); ++i) ready_.push_back(i);
    // Keep a connection for each transfer in flight between reads (libcurl's default cache
    // follows the handles added at the moment, and shrank below that between two reads).
    if (client_.multi != nullptr)
      c_.multi_setopt(client_.multi, CURLMOPT_MAXCONNECTS, static_cast<long>(limit_));
  }

  Failure run() {
    Failure failure;
    if (client_.multi == nullptr) failure = {ENOMEM, obj_.url_ + ": curl_multi_init failed"};
    while (failure.ok() && landed_ < parts_.size()) {
      wake_due();
      if (failure = start_ready(); !failure.ok()) break;
      if (active_.empty()) {  // only parts waiting out a backoff
        std::this_thread::sleep_until(next_due());
        continue;
      }
      int running = 0;
      if (CURLMcode m = c_.multi_perform(client_.multi, &running); m != CURLM_OK) {
        failure = {EIO, obj_.url_ + ": curl_multi_perform failed (" + std::to_string(m) + ")"};
        break;
      }
      if (failure = collect(); !failure.ok()) break;
      if (failure = check_stalls(); !failure.ok()) break;
      if (!active_.empty() && running > 0) c_.multi_poll(client_.multi, nullptr, 0, poll_ms(), nullptr);
    }
    abort_active();
    Failure end = sink_.finish();
    return failure.ok() ? end : failure;
  }

 private:
  struct Slot {
    Fetch* fetch = nullptr;
    CURL* easy = nullptr;
    size_t index = 0;
    char* mem = nullptr;
    uint64_t got = 0;
    bool accepted = false, checked = false, overflow = false;
    bool wrong_range = false;  // a 2xx reply with other bytes than asked for (no Range support)
    Response response;
    Clock::time_point last_byte;  // when the transfer started or last received body bytes
  };

  static size_t on_body(char* data, size_t size, size_t n, void* user) {
    Slot& s = *static_cast<Slot*>(user);
    const size_t bytes = size * n;
    const Part& p = s.fetch->parts_[s.index];
    if (!s.checked) {  // the first bytes: is this the range asked for, or an error page?
      s.checked = true;
      const Response& r = s.response;
      const bool range_ok = r.status == 206 && r.has_range && r.range_first == p.offset &&
                            r.range_last == p.offset + p.length - 1;
      // A server without ranges answers 200 with everything: fine for a part that is everything.
      const bool whole_ok = r.status == 200 && p.offset == 0 && p.length == s.fetch->obj_.size_;
      s.accepted = range_ok || whole_ok;
    }
    if (!s.accepted) {  // not the bytes asked for: never into the caller's memory
      const long status = s.response.status;
      s.wrong_range = status >= 200 && status < 300;
      return s.wrong_range ? 0 : bytes;  // an error page is read to its end, keeping the connection
    }
    s.last_byte = Clock::now();
    if (s.got + bytes > p.length) {
      s.overflow = true;
      return 0;  // more than asked: aborts the transfer
    }
    std::memcpy(s.mem + s.got, data, bytes);
    s.got += bytes;
    return bytes;
  }

  CURL* easy() {
    if (!idle_.empty()) {
      CURL* e = idle_.back();
      idle_.pop_back();
      return e;
    }
    CURL* e = c_.easy_init();
    if (e != nullptr) client_.easies.push_back(e);
    return e;
  }

  Failure start_ready() {
    while (active_.size() < limit_ && !ready_.empty()) {
      const size_t i = ready_.front();
      char* mem = sink_.begin(i, parts_[i]);
      if (mem == nullptr) break;
      ready_.pop_front();
      auto slot = std::make_unique<Slot>();
      slot->fetch = this;
      slot->index = i;
      slot->mem = mem;
      slot->last_byte = Clock::now();
      slot->easy = easy();
      if (slot->easy == nullptr) {
        sink_.dropped(i, mem);
        return {ENOMEM, obj_.url_ + ": curl_easy_init failed"};
      }
      CURL* e = slot->easy;
      obj_.request_->apply(e, o_, &slot->response);
      c_.easy_setopt(e, CURLOPT_NOBODY, 0L);
      c_.easy_setopt(e, CURLOPT_HTTPGET, 1L);
      c_.easy_setopt(e, CURLOPT_RANGE, range_text(parts_[i]).c_str());  // libcurl copies it
      c_.easy_setopt(e, CURLOPT_WRITEFUNCTION, &on_body);
      c_.easy_setopt(e, CURLOPT_WRITEDATA, slot.get());
      c_.easy_setopt(e, CURLOPT_PRIVATE, slot.get());
      if (c_.multi_add_handle(client_.multi, e) != CURLM_OK) {
        sink_.dropped(i, mem);
        idle_.push_back(e);
        return {EIO, obj_.url_ + ": curl_multi_add_handle failed"};
      }
      active_.push_back(std::move(slot));
    }
    if (active_.empty() && !ready_.empty() && delayed_.empty())
      return {EIO, obj_.url_ + ": no staging memory for a part"};  // a PartSink broke its promise
    return {};
  }

  // Finished transfers: landed, retried or the end of the fetch.
  Failure collect() {
    int left = 0;
    while (CURLMsg* msg = c_.multi_info_read(client_.multi, &left)) {
      if (msg->msg != CURLMSG_DONE) continue;
      void* priv = nullptr;
      c_.easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv);
      Slot* s = static_cast<Slot*>(priv);
      const CURLcode rc = msg->data.result;
      c_.multi_remove_handle(client_.multi, s->easy);
      idle_.push_back(s->easy);
      std::unique_ptr<Slot> slot = release(s);
      if (Failure f = settle(*slot, rc); !f.ok()) return f;
    }
    return {};
  }

  Failure settle(Slot& s, CURLcode rc) {
    const Part& p = parts_[s.index];
    const Response& r = s.response;
    const bool same_version = obj_.etag_.empty() || r.etag.empty() || r.etag == obj_.etag_;
    const bool complete = s.accepted && s.got == p.length;
    Verdict v = judge(transport_of(rc), r.status, complete);
    if (s.overflow || s.wrong_range) v = Verdict::failed;  // the same reply would come again
    if (!same_version && (r.status == 200 || r.status == 206)) v = Verdict::changed;
    if (v == Verdict::done) {
      ++landed_;
      return sink_.landed(s.index, p, s.mem);
    }
    sink_.dropped(s.index, s.mem);
    const unsigned tried = ++tries_[s.index];
    if (v == Verdict::retry && tried <= o_.retries) {
      const auto wait = std::chrono::milliseconds(backoff_ms(tried - 1, o_.backoff_ms));
      delayed_.push_back({Clock::now() + wait, s.index});
      return {};
    }
    return {verdict_errno(v), message(s, rc, v, tried)};
  }

  std::string message(const Slot& s, CURLcode rc, Verdict v, unsigned tries) const {
    const Part& p = parts_[s.index];
    std::string what;
    if (s.overflow)
      what = "the server sent more bytes than asked for";
    else if (s.wrong_range)
      what = "the reply (HTTP " + std::to_string(s.response.status) +
             ") is not the range asked for: does the server support ranges?";
    else if (rc != CURLE_OK)
      what = c_.easy_strerror(rc);
    else if (s.accepted)
      what = "short body: " + std::to_string(s.got) + " of " + std::to_string(p.length) + " bytes";
    else
      what = "HTTP " + std::to_string(s.response.status);
    std::string text = obj_.url_ + ": ";
    if (v != Verdict::retry && v != Verdict::failed) text += std::string(verdict_text(v)) + ": ";
    return text + what + " (bytes " + range_text(p) + ", " + std::to_string(tries) +
           (tries == 1 ? " try)" : " tries)");
  }

  // A transfer that received nothing for the timeout ends the fetch. libcurl's low-speed limit
  // stays as a backstop, but it averages over seconds: a server that sent a few bytes and then
  // stalled would pass it for far longer than the timeout.
  Failure check_stalls() const {
    const auto limit = std::chrono::seconds(o_.timeout_s);
    const auto now = Clock::now();
    for (const auto& s : active_)
      if (now - s->last_byte > limit)
        return {ETIMEDOUT, obj_.url_ + ": " + verdict_text(Verdict::timed_out) + ": no bytes for " +
                               std::to_string(o_.timeout_s) + " s (bytes " + range_text(parts_[s->index]) + ")"};
    return {};
  }

  std::unique_ptr<Slot> release(Slot* s) {
    auto it = std::find_if(active_.begin(), active_.end(), [s](const auto& p) { return p.get() == s; });
    std::unique_ptr<Slot> out = std::move(*it);
    active_.erase(it);
    return out;
  }

  // Ends transfers still running (after a failure): none writes anywhere after this.
  void abort_active() {
    for (auto& s : active_) {
      c_.multi_remove_handle(client_.multi, s->easy);
      idle_.push_back(s->easy);
      sink_.dropped(s->index, s->mem);
    }
    active_.clear();
  }

  void wake_due() {
    const auto now = Clock::now();
    for (auto it = delayed_.begin(); it != delayed_.end();) {
      if (it->due > now) {
        ++it;
        continue;
      }
      ready_.push_front(it->index);  // retries first: their neighbours are landing already
      it = delayed_.erase(it);
    }
  }

  Clock::time_point next_due() const {
    auto due = Clock::now() + std::chrono::milliseconds(100);
    for (const auto& d : delayed_) due = std::min(due, d.due);
    return due;
  }

  int poll_ms() const {
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_due() - Clock::now());
    return static_cast<int>(std::clamp<int64_t>(wait.count(), 1, 100));
  }

  struct Delayed {
    Clock::time_point due;
    size_t index;
  };

  Object& obj_;
  Client& client_;
  const Curl& c_;
  const Options o_;
  const std::vector<Part> parts_;
  const unsigned limit_;
  PartSink& sink_;
  std::vector<unsigned> tries_;
  std::deque<size_t> ready_;
  std::vector<Delayed> delayed_;
  std::vector<std::unique_ptr<Slot>> active_;
  std::vector<CURL*> idle_;  // easy handles of the client not in use now
  size_t landed_ = 0;
};

Failure Object::fetch(uint64_t offset, uint64_t length, const Options& o, PartSink& sink) {
  if (offset > size_ || length > size_ - offset)
    return {EINVAL, url_ + ": range past the end of the " + std::to_string(size_) + "-byte object"};
  if (length == 0) return sink.finish();
  std::unique_ptr<Client> client = take_client();
  Fetch f(*this, *client, o, plan_parts(offset, length, o.part_bytes), sink);
  Failure result = f.run();
  give_client(std::move(client));
  return result;
}

}  // namespace gpufile::remote
