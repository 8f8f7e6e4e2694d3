#include "io/remote/object.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <thread>

#include "io/remote/curl.hpp"

namespace gpufile::remote {
namespace {

using Clock = std::chrono::steady_clock;

std::string range_text(const Part& p) {
  return std::to_string(p.offset) + "-" + std::to_string(p.offset + p.length - 1);
}

}  // namespace

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
  if (!parsed) return fail_at(EINVAL, url, why);
  std::shared_ptr<Object> obj(new Object());
  obj->url_ = url;
  obj->options_ = options;
  obj->options_.concurrency = std::max(1u, options.concurrency);
  obj->options_.timeout_s = std::max(1u, options.timeout_s);
  std::unique_ptr<Request> req;
  if (Failure f = Request::make(url, *parsed, &req); !f.ok()) return f;
  obj->request_ = std::move(req);
  if (Failure f = obj->head(); !f.ok()) return f;
  // From here on every request carries If-Match: the version the read began on, or nothing.
  // Not for a weak ETag ("W/..."): If-Match compares strongly, so it would never match; the
  // ETag of each reply is still compared.
  const bool weak = obj->etag_.rfind("W/", 0) == 0;
  obj->request_->set_if_match(weak ? std::string() : obj->etag_);
  *out = std::move(obj);
  return {};
}

Object::~Object() = default;

