"""The HDF5 plugin exports exactly its entry points and include/gpufile/hdf5.h's functions:
gpufile's runtime inside stays local, so it never binds to another copy in the process."""
import subprocess
import sys

EXPECTED = {"H5PLget_plugin_type", "H5PLget_plugin_info", "H5Pset_fapl_gpufile",
            "gpufile_hdf5_get_counters", "gpufile_hdf5_get_stats_json", "gpufile_hdf5_reset_stats"}

out = subprocess.run(["nm", "-D", "--defined-only", sys.argv[1]], check=True,
                     capture_output=True, text=True).stdout
exported = {line.split()[-1] for line in out.splitlines()
            if len(line.split()) == 3 and line.split()[1] in "TDBRVWiu"}
if exported != EXPECTED:
    print("unexpected:", sorted(exported - EXPECTED), "missing:", sorted(EXPECTED - exported))
    sys.exit(1)
print("exports: ok")
