/*
 * cufile.h - gpufile's declaration of the cuFile C API.
 *
 * Source- and binary-compatible with the public interface of NVIDIA cuFile (GPUDirect Storage)
 * 1.15.1.6: the same names, enumerator values, struct layouts and entry points, so programs
 * written for cuFile build against this header and run against libcufile.so.0 from either
 * gpufile or NVIDIA.
 *
 * Builds as C99 or later and as C++; a CUDA toolkit is optional (see "CUDA types" below).
 * Layouts assume an LP64 Linux target (x86-64, aarch64); tests/abi checks them.
 */
#if !defined(GPUFILE_CUFILE_H_) && !defined(__CUFILE_H_)
#define GPUFILE_CUFILE_H_ 1
/* NVIDIA's header guard as well, so that its header and this one never both get expanded. */
#define __CUFILE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h> /* abs(), used by IS_CUFILE_ERR and CUFILE_ERRSTR */
#include <time.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <arpa/inet.h> /* NVIDIA's header pulls this in; kept for sources that rely on it */

/* ---- CUDA types --------------------------------------------------------------------------
 * Only CUresult and CUstream are needed. The toolkit's <cuda.h> is used when the compiler can
 * find it (define GPUFILE_NO_CUDA_H to skip it). Otherwise minimal stand-ins with the same
 * size are declared; they are left out when <cuda.h> has already been included. */
#if !defined(GPUFILE_NO_CUDA_H) && defined(__has_include)
#if __has_include(<cuda.h>)
#include <cuda.h>
#endif
#endif

#if !defined(__cuda_cuda_h__) && !defined(GPUFILE_CUDA_STANDIN_TYPES)
#define GPUFILE_CUDA_STANDIN_TYPES 1
typedef int CUresult;                  /* enum cudaError_enum in <cuda.h>: 4 bytes either way */
typedef struct CUstream_st *CUstream;  /* same declaration as <cuda.h> */
#endif

/* loff_t (a 64-bit file offset) is a GNU name that strict ISO modes hide; fall back to the
 * type it stands for there. */
#if defined(__USE_MISC)
#define GPUFILE_LOFF_T_ loff_t
#elif defined(__GLIBC__)
#define GPUFILE_LOFF_T_ __loff_t
#else
#define GPUFILE_LOFF_T_ off_t
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Makes the prototypes below valid even where <time.h> does not define the struct (strict C99). */
struct timespec;

/* ---- Errors ------------------------------------------------------------------------------ */

/* cuFile status codes start above this value; 0 is success. */
#define CUFILEOP_BASE_ERR 5000

