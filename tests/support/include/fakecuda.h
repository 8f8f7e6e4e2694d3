/*
 * Test controls of the CUDA driver double (tests/support/fakecuda, built as libcuda.so.1).
 *
 * The double exports these next to the driver API. A test that links the `fakecuda` CMake
 * target can call them directly; a test that only loads the driver at run time (as gpufile
 * does) can look them up with fakecuda_symbol() below, which finds the same loaded instance.
 * On a real driver none of them exist: fakecuda_symbol() then returns NULL, and tests that
 * need them should skip.
 *
 * Fault rules: a rule makes one named driver function (its exported symbol name, e.g.
 * "cuMemHostAlloc" or "cuMemcpyHtoDAsync_v2"; a name without its "_v2" suffix also matches)
 * return `result` instead of doing anything. Each rule counts the calls of its function from
 * the moment it was armed. Rules also come from the environment variable FAKECUDA_FAIL, armed
 * at the first driver call: "name:N:result" fails the N-th call, "name:N+:result" the N-th and
 * every later one, "name:*:result" every call; several rules are separated by commas.
 */
#ifndef GPUFILE_TESTS_FAKECUDA_H
#define GPUFILE_TESTS_FAKECUDA_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes currently held by the program, by kind (requested sizes, not page-rounded). */
size_t fakecuda_live_pinned_bytes(void);     /* cuMemHostAlloc / cuMemAllocHost, not yet freed */
size_t fakecuda_live_registered_bytes(void); /* cuMemHostRegister, not yet unregistered */
size_t fakecuda_live_device_bytes(void);     /* cuMemAlloc, not yet freed */
size_t fakecuda_live_managed_bytes(void);    /* cuMemAllocManaged, not yet freed */
int fakecuda_live_streams(void);             /* created and not destroyed */
int fakecuda_live_events(void);              /* created and not destroyed */
/* Reference count of a device's primary context (-1 for a bad ordinal). */
int fakecuda_primary_ctx_refcount(int device);
/* Every retain of a device's primary context since the process started, released or not (a
 * borrowed context given back still cost its creation); -1 for a bad ordinal. */
int fakecuda_primary_ctx_retains(int device);

/* Makes the nth call (1 = the next one) of `name` from now return `result`; nth == 0 makes
 * every call from now on fail. Returns 0, or -1 when the name is not a driver function of
 * the double or nth < 0. */
int fakecuda_fail_call(const char *name, int nth, int result);
/* Makes the nth call from now and every later one return `result`. */
int fakecuda_fail_call_from(const char *name, int nth, int result);
/* Drops every fault rule (those from FAKECUDA_FAIL too) and clears a sticky error. */
void fakecuda_reset_faults(void);
/* Calls of a driver function since the library was loaded (0 for an unknown name). */
unsigned long long fakecuda_call_count(const char *name);

/* Sleep before each queued stream operation (copy, memset, host function), in microseconds.
 * Starts at $FAKECUDA_ASYNC_DELAY_US (default 0). */
void fakecuda_set_async_delay_us(unsigned microseconds);
/* The sticky error (CUDA_ERROR_ILLEGAL_ADDRESS) set when queued work found its memory freed
 * under it, or 0. While set, calls that need a context and synchronisations return it. */
int fakecuda_sticky_error(void);

/* The double's own export for the name, or NULL when the loaded driver is not the double.
 * Loads the driver the way gpufile does ($GPUFILE_CUDA_LIBRARY, else libcuda.so.1); when it
 * is already loaded, this is the same instance. */
static inline void *fakecuda_symbol(const char *name) {
  const char *path = getenv("GPUFILE_CUDA_LIBRARY");
  void *lib = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  return lib ? dlsym(lib, name) : NULL;
}

/* FAKECUDA_FN(fakecuda_live_pinned_bytes) is a typed pointer to that function, or NULL. */
#define FAKECUDA_FN(name) ((__typeof__(&name))fakecuda_symbol(#name))

#ifdef __cplusplus
}
#endif

#endif /* GPUFILE_TESTS_FAKECUDA_H */
