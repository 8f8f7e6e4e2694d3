/*
 * Test-only stand-in for the CUDA toolkit's <cuda.h>: just the two types include/cufile.h
 * uses, declared the way the toolkit declares them. abi_header_with_cuda_h puts this directory
 * on the include path to exercise the header's "<cuda.h> found" branch without a toolkit.
 */
#ifndef __cuda_cuda_h__
#define __cuda_cuda_h__

#include <stdint.h>

typedef enum cudaError_enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_UNKNOWN = 999
} CUresult;

typedef struct CUstream_st *CUstream;

#endif /* __cuda_cuda_h__ */