typedef enum CUfileOpError {
    CU_FILE_SUCCESS = 0,
    CU_FILE_DRIVER_NOT_INITIALIZED = 5001,
    CU_FILE_DRIVER_INVALID_PROPS = 5002,
    CU_FILE_DRIVER_UNSUPPORTED_LIMIT = 5003,
    CU_FILE_DRIVER_VERSION_MISMATCH = 5004,
    CU_FILE_DRIVER_VERSION_READ_ERROR = 5005,
    CU_FILE_DRIVER_CLOSING = 5006,
    CU_FILE_PLATFORM_NOT_SUPPORTED = 5007,
    CU_FILE_IO_NOT_SUPPORTED = 5008,
    CU_FILE_DEVICE_NOT_SUPPORTED = 5009,
    CU_FILE_NVFS_DRIVER_ERROR = 5010,
    CU_FILE_CUDA_DRIVER_ERROR = 5011,
    CU_FILE_CUDA_POINTER_INVALID = 5012,
    CU_FILE_CUDA_MEMORY_TYPE_INVALID = 5013,
    CU_FILE_CUDA_POINTER_RANGE_ERROR = 5014,
    CU_FILE_CUDA_CONTEXT_MISMATCH = 5015,
    CU_FILE_INVALID_MAPPING_SIZE = 5016,
    CU_FILE_INVALID_MAPPING_RANGE = 5017,
    CU_FILE_INVALID_FILE_TYPE = 5018,
    CU_FILE_INVALID_FILE_OPEN_FLAG = 5019,
    CU_FILE_DIO_NOT_SET = 5020,
    /* 5021: not assigned */
    CU_FILE_INVALID_VALUE = 5022,
    CU_FILE_MEMORY_ALREADY_REGISTERED = 5023,
    CU_FILE_MEMORY_NOT_REGISTERED = 5024,
    CU_FILE_PERMISSION_DENIED = 5025,
    CU_FILE_DRIVER_ALREADY_OPEN = 5026,
    CU_FILE_HANDLE_NOT_REGISTERED = 5027,
    CU_FILE_HANDLE_ALREADY_REGISTERED = 5028,
    CU_FILE_DEVICE_NOT_FOUND = 5029,
    CU_FILE_INTERNAL_ERROR = 5030,
    CU_FILE_GETNEWFD_FAILED = 5031,
    /* 5032: not assigned */
    CU_FILE_NVFS_SETUP_ERROR = 5033,
    CU_FILE_IO_DISABLED = 5034,
    CU_FILE_BATCH_SUBMIT_FAILED = 5035,
    CU_FILE_GPU_MEMORY_PINNING_FAILED = 5036,
    CU_FILE_BATCH_FULL = 5037,
    CU_FILE_ASYNC_NOT_SUPPORTED = 5038,
    CU_FILE_INTERNAL_BATCH_SETUP_ERROR = 5039,
    CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR = 5040,
    CU_FILE_INTERNAL_BATCH_GETSTATUS_ERROR = 5041,
    CU_FILE_INTERNAL_BATCH_CANCEL_ERROR = 5042,
    CU_FILE_NOMEM_ERROR = 5043,
    CU_FILE_IO_ERROR = 5044,
    CU_FILE_INTERNAL_BUF_REGISTER_ERROR = 5045,
    CU_FILE_HASH_OPR_ERROR = 5046,
    CU_FILE_INVALID_CONTEXT_ERROR = 5047,
    CU_FILE_NVFS_INTERNAL_DRIVER_ERROR = 5048,
    CU_FILE_BATCH_NOCOMPAT_ERROR = 5049,
    CU_FILE_IO_MAX_ERROR = 5050 /* upper bound, never returned */
} CUfileOpError;

