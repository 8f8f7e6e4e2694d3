#include "io/remote/curl.hpp"

#include <dlfcn.h>

#include "sys/library.hpp"

namespace gpufile::remote {
namespace {

struct Loaded {
  Curl curl;
  bool usable = false;
  std::string why;
};

Loaded load() {
  Loaded out;
  const sys::Library lib = sys::load_library("GPUFILE_CURL_LIBRARY", "libcurl.so.4");
  if (lib.handle == nullptr) {
    out.why = "remote objects need libcurl, and " + lib.path + " cannot be loaded (" + lib.error +
              "; Debian: apt install libcurl4)";
    return out;
  }
  Curl& c = out.curl;
#define GPUFILE_CURL_BIND(name, sym, ret, params)                                 \
  c.name = reinterpret_cast<ret(*) params>(dlsym(lib.handle, sym));               \
  if (c.name == nullptr) {                                                        \
    out.why = lib.path + " lacks " + sym + " (libcurl too old?)";                 \
    return out;                                                                   \
  }
  GPUFILE_CURL_FUNCTIONS(GPUFILE_CURL_BIND)
#undef GPUFILE_CURL_BIND
  // Once, before any thread makes a handle: curl_global_init is not thread-safe everywhere.
  if (CURLcode r = c.global_init(CURL_GLOBAL_DEFAULT); r != CURLE_OK) {
    out.why = std::string("curl_global_init failed: ") + c.easy_strerror(r);
    return out;
  }
  const curl_version_info_data* v = c.version_info(CURLVERSION_NOW);
  c.aws_sigv4 = v != nullptr && v->version_num >= 0x074b00;
  c.protocols_str = v != nullptr && v->version_num >= 0x075500;
  out.usable = true;
  return out;
}

const Loaded& loaded() {
  static const Loaded* instance = new Loaded(load());  // leaked, as the library is
  return *instance;
}

}  // namespace

const Curl* curl() { return loaded().usable ? &loaded().curl : nullptr; }
const std::string& why_no_curl() { return loaded().why; }

}  // namespace gpufile::remote
