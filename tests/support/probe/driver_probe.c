/*
 * driver_probe: prints how a CUDA driver answers the calls gpufile makes, including the odd
 * cases (no current context, unknown and freed pointers, out-of-range copies, implicit
 * synchronisation). Built against the real <cuda.h> and run on a GPU machine it records what
 * the real driver does; built against tests/support/include and run with the test double it
 * shows where the double differs. Each section runs in its own process:
 *
 *   driver_probe SECTION      (SECTION: preinit basic ctxlife noctx attrs memops copies streams hostfn)
 *   driver_probe              (all sections, each in a child process)
 *
 *   gcc -O1 -I<cuda include dir> driver_probe.c -o driver_probe -ldl -lpthread   (libcuda via dlopen)
 * The driver is loaded with dlopen from $GPUFILE_CUDA_LIBRARY, else libcuda.so.1.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void *lib;
static void *sym(const char *name) {
  void *p = dlsym(lib, name);
  if (!p) {
    printf("MISSING SYMBOL %s\n", name);
    fflush(stdout);
    exit(2);
  }
  return p;
}
#define FN(name) ((__typeof__(&name))sym(#name))
/* The aliases in cuda.h turn e.g. cuMemAlloc into cuMemAlloc_v2 before FN stringises it. */
#define CALL(name, ...) FN(name)(__VA_ARGS__)

#define P(...) (printf(__VA_ARGS__), fflush(stdout))
#define R(label, expr) P("%-44s %d\n", label, (int)(expr))

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void sleeper(void *arg) { usleep((useconds_t)(uintptr_t)arg); }

static CUcontext ctx0;
static void init_ctx(void) {
  CUresult r = CALL(cuInit, 0);
  if (r) { P("cuInit failed %d\n", r); exit(3); }
  CALL(cuDevicePrimaryCtxRetain, &ctx0, 0);
  CALL(cuCtxSetCurrent, ctx0);
}

/* ---------------------------------------------------------------------------------------- */
static void s_preinit(void) {
  int v = -1, n = -1;
  CUdeviceptr d = 0;
  CUcontext c = (CUcontext)0x1;
  const char *s = NULL;
  R("preinit cuDriverGetVersion", CALL(cuDriverGetVersion, &v));
  P("preinit version>=12000 %d\n", v >= 12000);
  R("preinit cuDeviceGetCount", CALL(cuDeviceGetCount, &n));
  R("preinit cuGetErrorName(1)", CALL(cuGetErrorName, CUDA_ERROR_INVALID_VALUE, &s));
  P("preinit name %s\n", s ? s : "(null)");
  R("preinit cuMemAlloc", CALL(cuMemAlloc, &d, 16));
  R("preinit cuCtxGetCurrent", CALL(cuCtxGetCurrent, &c));
  R("preinit cuInit(1)", CALL(cuInit, 1));
  R("preinit cuInit(0)", CALL(cuInit, 0));
  R("preinit cuInit(0) again", CALL(cuInit, 0));
}

