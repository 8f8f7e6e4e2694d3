# Running tests against the CUDA driver test double (tests/support/fakecuda).
#
# gpufile loads the driver from $GPUFILE_CUDA_LIBRARY before falling back to
# dlopen("libcuda.so.1"); programs linked against libcuda directly (the examples) find it
# through LD_LIBRARY_PATH (and the build tree's RUNPATH). Both end up with the same loaded copy.
#
#   gpufile_use_fakecuda(<test> [<test>...])
#       Sets GPUFILE_CUDA_LIBRARY to the double and prepends its directory to LD_LIBRARY_PATH
#       for the named tests (call it in the directory that added them).
#
#   GPUFILE_FAKECUDA_ENV
#       The same two settings as a list for the ENVIRONMENT test property (LD_LIBRARY_PATH is
#       replaced rather than prepended there), e.g.
#       set_tests_properties(t PROPERTIES ENVIRONMENT "${GPUFILE_FAKECUDA_ENV};FAKECUDA_DEVICES=2")
#
#   GPUFILE_FAKECUDA_LIBRARY, GPUFILE_FAKECUDA_DIR
#       Generator expressions for the library file and its directory.
#
# Knobs of the double, read from the environment at its first call: FAKECUDA_DEVICES (1),
# FAKECUDA_NO_DEVICE, FAKECUDA_STUB, FAKECUDA_ASYNC_DELAY_US (0), FAKECUDA_FAIL,
# FAKECUDA_DEVICE_MEMORY (16G), FAKECUDA_PINNED_LIMIT (unlimited). See fakecuda.h.

set(GPUFILE_FAKECUDA_LIBRARY "$<TARGET_FILE:fakecuda>" CACHE INTERNAL "")
set(GPUFILE_FAKECUDA_DIR "$<TARGET_FILE_DIR:fakecuda>" CACHE INTERNAL "")
set(GPUFILE_FAKECUDA_ENV
  "GPUFILE_CUDA_LIBRARY=$<TARGET_FILE:fakecuda>;LD_LIBRARY_PATH=$<TARGET_FILE_DIR:fakecuda>"
  CACHE INTERNAL "")

function(gpufile_use_fakecuda)
  foreach(test IN LISTS ARGN)
    set_property(TEST ${test} APPEND PROPERTY ENVIRONMENT
      "GPUFILE_CUDA_LIBRARY=$<TARGET_FILE:fakecuda>")
    set_property(TEST ${test} APPEND PROPERTY ENVIRONMENT_MODIFICATION
      "LD_LIBRARY_PATH=path_list_prepend:$<TARGET_FILE_DIR:fakecuda>")
  endforeach()
endfunction()
