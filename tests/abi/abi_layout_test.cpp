// The cuFile ABI as the C++ compiler sees include/cufile.h: sizes, alignments and offsets
// (shared list with the C check), member types and the exact type of every entry point.
// Everything here is decided at compile time except the comparison with the C compiler's
// table, which runs as a test.
#include <cufile.h>

#include <cstddef>
#include <cstring>
#include <iterator>
#include <string_view>
#include <type_traits>

#include <gtest/gtest.h>

#include "abi_layout_c_table.h"
#include "abi_layout_list.h"

namespace {

// ---- sizes, alignments, offsets --------------------------------------------------------------

#define CHECK_SIZE(T, size, align)                                 \
  static_assert(sizeof(T) == (size), "sizeof(" #T ") != " #size); \
  static_assert(alignof(T) == (align), "alignof(" #T ") != " #align);
#define CHECK_FIELD(T, member, off, size)                                             \
  static_assert(offsetof(T, member) == (off), "offsetof(" #T ", " #member ") != " #off); \
  static_assert(sizeof(static_cast<T*>(nullptr)->member) == (size),                    \
                "sizeof(" #T "." #member ") != " #size);
GPUFILE_ABI_SIZES(CHECK_SIZE)
GPUFILE_ABI_FIELDS(CHECK_FIELD)
#undef CHECK_SIZE
#undef CHECK_FIELD

// The ones the spec calls out by name, spelled out once more for the reader.
static_assert(sizeof(CUfileStatsLevel1_t) == 512);
static_assert(sizeof(CUfileStatsLevel2_t) == 1024);
static_assert(sizeof(CUfilePerGpuStats_t) == 248);
static_assert(sizeof(CUfileStatsLevel3_t) == 5000);
static_assert(offsetof(CUfileStatsLevel3_t, num_gpus) == 1024);
static_assert(offsetof(CUfileStatsLevel3_t, per_gpu_stats) == 1032);
static_assert(sizeof(CUresult) == 4);
static_assert(std::is_standard_layout_v<CUfileError_t> && std::is_trivial_v<CUfileError_t>);
static_assert(std::is_standard_layout_v<CUfileStatsLevel3_t> && std::is_trivial_v<CUfileStatsLevel3_t>);

// ---- member types ----------------------------------------------------------------------------

#define CHECK_TYPE(T, member, ...)                                                   \
  static_assert(std::is_same_v<decltype(static_cast<T*>(nullptr)->member), __VA_ARGS__>, \
                "type of " #T "." #member);

CHECK_TYPE(CUfileError_t, err, CUfileOpError)
CHECK_TYPE(CUfileError_t, cu_err, CUresult)

CHECK_TYPE(CUfileDescr_t, type, enum CUfileFileHandleType)
CHECK_TYPE(CUfileDescr_t, handle.fd, int)
CHECK_TYPE(CUfileDescr_t, handle.handle, void*)
CHECK_TYPE(CUfileDescr_t, fs_ops, const CUfileFSOps_t*)

CHECK_TYPE(CUfileFSOps_t, fs_type, const char* (*)(void*))
CHECK_TYPE(CUfileFSOps_t, getRDMADeviceList, int (*)(void*, sockaddr_t**))
CHECK_TYPE(CUfileFSOps_t, getRDMADevicePriority, int (*)(void*, char*, size_t, loff_t, sockaddr_t*))
CHECK_TYPE(CUfileFSOps_t, read, ssize_t (*)(void*, char*, size_t, loff_t, cufileRDMAInfo_t*))
CHECK_TYPE(CUfileFSOps_t, write, ssize_t (*)(void*, const char*, size_t, loff_t, cufileRDMAInfo_t*))
static_assert(std::is_same_v<sockaddr_t, struct sockaddr>);
static_assert(std::is_same_v<loff_t, off_t> && sizeof(off_t) == 8);

CHECK_TYPE(CUfileDrvProps_t, nvfs.major_version, unsigned int)
CHECK_TYPE(CUfileDrvProps_t, nvfs.minor_version, unsigned int)
CHECK_TYPE(CUfileDrvProps_t, nvfs.poll_thresh_size, size_t)
CHECK_TYPE(CUfileDrvProps_t, nvfs.max_direct_io_size, size_t)
CHECK_TYPE(CUfileDrvProps_t, nvfs.dstatusflags, unsigned int)
CHECK_TYPE(CUfileDrvProps_t, nvfs.dcontrolflags, unsigned int)
CHECK_TYPE(CUfileDrvProps_t, fflags, unsigned int)
CHECK_TYPE(CUfileDrvProps_t, max_device_cache_size, unsigned int)
CHECK_TYPE(CUfileDrvProps_t, per_buffer_cache_size, unsigned int)
CHECK_TYPE(CUfileDrvProps_t, max_device_pinned_mem_size, unsigned int)
CHECK_TYPE(CUfileDrvProps_t, max_batch_io_size, unsigned int)
CHECK_TYPE(CUfileDrvProps_t, max_batch_io_timeout_msecs, unsigned int)

CHECK_TYPE(cufileRDMAInfo_t, version, int)
CHECK_TYPE(cufileRDMAInfo_t, desc_len, int)
CHECK_TYPE(cufileRDMAInfo_t, desc_str, const char*)

CHECK_TYPE(CUfileIOParams_t, mode, CUfileBatchMode_t)
CHECK_TYPE(CUfileIOParams_t, u.batch.devPtr_base, void*)
CHECK_TYPE(CUfileIOParams_t, u.batch.file_offset, off_t)
CHECK_TYPE(CUfileIOParams_t, u.batch.devPtr_offset, off_t)
CHECK_TYPE(CUfileIOParams_t, u.batch.size, size_t)
CHECK_TYPE(CUfileIOParams_t, fh, CUfileHandle_t)
CHECK_TYPE(CUfileIOParams_t, opcode, CUfileOpcode_t)
CHECK_TYPE(CUfileIOParams_t, cookie, void*)

CHECK_TYPE(CUfileIOEvents_t, cookie, void*)
CHECK_TYPE(CUfileIOEvents_t, status, CUfileStatus_t)
CHECK_TYPE(CUfileIOEvents_t, ret, size_t)

CHECK_TYPE(CUfileOpCounter_t, ok, uint64_t)
CHECK_TYPE(CUfileOpCounter_t, err, uint64_t)
CHECK_TYPE(CUfileStatsLevel1_t, read_ops, CUfileOpCounter_t)
CHECK_TYPE(CUfileStatsLevel1_t, read_bytes, uint64_t)
CHECK_TYPE(CUfileStatsLevel1_t, batch_total_submit_ops, CUfileOpCounter_t)
CHECK_TYPE(CUfileStatsLevel1_t, last_batch_write_bytes, uint64_t)
CHECK_TYPE(CUfileStatsLevel2_t, basic, CUfileStatsLevel1_t)
CHECK_TYPE(CUfileStatsLevel2_t, read_size_kb_hist, uint64_t[32])
CHECK_TYPE(CUfileStatsLevel2_t, write_size_kb_hist, uint64_t[32])
CHECK_TYPE(CUfilePerGpuStats_t, uuid, char[CUFILE_GPU_UUID_LEN])
CHECK_TYPE(CUfilePerGpuStats_t, reg_bytes, uint64_t)
CHECK_TYPE(CUfileStatsLevel3_t, detailed, CUfileStatsLevel2_t)
CHECK_TYPE(CUfileStatsLevel3_t, num_gpus, uint32_t)
CHECK_TYPE(CUfileStatsLevel3_t, per_gpu_stats, CUfilePerGpuStats_t[16])
#undef CHECK_TYPE

static_assert(std::is_same_v<CUfileHandle_t, void*>);
static_assert(std::is_same_v<CUfileBatchHandle_t, void*>);
static_assert(std::is_same_v<CUstream, struct CUstream_st*>);

// ---- entry points ----------------------------------------------------------------------------

#define CHECK_FN(fn, ...) \
  static_assert(std::is_same_v<decltype(fn), __VA_ARGS__>, "signature of " #fn);

CHECK_FN(cuFileDriverOpen, CUfileError_t(void))
CHECK_FN(cuFileDriverClose_v2, CUfileError_t(void))
CHECK_FN(cuFileUseCount, long(void))
CHECK_FN(cuFileDriverGetProperties, CUfileError_t(CUfileDrvProps_t*))
CHECK_FN(cuFileDriverSetPollMode, CUfileError_t(bool, size_t))
CHECK_FN(cuFileDriverSetMaxDirectIOSize, CUfileError_t(size_t))
CHECK_FN(cuFileDriverSetMaxCacheSize, CUfileError_t(size_t))
CHECK_FN(cuFileDriverSetMaxPinnedMemSize, CUfileError_t(size_t))
CHECK_FN(cuFileGetVersion, CUfileError_t(int*))
CHECK_FN(cuFileGetBARSizeInKB, CUfileError_t(int, size_t*))
CHECK_FN(cuFileHandleRegister, CUfileError_t(CUfileHandle_t*, CUfileDescr_t*))
CHECK_FN(cuFileHandleDeregister, void(CUfileHandle_t))
CHECK_FN(cuFileBufRegister, CUfileError_t(const void*, size_t, int))
CHECK_FN(cuFileBufDeregister, CUfileError_t(const void*))
CHECK_FN(cuFileRead, ssize_t(CUfileHandle_t, void*, size_t, off_t, off_t))
CHECK_FN(cuFileWrite, ssize_t(CUfileHandle_t, const void*, size_t, off_t, off_t))
CHECK_FN(cuFileBatchIOSetUp, CUfileError_t(CUfileBatchHandle_t*, unsigned))
CHECK_FN(cuFileBatchIOSubmit, CUfileError_t(CUfileBatchHandle_t, unsigned, CUfileIOParams_t*, unsigned))
CHECK_FN(cuFileBatchIOGetStatus, CUfileError_t(CUfileBatchHandle_t, unsigned, unsigned*,
                                               CUfileIOEvents_t*, struct timespec*))
CHECK_FN(cuFileBatchIOCancel, CUfileError_t(CUfileBatchHandle_t))
CHECK_FN(cuFileBatchIODestroy, void(CUfileBatchHandle_t))
CHECK_FN(cuFileReadAsync, CUfileError_t(CUfileHandle_t, void*, size_t*, off_t*, off_t*, ssize_t*, CUstream))
CHECK_FN(cuFileWriteAsync, CUfileError_t(CUfileHandle_t, void*, size_t*, off_t*, off_t*, ssize_t*, CUstream))
CHECK_FN(cuFileStreamRegister, CUfileError_t(CUstream, unsigned))
CHECK_FN(cuFileStreamDeregister, CUfileError_t(CUstream))
CHECK_FN(cuFileGetParameterSizeT, CUfileError_t(CUFileSizeTConfigParameter_t, size_t*))
CHECK_FN(cuFileGetParameterBool, CUfileError_t(CUFileBoolConfigParameter_t, bool*))
CHECK_FN(cuFileGetParameterString, CUfileError_t(CUFileStringConfigParameter_t, char*, int))
CHECK_FN(cuFileGetParameterMinMaxValue, CUfileError_t(CUFileSizeTConfigParameter_t, size_t*, size_t*))
CHECK_FN(cuFileSetParameterSizeT, CUfileError_t(CUFileSizeTConfigParameter_t, size_t))
CHECK_FN(cuFileSetParameterBool, CUfileError_t(CUFileBoolConfigParameter_t, bool))
CHECK_FN(cuFileSetParameterString, CUfileError_t(CUFileStringConfigParameter_t, const char*))
CHECK_FN(cuFileSetParameterPosixPoolSlabArray, CUfileError_t(const size_t*, const size_t*, int))
CHECK_FN(cuFileGetParameterPosixPoolSlabArray, CUfileError_t(size_t*, size_t*, int))
CHECK_FN(cuFileSetStatsLevel, CUfileError_t(int))
CHECK_FN(cuFileGetStatsLevel, CUfileError_t(int*))
CHECK_FN(cuFileStatsStart, CUfileError_t(void))
CHECK_FN(cuFileStatsStop, CUfileError_t(void))
CHECK_FN(cuFileStatsReset, CUfileError_t(void))
CHECK_FN(cuFileGetStatsL1, CUfileError_t(CUfileStatsLevel1_t*))
CHECK_FN(cuFileGetStatsL2, CUfileError_t(CUfileStatsLevel2_t*))
CHECK_FN(cuFileGetStatsL3, CUfileError_t(CUfileStatsLevel3_t*))

// cuFileDriverClose is a macro naming the _v2 entry point; the old symbol is declared too.
#define ABI_STR2(x) #x
#define ABI_STR(x) ABI_STR2(x)
static_assert(std::string_view(ABI_STR(cuFileDriverClose)) == "cuFileDriverClose_v2");
CHECK_FN(cuFileDriverClose, CUfileError_t(void))
#undef cuFileDriverClose
CHECK_FN(cuFileDriverClose, CUfileError_t(void))
#undef CHECK_FN

// ---- C and C++ agree -------------------------------------------------------------------------

struct Entry {
  const char* what;
  size_t value;
};

#define SIZE_ENTRY(T, size, align) {"sizeof(" #T ")", sizeof(T)},
#define FIELD_ENTRY(T, member, off, size)                    \
  {"offsetof(" #T ", " #member ")", offsetof(T, member)},    \
      {"sizeof(" #T "." #member ")", sizeof(static_cast<T*>(nullptr)->member)},
constexpr Entry kCxxTable[] = {GPUFILE_ABI_SIZES(SIZE_ENTRY) GPUFILE_ABI_FIELDS(FIELD_ENTRY)};
#undef SIZE_ENTRY
#undef FIELD_ENTRY

TEST(AbiLayout, CAndCxxCompilersAgree) {
  size_t count = 0;
  const gpufile_abi_entry* c_table = gpufile_abi_c_table(&count);
  ASSERT_NE(c_table, nullptr);
  ASSERT_EQ(count, std::size(kCxxTable));
  for (size_t i = 0; i < count; ++i) {
    EXPECT_STREQ(c_table[i].what, kCxxTable[i].what);
    EXPECT_EQ(c_table[i].value, kCxxTable[i].value) << kCxxTable[i].what;
  }
}

TEST(AbiLayout, ErrorStringMacroWorksFromC) {
  EXPECT_STREQ(gpufile_abi_c_errstr(-5022), "invalid arguments");
  EXPECT_STREQ(gpufile_abi_c_errstr(5027), "file descriptor is not registered");
  EXPECT_STREQ(gpufile_abi_c_errstr(0), "cufile success");
  EXPECT_STREQ(gpufile_abi_c_errstr(5021), "unknown cufile error");
}

}  // namespace