/* Message for a status code; "unknown cufile error" for anything unlisted. */
static inline const char *cufileop_status_error(CUfileOpError status)
{
    switch (status) {
    case CU_FILE_SUCCESS: return "cufile success";
    case CU_FILE_DRIVER_NOT_INITIALIZED:
        return "nvidia-fs driver is not loaded. Set allow_compat_mode to true in cufile.json file "
               "to enable compatible mode";
    case CU_FILE_DRIVER_INVALID_PROPS: return "invalid property";
    case CU_FILE_DRIVER_UNSUPPORTED_LIMIT: return "property range error";
    case CU_FILE_DRIVER_VERSION_MISMATCH: return "nvidia-fs driver version mismatch";
    case CU_FILE_DRIVER_VERSION_READ_ERROR: return "nvidia-fs driver version read error";
    case CU_FILE_DRIVER_CLOSING: return "driver shutdown in progress";
    case CU_FILE_PLATFORM_NOT_SUPPORTED: return "GPUDirect Storage not supported on current platform";
    case CU_FILE_IO_NOT_SUPPORTED: return "GPUDirect Storage not supported on current file";
    case CU_FILE_DEVICE_NOT_SUPPORTED: return "GPUDirect Storage not supported on current GPU";
    case CU_FILE_NVFS_DRIVER_ERROR: return "nvidia-fs driver ioctl error";
    case CU_FILE_CUDA_DRIVER_ERROR: return "CUDA Driver API error";
    case CU_FILE_CUDA_POINTER_INVALID: return "invalid device pointer";
    case CU_FILE_CUDA_MEMORY_TYPE_INVALID: return "invalid pointer memory type";
    case CU_FILE_CUDA_POINTER_RANGE_ERROR: return "pointer range exceeds allocated address range";
    case CU_FILE_CUDA_CONTEXT_MISMATCH: return "cuda context mismatch";
    case CU_FILE_INVALID_MAPPING_SIZE: return "access beyond maximum pinned size";
    case CU_FILE_INVALID_MAPPING_RANGE: return "access beyond mapped size";
    case CU_FILE_INVALID_FILE_TYPE: return "unsupported file type";
    case CU_FILE_INVALID_FILE_OPEN_FLAG: return "unsupported file open flags";
    case CU_FILE_DIO_NOT_SET: return "fd direct IO not set";
    case CU_FILE_INVALID_VALUE: return "invalid arguments";
    case CU_FILE_MEMORY_ALREADY_REGISTERED: return "device pointer already registered";
    case CU_FILE_MEMORY_NOT_REGISTERED: return "device pointer lookup failure";
    case CU_FILE_PERMISSION_DENIED: return "driver or file access error";
    case CU_FILE_DRIVER_ALREADY_OPEN: return "driver is already open";
    case CU_FILE_HANDLE_NOT_REGISTERED: return "file descriptor is not registered";
    case CU_FILE_HANDLE_ALREADY_REGISTERED: return "file descriptor is already registered";
    case CU_FILE_DEVICE_NOT_FOUND: return "GPU device not found";
    case CU_FILE_INTERNAL_ERROR: return "internal error";
    case CU_FILE_GETNEWFD_FAILED: return "failed to obtain new file descriptor";
    case CU_FILE_NVFS_SETUP_ERROR: return "NVFS driver initialization error";
    case CU_FILE_IO_DISABLED: return "GPUDirect Storage disabled by config on current file";
    case CU_FILE_BATCH_SUBMIT_FAILED: return "failed to submit batch operation";
    case CU_FILE_GPU_MEMORY_PINNING_FAILED: return "failed to allocate pinned GPU Memory";
    case CU_FILE_BATCH_FULL: return "queue full for batch operation";
    case CU_FILE_ASYNC_NOT_SUPPORTED: return "cuFile stream operation not supported";
    case CU_FILE_INTERNAL_BATCH_SETUP_ERROR: return "batch setup internal error - retry later";
    case CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR: return "batch submit internal error - retry later";
    case CU_FILE_INTERNAL_BATCH_GETSTATUS_ERROR: return "batch get status internal error - retry later";
    case CU_FILE_INTERNAL_BATCH_CANCEL_ERROR: return "batch cancel internal error - retry later";
    case CU_FILE_NOMEM_ERROR: return "cufile no memory error - retry later";
    case CU_FILE_IO_ERROR: return "cufile io error";
    case CU_FILE_INTERNAL_BUF_REGISTER_ERROR: return "cufile buf registration error";
    case CU_FILE_HASH_OPR_ERROR: return "cufile hash operation error";
    case CU_FILE_INVALID_CONTEXT_ERROR: return "cufile invalid context error";
    case CU_FILE_NVFS_INTERNAL_DRIVER_ERROR: return "nvfs internal driver error";
    case CU_FILE_BATCH_NOCOMPAT_ERROR: return "compat mode off error";
    case CU_FILE_IO_MAX_ERROR: return "GPUDirect Storage Max Error";
    default: return "unknown cufile error";
    }
}

/* Result of most calls, returned by value. cu_err only matters when err is
 * CU_FILE_CUDA_DRIVER_ERROR. */
typedef struct CUfileError {
    CUfileOpError err;
    CUresult cu_err;
} CUfileError_t;

/* err: an int that may hold a status code with either sign (e.g. errno, or -ret of cuFileRead). */
#define IS_CUFILE_ERR(err) (abs((err)) > CUFILEOP_BASE_ERR)
#define CUFILE_ERRSTR(err) cufileop_status_error((CUfileOpError)abs((err)))
/* status: a CUfileError_t. */
#define IS_CUDA_ERR(status) ((status).err == CU_FILE_CUDA_DRIVER_ERROR)
#define CU_FILE_CUDA_ERR(status) ((status).cu_err)