static void s_basic(void) {
  int n = 0, v = 0, i;
  char name[64];
  CUuuid u;
  CUdevice dev = -1;
  CUcontext c = (CUcontext)0x1, c2 = NULL;
  unsigned flags = 99;
  int active = 99;
  const char *s = (const char *)0x1;
  CALL(cuInit, 0);
  R("basic cuDeviceGetCount", CALL(cuDeviceGetCount, &n));
  R("basic cuDeviceGet(0)", CALL(cuDeviceGet, &dev, 0));
  P("basic dev0 %d\n", dev);
  R("basic cuDeviceGet(count)", CALL(cuDeviceGet, &dev, n));
  R("basic cuDeviceGet(-1)", CALL(cuDeviceGet, &dev, -1));
  R("basic cuDeviceGetName", CALL(cuDeviceGetName, name, (int)sizeof name, 0));
  /* cuDeviceGetName with len 0 crashes the real driver (580): not probed. */
  R("basic cuDeviceGetName bad dev", CALL(cuDeviceGetName, name, (int)sizeof name, n));
  R("basic cuDeviceGetUuid", CALL(cuDeviceGetUuid, &u, 0));
  R("basic cuDeviceGetAttribute(33)", CALL(cuDeviceGetAttribute, &v, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0));
  R("basic cuDeviceGetAttribute(0)", CALL(cuDeviceGetAttribute, &v, (CUdevice_attribute)0, 0));
  R("basic cuDeviceGetAttribute(9999)", CALL(cuDeviceGetAttribute, &v, (CUdevice_attribute)9999, 0));
  R("basic cuDeviceGetAttribute bad dev", CALL(cuDeviceGetAttribute, &v, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, n));
  {
    static const int attrs[] = {18, 19, 41, 75, 83, 89, 116};
    for (i = 0; i < (int)(sizeof attrs / sizeof attrs[0]); i++) {
      v = -7;
      CUresult r = CALL(cuDeviceGetAttribute, &v, (CUdevice_attribute)attrs[i], 0);
      P("basic attribute %d -> r=%d v=%d\n", attrs[i], r, v);
    }
  }
  R("basic cuCtxGetCurrent", CALL(cuCtxGetCurrent, &c));
  P("basic current is null %d\n", c == NULL);
  R("basic cuCtxGetDevice no ctx", CALL(cuCtxGetDevice, &dev));
  R("basic cuCtxSynchronize no ctx", CALL(cuCtxSynchronize));
  R("basic PrimaryCtxGetState", CALL(cuDevicePrimaryCtxGetState, 0, &flags, &active));
  P("basic state before retain flags=%u active=%d\n", flags, active);
  R("basic PrimaryCtxRetain", CALL(cuDevicePrimaryCtxRetain, &c, 0));
  R("basic PrimaryCtxRetain again", CALL(cuDevicePrimaryCtxRetain, &c2, 0));
  P("basic same handle %d\n", c == c2);
  R("basic PrimaryCtxRetain bad dev", CALL(cuDevicePrimaryCtxRetain, &c2, n));
  R("basic PrimaryCtxGetState", CALL(cuDevicePrimaryCtxGetState, 0, &flags, &active));
  P("basic state after retain active=%d\n", active);
  R("basic cuCtxGetCurrent after retain", CALL(cuCtxGetCurrent, &c2));
  P("basic retain does not make current %d\n", c2 == NULL);
  R("basic cuCtxSetCurrent", CALL(cuCtxSetCurrent, c));
  R("basic cuCtxGetDevice", CALL(cuCtxGetDevice, &dev));
  R("basic cuCtxSetCurrent(NULL)", CALL(cuCtxSetCurrent, NULL));
  R("basic cuCtxPushCurrent", CALL(cuCtxPushCurrent, c));
  R("basic cuCtxPopCurrent", CALL(cuCtxPopCurrent, &c2));
  P("basic popped same %d\n", c == c2);
  R("basic cuCtxPopCurrent empty", CALL(cuCtxPopCurrent, &c2));
  R("basic release 1", CALL(cuDevicePrimaryCtxRelease, 0));
  R("basic release 2", CALL(cuDevicePrimaryCtxRelease, 0));
  R("basic release 3 (over)", CALL(cuDevicePrimaryCtxRelease, 0));
  R("basic release bad dev", CALL(cuDevicePrimaryCtxRelease, n));
  R("basic cuGetErrorName(9999)", CALL(cuGetErrorName, (CUresult)9999, &s));
  P("basic name(9999) null %d\n", s == NULL);
  s = NULL;
  R("basic cuGetErrorString(600)", CALL(cuGetErrorString, CUDA_ERROR_NOT_READY, &s));
  R("basic cuGetErrorName(0)", CALL(cuGetErrorName, CUDA_SUCCESS, &s));
  P("basic name(0) %s\n", s);
  {
    static const int codes[] = {0, 1, 2, 3, 4, 34, 46, 100, 101, 201, 400, 600, 700, 709, 712, 713, 800, 801, 999};
    for (i = 0; i < (int)(sizeof codes / sizeof codes[0]); i++) {
      s = NULL;
      CUresult r = CALL(cuGetErrorName, (CUresult)codes[i], &s);
      P("basic errname %d -> r=%d %s\n", codes[i], r, s ? s : "(null)");
    }
  }
}

static void s_ctxlife(void) {
  CUcontext c = NULL, c2 = NULL;
  CUdeviceptr d = 0;
  unsigned flags;
  int active = -1;
  CALL(cuInit, 0);
  CALL(cuDevicePrimaryCtxRetain, &c, 0);
  CALL(cuCtxSetCurrent, c);
  R("ctxlife alloc", CALL(cuMemAlloc, &d, 4096));
  R("ctxlife release to zero", CALL(cuDevicePrimaryCtxRelease, 0));
  R("ctxlife GetState", CALL(cuDevicePrimaryCtxGetState, 0, &flags, &active));
  P("ctxlife active after release %d\n", active);
  R("ctxlife cuCtxGetCurrent", CALL(cuCtxGetCurrent, &c2));
  P("ctxlife current still same %d\n", c2 == c);
  R("ctxlife cuMemAlloc after release", CALL(cuMemAlloc, &d, 4096));
  R("ctxlife cuCtxGetDevice after release", CALL(cuCtxGetDevice, &active));
  R("ctxlife cuCtxSynchronize after release", CALL(cuCtxSynchronize));
  R("ctxlife retain again", CALL(cuDevicePrimaryCtxRetain, &c2, 0));
  P("ctxlife retain gives same handle %d\n", c2 == c);
  R("ctxlife cuMemAlloc after re-retain", CALL(cuMemAlloc, &d, 4096));
  R("ctxlife cuMemFree", CALL(cuMemFree, d));
}

