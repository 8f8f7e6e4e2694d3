// libcurl, loaded at run time.
//
// Why dlopen and not a link: libcufile.so.0 is a drop-in that must load on any machine a GDS
// program runs on, and remote objects are an extra most of them never use. Linking libcurl
// would make every library gpufile builds (libcufile.so.0 and libgpufile.so included) fail to
// load where libcurl.so.4 is missing, as a linked liburing.so would on the GPU machine. So the
// types and constants come from curl's headers at build time (Debian: libcurl4-openssl-dev),
// and the entry points from libcurl.so.4 when the first remote object is opened; without it,
// that open fails with a clear error and nothing else changes. docs/remote.md says the same.
#pragma once

#define CURL_DISABLE_TYPECHECK 1
// CURLOPT_REDIR_PROTOCOLS (a bit mask) is deprecated from 7.85 on, but it is what older libcurls
// have: request.cpp picks by the version loaded.
#define CURL_DISABLE_DEPRECATION 1
#include <curl/curl.h>

#include <string>

namespace gpufile::remote {

// X(member, symbol, return, parameters)
#define GPUFILE_CURL_FUNCTIONS(X)                                                              \
  X(global_init, "curl_global_init", CURLcode, (long flags))                                    \
  X(version_info, "curl_version_info", curl_version_info_data*, (CURLversion))                  \
  X(easy_init, "curl_easy_init", CURL*, (void))                                                 \
  X(easy_setopt, "curl_easy_setopt", CURLcode, (CURL*, CURLoption, ...))                        \
  X(easy_getinfo, "curl_easy_getinfo", CURLcode, (CURL*, CURLINFO, ...))                        \
  X(easy_perform, "curl_easy_perform", CURLcode, (CURL*))                                       \
  X(easy_reset, "curl_easy_reset", void, (CURL*))                                               \
  X(easy_cleanup, "curl_easy_cleanup", void, (CURL*))                                           \
  X(easy_strerror, "curl_easy_strerror", const char*, (CURLcode))                               \
  X(slist_append, "curl_slist_append", curl_slist*, (curl_slist*, const char*))                 \
  X(slist_free_all, "curl_slist_free_all", void, (curl_slist*))                                 \
  X(multi_init, "curl_multi_init", CURLM*, (void))                                              \
  X(multi_setopt, "curl_multi_setopt", CURLMcode, (CURLM*, CURLMoption, ...))                   \
  X(multi_add_handle, "curl_multi_add_handle", CURLMcode, (CURLM*, CURL*))                      \
  X(multi_remove_handle, "curl_multi_remove_handle", CURLMcode, (CURLM*, CURL*))                \
  X(multi_perform, "curl_multi_perform", CURLMcode, (CURLM*, int*))                             \
  X(multi_poll, "curl_multi_poll", CURLMcode, (CURLM*, curl_waitfd*, unsigned, int, int*))      \
  X(multi_info_read, "curl_multi_info_read", CURLMsg*, (CURLM*, int*))                          \
  X(multi_cleanup, "curl_multi_cleanup", CURLMcode, (CURLM*))

struct Curl {
#define GPUFILE_CURL_MEMBER(name, sym, ret, params) ret(*name) params = nullptr;
  GPUFILE_CURL_FUNCTIONS(GPUFILE_CURL_MEMBER)
#undef GPUFILE_CURL_MEMBER
  bool aws_sigv4 = false;  // libcurl is 7.75 or newer: CURLOPT_AWS_SIGV4 works
  bool protocols_str = false;  // 7.85 or newer: CURLOPT_PROTOCOLS_STR, CURLOPT_REDIR_PROTOCOLS_STR
};

// libcurl loaded and initialised once per process ($GPUFILE_CURL_LIBRARY, else libcurl.so.4);
// nullptr when it cannot be, and then why_no_curl() says why in one sentence.
const Curl* curl();
const std::string& why_no_curl();

}  // namespace gpufile::remote
