/* Interface between abi_layout.c (compiled as C) and the C++ tests in abi_tests. */
#ifndef GPUFILE_TESTS_ABI_LAYOUT_C_TABLE_H
#define GPUFILE_TESTS_ABI_LAYOUT_C_TABLE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gpufile_abi_entry {
    const char *what; /* e.g. "offsetof(CUfileIOParams_t, fh)" */
    size_t value;
};

/* Sizes and offsets as the C compiler sees them, in GPUFILE_ABI_SIZES/FIELDS order. */
const struct gpufile_abi_entry *gpufile_abi_c_table(size_t *count);

/* CUFILE_ERRSTR(code) evaluated in C. */
const char *gpufile_abi_c_errstr(int code);

#ifdef __cplusplus
}
#endif

#endif /* GPUFILE_TESTS_ABI_LAYOUT_C_TABLE_H */
