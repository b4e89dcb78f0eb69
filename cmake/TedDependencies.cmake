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
add_library(ted_cblas INTERFACE)
target_link_libraries(ted_cblas INTERFACE BLAS::BLAS)
target_include_directories(ted_cblas SYSTEM INTERFACE "${TED_CBLAS_INCLUDE_DIR}")
# OpenBLAS can be told to run a call on one thread, so that the CPU kernels may run several
# GEMMs side by side on their own threads (kernels/cpu/blas.hpp); another CBLAS goes without.
include(CheckSymbolExists)
set(CMAKE_REQUIRED_INCLUDES "${TED_CBLAS_INCLUDE_DIR}")
set(CMAKE_REQUIRED_LIBRARIES BLAS::BLAS)
check_symbol_exists(openblas_set_num_threads cblas.h TED_HAVE_OPENBLAS_THREADS)
unset(CMAKE_REQUIRED_INCLUDES)
unset(CMAKE_REQUIRED_LIBRARIES)
if(TED_HAVE_OPENBLAS_THREADS)
  target_compile_definitions(ted_cblas INTERFACE TED_HAVE_OPENBLAS_THREADS=1)
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

