# Installs the library, the public headers and a relocatable CMake package
# config so downstream code can `find_package(hvd_core)` with
# -Dhvd_core_DIR=$(hvd-core-config --cmakedir).
install(TARGETS hvd_core LIBRARY DESTINATION ${HVD_INSTALL_ROOT}/lib)
if(HVD_HAVE_CUDA_PLUGIN)
  install(TARGETS hvd_core_cuda LIBRARY DESTINATION ${HVD_INSTALL_ROOT}/lib)
endif()
if(HVD_HAVE_PYTHON_FASTCALL)
  install(TARGETS hvd_fastcall LIBRARY DESTINATION ${HVD_INSTALL_ROOT}/lib)
endif()
install(DIRECTORY include/hvd include/dlpack DESTINATION ${HVD_INSTALL_ROOT}/include)
include(CMakePackageConfigHelpers)
configure_package_config_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/hvd_coreConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/hvd_coreConfig.cmake
  INSTALL_DESTINATION ${HVD_INSTALL_ROOT}/lib/cmake/hvd_core)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/hvd_coreConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/hvd_coreConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/hvd_coreConfigVersion.cmake
  DESTINATION ${HVD_INSTALL_ROOT}/lib/cmake/hvd_core)
