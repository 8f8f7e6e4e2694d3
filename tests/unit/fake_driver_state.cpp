// Test double of the driver session (exec/driver_state.hpp) and of the CUDA driver loader
// (cuda/driver.hpp), linked only into capi_unit_tests, so that the cuFile parameter and stats
// entry points can be tested with the driver "open" or "closed" without the runtime or a GPU.
#include <mutex>

#include "cuda/driver.hpp"
#include "exec/driver_state.hpp"

namespace gpufile {
namespace fake {

namespace {
struct Session {
  std::mutex mu;
  bool open = false;
  Settings settings;
};
Session& session() {
  static Session s;
  return s;
}
int g_gpus = 0;
}  // namespace

// Opens (with these settings) or closes the fake session.
void set_driver_open(bool open, const Settings& s) {
  std::lock_guard lock(session().mu);
  session().open = open;
  session().settings = s;
}

Settings open_settings() {
  std::lock_guard lock(session().mu);
  return session().settings;
}

// How many GPUs the fake CUDA driver lists (0: no driver at all).
void set_gpu_count(int n) { g_gpus = n; }

}  // namespace fake

bool driver_is_open() {
  std::lock_guard lock(fake::session().mu);
  return fake::session().open;
}

bool with_open_settings(const std::function<void(Settings&)>& fn) {
  std::lock_guard lock(fake::session().mu);
  if (!fake::session().open) return false;
  fn(fake::session().settings);
  return true;
}

namespace cuda {

// Device i has the UUID whose bytes are all i + 1.
const Driver* driver() {
  static Driver d = [] {
    Driver x{};
    x.DeviceGet = [](CUdevice* dev, int ordinal) {
      *dev = ordinal;
      return CUDA_SUCCESS;
    };
    x.DeviceGetUuid = [](CUuuid* uuid, CUdevice dev) {
      for (char& b : uuid->bytes) b = static_cast<char>(dev + 1);
      return CUDA_SUCCESS;
    };
    return x;
  }();
  if (fake::g_gpus == 0) return nullptr;
  d.device_count = fake::g_gpus;
  return &d;
}

}  // namespace cuda
}  // namespace gpufile
