/*
 * Expected x86-64 (LP64) layout of the cuFile 1.15.1.6 ABI types, as X-macro lists shared by
 * the C and the C++ layout checks. Values were taken by compiling NVIDIA's 1.15.1.6 header
 * (spec: cufile-api.md, section 1.1); gpufile's include/cufile.h must match.
 *
 *   GPUFILE_ABI_SIZES(X):  X(type, sizeof, alignof)
 *   GPUFILE_ABI_FIELDS(X): X(type, member designator, offsetof, sizeof member)
 */
#ifndef GPUFILE_TESTS_ABI_LAYOUT_LIST_H
#define GPUFILE_TESTS_ABI_LAYOUT_LIST_H

#define GPUFILE_ABI_SIZES(X) \
    X(CUfileHandle_t, 8, 8) \
    X(CUfileBatchHandle_t, 8, 8) \
    X(CUfileError_t, 8, 4) \
    X(CUfileDescr_t, 24, 8) \
    X(CUfileFSOps_t, 40, 8) \
    X(CUfileDrvProps_t, 56, 8) \
    X(cufileRDMAInfo_t, 16, 8) \
    X(CUfileIOParams_t, 64, 8) \
    X(CUfileIOEvents_t, 24, 8) \
    X(CUfileOpCounter_t, 16, 8) \
    X(CUfileStatsLevel1_t, 512, 8) \
    X(CUfileStatsLevel2_t, 1024, 8) \
    X(CUfilePerGpuStats_t, 248, 8) \
    X(CUfileStatsLevel3_t, 5000, 8) \
    X(CUfileOpError, 4, 4) \
    X(CUfileDriverStatusFlags_t, 4, 4) \
    X(CUfileDriverControlFlags_t, 4, 4) \
    X(CUfileFeatureFlags_t, 4, 4) \
    X(enum CUfileFileHandleType, 4, 4) \
    X(CUfileOpcode_t, 4, 4) \
    X(CUfileStatus_t, 4, 4) \
    X(CUfileBatchMode_t, 4, 4) \
    X(CUFileSizeTConfigParameter_t, 4, 4) \
    X(CUFileBoolConfigParameter_t, 4, 4) \
    X(CUFileStringConfigParameter_t, 4, 4) \
    X(CUFileArrayConfigParameter_t, 4, 4) \
    /* end */

