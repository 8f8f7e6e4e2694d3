/*
 * gpufile's HDF5 virtual file driver, for C programs that link the plugin library
 * (libgpufile_hdf5.so) instead of loading it through HDF5_PLUGIN_PATH. docs/hdf5.md has the
 * whole story: which HDF5 versions work, the configuration string, what is not done yet.
 *
 *   #include <hdf5.h>
 *   #include <gpufile/hdf5.h>
 *   hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
 *   H5Pset_fapl_gpufile(fapl, "workers=8;block_size=4M");
 *   hid_t file = H5Fcreate("out.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
 *
 * The header stands alone (it does not need hdf5.h): hid_t and herr_t are declared here as
 * HDF5 1.10 and later declare them, so the two declarations agree when both are included.
 */
#ifndef GPUFILE_HDF5_H
#define GPUFILE_HDF5_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef H5public_H /* hdf5.h not included: the same types, declared the same way */
typedef int64_t hid_t;
typedef int herr_t;
#endif

/* The driver's name, for H5Pset_driver_by_name() and HDF5_DRIVER. */
#define GPUFILE_HDF5_DRIVER_NAME "gpufile"
/* Its H5FD_class_value_t: in the range HDF5 leaves to drivers not registered with The HDF
 * Group (256..511). */
#define GPUFILE_HDF5_DRIVER_VALUE 501

/* Makes `fapl` (a file access property list) use the gpufile driver, with `config` (may be
 * NULL or empty) as its configuration string, e.g. "workers=8;block_size=4M". Registers the
 * driver with the HDF5 library in the process on first use. Needs HDF5 1.14 or later; returns
 * a negative value on failure, with the reason on HDF5's error stack. */
herr_t H5Pset_fapl_gpufile(hid_t fapl, const char* config);

/* What the driver moved since the process started (all its files together). */
typedef struct gpufile_hdf5_counters {
  uint64_t files_opened;
  uint64_t reads;              /* read calls from HDF5 */
  uint64_t writes;             /* write calls from HDF5 */
  uint64_t bytes_read;         /* into any memory */
  uint64_t bytes_written;      /* from any memory */
  uint64_t device_bytes_read;  /* of bytes_read: into GPU (device or managed) memory */
  uint64_t device_bytes_written;
} gpufile_hdf5_counters;

/* Fills *out; returns 0. */
int gpufile_hdf5_get_counters(gpufile_hdf5_counters* out);

/* The statistics of the plugin's own copy of gpufile's runtime, as gpufile.stats() gives its
 * own (a JSON object: per operation the calls, bytes and bytes per data path, then the level and
 * the pinned staging held now). Writes it, NUL-terminated, into buf when `size` leaves room;
 * returns its length without the NUL either way (call with NULL, 0 to size a buffer). Python's
 * gpufile.stats() adds these to the extension's when the plugin is loaded in the process. */
size_t gpufile_hdf5_get_stats_json(char* buf, size_t size);

/* Zeroes those statistics (not the counters above); gpufile.stats_reset() calls it. */
void gpufile_hdf5_reset_stats(void);

#ifdef __cplusplus
}
#endif

#endif /* GPUFILE_HDF5_H */