/* ---------------------------------------------------------------------------------------- */
static void s_noctx(void) {
  CUdeviceptr d = 0, d2 = 0, x = 0;
  void *p = NULL, *p2 = NULL, *h = malloc(1 << 20), *hr = NULL;
  CUstream s = NULL, s2 = NULL, s3 = NULL;
  CUevent e = NULL, e2 = NULL, e3 = NULL;
  size_t fr, tot;
  unsigned mt = 0;
  CUpointer_attribute a = CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
  void *data = &mt;
  CUdevice dev;
  init_ctx();
  CALL(cuMemAlloc, &d, 1 << 20);
  CALL(cuMemAlloc, &d2, 1 << 20);
  CALL(cuMemHostAlloc, &p, 1 << 20, 0);
  CALL(cuMemHostAlloc, &p2, 1 << 20, 0);
  CALL(cuStreamCreate, &s, 0);
  CALL(cuStreamCreate, &s2, 0);
  CALL(cuEventCreate, &e, 0);
  CALL(cuEventCreate, &e2, 0);
  posix_memalign(&hr, 4096, 1 << 20);
  CALL(cuCtxSetCurrent, NULL);
  R("noctx cuMemAlloc", CALL(cuMemAlloc, &x, 4096));
  R("noctx cuMemAllocManaged", CALL(cuMemAllocManaged, &x, 4096, CU_MEM_ATTACH_GLOBAL));
  R("noctx cuMemHostAlloc", CALL(cuMemHostAlloc, &hr, 4096, 0));
  R("noctx cuMemHostRegister", CALL(cuMemHostRegister, hr, 1 << 20, 0));
  R("noctx cuMemHostUnregister", CALL(cuMemHostUnregister, hr));
  R("noctx cuMemcpyHtoD", CALL(cuMemcpyHtoD, d, h, 4096));
  R("noctx cuMemcpyDtoH", CALL(cuMemcpyDtoH, h, d, 4096));
  R("noctx cuMemcpy", CALL(cuMemcpy, d, (CUdeviceptr)h, 4096));
  R("noctx cuMemcpyHtoDAsync(s)", CALL(cuMemcpyHtoDAsync, d, p, 4096, s));
  R("noctx cuMemcpyDtoHAsync(s)", CALL(cuMemcpyDtoHAsync, p, d, 4096, s));
  R("noctx cuMemcpyHtoDAsync(0)", CALL(cuMemcpyHtoDAsync, d, p, 4096, NULL));
  R("noctx cuMemcpyAsync(s)", CALL(cuMemcpyAsync, d, (CUdeviceptr)p, 4096, s));
  R("noctx cuMemsetD8", CALL(cuMemsetD8, d, 0, 4096));
  R("noctx cuStreamCreate", CALL(cuStreamCreate, &s3, 0));
  R("noctx cuStreamQuery(s)", CALL(cuStreamQuery, s));
  R("noctx cuStreamQuery(0)", CALL(cuStreamQuery, NULL));
  R("noctx cuStreamSynchronize(s)", CALL(cuStreamSynchronize, s));
  R("noctx cuStreamSynchronize(0)", CALL(cuStreamSynchronize, NULL));
  R("noctx cuEventCreate", CALL(cuEventCreate, &e3, 0));
  R("noctx cuEventRecord(e,s)", CALL(cuEventRecord, e, s));
  R("noctx cuEventRecord(e,0)", CALL(cuEventRecord, e, NULL));
  R("noctx cuEventQuery", CALL(cuEventQuery, e));
  R("noctx cuEventSynchronize", CALL(cuEventSynchronize, e));
  R("noctx cuLaunchHostFunc(s)", CALL(cuLaunchHostFunc, s, sleeper, (void *)1));
  R("noctx cuLaunchHostFunc(0)", CALL(cuLaunchHostFunc, NULL, sleeper, (void *)1));
  R("noctx cuCtxSynchronize", CALL(cuCtxSynchronize));
  R("noctx cuCtxGetDevice", CALL(cuCtxGetDevice, &dev));
  R("noctx cuMemGetInfo", CALL(cuMemGetInfo, &fr, &tot));
  R("noctx cuDeviceTotalMem", CALL(cuDeviceTotalMem, &tot, 0));
  R("noctx cuPointerGetAttributes", CALL(cuPointerGetAttributes, 1, &a, &data, d));
  P("noctx memory type of device ptr %u\n", mt);
  R("noctx cuEventDestroy", CALL(cuEventDestroy, e2));
  R("noctx cuStreamDestroy", CALL(cuStreamDestroy, s2));
  R("noctx cuMemFreeHost", CALL(cuMemFreeHost, p2));
  R("noctx cuMemFree", CALL(cuMemFree, d2));
  CALL(cuCtxSetCurrent, ctx0);
}

/* ---------------------------------------------------------------------------------------- */
static unsigned long long readle(const unsigned char *b, int n) {
  unsigned long long v = 0;
  int i;
  for (i = n - 1; i >= 0; i--) v = (v << 8) | b[i];
  return v;
}

