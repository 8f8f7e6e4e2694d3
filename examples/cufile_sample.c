/*
 * cufile_sample: the classic GPUDirect Storage read, step by step.
 *
 *   cufile_sample FILE SIZE
 *
 * Opens the cuFile driver, opens FILE with O_DIRECT and registers it, allocates SIZE bytes of
 * GPU memory and registers them as a cuFile buffer, reads the first SIZE bytes of the file
 * straight into GPU memory with cuFileRead, then copies them back to the host and compares
 * them with what a plain pread() of the file returns. Everything is undone in reverse order.
 * Exits 0 when the bytes match.
 *
 * It first prints which libcufile answered (the file that defines cuFileDriverOpen). Two
 * libraries are named libcufile.so.0, gpufile's and NVIDIA's, and the first on the search path
 * wins: with CUFILE_SAMPLE_LIBRARY=PATH set, the sample exits 3 at once unless PATH is the one
 * that answered (bench/gpu-run.sh sets it to gpufile's; so does its test, examples/).
 *
 * Plain C that is also valid C++; it builds unchanged against NVIDIA's headers
 * (gcc or g++ -I/usr/local/cuda/include cufile_sample.c -lcufile -lcudart -ldl) and against
 * gpufile's include/cufile.h with the stand-in CUDA headers of tests/support/include.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_DIRECT, RTLD_NEXT, dladdr */
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <cuda_runtime.h>
#include <cufile.h>

static int cufile_failed(const char *what, CUfileError_t status) {
  if (status.err == CU_FILE_SUCCESS) return 0;
  if (status.err == CU_FILE_CUDA_DRIVER_ERROR)
    fprintf(stderr, "cufile_sample: %s failed: CUDA driver error %d\n", what, (int)status.cu_err);
  else
    fprintf(stderr, "cufile_sample: %s failed: %s (%d)\n", what, CUFILE_ERRSTR((int)status.err),
            (int)status.err);
  return 1;
}

static int cuda_failed(const char *what, cudaError_t err) {
  if (err == cudaSuccess) return 0;
  fprintf(stderr, "cufile_sample: %s failed: %s\n", what, cudaGetErrorString(err));
  return 1;
}

/* Which libcufile answered: the first library after this program that defines
 * cuFileDriverOpen, as the dynamic linker bound this program's calls (RTLD_NEXT: the address of
 * the function taken here could be this program's own PLT stub). With CUFILE_SAMPLE_LIBRARY set,
 * anything but that file fails the run. */
static int check_library(void) {
  const char *expected = getenv("CUFILE_SAMPLE_LIBRARY");
  char got[PATH_MAX], want[PATH_MAX];
  void *entry = dlsym(RTLD_NEXT, "cuFileDriverOpen");
  Dl_info info;
  if (!entry || !dladdr(entry, &info) || !info.dli_fname) {
    fprintf(stderr, "cufile_sample: cannot tell which library defines cuFileDriverOpen\n");
    return expected ? 3 : 0;
  }
  if (!realpath(info.dli_fname, got)) snprintf(got, sizeof got, "%s", info.dli_fname);
  printf("cufile_sample: cuFile library %s\n", got);
  if (!expected) return 0;
  if (!realpath(expected, want)) {
    fprintf(stderr, "cufile_sample: CUFILE_SAMPLE_LIBRARY=%s: %s\n", expected, strerror(errno));
    return 3;
  }
  if (strcmp(got, want) == 0) return 0;
  fprintf(stderr,
          "cufile_sample: the wrong libcufile answered: %s, not %s (CUFILE_SAMPLE_LIBRARY); "
          "another libcufile.so.0 comes first on this program's library search path\n",
          got, want);
  return 3;
}

/* The first `size` bytes of the file, read the ordinary way. */
static int read_plain(const char *path, unsigned char *buf, size_t size) {
  size_t done = 0;
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  while (done < size) {
    ssize_t n = pread(fd, buf + done, size - done, (off_t)done);
    if (n <= 0) break;
    done += (size_t)n;
  }
  close(fd);
  return done == size ? 0 : -1;
}

