# cmake -P check_install.cmake: installs the build into a fresh prefix, checks the files a user
# gets, then builds examples/cpp_read.cpp against the installed tree twice, with find_package
# (tests/install/consumer) and with pkg-config, and runs both on a scratch file against the
# CUDA driver double; and that both see the project's version (find_package(gpufile 0.1 CONFIG)
# takes 0.1.x and refuses 0.2). Variables (all -D): BUILD_DIR, WORK_DIR, SOURCE_DIR, GENERATOR,
# CXX_COMPILER, CXX_FLAGS (the sanitizer flags of the build, "" for none), FAKECUDA_LIBRARY,
# FAKECUDA_INCLUDE_DIR, PKG_CONFIG (empty when there is none: that half then fails), VERSION
# (the project's, X.Y.Z).
cmake_minimum_required(VERSION 3.22)

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${what}: ok")
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

include(GNUInstallDirs)
foreach(f IN ITEMS
    ${CMAKE_INSTALL_INCLUDEDIR}/gpufile/gpufile.hpp
    ${CMAKE_INSTALL_INCLUDEDIR}/gpufile/file.hpp
    ${CMAKE_INSTALL_INCLUDEDIR}/cufile.h
    ${CMAKE_INSTALL_LIBDIR}/libgpufile.so
    ${CMAKE_INSTALL_LIBDIR}/libcufile.so.0
    ${CMAKE_INSTALL_LIBDIR}/cmake/gpufile/gpufileConfig.cmake
    ${CMAKE_INSTALL_LIBDIR}/cmake/gpufile/gpufileConfigVersion.cmake
    ${CMAKE_INSTALL_LIBDIR}/pkgconfig/gpufile.pc)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "not installed: ${f}")
  endif()
endforeach()
# The public headers stand alone: nothing from gpufile's src/.
file(GLOB headers ${prefix}/${CMAKE_INSTALL_INCLUDEDIR}/gpufile/*.hpp)
foreach(h IN LISTS headers)
  file(STRINGS ${h} internal REGEX "#include \"(api|core|exec|cuda|sys|io|route|capi)/")
  if(internal)
    message(FATAL_ERROR "${h} includes gpufile's internals: ${internal}")
  endif()
endforeach()

# A scratch file of about 1 MiB (not a multiple of any block size).
string(REPEAT "gpufile C++ API install check. " 33825 text)
file(WRITE ${WORK_DIR}/data.bin "${text}")
set(ENV{GPUFILE_CUDA_LIBRARY} ${FAKECUDA_LIBRARY})
get_filename_component(fakecuda_dir ${FAKECUDA_LIBRARY} DIRECTORY)
set(ENV{LD_LIBRARY_PATH} "${prefix}/${CMAKE_INSTALL_LIBDIR}:${fakecuda_dir}")

# 1. find_package(gpufile MAJOR.MINOR CONFIG) -> gpufile::gpufile, of the project's version
string(REGEX MATCH "^([0-9]+)\\.([0-9]+)\\.[0-9]+$" version_ok "${VERSION}")
if(NOT version_ok)
  message(FATAL_ERROR "VERSION must be X.Y.Z, not '${VERSION}'")
endif()
set(major_minor ${CMAKE_MATCH_1}.${CMAKE_MATCH_2})
math(EXPR next_minor "${CMAKE_MATCH_2} + 1")
set(too_new ${CMAKE_MATCH_1}.${next_minor})
set(consumer_args -S ${SOURCE_DIR}/tests/install/consumer -G ${GENERATOR}
  -DCMAKE_CXX_COMPILER=${CXX_COMPILER} "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
  -DCMAKE_PREFIX_PATH=${prefix} -DEXAMPLE_SOURCE=${SOURCE_DIR}/examples/cpp_read.cpp
  -DFAKECUDA_INCLUDE_DIR=${FAKECUDA_INCLUDE_DIR} -DFAKECUDA_LIBRARY=${FAKECUDA_LIBRARY})
run("configure the find_package consumer" ${CMAKE_COMMAND} ${consumer_args}
  -B ${WORK_DIR}/consumer -DREQUIRED_VERSION=${major_minor})
if(NOT run_output MATCHES "gpufile_VERSION=${VERSION}\n")
  message(FATAL_ERROR "find_package(gpufile ${major_minor}) found another version than ${VERSION}:\n"
                      "${run_output}")
endif()
run("build it" ${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
run("run it" ${WORK_DIR}/consumer/cpp_read ${WORK_DIR}/data.bin)
# gpufileConfigVersion.cmake refuses the next minor version (0.x: a minor release may change the
# API), so a project that needs it stops at its configure step.
execute_process(COMMAND ${CMAKE_COMMAND} ${consumer_args} -B ${WORK_DIR}/consumer-too-new
  -DREQUIRED_VERSION=${too_new}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "compatible with requested version")
  message(FATAL_ERROR "find_package(gpufile ${too_new} CONFIG) did not refuse "
                      "gpufile ${VERSION} (${rc}):\n${out}\n${err}")
endif()
message(STATUS "find_package(gpufile ${too_new}) refused ${VERSION}: ok")

# 2. pkg-config gpufile
if(NOT PKG_CONFIG)
  message(FATAL_ERROR "no pkg-config here (Debian: pkg-config), the pkg-config half cannot run")
endif()
set(ENV{PKG_CONFIG_PATH} ${prefix}/${CMAKE_INSTALL_LIBDIR}/pkgconfig)
run("pkg-config --modversion" ${PKG_CONFIG} --modversion gpufile)
if(NOT run_output STREQUAL "${VERSION}\n")
  message(FATAL_ERROR "pkg-config --modversion gpufile: '${run_output}', not ${VERSION}")
endif()
run("pkg-config" ${PKG_CONFIG} --cflags --libs gpufile)
separate_arguments(pc_flags UNIX_COMMAND "${run_output}")
separate_arguments(cxx_flags UNIX_COMMAND "${CXX_FLAGS}")
run("build with pkg-config's flags" ${CXX_COMPILER} -std=c++20 ${cxx_flags}
  -I${FAKECUDA_INCLUDE_DIR} ${SOURCE_DIR}/examples/cpp_read.cpp ${pc_flags} ${FAKECUDA_LIBRARY}
  -o ${WORK_DIR}/cpp_read_pc)
run("run it" ${WORK_DIR}/cpp_read_pc ${WORK_DIR}/data.bin)