static void attr_case(const char *what, CUdeviceptr ptr, CUdeviceptr base) {
  int a;
  for (a = 1; a <= 20; a++) {
    unsigned char b1[32], b2[32];
    CUpointer_attribute at = (CUpointer_attribute)a;
    void *d1 = b1, *d2 = b2;
    CUresult r1, r2;
    int n = 0, i;
    memset(b1, 0xA5, sizeof b1);
    memset(b2, 0x5A, sizeof b2);
    r1 = CALL(cuPointerGetAttributes, 1, &at, &d1, ptr);
    r2 = CALL(cuPointerGetAttributes, 1, &at, &d2, ptr);
    for (i = 0; i < 32; i++)
      if (b1[i] != 0xA5 || b2[i] != 0x5A) n = i + 1;
    {
      unsigned long long v = readle(b1, n > 8 ? 8 : n);
      char val[64];
      if (n == 0) snprintf(val, sizeof val, "-");
      else if (a == 1) snprintf(val, sizeof val, "%s", v == 0 ? "null" : v == (unsigned long long)(uintptr_t)ctx0 ? "ctx" : "other");
      else if (a == 3 || a == 4 || a == 11 || a == 19)
        snprintf(val, sizeof val, "%s", v == 0 ? "0" : v == ptr ? "ptr" : v == base ? "base" : "other");
      else if (a == 7 || a == 20 || a == 17) snprintf(val, sizeof val, "%s", v == 0 ? "0" : "nonzero");
      else snprintf(val, sizeof val, "%llu", n >= 8 ? v : (unsigned long long)(long long)(int)v);
      if (a == 9 && n == 4) snprintf(val, sizeof val, "%d", (int)v);
      P("attrs %-22s attr %2d r=%d/%d bytes=%d value=%s\n", what, a, r1, r2, n, val);
    }
  }
}

static void s_attrs(void) {
  CUdeviceptr d = 0, m = 0, f = 0;
  void *p = NULL, *r = NULL, *h = malloc(4096), *fp = NULL;
  int stackvar = 0;
  const size_t D = (1 << 20) + 100;
  init_ctx();
  CALL(cuMemAlloc, &d, D);
  CALL(cuMemAllocManaged, &m, 1 << 20, CU_MEM_ATTACH_GLOBAL);
  CALL(cuMemHostAlloc, &p, 1 << 20, 0);
  posix_memalign(&r, 4096, 2 << 20);
  R("attrs register", CALL(cuMemHostRegister, r, 1 << 20, 0));
  CALL(cuMemAlloc, &f, 4096);
  CALL(cuMemFree, f);
  CALL(cuMemHostAlloc, &fp, 4096, 0);
  CALL(cuMemFreeHost, fp);
  attr_case("device", d, d);
  attr_case("device+100", d + 100, d);
  attr_case("device+size-1", d + D - 1, d);
  attr_case("device+size", d + D, d);
  attr_case("managed", m, m);
  attr_case("managed+100", m + 100, m);
  attr_case("pinned", (CUdeviceptr)p, (CUdeviceptr)p);
  attr_case("pinned+100", (CUdeviceptr)p + 100, (CUdeviceptr)p);
  attr_case("registered", (CUdeviceptr)r, (CUdeviceptr)r);
  attr_case("registered+100", (CUdeviceptr)r + 100, (CUdeviceptr)r);
  attr_case("registered+1M (past)", (CUdeviceptr)r + (1 << 20), (CUdeviceptr)r);
  attr_case("malloc", (CUdeviceptr)h, (CUdeviceptr)h);
  attr_case("stack", (CUdeviceptr)&stackvar, (CUdeviceptr)&stackvar);
  attr_case("null", 0, 0);
  attr_case("garbage", 0x1234, 0x1234);
  attr_case("freed device", f, f);
  attr_case("freed pinned", (CUdeviceptr)fp, (CUdeviceptr)fp);
  {
    CUpointer_attribute at[6] = {CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    CUcontext c;
    unsigned mt;
    int ism, ord;
    CUdeviceptr st;
    size_t sz;
    void *data[6] = {&c, &mt, &ism, &ord, &st, &sz};
    c = (CUcontext)1; mt = 77; ism = 77; ord = 77; st = 77; sz = 77;
    R("attrs six on malloc", CALL(cuPointerGetAttributes, 6, at, data, (CUdeviceptr)h));
    P("attrs six on malloc: ctx null %d mt %u managed %d ord %d start %llu size %zu\n", c == NULL, mt, ism, ord, st, sz);
    R("attrs six on device", CALL(cuPointerGetAttributes, 6, at, data, d + 5));
    P("attrs six on device: ctx %d mt %u managed %d ord %d start-base %lld size %zu\n", c == ctx0, mt, ism, ord, (long long)(st - d), sz);
    R("attrs num=0", CALL(cuPointerGetAttributes, 0, at, data, d));
    R("attrs attrs=NULL", CALL(cuPointerGetAttributes, 1, NULL, data, d));
    R("attrs data=NULL", CALL(cuPointerGetAttributes, 1, at, NULL, d));
  }
  {
    unsigned mt = 0;
    CUdeviceptr st = 0;
    size_t sz = 0;
    R("attrs single MEMORY_TYPE malloc", CALL(cuPointerGetAttribute, &mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)h));
    R("attrs single MEMORY_TYPE device", CALL(cuPointerGetAttribute, &mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d));
    R("attrs single MEMORY_TYPE freed", CALL(cuPointerGetAttribute, &mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, f));
    R("attrs single HOST_POINTER device", CALL(cuPointerGetAttribute, &st, CU_POINTER_ATTRIBUTE_HOST_POINTER, d));
    R("attrs GetAddressRange interior", CALL(cuMemGetAddressRange, &st, &sz, d + 7));
    P("attrs range base ok %d size %zu\n", st == d, sz);
    R("attrs GetAddressRange malloc", CALL(cuMemGetAddressRange, &st, &sz, (CUdeviceptr)h));
    R("attrs GetAddressRange pinned", CALL(cuMemGetAddressRange, &st, &sz, (CUdeviceptr)p));
  }
}

