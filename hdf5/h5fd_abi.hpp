// gpufile's own declaration of the part of HDF5's binary interface a virtual file driver (VFD)
// plugin meets: the driver class table HDF5 calls through, the per-file record HDF5 shares
// with the driver, and the scalar types they use. Written from the layout HDF5 documents for
// 1.14 and 2.0 (H5FDdevelop.h, H5FDpublic.h, H5PLextern.h, H5public.h, H5Ipublic.h), so that
// the plugin builds without HDF5's headers: Debian 12 ships HDF5 1.10, which has no VFD plugins,
// and h5py's wheels bring their own libhdf5. Nothing here is linked against: the few H5*
// functions the driver calls are found at run time (hdf5_api.hpp).
//
// The class table is the same in 1.14.0 .. 1.14.6 and in 2.0 (H5FD_CLASS_VERSION 1 in both;
// 2.0 spells hbool_t as C's bool, one byte either way). The selection callbacks' `count`
// argument changed type inside 1.14 (size_t, later uint32_t); gpufile leaves those callbacks
// empty, so HDF5 falls back to plain reads and writes and the difference never matters.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpufile::hdf5::abi {

// ---- scalars (H5public.h, H5Ipublic.h) -------------------------------------------------------
using hid_t = int64_t;      // 64-bit since HDF5 1.10
using herr_t = int;         // negative: failure
using htri_t = int;         // negative failure, 0 false, positive true
using hsize_t = uint64_t;
using haddr_t = uint64_t;
using hbool_t = bool;       // one byte: bool in 1.14 and 2.0

inline constexpr haddr_t kUndefinedAddress = ~haddr_t{0};  // HADDR_UNDEF
inline constexpr hid_t kDefault = 0;                        // H5P_DEFAULT, H5E_DEFAULT, H5S_ALL

// ---- plugins (H5PLextern.h) ------------------------------------------------------------------
enum PluginType : int {
  kPluginError = -1,
  kPluginFilter = 0,
  kPluginVol = 1,
  kPluginVfd = 2,
};

// ---- file access (H5Fpublic.h) ---------------------------------------------------------------
// H5Fcreate/H5Fopen flags as the driver's open() receives them.
inline constexpr unsigned kAccessReadWrite = 0x0001u;  // H5F_ACC_RDWR
inline constexpr unsigned kAccessTruncate = 0x0002u;   // H5F_ACC_TRUNC
inline constexpr unsigned kAccessExclusive = 0x0004u;  // H5F_ACC_EXCL
inline constexpr unsigned kAccessCreate = 0x0010u;     // H5F_ACC_CREAT

// H5F_close_degree_t
enum CloseDegree : int { kCloseDefault = 0, kCloseWeak = 1, kCloseSemi = 2, kCloseStrong = 3 };

// H5F_mem_t / H5FD_mem_t: what kind of file memory an IO is about. Raw data is kMemRaw.
enum MemType : int {
  kMemNoList = -1,
  kMemDefault = 0,
  kMemSuper = 1,
  kMemBtree = 2,
  kMemRaw = 3,  // H5FD_MEM_DRAW
  kMemGlobalHeap = 4,
  kMemLocalHeap = 5,
  kMemObjectHeader = 6,
  kMemTypes = 7,  // H5FD_MEM_NTYPES
};

// ---- driver values and feature flags (H5FDpublic.h) -----------------------------------------
using ClassValue = int;  // H5FD_class_value_t
// 0..255 belong to HDF5's own drivers, 256..511 are left for drivers that are not registered
// with The HDF Group ("testing"), 512 and up are handed out on request (512 is the GDS driver).
inline constexpr ClassValue kFirstUnregisteredValue = 256;
inline constexpr ClassValue kFirstRegisteredValue = 512;

// What query() may report (H5FD_FEAT_*).
inline constexpr unsigned long kFeatureAggregateMetadata = 0x00000001ul;
inline constexpr unsigned long kFeatureAccumulateMetadata = 0x00000002ul | 0x00000004ul;
inline constexpr unsigned long kFeatureDataSieve = 0x00000008ul;
inline constexpr unsigned long kFeatureAggregateSmallData = 0x00000010ul;
inline constexpr unsigned long kFeaturePosixCompatHandle = 0x00000080ul;
inline constexpr unsigned long kFeatureDefaultVfdCompatible = 0x00008000ul;

