// Values of the cuFile 1.15.1.6 enums and macros, and the text of every status message,
// as include/cufile.h declares them.
#include <cufile.h>

#include <cerrno>
#include <set>
#include <string>
#include <utility>

#include <gtest/gtest.h>

namespace {

// Every status code with its message (spec section 2.2).
const std::pair<CUfileOpError, const char*> kStatusMessages[] = {
    {CU_FILE_SUCCESS, "cufile success"},
    {CU_FILE_DRIVER_NOT_INITIALIZED,
     "nvidia-fs driver is not loaded. Set allow_compat_mode to true in cufile.json file to enable "
     "compatible mode"},
    {CU_FILE_DRIVER_INVALID_PROPS, "invalid property"},
    {CU_FILE_DRIVER_UNSUPPORTED_LIMIT, "property range error"},
    {CU_FILE_DRIVER_VERSION_MISMATCH, "nvidia-fs driver version mismatch"},
    {CU_FILE_DRIVER_VERSION_READ_ERROR, "nvidia-fs driver version read error"},
    {CU_FILE_DRIVER_CLOSING, "driver shutdown in progress"},
    {CU_FILE_PLATFORM_NOT_SUPPORTED, "GPUDirect Storage not supported on current platform"},
    {CU_FILE_IO_NOT_SUPPORTED, "GPUDirect Storage not supported on current file"},
    {CU_FILE_DEVICE_NOT_SUPPORTED, "GPUDirect Storage not supported on current GPU"},
    {CU_FILE_NVFS_DRIVER_ERROR, "nvidia-fs driver ioctl error"},
    {CU_FILE_CUDA_DRIVER_ERROR, "CUDA Driver API error"},
    {CU_FILE_CUDA_POINTER_INVALID, "invalid device pointer"},
    {CU_FILE_CUDA_MEMORY_TYPE_INVALID, "invalid pointer memory type"},
    {CU_FILE_CUDA_POINTER_RANGE_ERROR, "pointer range exceeds allocated address range"},
    {CU_FILE_CUDA_CONTEXT_MISMATCH, "cuda context mismatch"},
    {CU_FILE_INVALID_MAPPING_SIZE, "access beyond maximum pinned size"},
    {CU_FILE_INVALID_MAPPING_RANGE, "access beyond mapped size"},
    {CU_FILE_INVALID_FILE_TYPE, "unsupported file type"},
    {CU_FILE_INVALID_FILE_OPEN_FLAG, "unsupported file open flags"},
    {CU_FILE_DIO_NOT_SET, "fd direct IO not set"},
    {CU_FILE_INVALID_VALUE, "invalid arguments"},
    {CU_FILE_MEMORY_ALREADY_REGISTERED, "device pointer already registered"},
    {CU_FILE_MEMORY_NOT_REGISTERED, "device pointer lookup failure"},
    {CU_FILE_PERMISSION_DENIED, "driver or file access error"},
    {CU_FILE_DRIVER_ALREADY_OPEN, "driver is already open"},
    {CU_FILE_HANDLE_NOT_REGISTERED, "file descriptor is not registered"},
    {CU_FILE_HANDLE_ALREADY_REGISTERED, "file descriptor is already registered"},
    {CU_FILE_DEVICE_NOT_FOUND, "GPU device not found"},
    {CU_FILE_INTERNAL_ERROR, "internal error"},
    {CU_FILE_GETNEWFD_FAILED, "failed to obtain new file descriptor"},
    {CU_FILE_NVFS_SETUP_ERROR, "NVFS driver initialization error"},
    {CU_FILE_IO_DISABLED, "GPUDirect Storage disabled by config on current file"},
    {CU_FILE_BATCH_SUBMIT_FAILED, "failed to submit batch operation"},
    {CU_FILE_GPU_MEMORY_PINNING_FAILED, "failed to allocate pinned GPU Memory"},
    {CU_FILE_BATCH_FULL, "queue full for batch operation"},
    {CU_FILE_ASYNC_NOT_SUPPORTED, "cuFile stream operation not supported"},
    {CU_FILE_INTERNAL_BATCH_SETUP_ERROR, "batch setup internal error - retry later"},
    {CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR, "batch submit internal error - retry later"},
    {CU_FILE_INTERNAL_BATCH_GETSTATUS_ERROR, "batch get status internal error - retry later"},
    {CU_FILE_INTERNAL_BATCH_CANCEL_ERROR, "batch cancel internal error - retry later"},
    {CU_FILE_NOMEM_ERROR, "cufile no memory error - retry later"},
    {CU_FILE_IO_ERROR, "cufile io error"},
    {CU_FILE_INTERNAL_BUF_REGISTER_ERROR, "cufile buf registration error"},
    {CU_FILE_HASH_OPR_ERROR, "cufile hash operation error"},
    {CU_FILE_INVALID_CONTEXT_ERROR, "cufile invalid context error"},
    {CU_FILE_NVFS_INTERNAL_DRIVER_ERROR, "nvfs internal driver error"},
    {CU_FILE_BATCH_NOCOMPAT_ERROR, "compat mode off error"},
    {CU_FILE_IO_MAX_ERROR, "GPUDirect Storage Max Error"},
};

TEST(AbiValues, StatusCodesAreBaseErrorPlusOffset) {
  EXPECT_EQ(CUFILEOP_BASE_ERR, 5000);
  EXPECT_EQ(CU_FILE_SUCCESS, 0);
  EXPECT_EQ(CU_FILE_DRIVER_NOT_INITIALIZED, 5001);
  EXPECT_EQ(CU_FILE_CUDA_DRIVER_ERROR, 5011);
  EXPECT_EQ(CU_FILE_DIO_NOT_SET, 5020);
  EXPECT_EQ(CU_FILE_INVALID_VALUE, 5022);  // 5021 is not assigned
  EXPECT_EQ(CU_FILE_MEMORY_NOT_REGISTERED, 5024);
  EXPECT_EQ(CU_FILE_DRIVER_ALREADY_OPEN, 5026);
  EXPECT_EQ(CU_FILE_HANDLE_NOT_REGISTERED, 5027);
  EXPECT_EQ(CU_FILE_GETNEWFD_FAILED, 5031);
  EXPECT_EQ(CU_FILE_NVFS_SETUP_ERROR, 5033);  // 5032 is not assigned
  EXPECT_EQ(CU_FILE_ASYNC_NOT_SUPPORTED, 5038);
  EXPECT_EQ(CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR, 5040);
  EXPECT_EQ(CU_FILE_BATCH_NOCOMPAT_ERROR, 5049);
  EXPECT_EQ(CU_FILE_IO_MAX_ERROR, 5050);
}

TEST(AbiValues, EveryStatusCodeHasItsMessage) {
  std::set<int> codes;
  for (const auto& [code, text] : kStatusMessages) {
    EXPECT_STREQ(cufileop_status_error(code), text) << "code " << static_cast<int>(code);
    codes.insert(code);
  }
  // 0, then 5001..5050 without the two unassigned codes.
  EXPECT_EQ(codes.size(), 49u);
  for (int c = 5001; c <= 5050; ++c) {
    if (c == 5021 || c == 5032) {
      EXPECT_EQ(codes.count(c), 0u) << c;
    } else {
      EXPECT_EQ(codes.count(c), 1u) << c;
    }
  }
}

TEST(AbiValues, UnknownCodesGetTheDefaultMessage) {
  for (int c : {-1, 1, 22, 4999, 5000, 5021, 5032, 5051, 6000}) {
    EXPECT_STREQ(cufileop_status_error(static_cast<CUfileOpError>(c)), "unknown cufile error") << c;
  }
}

TEST(AbiValues, ErrorMacros) {
  EXPECT_TRUE(IS_CUFILE_ERR(5001));
  EXPECT_TRUE(IS_CUFILE_ERR(-5022));
  EXPECT_FALSE(IS_CUFILE_ERR(5000));
  EXPECT_FALSE(IS_CUFILE_ERR(0));
  EXPECT_FALSE(IS_CUFILE_ERR(EINVAL));
  EXPECT_FALSE(IS_CUFILE_ERR(-EIO));

  EXPECT_STREQ(CUFILE_ERRSTR(-5022), "invalid arguments");
  EXPECT_STREQ(CUFILE_ERRSTR(5017), "access beyond mapped size");
  EXPECT_STREQ(CUFILE_ERRSTR(0), "cufile success");
  EXPECT_STREQ(CUFILE_ERRSTR(-5021), "unknown cufile error");

  CUfileError_t cuda_failure{CU_FILE_CUDA_DRIVER_ERROR, static_cast<CUresult>(700)};
  EXPECT_TRUE(IS_CUDA_ERR(cuda_failure));
  EXPECT_EQ(static_cast<int>(CU_FILE_CUDA_ERR(cuda_failure)), 700);
  CUfileError_t other{CU_FILE_INVALID_VALUE, static_cast<CUresult>(0)};
  EXPECT_FALSE(IS_CUDA_ERR(other));
  EXPECT_EQ(static_cast<int>(CU_FILE_CUDA_ERR(other)), 0);
}

TEST(AbiValues, DriverAndFeatureFlagBits) {
  EXPECT_EQ(CU_FILE_LUSTRE_SUPPORTED, 0);
  EXPECT_EQ(CU_FILE_WEKAFS_SUPPORTED, 1);
  EXPECT_EQ(CU_FILE_NFS_SUPPORTED, 2);
  EXPECT_EQ(CU_FILE_GPFS_SUPPORTED, 3);
  EXPECT_EQ(CU_FILE_NVME_SUPPORTED, 4);
  EXPECT_EQ(CU_FILE_NVMEOF_SUPPORTED, 5);
  EXPECT_EQ(CU_FILE_SCSI_SUPPORTED, 6);
  EXPECT_EQ(CU_FILE_SCALEFLUX_CSD_SUPPORTED, 7);
  EXPECT_EQ(CU_FILE_NVMESH_SUPPORTED, 8);
  EXPECT_EQ(CU_FILE_BEEGFS_SUPPORTED, 9);
  EXPECT_EQ(CU_FILE_NVME_P2P_SUPPORTED, 11);
  EXPECT_EQ(CU_FILE_SCATEFS_SUPPORTED, 12);

  EXPECT_EQ(CU_FILE_USE_POLL_MODE, 0);
  EXPECT_EQ(CU_FILE_ALLOW_COMPAT_MODE, 1);

  EXPECT_EQ(CU_FILE_DYN_ROUTING_SUPPORTED, 0);
  EXPECT_EQ(CU_FILE_BATCH_IO_SUPPORTED, 1);
  EXPECT_EQ(CU_FILE_STREAMS_SUPPORTED, 2);
  EXPECT_EQ(CU_FILE_PARALLEL_IO_SUPPORTED, 3);
}

TEST(AbiValues, HandleOpcodeStatusAndBatchEnums) {
  EXPECT_EQ(CU_FILE_HANDLE_TYPE_OPAQUE_FD, 1);
  EXPECT_EQ(CU_FILE_HANDLE_TYPE_OPAQUE_WIN32, 2);
  EXPECT_EQ(CU_FILE_HANDLE_TYPE_USERSPACE_FS, 3);

  EXPECT_EQ(CUFILE_READ, 0);
  EXPECT_EQ(CUFILE_WRITE, 1);

  EXPECT_EQ(CUFILE_WAITING, 0x01);
  EXPECT_EQ(CUFILE_PENDING, 0x02);
  EXPECT_EQ(CUFILE_INVALID, 0x04);
  EXPECT_EQ(CUFILE_CANCELED, 0x08);
  EXPECT_EQ(CUFILE_COMPLETE, 0x10);
  EXPECT_EQ(CUFILE_TIMEOUT, 0x20);
  EXPECT_EQ(CUFILE_FAILED, 0x40);

  EXPECT_EQ(CUFILE_BATCH, 1);
}

TEST(AbiValues, ConfigParameterEnums) {
  EXPECT_EQ(CUFILE_PARAM_PROFILE_STATS, 0);
  EXPECT_EQ(CUFILE_PARAM_EXECUTION_MAX_IO_QUEUE_DEPTH, 1);
  EXPECT_EQ(CUFILE_PARAM_EXECUTION_MAX_IO_THREADS, 2);
  EXPECT_EQ(CUFILE_PARAM_EXECUTION_MIN_IO_THRESHOLD_SIZE_KB, 3);
  EXPECT_EQ(CUFILE_PARAM_EXECUTION_MAX_REQUEST_PARALLELISM, 4);
  EXPECT_EQ(CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB, 5);
  EXPECT_EQ(CUFILE_PARAM_PROPERTIES_MAX_DEVICE_CACHE_SIZE_KB, 6);
  EXPECT_EQ(CUFILE_PARAM_PROPERTIES_PER_BUFFER_CACHE_SIZE_KB, 7);
  EXPECT_EQ(CUFILE_PARAM_PROPERTIES_MAX_DEVICE_PINNED_MEM_SIZE_KB, 8);
  EXPECT_EQ(CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE, 9);
  EXPECT_EQ(CUFILE_PARAM_POLLTHRESHOLD_SIZE_KB, 10);
  EXPECT_EQ(CUFILE_PARAM_PROPERTIES_BATCH_IO_TIMEOUT_MS, 11);

  EXPECT_EQ(CUFILE_PARAM_PROPERTIES_USE_POLL_MODE, 0);
  EXPECT_EQ(CUFILE_PARAM_PROPERTIES_ALLOW_COMPAT_MODE, 1);
  EXPECT_EQ(CUFILE_PARAM_FORCE_COMPAT_MODE, 2);
  EXPECT_EQ(CUFILE_PARAM_FS_MISC_API_CHECK_AGGRESSIVE, 3);
  EXPECT_EQ(CUFILE_PARAM_EXECUTION_PARALLEL_IO, 4);
  EXPECT_EQ(CUFILE_PARAM_PROFILE_NVTX, 5);
  EXPECT_EQ(CUFILE_PARAM_PROPERTIES_ALLOW_SYSTEM_MEMORY, 6);
  EXPECT_EQ(CUFILE_PARAM_USE_PCIP2PDMA, 7);
  EXPECT_EQ(CUFILE_PARAM_PREFER_IO_URING, 8);
  EXPECT_EQ(CUFILE_PARAM_FORCE_ODIRECT_MODE, 9);
  EXPECT_EQ(CUFILE_PARAM_SKIP_TOPOLOGY_DETECTION, 10);
  EXPECT_EQ(CUFILE_PARAM_STREAM_MEMOPS_BYPASS, 11);

  EXPECT_EQ(CUFILE_PARAM_LOGGING_LEVEL, 0);
  EXPECT_EQ(CUFILE_PARAM_ENV_LOGFILE_PATH, 1);
  EXPECT_EQ(CUFILE_PARAM_LOG_DIR, 2);

  EXPECT_EQ(CUFILE_PARAM_POSIX_POOL_SLAB_SIZE_KB, 0);
  EXPECT_EQ(CUFILE_PARAM_POSIX_POOL_SLAB_COUNT, 1);
}

TEST(AbiValues, FlagMacros) {
  EXPECT_EQ(CU_FILE_RDMA_REGISTER, 1);
  EXPECT_EQ(CU_FILE_RDMA_RELAXED_ORDERING, 2);
  EXPECT_EQ(CU_FILE_STREAM_FIXED_BUF_OFFSET, 1);
  EXPECT_EQ(CU_FILE_STREAM_FIXED_FILE_OFFSET, 2);
  EXPECT_EQ(CU_FILE_STREAM_FIXED_FILE_SIZE, 4);
  EXPECT_EQ(CU_FILE_STREAM_PAGE_ALIGNED_INPUTS, 8);
  EXPECT_EQ(CUFILE_GPU_UUID_LEN, 16);
}

}  // namespace