/* ---------------------------------------------------------------------------------------- */
static void s_memops(void) {
  CUdeviceptr d = 0, x = 0;
  void *p = NULL, *h = malloc(8192), *r = NULL, *q = NULL;
  init_ctx();
  R("memops cuMemAlloc(0)", CALL(cuMemAlloc, &x, 0));
  R("memops cuMemAlloc(1)", CALL(cuMemAlloc, &x, 1));
  P("memops alloc(1) aligned256 %d aligned4096 %d\n", (int)(x % 256 == 0), (int)(x % 4096 == 0));
  R("memops cuMemAlloc(1<<20)", CALL(cuMemAlloc, &d, 1 << 20));
  P("memops alloc(1M) aligned 2M %d\n", (int)(d % (2 << 20) == 0));
  R("memops cuMemFree(0)", CALL(cuMemFree, 0));
  R("memops cuMemFree(interior)", CALL(cuMemFree, d + 256));
  R("memops cuMemFree(malloc)", CALL(cuMemFree, (CUdeviceptr)h));
  R("memops cuMemFree(d)", CALL(cuMemFree, d));
  R("memops cuMemFree(d) again", CALL(cuMemFree, d));
  R("memops cuMemAllocManaged flags 0", CALL(cuMemAllocManaged, &x, 4096, 0));
  R("memops cuMemAllocManaged size 0", CALL(cuMemAllocManaged, &x, 0, CU_MEM_ATTACH_GLOBAL));
  R("memops cuMemAllocManaged", CALL(cuMemAllocManaged, &x, 4096, CU_MEM_ATTACH_GLOBAL));
  ((char *)(uintptr_t)x)[10] = 5;
  R("memops cuMemFree(managed)", CALL(cuMemFree, x));
  R("memops cuMemHostAlloc(0)", CALL(cuMemHostAlloc, &q, 0, 0));
  R("memops cuMemHostAlloc(100)", CALL(cuMemHostAlloc, &p, 100, 0));
  P("memops pinned page aligned %d\n", (int)((uintptr_t)p % 4096 == 0));
  R("memops cuMemFreeHost(interior)", CALL(cuMemFreeHost, (char *)p + 8));
  R("memops cuMemFreeHost(malloc)", CALL(cuMemFreeHost, h));
  R("memops cuMemFreeHost(NULL)", CALL(cuMemFreeHost, NULL));
  R("memops cuMemFreeHost(p)", CALL(cuMemFreeHost, p));
  R("memops cuMemFreeHost(p) again", CALL(cuMemFreeHost, p));
  posix_memalign(&r, 4096, 4 << 20);
  R("memops register unaligned ptr", CALL(cuMemHostRegister, (char *)r + 100, 5000, 0));
  R("memops unregister unaligned ptr", CALL(cuMemHostUnregister, (char *)r + 100));
  R("memops register size 0", CALL(cuMemHostRegister, r, 0, 0));
  R("memops register NULL", CALL(cuMemHostRegister, NULL, 4096, 0));
  R("memops register 1M", CALL(cuMemHostRegister, r, 1 << 20, 0));
  R("memops register same again", CALL(cuMemHostRegister, r, 1 << 20, 0));
  R("memops register overlapping", CALL(cuMemHostRegister, (char *)r + 4096, 1 << 20, 0));
  R("memops register adjacent", CALL(cuMemHostRegister, (char *)r + (1 << 20), 4096, 0));
  R("memops unregister interior", CALL(cuMemHostUnregister, (char *)r + 4096));
  R("memops unregister base", CALL(cuMemHostUnregister, r));
  R("memops unregister base again", CALL(cuMemHostUnregister, r));
  R("memops unregister adjacent", CALL(cuMemHostUnregister, (char *)r + (1 << 20)));
  R("memops unregister malloc", CALL(cuMemHostUnregister, h));
  CALL(cuMemHostAlloc, &p, 8192, 0);
  R("memops register pinned alloc", CALL(cuMemHostRegister, p, 4096, 0));
  R("memops cuCtxSynchronize at end", CALL(cuCtxSynchronize));
}

