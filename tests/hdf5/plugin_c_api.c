/* The HDF5 plugin's C face, from a C program that links it and has no HDF5: the public header
 * compiles as strict ISO C, the plugin entry points say "VFD" and hand out a class table whose
 * head reads as HDF5 expects, H5Pset_fapl_gpufile refuses cleanly when no libhdf5 is loaded,
 * and the counters start at zero. (With HDF5 the driver is tested from Python:
 * tests/python/test_hdf5.py.) */
#include <gpufile/hdf5.h>
#include <stdio.h>
#include <string.h>

/* HDF5's plugin entry points, as H5PLextern.h declares them (H5PL_type_t is an int enum). */
int H5PLget_plugin_type(void);
const void* H5PLget_plugin_info(void);

/* The first fields of H5FD_class_t: version, value, name. */
struct class_head {
  unsigned version;
  int value;
  const char* name;
};

static int failures = 0;

static void check(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "FAILED: %s\n", what);
    ++failures;
  }
}

int main(void) {
  const struct class_head* head = (const struct class_head*)H5PLget_plugin_info();
  gpufile_hdf5_counters counters;
  check(H5PLget_plugin_type() == 2, "plugin type is H5PL_TYPE_VFD (2)");
  check(head != NULL, "plugin info is a class table");
  if (head != NULL) {
    check(head->version == 1, "H5FD_CLASS_VERSION 1");
    check(head->value == GPUFILE_HDF5_DRIVER_VALUE, "driver value");
    check(head->value >= 256 && head->value < 512, "value in the unregistered range");
    check(strcmp(head->name, GPUFILE_HDF5_DRIVER_NAME) == 0, "driver name");
  }
  check(H5Pset_fapl_gpufile((hid_t)1, "workers=1") < 0, "refused without a libhdf5");
  memset(&counters, 0xff, sizeof counters);
  check(gpufile_hdf5_get_counters(&counters) == 0, "counters");
  check(counters.files_opened == 0 && counters.bytes_read == 0 && counters.bytes_written == 0,
        "counters start at zero");
  check(gpufile_hdf5_get_counters(NULL) < 0, "null counters refused");
  if (failures == 0) printf("plugin C API: ok\n");
  return failures == 0 ? 0 : 1;
}
