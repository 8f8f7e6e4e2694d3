/* Test controls of the NVIDIA libcufile test double (fakecufile.cpp). A test reaches them by
 * dlopen()ing the same file gpufile loaded (same path: the same loaded copy) and dlsym(). */
#ifndef GPUFILE_FAKECUFILE_H_
#define GPUFILE_FAKECUFILE_H_

#ifdef __cplusplus
extern "C" {
#endif

/* Calls of one entry point ("cuFileRead", "cuFileHandleRegister", ...) since the last reset. */
long fakecufile_calls(const char* entry_point);
/* The next `times` calls of `entry_point` (cuFileRead or cuFileWrite) fail: -1, errno = code. */
void fakecufile_fail(const char* entry_point, int code, int times);
/* Files and buffers registered now, and whether the driver is open. */
int fakecufile_open_files(void);
int fakecufile_open_buffers(void);
int fakecufile_driver_is_open(void);
/* Whether the last file registered came with O_DIRECT (NVIDIA's DMA needs it). */
int fakecufile_last_file_direct(void);
/* Zeroes the call counts and the failures queued. */
void fakecufile_reset(void);

#ifdef __cplusplus
}
#endif
#endif
