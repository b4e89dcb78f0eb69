# Host dependencies, all as imported targets. Every one is a Debian package that
# scripts/common.sh (ted_install_missing) installs; a missing one stops the configure with its
# package name.

find_package(MPI REQUIRED COMPONENTS CXX)

set(BLA_VENDOR OpenBLAS)
find_package(BLAS)
if(NOT BLAS_FOUND)
  unset(BLA_VENDOR)
  find_package(BLAS REQUIRED)
endif()
# OpenBLAS ships the CBLAS interface; find its header so sources can include <cblas.h>.
find_path(TED_CBLAS_INCLUDE_DIR cblas.h
  PATH_SUFFIXES openblas x86_64-linux-gnu/openblas-pthread aarch64-linux-gnu/openblas-pthread
  REQUIRED)
# The BLAS is not linked: every program loads it at start-up, after choosing OpenBLAS's kernels
# from the CPU's features (lib/ted/core/blas_library.hpp; target ted_cblas in
# lib/CMakeLists.txt). What it loads: the shared library found, by its SONAME in the same folder
# (libopenblas.so.0, what the dynamic linker would have loaded), so a package upgrade that keeps
# the SONAME keeps working.
set(TED_BLAS_LIBRARY "")
foreach(_blas_file IN LISTS BLAS_LIBRARIES)
  if(_blas_file MATCHES "\\.so(\\.[0-9]+)*$" AND EXISTS "${_blas_file}")
    set(TED_BLAS_LIBRARY "${_blas_file}")
    execute_process(COMMAND ${CMAKE_OBJDUMP} -p "${_blas_file}" OUTPUT_VARIABLE _blas_dump
      ERROR_QUIET)
    if(_blas_dump MATCHES "SONAME +([^ \n]+)")
      get_filename_component(_blas_dir "${_blas_file}" DIRECTORY)
      if(EXISTS "${_blas_dir}/${CMAKE_MATCH_1}")
        set(TED_BLAS_LIBRARY "${_blas_dir}/${CMAKE_MATCH_1}")
      endif()
    endif()
    break()
  endif()
endforeach()
if(NOT TED_BLAS_LIBRARY)
  message(FATAL_ERROR "the BLAS found (${BLAS_LIBRARIES}) is not a shared library: the programs "
    "load it at start-up (lib/ted/core/blas_library.hpp). Install libopenblas-dev.")
endif()

# Element-wise CPU kernels run on a small thread pool (lib/ted/core/parallel.hpp).
find_package(Threads REQUIRED)

find_package(CLI11 CONFIG REQUIRED)            # libcli11-dev
find_package(yaml-cpp REQUIRED)                # libyaml-cpp-dev
if(NOT TARGET yaml-cpp::yaml-cpp)
  add_library(yaml-cpp::yaml-cpp ALIAS yaml-cpp) # yaml-cpp < 0.8 exports the bare name
endif()
find_package(benchmark REQUIRED)               # libbenchmark-dev
if(TED_BUILD_TESTS)
  find_package(Catch2 REQUIRED)                # catch2: 2 on Debian 12, 3 on Debian 13
endif()

