#!/usr/bin/env python3
"""`gpufile check FILE` names the vendor path (NVIDIA's libcufile) and says why a file takes it
or not, which reads make page-cache windows and the pieces reads move: against the CUDA driver double and the NVIDIA
libcufile double (tests/support/fakecufile).

usage: check_vendor_test.py GPUFILE_CLI FAKECUDA FAKECUFILE
"""
import os
import subprocess
import sys
import tempfile


def check(cli, path, **env):
    full = dict(os.environ, **env)
    out = subprocess.run([cli, "check", path], env=full, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=60)
    if out.returncode != 0:
        sys.exit(f"gpufile check {path} failed ({out.returncode}):\n{out.stdout}")
    return out.stdout


def expect(text, *parts):
    for part in parts:
        if part not in text:
            sys.exit(f"expected {part!r} in the output of gpufile check:\n{text}")


def main():
    cli, fakecuda, fakecufile = sys.argv[1:4]
    base = {"GPUFILE_CUDA_LIBRARY": fakecuda, "GPUFILE_VENDOR_LIBRARY": fakecufile,
            "GPUFILE_DIRECT_IO": "always", "FAKECUFILE_REFUSE": "refused"}
    # In the build tree, not /tmp: O_DIRECT must work where the files are (tmpfs refuses it).
    with tempfile.TemporaryDirectory(dir=os.getcwd()) as d:
        accepted, refused = os.path.join(d, "data.bin"), os.path.join(d, "refused.bin")
        for path in (accepted, refused):
            with open(path, "wb") as f:
                f.write(os.urandom(4 << 20))

        out = check(cli, accepted, **base)
        expect(out, "NVIDIA      " + fakecufile, "nvidia-fs 2.17",
               "large reads vendor direct: NVIDIA's cuFileRead",
               "on a file NVIDIA's driver accepts",
               # gpufile.cache_policy=auto leaves a file GPUDirect Storage reads to it
               "cache miss  read with O_DIRECT, past the page cache",
               "why: NVIDIA's GPUDirect Storage reads this file straight into GPU memory")

        out = check(cli, refused, **base)
        expect(out, "this file: ", "(5027)", "large reads staged direct",
               "not NVIDIA's: NVIDIA's driver refused this file")

        out = check(cli, accepted, **base, FAKECUFILE_MODE="compat")
        expect(out, "compatibility mode only", "large reads staged direct",
               "not NVIDIA's: NVIDIA's driver reports no GPUDirect Storage",
               # no GDS: a 4 MiB file fits in any machine's page cache, and is kept there
               "cache miss  brought into the page cache in folios of up to 2 MiB, read from there, left cached for the next reader",
               "why: the file takes at most half of the memory the page cache can hold",
               "the page cache can hold ")

        out = check(cli, accepted, **base, FAKECUFILE_MODE="compat", GPUFILE_CACHE_POLICY="bypass")
        expect(out, "cache miss  read with O_DIRECT, past the page cache",
               "why: gpufile.cache_policy=bypass")

        out = check(cli, accepted, **base, GPUFILE_VENDOR="off")
        expect(out, "NVIDIA      off (gpufile.vendor)", "not NVIDIA's: gpufile.vendor is off",
               # the double's one GPU, alone: long reads stay staged
               "only reads of up to four slabs make windows (one GPU alone on this host")

        # Several GPUs share the host: long reads of bytes read before make page-cache windows.
        out = check(cli, accepted, **base, GPUFILE_VENDOR="off", FAKECUDA_DEVICES="2")
        expect(out, "reads of 16 MiB or more make the windows of bytes read before")
        out = check(cli, accepted, **base, GPUFILE_VENDOR="off", LOCAL_WORLD_SIZE="2",
                    GPUFILE_PAGECACHE_DMA_LONG_READ_MB="0")
        expect(out, "only reads of up to four slabs make windows "
                    "(gpufile.pagecache_dma_long_read_mb is 0)")

        # The pieces reads into GPU memory move: whole slabs for a process alone, the shared
        # size where ranks share the host, 512 KiB O_DIRECT pieces (every setting given, so that
        # the machine's cache size does not matter).
        alone = dict(base, GPUFILE_VENDOR="off", GPUFILE_WORKERS="3")
        expect(check(cli, accepted, **alone),
               "pieces      page cache to GPU: up to a 4096 KiB slab (no other GPU's staging",
               "O_DIRECT to GPU: 512 KiB, 6 in flight")
        expect(check(cli, accepted, **alone, LOCAL_WORLD_SIZE="4", GPUFILE_SHARED_PIECE_KB="1024",
                     GPUFILE_COLD_PIECE_KB="0", GPUFILE_COLD_SLABS_PER_WORKER="4"),
               "pieces      page cache to GPU: 1024 KiB, not a 4096 KiB slab (the staging of 4 process(es)",
               "O_DIRECT to GPU: 4096 KiB, 12 in flight")
    print("ok")


if __name__ == "__main__":
    main()