// Size and ETag, from a HEAD request. A server may refuse HEAD and still serve GETs: a URL
// presigned for GET answers HEAD with 403 (the method is part of what is signed), and some
// servers answer 405 or 501. For those the first byte is asked for instead.
Failure Object::head() {
  long refused = 0;  // the HEAD's status, when it was one of those
  Failure f = ask(
      "HEAD",
      [&](CURL* e, Response*) {
        curl()->easy_setopt(e, CURLOPT_NOBODY, 1L);
        curl()->easy_setopt(e, CURLOPT_WRITEFUNCTION, &discard_body);
      },
      [&](CURL* e, CURLcode rc, const Response& r, Verdict* v) {
        curl_off_t length = -1;
        curl()->easy_getinfo(e, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
        *v = judge(transport_of(rc), r.status, length >= 0);
        if (*v == Verdict::done) {
          size_ = static_cast<uint64_t>(length);
          etag_ = r.etag;
          return true;
        }
        if (r.status == 403 || r.status == 405 || r.status == 501) refused = r.status;
        return false;
      });
  if (f.ok() || refused == 0) return f;
  Failure probed = probe_by_range();
  if (!probed.ok())
    probed.message += "; HEAD was refused too (HTTP " + std::to_string(refused) + ")";
  return probed;
}

namespace {

// The probe's body: a 206's one byte is kept by nobody; a 200 (a server without ranges sends
// the whole object) is cut off at its first bytes, its Content-Length having said the size.
size_t stop_after_headers(char*, size_t size, size_t n, void* reply) {
  return static_cast<const Response*>(reply)->status == 200 ? 0 : size * n;
}

}  // namespace

// GET with Range: bytes=0-0. A 206 gives the size in its Content-Range (".../TOTAL"); an empty
// object's 416 does too ("bytes */0"); a 200 from a server without ranges, in Content-Length.
Failure Object::probe_by_range() {
  return ask(
      "GET bytes=0-0",
      [&](CURL* e, Response* reply) {
        curl()->easy_setopt(e, CURLOPT_HTTPGET, 1L);
        curl()->easy_setopt(e, CURLOPT_RANGE, "0-0");
        curl()->easy_setopt(e, CURLOPT_WRITEFUNCTION, &stop_after_headers);
        curl()->easy_setopt(e, CURLOPT_WRITEDATA, reply);  // its status is in before the body
      },
      [&](CURL* e, CURLcode rc, const Response& r, Verdict* v) {
        curl_off_t length = -1;
        curl()->easy_getinfo(e, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
        const bool total = (r.status == 206 || r.status == 416) && r.has_total;
        if (total || (r.status == 200 && length >= 0)) {
          size_ = total ? r.range_total : static_cast<uint64_t>(length);
          etag_ = r.etag;
          return true;
        }
        // A 200 without a length, or a 206 or 416 without a total, cannot say the size.
        const bool sized_reply = r.status == 200 || r.status == 206 || r.status == 416;
        *v = sized_reply ? Verdict::failed : judge(transport_of(rc), r.status, true);
        return false;
      });
}

Failure Object::ask(const char* what, const std::function<void(CURL*, Response*)>& setup,
                    const std::function<bool(CURL*, CURLcode, const Response&, Verdict*)>& settle) {
  const Curl& c = *curl();
  std::unique_ptr<CURL, void (*)(CURL*)> e(c.easy_init(), c.easy_cleanup);
  if (!e) return fail_at(ENOMEM, url_, "curl_easy_init failed");
  for (unsigned attempt = 0;; ++attempt) {
    Response r;
    request_->apply(e.get(), options_, &r);
    setup(e.get(), &r);
    const CURLcode rc = c.easy_perform(e.get());
    long status = 0;
    c.easy_getinfo(e.get(), CURLINFO_RESPONSE_CODE, &status);
    r.status = status;
    Verdict v = Verdict::failed;
    if (settle(e.get(), rc, r, &v)) return {};
    if (v == Verdict::retry && attempt < options_.retries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(retry_wait_ms(attempt, options_.backoff_ms)));
      continue;
    }
    std::string text = shown(url_) + ": ";
    if (v != Verdict::retry && v != Verdict::failed) text += std::string(verdict_text(v)) + ": ";
    if (rc != CURLE_OK && rc != CURLE_WRITE_ERROR)
      text += transport_error(e.get(), rc, request_->http_url);
    else if (status >= 200 && status < 300)
      text += "the reply does not say the object's size";
    else
      text += "HTTP " + std::to_string(status);
    text += std::string(" (") + what + ", " + std::to_string(attempt + 1) +
            (attempt ? " tries)" : " try)");
    return {verdict_errno(v), text};
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
  Fetch(Object& obj, Client& client, const Options& o, std::vector<Part> parts, PartSink& sink,
        const std::atomic<bool>* stop)
      : obj_(obj), client_(client), c_(*curl()), o_(o), parts_(std::move(parts)),
        limit_(std::max(1u, o.concurrency)), sink_(sink), stop_(stop), tries_(parts_.size(), 0),
        idle_(client.easies) {
    for (size_t i = 0; i < parts_.size(); ++i) ready_.push_back(i);
    // Keep a connection for each transfer in flight between reads (libcurl's default cache
    // follows the handles added at the moment, and shrank below that between two reads).
    if (client_.multi != nullptr)
      c_.multi_setopt(client_.multi, CURLMOPT_MAXCONNECTS, static_cast<long>(limit_));
  }

  Failure run() {
    Failure failure;
    if (client_.multi == nullptr) failure = fail_at(ENOMEM, obj_.url_, "curl_multi_init failed");
    while (failure.ok() && landed_ < parts_.size()) {
      if (stop_ != nullptr && stop_->load(std::memory_order_acquire)) {
        failure = fail_at(ECANCELED, obj_.url_, "stopped: another part of the read failed");
        break;
      }
      wake_due();
      if (failure = start_ready(); !failure.ok()) break;
      if (active_.empty()) {  // only parts waiting out a backoff
        std::this_thread::sleep_until(next_due());
        continue;
      }
      int running = 0;
      if (CURLMcode m = c_.multi_perform(client_.multi, &running); m != CURLM_OK) {
        failure = fail_at(EIO, obj_.url_, "curl_multi_perform failed (" + std::to_string(m) + ")");
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
        return fail_at(ENOMEM, obj_.url_, "curl_easy_init failed");
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
        return fail_at(EIO, obj_.url_, "curl_multi_add_handle failed");
      }
      active_.push_back(std::move(slot));
    }
    if (active_.empty() && !ready_.empty() && delayed_.empty())
      return fail_at(EIO, obj_.url_, "no staging memory for a part");  // a PartSink broke its promise
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
      const auto wait = std::chrono::milliseconds(retry_wait_ms(tried - 1, o_.backoff_ms));
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
      what = transport_error(s.easy, rc, obj_.request_->http_url);
    else if (s.accepted)
      what = "short body: " + std::to_string(s.got) + " of " + std::to_string(p.length) + " bytes";
    else
      what = "HTTP " + std::to_string(s.response.status);
    std::string text = shown(obj_.url_) + ": ";
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
        return fail_at(ETIMEDOUT, obj_.url_,
                       std::string(verdict_text(Verdict::timed_out)) + ": no bytes for " +
                           std::to_string(o_.timeout_s) + " s (bytes " + range_text(parts_[s->index]) + ")");
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
  const std::atomic<bool>* stop_;
  std::vector<unsigned> tries_;
  std::deque<size_t> ready_;
  std::vector<Delayed> delayed_;
  std::vector<std::unique_ptr<Slot>> active_;
  std::vector<CURL*> idle_;  // easy handles of the client not in use now
  size_t landed_ = 0;
};

Failure Object::fetch(uint64_t offset, uint64_t length, const Options& o, PartSink& sink,
                      const std::atomic<bool>* stop) {
  if (offset > size_ || length > size_ - offset)
    return fail_at(EINVAL, url_, "range past the end of the " + std::to_string(size_) + "-byte object");
  if (length == 0) return sink.finish();
  std::unique_ptr<Client> client = take_client();
  Fetch f(*this, *client, o, plan_parts(offset, length, o.part_bytes), sink, stop);
  Failure result = f.run();
  give_client(std::move(client));
  return result;
}

}  // namespace gpufile::remote