/* ---- Driver properties ------------------------------------------------------------------- */

/* Bit numbers in CUfileDrvProps_t.nvfs.dstatusflags: storage kinds with GDS support. */
typedef enum CUfileDriverStatusFlags {
    CU_FILE_LUSTRE_SUPPORTED = 0,
    CU_FILE_WEKAFS_SUPPORTED = 1,
    CU_FILE_NFS_SUPPORTED = 2,
    CU_FILE_GPFS_SUPPORTED = 3,
    CU_FILE_NVME_SUPPORTED = 4,
    CU_FILE_NVMEOF_SUPPORTED = 5,
    CU_FILE_SCSI_SUPPORTED = 6,
    CU_FILE_SCALEFLUX_CSD_SUPPORTED = 7,
    CU_FILE_NVMESH_SUPPORTED = 8,
    CU_FILE_BEEGFS_SUPPORTED = 9,
    /* 10 is reserved */
    CU_FILE_NVME_P2P_SUPPORTED = 11,
    CU_FILE_SCATEFS_SUPPORTED = 12
} CUfileDriverStatusFlags_t;

/* Bit numbers in CUfileDrvProps_t.nvfs.dcontrolflags. */
typedef enum CUfileDriverControlFlags {
    CU_FILE_USE_POLL_MODE = 0,
    CU_FILE_ALLOW_COMPAT_MODE = 1
} CUfileDriverControlFlags_t;

/* Bit numbers in CUfileDrvProps_t.fflags. */
typedef enum CUfileFeatureFlags {
    CU_FILE_DYN_ROUTING_SUPPORTED = 0,
    CU_FILE_BATCH_IO_SUPPORTED = 1,
    CU_FILE_STREAMS_SUPPORTED = 2,
    CU_FILE_PARALLEL_IO_SUPPORTED = 3
} CUfileFeatureFlags_t;

/* Filled by cuFileDriverGetProperties. Sizes are in KiB. */
typedef struct CUfileDrvProps {
    struct {
        unsigned int major_version; /* nvidia-fs kernel module version, 0.0 without it */
        unsigned int minor_version;
        size_t poll_thresh_size;
        size_t max_direct_io_size;
        unsigned int dstatusflags; /* 1 << CUfileDriverStatusFlags_t */
        unsigned int dcontrolflags; /* 1 << CUfileDriverControlFlags_t */
    } nvfs;
    unsigned int fflags; /* 1 << CUfileFeatureFlags_t */
    unsigned int max_device_cache_size;
    unsigned int per_buffer_cache_size;
    unsigned int max_device_pinned_mem_size;
    unsigned int max_batch_io_size;
    unsigned int max_batch_io_timeout_msecs;
} CUfileDrvProps_t;

/* ---- File handles ------------------------------------------------------------------------ */

typedef struct sockaddr sockaddr_t;

/* Passed to the read/write hooks of a user-space filesystem. */
typedef struct cufileRDMAInfo {
    int version;
    int desc_len;
    const char *desc_str;
} cufileRDMAInfo_t;

/* cuFileBufRegister flags. */
#define CU_FILE_RDMA_REGISTER 1
#define CU_FILE_RDMA_RELAXED_ORDERING 2

/* Hooks of a user-space filesystem (CU_FILE_HANDLE_TYPE_USERSPACE_FS); any may be NULL. */
typedef struct CUfileFSOps {
    const char *(*fs_type)(void *handle);
    int (*getRDMADeviceList)(void *handle, sockaddr_t **hostaddrs);
    int (*getRDMADevicePriority)(void *handle, char *buf, size_t size, GPUFILE_LOFF_T_ offset,
                                 sockaddr_t *hostaddr);
    ssize_t (*read)(void *handle, char *buf, size_t size, GPUFILE_LOFF_T_ offset,
                    cufileRDMAInfo_t *info);
    ssize_t (*write)(void *handle, const char *buf, size_t size, GPUFILE_LOFF_T_ offset,
                     cufileRDMAInfo_t *info);
} CUfileFSOps_t;