/* ---------------------------------------------------------------------------------------- */
static void s_copies(void) {
  const size_t M = 1 << 20;
  CUdeviceptr d = 0, d2 = 0, f = 0, m = 0;
  unsigned char *p = NULL, *h = (unsigned char *)malloc(M), *h2 = (unsigned char *)malloc(M);
  CUstream s = NULL;
  size_t i;
  int ok;
  init_ctx();
  CALL(cuMemAlloc, &d, M);
  CALL(cuMemAlloc, &d2, M);
  CALL(cuMemAlloc, &f, 4096);
  CALL(cuMemFree, f);
  CALL(cuMemAllocManaged, &m, M, CU_MEM_ATTACH_GLOBAL);
  CALL(cuMemHostAlloc, (void **)&p, M, 0);
  CALL(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING);
  for (i = 0; i < M; i++) h[i] = (unsigned char)(i * 7 + 3);
  R("copies HtoD full", CALL(cuMemcpyHtoD, d, h, M));
  R("copies DtoH full", CALL(cuMemcpyDtoH, h2, d, M));
  P("copies roundtrip ok %d\n", memcmp(h, h2, M) == 0);
  R("copies HtoD 0 bytes", CALL(cuMemcpyHtoD, d, h, 0));
  R("copies HtoD 0 bytes garbage dst", CALL(cuMemcpyHtoD, 0x1234, h, 0));
  R("copies HtoD overflow by 1", CALL(cuMemcpyHtoD, d + 1, h, M));
  R("copies HtoD at end", CALL(cuMemcpyHtoD, d + M, h, 1));
  R("copies HtoD freed", CALL(cuMemcpyHtoD, f, h, 16));
  R("copies HtoD garbage", CALL(cuMemcpyHtoD, 0x1234, h, 16));
  R("copies HtoD dst=pinned host", CALL(cuMemcpyHtoD, (CUdeviceptr)p, h, 16));
  R("copies HtoD dst=malloc host", CALL(cuMemcpyHtoD, (CUdeviceptr)h2, h, 16));
  R("copies HtoD dst=managed", CALL(cuMemcpyHtoD, m, h, 16));
  R("copies HtoD src=device", CALL(cuMemcpyHtoD, d2, (void *)(uintptr_t)d, 16));
  R("copies DtoH dst=device", CALL(cuMemcpyDtoH, (void *)(uintptr_t)d2, d, 16));
  R("copies DtoH overflow", CALL(cuMemcpyDtoH, h2, d + M - 8, 16));
  R("copies DtoH freed", CALL(cuMemcpyDtoH, h2, f, 16));
  R("copies DtoH src=pinned host", CALL(cuMemcpyDtoH, h2, (CUdeviceptr)p, 16));
  R("copies DtoH src=malloc host", CALL(cuMemcpyDtoH, h2, (CUdeviceptr)h, 16));
  R("copies DtoH src=managed", CALL(cuMemcpyDtoH, h2, m, 16));
  R("copies DtoD", CALL(cuMemcpyDtoD, d2, d, M));
  R("copies DtoD overflow", CALL(cuMemcpyDtoD, d2 + 8, d, M));
  R("copies cuMemcpy host->host", CALL(cuMemcpy, (CUdeviceptr)h2, (CUdeviceptr)h, 64));
  R("copies cuMemcpy host->device", CALL(cuMemcpy, d, (CUdeviceptr)h, M));
  R("copies cuMemcpy device->host", CALL(cuMemcpy, (CUdeviceptr)h2, d, M));
  R("copies cuMemcpy overflow", CALL(cuMemcpy, d + 8, (CUdeviceptr)h, M));
  R("copies cuMemcpy freed", CALL(cuMemcpy, f, (CUdeviceptr)h, 16));
  /* cuMemcpy to an unknown address treats it as host memory: the real driver crashes. */
  R("copies HtoDAsync pinned", CALL(cuMemcpyHtoDAsync, d, p, M, s));
  R("copies HtoDAsync overflow", CALL(cuMemcpyHtoDAsync, d + 1, p, M, s));
  R("copies HtoDAsync freed", CALL(cuMemcpyHtoDAsync, f, p, 16, s));
  R("copies DtoHAsync overflow", CALL(cuMemcpyDtoHAsync, p, d + 1, M, s));
  R("copies DtoHAsync garbage", CALL(cuMemcpyDtoHAsync, p, 0x1234, 16, s));
  R("copies cuMemcpyAsync overflow", CALL(cuMemcpyAsync, d + 1, (CUdeviceptr)p, M, s));
  R("copies MemsetD8", CALL(cuMemsetD8, d, 9, M));
  R("copies MemsetD8 overflow", CALL(cuMemsetD8, d + 1, 9, M));
  R("copies MemsetD8 freed", CALL(cuMemsetD8, f, 9, 16));
  R("copies MemsetD8 pinned host", CALL(cuMemsetD8, (CUdeviceptr)p, 9, 16));
  P("copies memset on pinned visible %d\n", p[0] == 9 && p[15] == 9);
  R("copies MemsetD8 malloc host", CALL(cuMemsetD8, (CUdeviceptr)h2, 9, 16));
  R("copies MemsetD8 managed", CALL(cuMemsetD8, m, 9, 16));
  R("copies StreamSynchronize", CALL(cuStreamSynchronize, s));
  R("copies cuCtxSynchronize", CALL(cuCtxSynchronize));
  CALL(cuMemcpyDtoH, h2, d, M);
  ok = 1;
  for (i = 0; i < M; i++) ok &= h2[i] == 9;
  P("copies memset data ok %d\n", ok);
  R("copies bad stream handle", CALL(cuMemcpyHtoDAsync, d, p, 16, (CUstream)(uintptr_t)0xdead0));
}

/* ---------------------------------------------------------------------------------------- */
static int waited(double t0) { return now_s() - t0 > 0.2; }
#define TIMED(label, expr)                                     \
  do {                                                         \
    double t0_ = now_s();                                      \
    CUresult r_ = (expr);                                      \
    P("%-52s r=%d waited=%d\n", label, (int)r_, waited(t0_)); \
  } while (0)
#define BUSY(st) CALL(cuLaunchHostFunc, st, sleeper, (void *)(uintptr_t)400000)

