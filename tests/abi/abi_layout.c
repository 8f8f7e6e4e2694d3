/*
 * The cuFile ABI layout, checked at compile time from C. CMake builds this file as strict C99
 * (-std=c99 -pedantic, no _Static_assert there) and as C11, with and without a <cuda.h> on the
 * include path; any mismatch with abi_layout_list.h fails the build.
 *
 * It also records what the C compiler computed in a table that abi_tests compares, entry by
 * entry, with the C++ compiler's view of the same header.
 */
#include <cufile.h>

#include <stddef.h>

#include "abi_layout_c_table.h"
#include "abi_layout_list.h"

/* Set by the build for the variant that has stub_cuda/ on the include path. */
#if defined(GPUFILE_ABI_EXPECT_CUDA_H)
#if !defined(__cuda_cuda_h__) || defined(GPUFILE_CUDA_STANDIN_TYPES)
#error "cufile.h did not take CUresult and CUstream from <cuda.h>"
#endif
#endif

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define ABI_CHECK(cond, what) _Static_assert(cond, what);
#define ABI_ALIGNOF(T) _Alignof(T)
#else
/* C99: a negative array size is a compile-time error. Only valid inside a function. */
#define ABI_CHECK(cond, what) (void)sizeof(char[(cond) ? 1 : -1]);
#define ABI_ALIGNOF(T) 0
#endif

#define CHECK_SIZE(T, size, align)                                      \
    ABI_CHECK(sizeof(T) == (size), "sizeof(" #T ") != " #size)          \
    ABI_CHECK(ABI_ALIGNOF(T) == 0 || ABI_ALIGNOF(T) == (align), "alignof(" #T ") != " #align)
#define CHECK_FIELD(T, member, off, size)                                               \
    ABI_CHECK(offsetof(T, member) == (off), "offsetof(" #T ", " #member ") != " #off)   \
    ABI_CHECK(sizeof(((T *)0)->member) == (size), "sizeof(" #T "." #member ") != " #size)

static void abi_static_checks(void)
{
    GPUFILE_ABI_SIZES(CHECK_SIZE)
    GPUFILE_ABI_FIELDS(CHECK_FIELD)
}

#define SIZE_ENTRY(T, size, align) {"sizeof(" #T ")", sizeof(T)},
#define FIELD_ENTRY(T, member, off, size)                          \
    {"offsetof(" #T ", " #member ")", offsetof(T, member)},        \
    {"sizeof(" #T "." #member ")", sizeof(((T *)0)->member)},

static const struct gpufile_abi_entry c_table[] = {
    GPUFILE_ABI_SIZES(SIZE_ENTRY)
    GPUFILE_ABI_FIELDS(FIELD_ENTRY)
};

const struct gpufile_abi_entry *gpufile_abi_c_table(size_t *count)
{
    abi_static_checks();
    *count = sizeof c_table / sizeof c_table[0];
    return c_table;
}

/* The message function must be usable from C as well. */
const char *gpufile_abi_c_errstr(int code)
{
    return CUFILE_ERRSTR(code);
}