enum CUfileFileHandleType {
    CU_FILE_HANDLE_TYPE_OPAQUE_FD = 1,    /* a POSIX file descriptor */
    CU_FILE_HANDLE_TYPE_OPAQUE_WIN32 = 2, /* Windows HANDLE; not supported */
    CU_FILE_HANDLE_TYPE_USERSPACE_FS = 3  /* opaque handle plus fs_ops */
};

/* Describes the file to cuFileHandleRegister. Zero it, then set type and handle. */
typedef struct CUfileDescr_t {
    enum CUfileFileHandleType type;
    union {
        int fd;
        void *handle;
    } handle;
    const CUfileFSOps_t *fs_ops;
} CUfileDescr_t;

typedef void *CUfileHandle_t;

/* ---- Batch IO ---------------------------------------------------------------------------- */

typedef enum CUfileOpcode {
    CUFILE_READ = 0,
    CUFILE_WRITE = 1
} CUfileOpcode_t;

/* Per-entry state reported by cuFileBatchIOGetStatus. */
typedef enum CUFILEStatus_enum {
    CUFILE_WAITING = 0x01,
    CUFILE_PENDING = 0x02,
    CUFILE_INVALID = 0x04,
    CUFILE_CANCELED = 0x08,
    CUFILE_COMPLETE = 0x10,
    CUFILE_TIMEOUT = 0x20,
    CUFILE_FAILED = 0x40
} CUfileStatus_t;

typedef enum cufileBatchMode {
    CUFILE_BATCH = 1
} CUfileBatchMode_t;

/* One entry of a batch submission. */
typedef struct CUfileIOParams {
    CUfileBatchMode_t mode; /* CUFILE_BATCH */
    union {
        struct {
            void *devPtr_base;
            off_t file_offset;
            off_t devPtr_offset;
            size_t size;
        } batch;
    } u;
    CUfileHandle_t fh;
    CUfileOpcode_t opcode;
    void *cookie; /* handed back in CUfileIOEvents_t */
} CUfileIOParams_t;

/* One completion. ret: bytes transferred, or a negative error stored in a size_t. */
typedef struct CUfileIOEvents {
    void *cookie;
    CUfileStatus_t status;
    size_t ret;
} CUfileIOEvents_t;

typedef void *CUfileBatchHandle_t;

/* ---- Stream IO --------------------------------------------------------------------------- */

/* cuFileStreamRegister flags: which arguments are final at submission, and alignment. */
#define CU_FILE_STREAM_FIXED_BUF_OFFSET 1
#define CU_FILE_STREAM_FIXED_FILE_OFFSET 2
#define CU_FILE_STREAM_FIXED_FILE_SIZE 4
#define CU_FILE_STREAM_PAGE_ALIGNED_INPUTS 8

/* ---- Configuration parameters ------------------------------------------------------------ */

typedef enum CUFileSizeTConfigParameter_t {
    CUFILE_PARAM_PROFILE_STATS = 0,
    CUFILE_PARAM_EXECUTION_MAX_IO_QUEUE_DEPTH = 1,
    CUFILE_PARAM_EXECUTION_MAX_IO_THREADS = 2,
    CUFILE_PARAM_EXECUTION_MIN_IO_THRESHOLD_SIZE_KB = 3,
    CUFILE_PARAM_EXECUTION_MAX_REQUEST_PARALLELISM = 4,
    CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB = 5,
    CUFILE_PARAM_PROPERTIES_MAX_DEVICE_CACHE_SIZE_KB = 6,
    CUFILE_PARAM_PROPERTIES_PER_BUFFER_CACHE_SIZE_KB = 7,
    CUFILE_PARAM_PROPERTIES_MAX_DEVICE_PINNED_MEM_SIZE_KB = 8,
    CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE = 9,
    CUFILE_PARAM_POLLTHRESHOLD_SIZE_KB = 10,
    CUFILE_PARAM_PROPERTIES_BATCH_IO_TIMEOUT_MS = 11
} CUFileSizeTConfigParameter_t;

