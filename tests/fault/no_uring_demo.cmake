# Runs `gpufile demo` under no_uring_runner and checks that the library chose the posix engine,
# said why, and moved every byte correctly. Used by the fault_no_uring_* CTests:
#
#   cmake -DRUNNER=... -DMODE=enosys|eperm -DGPUFILE=... -DWORKDIR=... -P no_uring_demo.cmake
#
# The environment (GPUFILE_CUDA_LIBRARY=/nonexistent: host memory only) comes from CTest.
file(REMOVE_RECURSE "${WORKDIR}")
file(MAKE_DIRECTORY "${WORKDIR}")
execute_process(
  COMMAND "${RUNNER}" "${MODE}" "${GPUFILE}" demo --size 64M --dir "${WORKDIR}"
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 120)
file(REMOVE_RECURSE "${WORKDIR}")
message("${out}${err}")
if(rc EQUAL 77)
  message("SKIP: seccomp filters are not available here")
  return()
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gpufile demo under no_uring_runner ${MODE} failed: ${rc}")
endif()
if(NOT out MATCHES "engine +posix: ")
  message(FATAL_ERROR "the demo did not run on the posix engine")
endif()
if(MODE STREQUAL "eperm")
  set(why "not permitted")
else()
  set(why "no io_uring")
endif()
if(NOT out MATCHES "engine +posix: [^\n]*${why}")
  message(FATAL_ERROR "the engine line does not say why io_uring is off ('${why}')")
endif()
if(NOT out MATCHES "gpufile demo: ok")
  message(FATAL_ERROR "the demo did not end with 'gpufile demo: ok'")
endif()