inline constexpr unsigned kClassVersion = 1;  // H5FD_CLASS_VERSION of 1.14 and 2.0

struct File;

// H5FD_class_t: one per driver, static; HDF5 copies it when the driver is registered.
struct Class {
  unsigned version;
  ClassValue value;
  const char* name;
  haddr_t maxaddr;
  CloseDegree fc_degree;
  herr_t (*terminate)();
  hsize_t (*sb_size)(File*);
  herr_t (*sb_encode)(File*, char* name, unsigned char* p);
  herr_t (*sb_decode)(File*, const char* name, const unsigned char* p);
  size_t fapl_size;
  void* (*fapl_get)(File*);
  void* (*fapl_copy)(const void* fapl);
  herr_t (*fapl_free)(void* fapl);
  size_t dxpl_size;
  void* (*dxpl_copy)(const void* dxpl);
  herr_t (*dxpl_free)(void* dxpl);
  File* (*open)(const char* name, unsigned flags, hid_t fapl, haddr_t maxaddr);
  herr_t (*close)(File*);
  int (*cmp)(const File*, const File*);
  herr_t (*query)(const File*, unsigned long* flags);
  herr_t (*get_type_map)(const File*, MemType* type_map);
  haddr_t (*alloc)(File*, MemType, hid_t dxpl, hsize_t size);
  herr_t (*free)(File*, MemType, hid_t dxpl, haddr_t addr, hsize_t size);
  haddr_t (*get_eoa)(const File*, MemType);
  herr_t (*set_eoa)(File*, MemType, haddr_t addr);
  haddr_t (*get_eof)(const File*, MemType);
  herr_t (*get_handle)(File*, hid_t fapl, void** handle);
  herr_t (*read)(File*, MemType, hid_t dxpl, haddr_t addr, size_t size, void* buf);
  herr_t (*write)(File*, MemType, hid_t dxpl, haddr_t addr, size_t size, const void* buf);
  // Vector and selection IO: left null (HDF5 then calls read/write once per piece).
  void* read_vector;
  void* write_vector;
  void* read_selection;
  void* write_selection;
  herr_t (*flush)(File*, hid_t dxpl, hbool_t closing);
  herr_t (*truncate)(File*, hid_t dxpl, hbool_t closing);
  herr_t (*lock)(File*, hbool_t read_write);
  herr_t (*unlock)(File*);
  herr_t (*del)(const char* name, hid_t fapl);
  herr_t (*ctl)(File*, uint64_t op, uint64_t flags, const void* in, void** out);
  MemType fl_map[kMemTypes];
};

// H5FD_t: the head of every open file's record. The driver allocates the record (its own
// fields follow), HDF5 fills these in after open() returns and reads them until close().
struct File {
  hid_t driver_id;
  const Class* cls;
  unsigned long fileno;
  unsigned access_flags;
  unsigned long feature_flags;
  haddr_t maxaddr;
  haddr_t base_addr;
  hsize_t threshold;
  hsize_t alignment;
  hbool_t paged_aggr;
};

// The layout on x86-64 and aarch64 (LP64) as HDF5 compiles it: a wrong offset here would make
// HDF5 call the wrong callback, so the build checks the ones that are easy to get wrong.
static_assert(sizeof(void*) == 8, "LP64 only");
static_assert(offsetof(Class, maxaddr) == 16);
static_assert(offsetof(Class, terminate) == 32);
static_assert(offsetof(Class, open) == 120);
static_assert(offsetof(Class, read) == 208);
static_assert(offsetof(Class, flush) == 256);
static_assert(offsetof(Class, ctl) == 296);
static_assert(sizeof(Class) == 336);
static_assert(offsetof(File, maxaddr) == 40);
static_assert(sizeof(File) == 80);

}  // namespace gpufile::hdf5::abi
