# Probe: what pinning host memory for DMA costs on this machine, by method: cuMemHostAlloc, and
# cuMemHostRegister of anonymous memory with and without transparent huge pages. Not a test.
import ctypes, mmap, time
import cupy
rt = cupy.cuda.runtime
libc = ctypes.CDLL("libc.so.6", use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
MADV_HUGEPAGE = 14
cupy.zeros(1)  # context
print(open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip())
for mib in (8, 128):
    n = mib << 20
    for rep in range(2):
        t0 = time.perf_counter(); p = rt.hostAlloc(n, 0); t1 = time.perf_counter(); rt.freeHost(p)
        print(f"{mib:4d} MiB cuMemHostAlloc: {1e3*(t1-t0):7.1f} ms", flush=True)
        for huge in (False, True):
            raw = libc.mmap(None, n + (2 << 20), 3, 0x22, -1, 0)  # PROT_RW, MAP_PRIVATE|ANON
            addr = (raw + (2 << 20) - 1) & ~((2 << 20) - 1)
            if huge:
                libc.madvise(addr, n, MADV_HUGEPAGE)
            t0 = time.perf_counter()
            ctypes.memset(addr, 0, n)
            t1 = time.perf_counter()
            rt.hostRegister(addr, n, 0)
            t2 = time.perf_counter()
            rt.hostUnregister(addr)
            libc.munmap(raw, n + (2 << 20))
            print(f"{mib:4d} MiB touch+register {'THP ' if huge else '4KiB'}: touch {1e3*(t1-t0):6.1f} ms, register {1e3*(t2-t1):7.1f} ms", flush=True)