#define GPUFILE_ABI_FIELDS(X) \
    X(CUfileError_t, err, 0, 4) \
    X(CUfileError_t, cu_err, 4, 4) \
    X(CUfileDescr_t, type, 0, 4) \
    X(CUfileDescr_t, handle, 8, 8) \
    X(CUfileDescr_t, handle.fd, 8, 4) \
    X(CUfileDescr_t, handle.handle, 8, 8) \
    X(CUfileDescr_t, fs_ops, 16, 8) \
    X(CUfileFSOps_t, fs_type, 0, 8) \
    X(CUfileFSOps_t, getRDMADeviceList, 8, 8) \
    X(CUfileFSOps_t, getRDMADevicePriority, 16, 8) \
    X(CUfileFSOps_t, read, 24, 8) \
    X(CUfileFSOps_t, write, 32, 8) \
    X(CUfileDrvProps_t, nvfs, 0, 32) \
    X(CUfileDrvProps_t, nvfs.major_version, 0, 4) \
    X(CUfileDrvProps_t, nvfs.minor_version, 4, 4) \
    X(CUfileDrvProps_t, nvfs.poll_thresh_size, 8, 8) \
    X(CUfileDrvProps_t, nvfs.max_direct_io_size, 16, 8) \
    X(CUfileDrvProps_t, nvfs.dstatusflags, 24, 4) \
    X(CUfileDrvProps_t, nvfs.dcontrolflags, 28, 4) \
    X(CUfileDrvProps_t, fflags, 32, 4) \
    X(CUfileDrvProps_t, max_device_cache_size, 36, 4) \
    X(CUfileDrvProps_t, per_buffer_cache_size, 40, 4) \
    X(CUfileDrvProps_t, max_device_pinned_mem_size, 44, 4) \
    X(CUfileDrvProps_t, max_batch_io_size, 48, 4) \
    X(CUfileDrvProps_t, max_batch_io_timeout_msecs, 52, 4) \
    X(cufileRDMAInfo_t, version, 0, 4) \
    X(cufileRDMAInfo_t, desc_len, 4, 4) \
    X(cufileRDMAInfo_t, desc_str, 8, 8) \
    X(CUfileIOParams_t, mode, 0, 4) \
    X(CUfileIOParams_t, u, 8, 32) \
    X(CUfileIOParams_t, u.batch.devPtr_base, 8, 8) \
    X(CUfileIOParams_t, u.batch.file_offset, 16, 8) \
    X(CUfileIOParams_t, u.batch.devPtr_offset, 24, 8) \
    X(CUfileIOParams_t, u.batch.size, 32, 8) \
    X(CUfileIOParams_t, fh, 40, 8) \
    X(CUfileIOParams_t, opcode, 48, 4) \
    X(CUfileIOParams_t, cookie, 56, 8) \
    X(CUfileIOEvents_t, cookie, 0, 8) \
    X(CUfileIOEvents_t, status, 8, 4) \
    X(CUfileIOEvents_t, ret, 16, 8) \
    X(CUfileOpCounter_t, ok, 0, 8) \
    X(CUfileOpCounter_t, err, 8, 8) \
    X(CUfileStatsLevel1_t, read_ops, 0, 16) \
    X(CUfileStatsLevel1_t, write_ops, 16, 16) \
    X(CUfileStatsLevel1_t, hdl_register_ops, 32, 16) \
    X(CUfileStatsLevel1_t, hdl_deregister_ops, 48, 16) \
    X(CUfileStatsLevel1_t, buf_register_ops, 64, 16) \
    X(CUfileStatsLevel1_t, buf_deregister_ops, 80, 16) \
    X(CUfileStatsLevel1_t, read_bytes, 96, 8) \
    X(CUfileStatsLevel1_t, write_bytes, 104, 8) \
    X(CUfileStatsLevel1_t, read_bw_bytes_per_sec, 112, 8) \
    X(CUfileStatsLevel1_t, write_bw_bytes_per_sec, 120, 8) \
    X(CUfileStatsLevel1_t, read_lat_avg_us, 128, 8) \
    X(CUfileStatsLevel1_t, write_lat_avg_us, 136, 8) \
    X(CUfileStatsLevel1_t, read_ops_per_sec, 144, 8) \
    X(CUfileStatsLevel1_t, write_ops_per_sec, 152, 8) \
    X(CUfileStatsLevel1_t, read_lat_sum_us, 160, 8) \
    X(CUfileStatsLevel1_t, write_lat_sum_us, 168, 8) \
    X(CUfileStatsLevel1_t, batch_submit_ops, 176, 16) \
    X(CUfileStatsLevel1_t, batch_complete_ops, 192, 16) \
    X(CUfileStatsLevel1_t, batch_setup_ops, 208, 16) \
    X(CUfileStatsLevel1_t, batch_cancel_ops, 224, 16) \
    X(CUfileStatsLevel1_t, batch_destroy_ops, 240, 16) \
    X(CUfileStatsLevel1_t, batch_enqueued_ops, 256, 16) \
    X(CUfileStatsLevel1_t, batch_posix_enqueued_ops, 272, 16) \
    X(CUfileStatsLevel1_t, batch_processed_ops, 288, 16) \
    X(CUfileStatsLevel1_t, batch_posix_processed_ops, 304, 16) \
    X(CUfileStatsLevel1_t, batch_nvfs_submit_ops, 320, 16) \
    X(CUfileStatsLevel1_t, batch_p2p_submit_ops, 336, 16) \
    X(CUfileStatsLevel1_t, batch_aio_submit_ops, 352, 16) \
    X(CUfileStatsLevel1_t, batch_iouring_submit_ops, 368, 16) \
    X(CUfileStatsLevel1_t, batch_mixed_io_submit_ops, 384, 16) \
    X(CUfileStatsLevel1_t, batch_total_submit_ops, 400, 16) \
    X(CUfileStatsLevel1_t, batch_read_bytes, 416, 8) \
    X(CUfileStatsLevel1_t, batch_write_bytes, 424, 8) \
    X(CUfileStatsLevel1_t, batch_read_bw_bytes, 432, 8) \
    X(CUfileStatsLevel1_t, batch_write_bw_bytes, 440, 8) \
    X(CUfileStatsLevel1_t, batch_submit_lat_avg_us, 448, 8) \
    X(CUfileStatsLevel1_t, batch_completion_lat_avg_us, 456, 8) \
    X(CUfileStatsLevel1_t, batch_submit_ops_per_sec, 464, 8) \
    X(CUfileStatsLevel1_t, batch_complete_ops_per_sec, 472, 8) \
    X(CUfileStatsLevel1_t, batch_submit_lat_sum_us, 480, 8) \
    X(CUfileStatsLevel1_t, batch_completion_lat_sum_us, 488, 8) \
    X(CUfileStatsLevel1_t, last_batch_read_bytes, 496, 8) \
    X(CUfileStatsLevel1_t, last_batch_write_bytes, 504, 8) \
    X(CUfileStatsLevel2_t, basic, 0, 512) \
    X(CUfileStatsLevel2_t, read_size_kb_hist, 512, 256) \
    X(CUfileStatsLevel2_t, write_size_kb_hist, 768, 256) \
    X(CUfilePerGpuStats_t, uuid, 0, 16) \
    X(CUfilePerGpuStats_t, read_bytes, 16, 8) \
    X(CUfilePerGpuStats_t, read_bw_bytes_per_sec, 24, 8) \
    X(CUfilePerGpuStats_t, read_utilization, 32, 8) \
    X(CUfilePerGpuStats_t, read_duration_us, 40, 8) \
    X(CUfilePerGpuStats_t, n_total_reads, 48, 8) \
    X(CUfilePerGpuStats_t, n_p2p_reads, 56, 8) \
    X(CUfilePerGpuStats_t, n_nvfs_reads, 64, 8) \
    X(CUfilePerGpuStats_t, n_posix_reads, 72, 8) \
    X(CUfilePerGpuStats_t, n_unaligned_reads, 80, 8) \
    X(CUfilePerGpuStats_t, n_dr_reads, 88, 8) \
    X(CUfilePerGpuStats_t, n_sparse_regions, 96, 8) \
    X(CUfilePerGpuStats_t, n_inline_regions, 104, 8) \
    X(CUfilePerGpuStats_t, n_reads_err, 112, 8) \
    X(CUfilePerGpuStats_t, writes_bytes, 120, 8) \
    X(CUfilePerGpuStats_t, write_bw_bytes_per_sec, 128, 8) \
    X(CUfilePerGpuStats_t, write_utilization, 136, 8) \
    X(CUfilePerGpuStats_t, write_duration_us, 144, 8) \
    X(CUfilePerGpuStats_t, n_total_writes, 152, 8) \
    X(CUfilePerGpuStats_t, n_p2p_writes, 160, 8) \
    X(CUfilePerGpuStats_t, n_nvfs_writes, 168, 8) \
    X(CUfilePerGpuStats_t, n_posix_writes, 176, 8) \
    X(CUfilePerGpuStats_t, n_unaligned_writes, 184, 8) \
    X(CUfilePerGpuStats_t, n_dr_writes, 192, 8) \
    X(CUfilePerGpuStats_t, n_writes_err, 200, 8) \
    X(CUfilePerGpuStats_t, n_mmap, 208, 8) \
    X(CUfilePerGpuStats_t, n_mmap_ok, 216, 8) \
    X(CUfilePerGpuStats_t, n_mmap_err, 224, 8) \
    X(CUfilePerGpuStats_t, n_mmap_free, 232, 8) \
    X(CUfilePerGpuStats_t, reg_bytes, 240, 8) \
    X(CUfileStatsLevel3_t, detailed, 0, 1024) \
    X(CUfileStatsLevel3_t, num_gpus, 1024, 4) \
    X(CUfileStatsLevel3_t, per_gpu_stats, 1032, 3968) \
    /* end */

#endif /* GPUFILE_TESTS_ABI_LAYOUT_LIST_H */
