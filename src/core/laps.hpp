// Milliseconds between the marks of a sequence of steps: where a set-up's time goes (the
// session's open logs each step's cost at INFO). Not for the data path.
#pragma once

#include <chrono>

namespace gpufile {

class Laps {
 public:
  // Milliseconds since the last lap (or since construction), and marks now.
  double lap() {
    const auto now = std::chrono::steady_clock::now();
    const double ms = std::chrono::duration<double, std::milli>(now - mark_).count();
    mark_ = now;
    return ms;
  }
  // Milliseconds since construction.
  double total() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
        .count();
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point mark_ = start_;
};

}  // namespace gpufile