int main(int argc, char **argv) {
  const char *path;
  char *end = NULL;
  size_t size, i;
  int fd, rc = 1;
  CUfileError_t status;
  CUfileDescr_t descr;
  CUfileHandle_t handle = NULL;
  void *dev = NULL;
  unsigned char *got = NULL, *want = NULL;
  ssize_t ret;

  if (argc != 3) {
    fprintf(stderr, "usage: %s FILE SIZE\n", argv[0]);
    return 2;
  }
  path = argv[1];
  size = (size_t)strtoull(argv[2], &end, 0);
  if (!end || *end || size == 0) {
    fprintf(stderr, "cufile_sample: bad size '%s'\n", argv[2]);
    return 2;
  }

  rc = check_library();
  if (rc != 0) return rc;
  rc = 1;

  /* 1. The driver. */
  status = cuFileDriverOpen();
  if (cufile_failed("cuFileDriverOpen", status)) return 1;
  printf("cufile_sample: cuFile driver open\n");

  /* 2. The file, opened for direct IO and registered with cuFile. */
  fd = open(path, O_RDONLY | O_DIRECT);
  if (fd < 0 && errno == EINVAL) {
    /* Some file systems (older tmpfs) refuse O_DIRECT; cuFile copes with buffered files. */
    printf("cufile_sample: %s does not take O_DIRECT, opening it buffered\n", path);
    fd = open(path, O_RDONLY);
  }
  if (fd < 0) {
    fprintf(stderr, "cufile_sample: open %s: %s\n", path, strerror(errno));
    goto close_driver;
  }
  memset(&descr, 0, sizeof descr);
  descr.handle.fd = fd;
  descr.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
  status = cuFileHandleRegister(&handle, &descr);
  if (cufile_failed("cuFileHandleRegister", status)) goto close_file;
  printf("cufile_sample: registered %s (fd %d)\n", path, fd);

  /* 3. GPU memory, filled with a pattern the file is unlikely to have, and registered. */
  if (cuda_failed("cudaMalloc", cudaMalloc((void **)&dev, size))) goto deregister_handle;
  if (cuda_failed("cudaMemset", cudaMemset(dev, 0xab, size))) goto free_dev;
  if (cuda_failed("cudaDeviceSynchronize", cudaDeviceSynchronize())) goto free_dev;
  status = cuFileBufRegister(dev, size, 0);
  if (cufile_failed("cuFileBufRegister", status)) goto free_dev;
  printf("cufile_sample: registered %zu bytes of GPU memory\n", size);

  /* 4. Storage to GPU memory. */
  ret = cuFileRead(handle, dev, size, 0, 0);
  if (ret < 0) {
    if (ret == -1 && IS_CUFILE_ERR(errno)) /* what libcufile really does: code in errno */
      fprintf(stderr, "cufile_sample: cuFileRead failed: %s (%d)\n", CUFILE_ERRSTR(errno), errno);
    else if (ret == -1)
      fprintf(stderr, "cufile_sample: cuFileRead failed: %s\n", strerror(errno));
    else
      fprintf(stderr, "cufile_sample: cuFileRead failed: %s (%d)\n", CUFILE_ERRSTR((int)-ret),
              (int)-ret);
    goto deregister_buf;
  }
  if ((size_t)ret != size) {
    fprintf(stderr, "cufile_sample: cuFileRead read %zd of %zu bytes\n", ret, size);
    goto deregister_buf;
  }
  printf("cufile_sample: cuFileRead read %zd bytes into GPU memory\n", ret);

  /* 5. Check: the GPU's bytes against an ordinary read of the file. */
  got = (unsigned char *)malloc(size);
  want = (unsigned char *)malloc(size);
  if (!got || !want) {
    fprintf(stderr, "cufile_sample: out of host memory\n");
    goto deregister_buf;
  }
  if (cuda_failed("cudaMemcpy", cudaMemcpy(got, dev, size, cudaMemcpyDeviceToHost)))
    goto deregister_buf;
  if (read_plain(path, want, size) != 0) {
    fprintf(stderr, "cufile_sample: pread of %s failed\n", path);
    goto deregister_buf;
  }
  for (i = 0; i < size && got[i] == want[i]; ++i) {
  }
  if (i != size) {
    fprintf(stderr, "cufile_sample: data differs at byte %zu: GPU has 0x%02x, file has 0x%02x\n",
            i, got[i], want[i]);
    goto deregister_buf;
  }
  printf("cufile_sample: all %zu bytes match the file\n", size);
  rc = 0;

  /* 6. Undo everything, in reverse order. */
deregister_buf:
  status = cuFileBufDeregister(dev);
  if (cufile_failed("cuFileBufDeregister", status)) rc = 1;
free_dev:
  if (cuda_failed("cudaFree", cudaFree(dev))) rc = 1;
deregister_handle:
  cuFileHandleDeregister(handle);
close_file:
  close(fd);
close_driver:
  status = cuFileDriverClose();
  if (cufile_failed("cuFileDriverClose", status)) rc = 1;
  free(got);
  free(want);
  if (rc == 0) printf("cufile_sample: done\n");
  return rc;
}