typedef enum CUFileBoolConfigParameter_t {
    CUFILE_PARAM_PROPERTIES_USE_POLL_MODE = 0,
    CUFILE_PARAM_PROPERTIES_ALLOW_COMPAT_MODE = 1,
    CUFILE_PARAM_FORCE_COMPAT_MODE = 2,
    CUFILE_PARAM_FS_MISC_API_CHECK_AGGRESSIVE = 3,
    CUFILE_PARAM_EXECUTION_PARALLEL_IO = 4,
    CUFILE_PARAM_PROFILE_NVTX = 5,
    CUFILE_PARAM_PROPERTIES_ALLOW_SYSTEM_MEMORY = 6,
    CUFILE_PARAM_USE_PCIP2PDMA = 7,
    CUFILE_PARAM_PREFER_IO_URING = 8,
    CUFILE_PARAM_FORCE_ODIRECT_MODE = 9,
    CUFILE_PARAM_SKIP_TOPOLOGY_DETECTION = 10,
    CUFILE_PARAM_STREAM_MEMOPS_BYPASS = 11
} CUFileBoolConfigParameter_t;

typedef enum CUFileStringConfigParameter_t {
    CUFILE_PARAM_LOGGING_LEVEL = 0,
    CUFILE_PARAM_ENV_LOGFILE_PATH = 1,
    CUFILE_PARAM_LOG_DIR = 2
} CUFileStringConfigParameter_t;

typedef enum CUFileArrayConfigParameter_t {
    CUFILE_PARAM_POSIX_POOL_SLAB_SIZE_KB = 0,
    CUFILE_PARAM_POSIX_POOL_SLAB_COUNT = 1
} CUFileArrayConfigParameter_t;

/* ---- Statistics -------------------------------------------------------------------------- */

#define CUFILE_GPU_UUID_LEN 16

typedef struct CUfileOpCounter {
    uint64_t ok;
    uint64_t err;
} CUfileOpCounter_t;

/* Level 1: operation counters, throughput and latency (512 bytes). */
typedef struct CUfileStatsLevel1 {
    CUfileOpCounter_t read_ops;
    CUfileOpCounter_t write_ops;
    CUfileOpCounter_t hdl_register_ops;
    CUfileOpCounter_t hdl_deregister_ops;
    CUfileOpCounter_t buf_register_ops;
    CUfileOpCounter_t buf_deregister_ops;
    uint64_t read_bytes;
    uint64_t write_bytes;
    uint64_t read_bw_bytes_per_sec;
    uint64_t write_bw_bytes_per_sec;
    uint64_t read_lat_avg_us;
    uint64_t write_lat_avg_us;
    uint64_t read_ops_per_sec;
    uint64_t write_ops_per_sec;
    uint64_t read_lat_sum_us;
    uint64_t write_lat_sum_us;
    /* batch API */
    CUfileOpCounter_t batch_submit_ops;
    CUfileOpCounter_t batch_complete_ops;
    CUfileOpCounter_t batch_setup_ops;
    CUfileOpCounter_t batch_cancel_ops;
    CUfileOpCounter_t batch_destroy_ops;
    CUfileOpCounter_t batch_enqueued_ops;
    CUfileOpCounter_t batch_posix_enqueued_ops;
    CUfileOpCounter_t batch_processed_ops;
    CUfileOpCounter_t batch_posix_processed_ops;
    CUfileOpCounter_t batch_nvfs_submit_ops;
    CUfileOpCounter_t batch_p2p_submit_ops;
    CUfileOpCounter_t batch_aio_submit_ops;
    CUfileOpCounter_t batch_iouring_submit_ops;
    CUfileOpCounter_t batch_mixed_io_submit_ops;
    CUfileOpCounter_t batch_total_submit_ops;
    uint64_t batch_read_bytes;
    uint64_t batch_write_bytes;
    uint64_t batch_read_bw_bytes;
    uint64_t batch_write_bw_bytes;
    uint64_t batch_submit_lat_avg_us;
    uint64_t batch_completion_lat_avg_us;
    uint64_t batch_submit_ops_per_sec;
    uint64_t batch_complete_ops_per_sec;
    uint64_t batch_submit_lat_sum_us;
    uint64_t batch_completion_lat_sum_us;
    uint64_t last_batch_read_bytes;
    uint64_t last_batch_write_bytes;
} CUfileStatsLevel1_t;

