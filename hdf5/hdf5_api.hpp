// The H5* functions and error ids the driver uses, found at run time in the libhdf5 that loaded
// the plugin: the plugin links against no HDF5, so one build works with every libhdf5 of
// version 1.14 or later, h5py's private copy included (Python loads it RTLD_LOCAL, so its
// symbols are not in the global scope and must be looked up in that library itself).
#pragma once

#include <sys/types.h>

#include <string>

#include "h5fd_abi.hpp"

namespace gpufile::hdf5 {

struct Hdf5Api {
  using hid_t = abi::hid_t;
  using herr_t = abi::herr_t;
  using htri_t = abi::htri_t;

  herr_t (*get_libversion)(unsigned* major, unsigned* minor, unsigned* release) = nullptr;
  // 1.14+: the configuration string of H5Pset_driver_by_name or HDF5_DRIVER_CONFIG.
  ssize_t (*get_driver_config_str)(hid_t fapl, char* buf, size_t size) = nullptr;
  hid_t (*register_driver)(const abi::Class* cls) = nullptr;  // H5FDregister
  htri_t (*is_driver_registered_by_name)(const char* name) = nullptr;
  herr_t (*set_driver_by_name)(hid_t fapl, const char* name, const char* config) = nullptr;
  // H5Epush2 and the ids it takes (global variables of libhdf5, valid once it initialised).
  herr_t (*push_error)(hid_t stack, const char* file, const char* func, unsigned line,
                       hid_t error_class, hid_t major, hid_t minor, const char* fmt,
                       ...) = nullptr;
  const hid_t* error_class = nullptr;  // H5E_ERR_CLS_g
  const hid_t* major_file = nullptr;   // H5E_FILE_g
  const hid_t* major_io = nullptr;     // H5E_IO_g
  const hid_t* major_args = nullptr;   // H5E_ARGS_g
  const hid_t* minor_open = nullptr;   // H5E_CANTOPENFILE_g
  const hid_t* minor_close = nullptr;  // H5E_CANTCLOSEFILE_g
  const hid_t* minor_read = nullptr;   // H5E_READERROR_g
  const hid_t* minor_write = nullptr;  // H5E_WRITEERROR_g
  const hid_t* minor_seek = nullptr;   // H5E_SEEKERROR_g
  const hid_t* minor_overflow = nullptr;  // H5E_OVERFLOW_g
  const hid_t* minor_bad_value = nullptr; // H5E_BADVALUE_g
  const hid_t* minor_lock = nullptr;   // H5E_CANTLOCKFILE_g
  const hid_t* minor_delete = nullptr; // H5E_CANTDELETEFILE_g

  std::string library;  // the file the functions came from, for messages
  unsigned major = 0, minor = 0, release = 0;
};

// Remembers the library that called into the plugin (the caller of H5PLget_plugin_info is
// the libhdf5 that loads plugins), so that later look-ups use it before any other.
void remember_loader(const void* caller_address);

// The functions of the loader remembered above; else of the libhdf5 in the global scope (a C
// program linked against it); else of the first libhdf5 loaded in the process. Never null:
// members are null where nothing was found.
const Hdf5Api& hdf5_api();

// Pushes an error onto HDF5's default error stack, as HDF5's own drivers do, so that the
// caller (h5py turns the stack into an exception) sees why. `major`/`minor` are members of
// Hdf5Api; a missing one still pushes with the VFL-less default. Without H5Epush2 the message
// goes to gpufile's log.
void push_error(const char* function, const abi::hid_t* Hdf5Api::*major,
                const abi::hid_t* Hdf5Api::*minor, const std::string& message);

}  // namespace gpufile::hdf5
