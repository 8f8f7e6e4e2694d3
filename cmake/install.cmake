# cmake --install: the C++ API's headers and libgpufile.so with a CMake package
# (find_package(gpufile CONFIG) -> gpufile::gpufile) and a pkg-config file (gpufile.pc), and
# the cuFile drop-in libcufile.so.0 with include/cufile.h. tests/install checks the result.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(GPUFILE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/gpufile)

install(TARGETS gpufile EXPORT gpufileTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS cufile LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/gpufile
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.hpp")
install(FILES ${PROJECT_SOURCE_DIR}/include/cufile.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

install(EXPORT gpufileTargets NAMESPACE gpufile:: DESTINATION ${GPUFILE_CMAKE_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/gpufileConfig.cmake.in
  ${PROJECT_BINARY_DIR}/gpufileConfig.cmake INSTALL_DESTINATION ${GPUFILE_CMAKE_DIR})
# 0.x: a minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/gpufileConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/gpufileConfig.cmake
  ${PROJECT_BINARY_DIR}/gpufileConfigVersion.cmake DESTINATION ${GPUFILE_CMAKE_DIR})

file(RELATIVE_PATH GPUFILE_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" GPUFILE_PC_TO_PREFIX "${GPUFILE_PC_TO_PREFIX}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/gpufile.pc.in ${PROJECT_BINARY_DIR}/gpufile.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/gpufile.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
