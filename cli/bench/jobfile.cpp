#include "cli/bench/jobfile.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace gpufile::cli::benchmark {
namespace {

constexpr std::string_view kGlobal = "global";

std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// Job names appear in -J lines and JSON strings: nothing there may need quoting.
bool valid_section_name(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

bool known_key(std::string_view key) {
  const auto& keys = job_file_keys();
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

std::string key_list() {
  std::string list;
  for (const std::string& k : job_file_keys()) list += (list.empty() ? "" : ", ") + k;
  return list;
}

// One pass over the lines; the first error stops it.
class Parser {
 public:
  explicit Parser(JobFile* out) : file_(out) {}

  bool line(std::string_view raw, int number) {
    // A job file is text. A NUL byte would cut a value short where it becomes a C string: a
    // directory opened, a number read by strtol ("16<NUL>x" read as 16). Found by fuzzing
    // (tests/fuzz/corpus/gdsio_jobfile/regress-nul-in-value.gdsio).
    if (const size_t nul = raw.find('\0'); nul != std::string_view::npos)
      return fail(number, "a NUL byte at column " + std::to_string(nul + 1) +
                              ": a job file is text");
    const std::string_view text = trim(raw);
    if (text.empty() || text.front() == '#' || text.front() == ';') return true;
    if (text.front() == '[') return section(text, number);
    return setting(text, number);
  }

  bool finish() {
    if (!file_->jobs.empty()) return true;
    return fail(0, "no job section: add one, e.g. [job1] with a directory or filename");
  }

  const std::string& error() const { return error_; }

 private:
  bool fail(int line, const std::string& message) {
    error_ = file_->at(line, message);
    return false;
  }

  bool section(std::string_view text, int number) {
    if (text.back() != ']')
      return fail(number, "malformed section header '" + std::string(text) + "': expected [name]");
    const std::string name(trim(text.substr(1, text.size() - 2)));
    if (name.empty()) return fail(number, "empty section name []");
    if (!valid_section_name(name))
      return fail(number, "section name '" + name +
                              "' may hold only letters, digits, '_', '-' and '.'");
    auto [first, added] = header_lines_.try_emplace(name, number);
    if (!added)
      return fail(number, "[" + name + "] appears twice (first at line " +
                              std::to_string(first->second) + ")");
    if (name == kGlobal) return open_global(number);
    file_->jobs.push_back(JobSection{name, number, {}});
    current_ = &file_->jobs.back();
    return true;
  }

  bool open_global(int number) {
    if (!file_->jobs.empty())
      return fail(number, "[global] must come before the first job ([" +
                              file_->jobs.front().name + "] at line " +
                              std::to_string(file_->jobs.front().line) + ")");
    file_->global = JobSection{std::string(kGlobal), number, {}};
    current_ = &file_->global;
    return true;
  }

  bool setting(std::string_view text, int number) {
    const size_t eq = text.find('=');
    if (eq == std::string_view::npos)
      return fail(number, "expected [section], key=value or a # comment, got '" +
                              std::string(text) + "'");
    const std::string key(trim(text.substr(0, eq)));
    const std::string value(trim(text.substr(eq + 1)));
    if (!current_)
      return fail(number, "'" + std::string(text) +
                              "' comes before any section; start with [global] or a job");
    if (key.empty()) return fail(number, "missing key before '='");
    if (!known_key(key))
      return fail(number, "unknown key '" + key + "' (keys: " + key_list() + ")");
    if (value.empty()) return fail(number, key + " has no value");
    auto [first, added] = current_->settings.try_emplace(key, JobSetting{value, number});
    if (!added)
      return fail(number, key + " set twice in [" + current_->name + "] (first at line " +
                              std::to_string(first->second.line) + ")");
    return true;
  }

  JobFile* file_;
  JobSection* current_ = nullptr;  // stable: jobs grow only when a new section starts
  std::map<std::string, int> header_lines_;
  std::string error_;
};

}  // namespace

const JobSetting* JobFile::find(const JobSection& job, const std::string& key) const {
  for (const JobSection* s : {&job, &global}) {
    auto it = s->settings.find(key);
    if (it != s->settings.end()) return &it->second;
  }
  return nullptr;
}

std::string JobFile::at(int line, const std::string& message) const {
  return path + (line > 0 ? ":" + std::to_string(line) : std::string()) + ": " + message;
}

const std::vector<std::string>& job_file_keys() {
  static const std::vector<std::string> keys = {
      "name",      "xfer_type",  "rw",          "bs",         "size",      "runtime",
      "do_verify", "enable_nvlinks", "numa_node", "gpu_dev_id", "num_threads", "directory",
      "filename"};
  return keys;
}

bool parse_job_file(std::string_view text, const std::string& path, JobFile* out,
                    std::string* error) {
  *out = JobFile{};
  out->path = path;
  Parser parser(out);
  int number = 0;
  for (size_t from = 0; from <= text.size();) {
    const size_t end = std::min(text.find('\n', from), text.size());
    if (!parser.line(text.substr(from, end - from), ++number)) {
      *error = parser.error();
      return false;
    }
    from = end + 1;
  }
  if (!parser.finish()) return *error = parser.error(), false;
  return true;
}

bool load_job_file(const std::string& path, JobFile* out, std::string* error) {
  struct stat st{};
  const int err = ::stat(path.c_str(), &st) != 0 ? errno : S_ISDIR(st.st_mode) ? EISDIR : 0;
  std::ifstream in(path, std::ios::binary);
  if (err != 0 || !in) {
    *error = path + ": cannot read the job file: " + std::strerror(err != 0 ? err : EACCES);
    return false;
  }
  std::stringstream text;
  text << in.rdbuf();
  return parse_job_file(text.str(), path, out, error);
}

}  // namespace gpufile::cli::benchmark