static void s_streams(void) {
  const size_t M = 1 << 20;
  CUdeviceptr d = 0, x = 0;
  unsigned char *p = NULL, *p2 = NULL, *h = (unsigned char *)malloc(M);
  void *r = NULL;
  CUstream sb = NULL, snb = NULL, s3 = NULL;
  CUevent e = NULL, e2 = NULL;
  init_ctx();
  CALL(cuMemAlloc, &d, M);
  CALL(cuMemHostAlloc, (void **)&p, M, 0);
  CALL(cuStreamCreate, &sb, CU_STREAM_DEFAULT);
  CALL(cuStreamCreate, &snb, CU_STREAM_NON_BLOCKING);
  CALL(cuEventCreate, &e, CU_EVENT_DISABLE_TIMING);
  CALL(cuEventCreate, &e2, CU_EVENT_DISABLE_TIMING);
  R("streams query never-recorded event", CALL(cuEventQuery, e));
  R("streams sync never-recorded event", CALL(cuEventSynchronize, e));
  BUSY(sb); TIMED("streams sync HtoD after blocking stream busy", CALL(cuMemcpyHtoD, d, h, 16));
  CALL(cuCtxSynchronize);
  BUSY(snb); TIMED("streams sync HtoD after non-blocking busy", CALL(cuMemcpyHtoD, d, h, 16));
  CALL(cuCtxSynchronize);
  BUSY(sb); TIMED("streams StreamSynchronize(0) blocking busy", CALL(cuStreamSynchronize, NULL));
  CALL(cuCtxSynchronize);
  BUSY(snb); TIMED("streams StreamSynchronize(0) non-blocking busy", CALL(cuStreamSynchronize, NULL));
  CALL(cuCtxSynchronize);
  BUSY(sb); R("streams StreamQuery(0) blocking busy", CALL(cuStreamQuery, NULL));
  CALL(cuCtxSynchronize);
  BUSY(snb); R("streams StreamQuery(0) non-blocking busy", CALL(cuStreamQuery, NULL));
  R("streams StreamQuery(snb) busy", CALL(cuStreamQuery, snb));
  CALL(cuCtxSynchronize);
  R("streams StreamQuery(snb) idle", CALL(cuStreamQuery, snb));
  BUSY(sb); CALL(cuEventRecord, e, NULL);
  R("streams event on NULL after blocking busy: query", CALL(cuEventQuery, e));
  CALL(cuCtxSynchronize);
  BUSY(snb); CALL(cuEventRecord, e, NULL);
  R("streams event on NULL after non-blocking busy: query", CALL(cuEventQuery, e));
  CALL(cuCtxSynchronize);
  BUSY(NULL); CALL(cuEventRecord, e, sb);
  R("streams event on blocking after NULL busy: query", CALL(cuEventQuery, e));
  CALL(cuCtxSynchronize);
  BUSY(NULL); CALL(cuEventRecord, e, snb);
  R("streams event on non-blocking after NULL busy: query", CALL(cuEventQuery, e));
  CALL(cuCtxSynchronize);
  BUSY(snb); CALL(cuEventRecord, e, snb);
  R("streams event busy: query", CALL(cuEventQuery, e));
  TIMED("streams event busy: synchronize", CALL(cuEventSynchronize, e));
  R("streams event after sync: query", CALL(cuEventQuery, e));
  BUSY(snb); CALL(cuEventRecord, e2, snb); CALL(cuStreamWaitEvent, sb, e2, 0); CALL(cuEventRecord, e, sb);
  R("streams wait-event chain: query", CALL(cuEventQuery, e));
  TIMED("streams wait-event chain: synchronize", CALL(cuEventSynchronize, e));
  BUSY(snb); CALL(cuEventRecord, e, snb);
  TIMED("streams destroy pending event", CALL(cuEventDestroy, e));
  CALL(cuCtxSynchronize);
  BUSY(snb); TIMED("streams cuCtxSynchronize non-blocking busy", CALL(cuCtxSynchronize));
  BUSY(snb); TIMED("streams HtoDAsync pageable, stream busy", CALL(cuMemcpyHtoDAsync, d, h, M, snb));
  CALL(cuCtxSynchronize);
  BUSY(snb); TIMED("streams HtoDAsync pinned, stream busy", CALL(cuMemcpyHtoDAsync, d, p, M, snb));
  CALL(cuCtxSynchronize);
  BUSY(snb); TIMED("streams DtoHAsync pageable, stream busy", CALL(cuMemcpyDtoHAsync, h, d, M, snb));
  CALL(cuCtxSynchronize);
  BUSY(snb); TIMED("streams DtoHAsync pinned, stream busy", CALL(cuMemcpyDtoHAsync, p, d, M, snb));
  CALL(cuCtxSynchronize);
  BUSY(snb); TIMED("streams cuMemcpyAsync H(pageable)->D busy", CALL(cuMemcpyAsync, d, (CUdeviceptr)h, M, snb));
  CALL(cuCtxSynchronize);
  BUSY(snb); TIMED("streams cuMemcpyAsync D->H(pageable) busy", CALL(cuMemcpyAsync, (CUdeviceptr)h, d, M, snb));
  CALL(cuCtxSynchronize);
  BUSY(snb); TIMED("streams cuMemAlloc, non-blocking busy", CALL(cuMemAlloc, &x, 4096));
  CALL(cuCtxSynchronize);
  BUSY(snb); TIMED("streams cuMemFree, non-blocking busy", CALL(cuMemFree, x));
  CALL(cuCtxSynchronize);
  CALL(cuMemAlloc, &x, 4096);
  BUSY(sb); TIMED("streams cuMemFree, blocking busy", CALL(cuMemFree, x));
  CALL(cuCtxSynchronize);
  BUSY(snb); TIMED("streams cuMemHostAlloc, non-blocking busy", CALL(cuMemHostAlloc, (void **)&p2, 4096, 0));
  CALL(cuCtxSynchronize);
  BUSY(snb); TIMED("streams cuMemFreeHost, non-blocking busy", CALL(cuMemFreeHost, p2));
  CALL(cuCtxSynchronize);
  posix_memalign(&r, 4096, M);
  BUSY(snb); TIMED("streams cuMemHostRegister, non-blocking busy", CALL(cuMemHostRegister, r, M, 0));
  CALL(cuCtxSynchronize);
  BUSY(snb); TIMED("streams cuMemHostUnregister, non-blocking busy", CALL(cuMemHostUnregister, r));
  CALL(cuCtxSynchronize);
  BUSY(snb); TIMED("streams cuMemsetD8, non-blocking busy", CALL(cuMemsetD8, d, 1, M));
  CALL(cuCtxSynchronize);
  BUSY(sb); TIMED("streams cuMemsetD8, blocking busy", CALL(cuMemsetD8, d, 1, M));
  CALL(cuCtxSynchronize);
  BUSY(snb); TIMED("streams cuStreamCreate, non-blocking busy", CALL(cuStreamCreate, &s3, 0));
  BUSY(s3); TIMED("streams cuStreamDestroy(busy stream)", CALL(cuStreamDestroy, s3));
  TIMED("streams cuCtxSynchronize after destroy", CALL(cuCtxSynchronize));
  BUSY(snb); TIMED("streams cuStreamSynchronize(snb)", CALL(cuStreamSynchronize, snb));
  {
    /* A pinned source changed right after an async copy was queued behind a busy stream. */
    memset(p, 1, M);
    BUSY(snb);
    CALL(cuMemcpyHtoDAsync, d, p, M, snb);
    memset(p, 2, M);
    CALL(cuStreamSynchronize, snb);
    CALL(cuMemcpyDtoH, h, d, M);
    P("streams pinned source read at execution (device sees 2) %d\n", h[0] == 2 && h[M - 1] == 2);
    memset(h, 1, M);
    BUSY(snb);
    CALL(cuMemcpyHtoDAsync, d, h, M, snb);
    memset(h, 2, M);
    CALL(cuStreamSynchronize, snb);
    CALL(cuMemcpyDtoH, h, d, M);
    P("streams pageable source staged at call (device sees 1) %d\n", h[0] == 1 && h[M - 1] == 1);
  }
}