/* Level 2: level 1 plus IO size histograms (1024 bytes). */
typedef struct CUfileStatsLevel2 {
    CUfileStatsLevel1_t basic;
    uint64_t read_size_kb_hist[32];
    uint64_t write_size_kb_hist[32];
} CUfileStatsLevel2_t;

/* Per-GPU counters of level 3 (248 bytes). */
typedef struct CUfilePerGpuStats {
    char uuid[CUFILE_GPU_UUID_LEN];
    uint64_t read_bytes;
    uint64_t read_bw_bytes_per_sec;
    uint64_t read_utilization;
    uint64_t read_duration_us;
    uint64_t n_total_reads;
    uint64_t n_p2p_reads;
    uint64_t n_nvfs_reads;
    uint64_t n_posix_reads;
    uint64_t n_unaligned_reads;
    uint64_t n_dr_reads;
    uint64_t n_sparse_regions;
    uint64_t n_inline_regions;
    uint64_t n_reads_err;
    uint64_t writes_bytes;
    uint64_t write_bw_bytes_per_sec;
    uint64_t write_utilization;
    uint64_t write_duration_us;
    uint64_t n_total_writes;
    uint64_t n_p2p_writes;
    uint64_t n_nvfs_writes;
    uint64_t n_posix_writes;
    uint64_t n_unaligned_writes;
    uint64_t n_dr_writes;
    uint64_t n_writes_err;
    uint64_t n_mmap;
    uint64_t n_mmap_ok;
    uint64_t n_mmap_err;
    uint64_t n_mmap_free;
    uint64_t reg_bytes;
} CUfilePerGpuStats_t;

/* Level 3: level 2 plus up to 16 GPUs (5000 bytes). */
typedef struct CUfileStatsLevel3 {
    CUfileStatsLevel2_t detailed;
    uint32_t num_gpus;
    CUfilePerGpuStats_t per_gpu_stats[16];
} CUfileStatsLevel3_t;

/* ---- Entry points ------------------------------------------------------------------------ */

#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* Driver lifetime and properties */
CUfileError_t cuFileDriverOpen(void);
CUfileError_t cuFileDriverClose(void);   /* the symbol that binaries built with old headers use */
CUfileError_t cuFileDriverClose_v2(void);
long cuFileUseCount(void);
CUfileError_t cuFileDriverGetProperties(CUfileDrvProps_t *props);
CUfileError_t cuFileDriverSetPollMode(bool poll, size_t poll_threshold_size);
CUfileError_t cuFileDriverSetMaxDirectIOSize(size_t max_direct_io_size);
CUfileError_t cuFileDriverSetMaxCacheSize(size_t max_cache_size);
CUfileError_t cuFileDriverSetMaxPinnedMemSize(size_t max_pinned_size);
CUfileError_t cuFileGetVersion(int *version);
CUfileError_t cuFileGetBARSizeInKB(int gpuIndex, size_t *barSize);

/* Calls written as cuFileDriverClose() bind to the _v2 symbol, as with NVIDIA's header. */
#define cuFileDriverClose cuFileDriverClose_v2

