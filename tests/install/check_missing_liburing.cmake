# cmake -P check_missing_liburing.cmake: configures gpufile as if liburing were not installed
# (every header and library search re-rooted into an empty folder, so the system's liburing-dev
# stays where it is) and checks that the configure step fails with what to install, not with
# CMake's own error about a NOTFOUND variable. Variables (all -D): SOURCE_DIR, WORK_DIR, GENERATOR.
cmake_minimum_required(VERSION 3.22)

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR}/empty-root)
execute_process(
  COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_FIND_ROOT_PATH=${WORK_DIR}/empty-root
    -DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY -DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY
    -DBUILD_TESTING=OFF
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(output "${out}\n${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "configuring without liburing succeeded:\n${output}")
endif()
foreach(expected IN ITEMS
    "gpufile needs liburing"
    "Debian/Ubuntu: apt install liburing-dev"
    "Fedora/RHEL:   dnf install liburing-devel")
  string(FIND "${output}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the configure error does not say \"${expected}\":\n${output}")
  endif()
endforeach()
if(output MATCHES "NOTFOUND|LIBURING_")
  message(FATAL_ERROR "the configure error shows CMake's variables, not only what to install:\n${output}")
endif()
message(STATUS "configuring without liburing fails with what to install: ok")