static volatile int hostfn_result = -1;
static volatile int hostfn_result2 = -1;
static void hostfn_calls_cuda(void *arg) {
  CUcontext c;
  CUdeviceptr x;
  (void)arg;
  hostfn_result = CALL(cuCtxGetCurrent, &c);
  hostfn_result2 = CALL(cuMemAlloc, &x, 4096);
}
static void s_hostfn(void) {
  CUstream s;
  init_ctx();
  alarm(10);
  CALL(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING);
  R("hostfn launch NULL fn", CALL(cuLaunchHostFunc, s, NULL, NULL));
  CALL(cuLaunchHostFunc, s, hostfn_calls_cuda, NULL);
  R("hostfn sync", CALL(cuStreamSynchronize, s));
  P("hostfn cuCtxGetCurrent inside host fn %d\n", hostfn_result);
  P("hostfn cuMemAlloc inside host fn %d\n", hostfn_result2);
}

/* ---------------------------------------------------------------------------------------- */
struct section { const char *name; void (*fn)(void); };
static const struct section sections[] = {
    {"preinit", s_preinit}, {"basic", s_basic},   {"ctxlife", s_ctxlife},
    {"noctx", s_noctx},     {"attrs", s_attrs},   {"memops", s_memops},
    {"copies", s_copies},   {"streams", s_streams}, {"hostfn", s_hostfn},
};

int main(int argc, char **argv) {
  const char *path = getenv("GPUFILE_CUDA_LIBRARY");
  size_t i;
  if (argc > 1) {
    lib = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) { P("dlopen failed: %s\n", dlerror()); return 2; }
    for (i = 0; i < sizeof sections / sizeof sections[0]; i++)
      if (strcmp(argv[1], sections[i].name) == 0) { sections[i].fn(); return 0; }
    P("unknown section %s\n", argv[1]);
    return 2;
  }
  for (i = 0; i < sizeof sections / sizeof sections[0]; i++) {
    pid_t pid = fork();
    int st = 0;
    if (pid == 0) { execl("/proc/self/exe", argv[0], sections[i].name, (char *)NULL); _exit(127); }
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      P("section %s ended abnormally (status 0x%x)\n", sections[i].name, st);
  }
  return 0;
}
