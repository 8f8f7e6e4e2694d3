// `gpufile check FILE`: which path reads of FILE would take, and why. No path is silent.
// `gpufile check URL`: a remote object opened as a read opens it, and how its reads travel.
#include <cufile.h>
#include <fcntl.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "api/remote_file.hpp"
#include "cli/commands.hpp"
#include "core/redact.hpp"
#include "cuda/driver.hpp"
#include "exec/runtime.hpp"

namespace gpufile::cli {
namespace {

const char* fs_name(long type) {
  switch (static_cast<unsigned long>(type)) {
    case 0xEF53: return "ext4";
    case 0x58465342: return "xfs";
    case 0x01021994: return "tmpfs";
    case 0x9123683E: return "btrfs";
    case 0x6969: return "nfs";
    case 0x794c7630: return "overlayfs";
    case 0x65735546: return "fuse";
    case 0x0BD00BD0: return "lustre";
    default: return "other";
  }
}

// The URL is shown as core/redact.hpp allows, and so is any failure (they name it).
int check_remote(const char* url) {
  std::unique_ptr<api::RemoteFile> f;
  if (remote::Failure why = api::RemoteFile::open(url, &f); !why.ok())
    return std::fprintf(stderr, "%s\n", redact_text(why.message).c_str()), 1;
  remote::Options o;
  Runtime::instance().remote_options(&o);
  std::printf("object      %s (%llu bytes, ETag %s)\n", redact_url(url).c_str(),
              static_cast<unsigned long long>(f->size()), f->etag().empty() ? "none" : f->etag().c_str());
  std::printf("large reads remote: ranged GETs of %llu KiB, %u in flight, %u tries each at most;\n"
              "            into GPU memory through pinned staging, into host memory in place\n",
              static_cast<unsigned long long>(o.part_bytes >> 10), o.concurrency, o.retries + 1);
  std::printf("GPU         %s\n", cuda::driver() ? "yes" : cuda::why_no_driver().c_str());
  return 0;
}

// How large the pieces are that reads into GPU memory move, and why: staged out of the page
// cache (smaller where other GPUs share the host) and read with O_DIRECT.
void print_pieces(const Runtime::FileReport& r) {
  const auto kib = [](uint64_t b) { return static_cast<unsigned long long>(b >> 10); };
  if (r.shared_piece > 0)
    std::printf("pieces      page cache to GPU: %llu KiB, not a %llu KiB slab (the staging of %u "
                "process(es) on this host kept within a third of its %llu MiB last-level cache)\n",
                kib(r.shared_piece), kib(r.slab), r.staging_processes,
                static_cast<unsigned long long>(r.last_level_cache >> 20));
  else
    std::printf("pieces      page cache to GPU: up to a %llu KiB slab (%s)\n", kib(r.slab),
                r.staging_processes == 0 ? "no other GPU's staging known to share this host"
                                         : "the share of the last-level cache is no smaller, or its size is unknown");
  std::printf("            O_DIRECT to GPU: %llu KiB, %u in flight (gpufile.cold_piece_kb; the workers' "
              "slabs)\n", kib(r.direct_piece), r.direct_in_flight);
}

}  // namespace

int check(int argc, char** argv) {
  if (argc != 2) return std::fprintf(stderr, "usage: gpufile check FILE|URL\n"), 2;
  const char* path = argv[1];
  if (remote::is_remote(path)) return check_remote(path);
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::perror(path), 1;
  struct statfs sf {};
  fstatfs(fd, &sf);
  CUfileDescr_t d{};
  d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
  d.handle.fd = fd;
  CUfileHandle_t h = nullptr;
  CUfileError_t e = cuFileHandleRegister(&h, &d);
  if (e.err != CU_FILE_SUCCESS) {
    std::printf("%s: cannot be registered: %s (%d)\n", path, CUFILE_ERRSTR(e.err), e.err);
    ::close(fd);
    return 1;
  }
  Runtime::FileReport r;
  Runtime::instance().explain_file(h, &r);
  std::printf("file        %s (%llu bytes, %s)\n", path, static_cast<unsigned long long>(r.size),
              fs_name(sf.f_type));
  std::printf("O_DIRECT    %s", r.direct_capable ? "yes" : "no (this file system refuses it)");
  if (r.direct_capable) std::printf(", alignment: memory %u, offset %u", r.align.mem, r.align.offset);
  std::printf("\n");
  if (r.cachestat_ok)
    std::printf("page cache  %llu of %llu pages resident\n",
                static_cast<unsigned long long>(r.resident.cached_pages),
                static_cast<unsigned long long>(r.resident.total_pages));
  else
    std::printf("page cache  unknown (kernel without cachestat)\n");
  std::printf("cache miss  %s\n            why: %s\n",
              r.cache.keep ? "brought into the page cache in folios of up to 2 MiB, read from there, "
                             "left cached for the next reader"
                           : "read with O_DIRECT, past the page cache",
              route::describe(r.cache.why));
  if (r.cache_room)
    std::printf("            file %.2f GiB; the page cache can hold %.2f GiB\n",
                static_cast<double>(r.size) / (1 << 30), static_cast<double>(*r.cache_room) / (1 << 30));
  std::printf("engine      %s%s%s\n", Runtime::instance().engine_name().c_str(),
              Runtime::instance().engine_note().empty() ? "" : ": ",
              Runtime::instance().engine_note().c_str());
  const std::vector<std::string> placement = Runtime::instance().placement();
  for (size_t i = 0; i < placement.size(); ++i)
    std::printf("%s %s\n", i == 0 ? "placement  " : "           ", placement[i].c_str());
  std::printf("GPU         %s\n", cuda::driver() ? "yes" : cuda::why_no_driver().c_str());
  if (const cuda::Driver* d = cuda::driver()) {
    for (int gpu = 0; gpu < d->device_count; ++gpu) {
      size_t kb = 0;
      cuFileGetBARSizeInKB(gpu, &kb);
      std::printf("BAR1        GPU %d: %zu MiB%s\n", gpu, kb / 1024, kb ? "" : " (neither NVML nor sysfs says)");
    }
  }
  std::printf("NVIDIA      %s\n", r.vendor_state.c_str());
  if (!r.vendor_refusal.empty()) std::printf("            this file: %s\n", r.vendor_refusal.c_str());
  const char* path_taken =
      r.vendor.use ? "vendor direct: NVIDIA's cuFileRead, storage DMA straight into GPU memory"
      : r.read.direct ? "staged direct: O_DIRECT into pinned slabs, async copy to the GPU"
      : r.copies_from_cache
          ? "page cache DMA: the copy engine reads the cached pages, registered in 64 MiB windows"
          : "page cache: buffered reads into pinned slabs, async copy to the GPU";
  std::printf("large reads %s\n            why: %s\n", path_taken,
              route::describe(r.vendor.use ? r.vendor.why : r.read.why));
  if (!r.vendor.use) std::printf("            not NVIDIA's: %s\n", route::describe(r.vendor.why));
  if (r.cache_dma_budget == 0)
    std::printf("page-cache DMA off (gpufile.pagecache_dma_mb is 0, no GPU, or no inotify)\n");
  else
    std::printf("page-cache DMA up to %llu MiB registered at once\n",
                static_cast<unsigned long long>(r.cache_dma_budget >> 20));
  if (r.cache_dma_budget > 0) {
    if (r.long_read_windows_from > 0)
      std::printf("            reads of %llu MiB or more make the windows of bytes read before "
                  "(several GPUs share this host: %s)\n",
                  static_cast<unsigned long long>(r.long_read_windows_from >> 20),
                  r.sharing_why.c_str());
    else if (r.gpus_share_host)
      std::printf("            only reads of up to four slabs make windows "
                  "(gpufile.pagecache_dma_long_read_mb is 0)\n");
    else
      std::printf("            only reads of up to four slabs make windows (one GPU alone on "
                  "this host, its link takes staged bytes: %s)\n", r.sharing_why.c_str());
  }
  print_pieces(r);
  cuFileHandleDeregister(h);
  ::close(fd);
  return 0;
}

}  // namespace gpufile::cli
