# Probe: reading a page-cache-resident file into the GPU by registering its mmap'd pages with
# CUDA (cuMemHostRegister, read-only) and copying them by DMA, chunk by chunk on several threads,
# against the pinned-copy ceiling. Not a test; a measurement for the tuning notes.
import mmap, os, sys, time, threading, subprocess
import numpy as np, cupy, torch
from concurrent.futures import ThreadPoolExecutor
GB = 1e9
path = sys.argv[1]
size = os.path.getsize(path)
rt = cupy.cuda.runtime
torch.zeros(1, device="cuda")
buf = torch.empty(size, dtype=torch.uint8, device="cuda")
for where in ("ext4", "shm"):
    p = path if where == "ext4" else "/dev/shm/probe.bin"
    if where == "shm": subprocess.run(["cp", path, p], check=True)
    subprocess.run(f"cat {p} > /dev/null", shell=True)
    fd = os.open(p, os.O_RDONLY)
    m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    base = np.frombuffer(m, dtype=np.uint8).ctypes.data
    for chunk_mb in (4, 16, 64):
        chunk = chunk_mb << 20
        for threads in (1, 4, 8, 12):
            offs = list(range(0, size, chunk))
            def work(k):
                dev = torch.cuda.current_device()
                s = cupy.cuda.Stream(non_blocking=True)
                for off in offs[k::threads]:
                    n = min(chunk, size - off)
                    rt.hostRegister(base + off, n, 0x08)
                    rt.memcpyAsync(buf.data_ptr() + off, base + off, n, 1, s.ptr)
                    s.synchronize()
                    rt.hostUnregister(base + off)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with ThreadPoolExecutor(threads) as ex:
                list(ex.map(work, range(threads)))
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            print(f"{where} chunk {chunk_mb:3d} MiB threads {threads:2d}: {size/GB/dt:6.1f} GB/s", flush=True)
    del base; m.close(); os.close(fd)
    if where == "shm": os.remove(p)