/* File handles and buffers */
CUfileError_t cuFileHandleRegister(CUfileHandle_t *fh, CUfileDescr_t *descr);
void cuFileHandleDeregister(CUfileHandle_t fh);
CUfileError_t cuFileBufRegister(const void *bufPtr_base, size_t length, int flags);
CUfileError_t cuFileBufDeregister(const void *bufPtr_base);

/* Synchronous IO: bytes transferred, or a negative value on failure */
ssize_t cuFileRead(CUfileHandle_t fh, void *bufPtr_base, size_t size, off_t file_offset,
                   off_t bufPtr_offset);
ssize_t cuFileWrite(CUfileHandle_t fh, const void *bufPtr_base, size_t size, off_t file_offset,
                    off_t bufPtr_offset);

/* Batch IO */
CUfileError_t cuFileBatchIOSetUp(CUfileBatchHandle_t *batch_idp, unsigned nr);
CUfileError_t cuFileBatchIOSubmit(CUfileBatchHandle_t batch_idp, unsigned nr,
                                  CUfileIOParams_t *iocbp, unsigned int flags);
CUfileError_t cuFileBatchIOGetStatus(CUfileBatchHandle_t batch_idp, unsigned min_nr, unsigned *nr,
                                     CUfileIOEvents_t *iocbp, struct timespec *timeout);
CUfileError_t cuFileBatchIOCancel(CUfileBatchHandle_t batch_idp);
void cuFileBatchIODestroy(CUfileBatchHandle_t batch_idp);

/* IO ordered on a CUDA stream; arguments are read through the pointers when the IO runs */
CUfileError_t cuFileReadAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p,
                              off_t *file_offset_p, off_t *bufPtr_offset_p, ssize_t *bytes_read_p,
                              CUstream stream);
CUfileError_t cuFileWriteAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p,
                               off_t *file_offset_p, off_t *bufPtr_offset_p,
                               ssize_t *bytes_written_p, CUstream stream);
CUfileError_t cuFileStreamRegister(CUstream stream, unsigned flags);
CUfileError_t cuFileStreamDeregister(CUstream stream);

/* Configuration parameters: Set* stage values for the next cuFileDriverOpen */
CUfileError_t cuFileGetParameterSizeT(CUFileSizeTConfigParameter_t param, size_t *value);
CUfileError_t cuFileGetParameterBool(CUFileBoolConfigParameter_t param, bool *value);
CUfileError_t cuFileGetParameterString(CUFileStringConfigParameter_t param, char *desc_str,
                                       int len);
CUfileError_t cuFileGetParameterMinMaxValue(CUFileSizeTConfigParameter_t param, size_t *min_value,
                                            size_t *max_value);
CUfileError_t cuFileSetParameterSizeT(CUFileSizeTConfigParameter_t param, size_t value);
CUfileError_t cuFileSetParameterBool(CUFileBoolConfigParameter_t param, bool value);
CUfileError_t cuFileSetParameterString(CUFileStringConfigParameter_t param, const char *desc_str);
CUfileError_t cuFileSetParameterPosixPoolSlabArray(const size_t *size_values,
                                                   const size_t *count_values, int len);
CUfileError_t cuFileGetParameterPosixPoolSlabArray(size_t *size_values, size_t *count_values,
                                                   int len);

/* Statistics (levels 0-3) */
CUfileError_t cuFileSetStatsLevel(int level);
CUfileError_t cuFileGetStatsLevel(int *level);
CUfileError_t cuFileStatsStart(void);
CUfileError_t cuFileStatsStop(void);
CUfileError_t cuFileStatsReset(void);
CUfileError_t cuFileGetStatsL1(CUfileStatsLevel1_t *stats);
CUfileError_t cuFileGetStatsL2(CUfileStatsLevel2_t *stats);
CUfileError_t cuFileGetStatsL3(CUfileStatsLevel3_t *stats);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
} /* extern "C" */
#endif

#undef GPUFILE_LOFF_T_

#endif /* GPUFILE_CUFILE_H_ */
