# Optional CUDA backend. Compiled wherever nvcc exists, whether or not a GPU is present,
# so CI checks that the CUDA code builds. Sets:
#   TED_HAVE_CUDA  - nvcc found, CUDA language enabled, cudart and cuBLAS found
#   TED_HAVE_NCCL  - nccl.h and libnccl found (needs TED_HAVE_CUDA; where: cmake/TedNccl.cmake)
#   TED_HAVE_CUDNN - cudnn.h and cuDNN's header-only C++ graph API, cudnn-frontend, found (needs
#                    TED_HAVE_CUDA): the GPU's attention is cuDNN's. The frontend comes from
#                    PyPI's nvidia-cudnn-frontend wheel (scripts/common.sh unpacks it into
#                    <build>/_deps/cudnn-frontend), or -DTED_CUDNN_FRONTEND_DIR=<dir with
#                    cudnn_frontend.h>, or $CUDNN_FRONTEND_HOME/include. libcudnn is not linked:
#                    it is loaded at run time, where present.
# Architectures: -DCMAKE_CUDA_ARCHITECTURES=... overrides. The default covers V100 (70),
# A100 (80) and H100 (90); CUDA 13 removed Volta, so with nvcc >= 13 the default is 80;90
# and the summary says sm_70 was left out.
set(TED_HAVE_CUDA OFF)
set(TED_HAVE_NCCL OFF)
set(TED_HAVE_CUDNN OFF)
set(TED_CUDNN_NOTE "needs CUDA")
set(TED_CUDA_NOTE "")
if(NOT TED_ENABLE_CUDA)
  set(TED_CUDA_NOTE "disabled by TED_ENABLE_CUDA=OFF")
  return()
endif()

include(CheckLanguage)
if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  set(TED_CUDA_NOTE "nvcc not found")
  return()
endif()

if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  execute_process(COMMAND "${CMAKE_CUDA_COMPILER}" --version OUTPUT_VARIABLE _nvcc_version)
  string(REGEX MATCH "release ([0-9]+)\\.([0-9]+)" _ "${_nvcc_version}")
  if(CMAKE_MATCH_1 AND CMAKE_MATCH_1 GREATER_EQUAL 13)
    set(CMAKE_CUDA_ARCHITECTURES "80;90")
    set(TED_CUDA_NOTE "sm_70 (V100) left out: CUDA ${CMAKE_MATCH_1}.${CMAKE_MATCH_2} no longer targets Volta")
  else()
    set(CMAKE_CUDA_ARCHITECTURES "70;80;90")
  endif()
endif()
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 17)  # CMake 3.25 knows no C++20 flag for nvcc; CUDA sources stay C++17
set(CMAKE_CUDA_STANDARD_REQUIRED ON)

find_package(CUDAToolkit REQUIRED)
if(NOT TARGET CUDA::cublas)
  set(TED_CUDA_NOTE "cuBLAS not found")
  return()
endif()
set(TED_HAVE_CUDA ON)

include(TedNccl)
ted_find_nccl()

find_path(TED_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV CUDNN_HOME
  PATH_SUFFIXES include)
find_path(TED_CUDNN_FRONTEND_DIR cudnn_frontend.h
  HINTS "${CMAKE_BINARY_DIR}/_deps/cudnn-frontend/include" ENV CUDNN_FRONTEND_HOME
  PATH_SUFFIXES include NO_DEFAULT_PATH)
if(TED_CUDNN_INCLUDE_DIR AND TED_CUDNN_FRONTEND_DIR)
  file(STRINGS "${TED_CUDNN_INCLUDE_DIR}/cudnn_version.h" _cudnn_major REGEX "define CUDNN_MAJOR ")
  if(_cudnn_major MATCHES "CUDNN_MAJOR ([0-9]+)" AND CMAKE_MATCH_1 GREATER_EQUAL 9)
    add_library(ted_cudnn_frontend INTERFACE)
    target_include_directories(ted_cudnn_frontend SYSTEM INTERFACE "${TED_CUDNN_FRONTEND_DIR}"
      "${TED_CUDNN_INCLUDE_DIR}")
    target_link_libraries(ted_cudnn_frontend INTERFACE ${CMAKE_DL_LIBS})
    set(TED_HAVE_CUDNN ON)
    set(TED_CUDNN_NOTE "headers ${TED_CUDNN_INCLUDE_DIR}, frontend ${TED_CUDNN_FRONTEND_DIR}; libcudnn.so.9 loaded at run time")
  else()
    set(TED_CUDNN_NOTE "cuDNN 9 or later needed (${TED_CUDNN_INCLUDE_DIR})")
  endif()
elseif(NOT TED_CUDNN_INCLUDE_DIR)
  set(TED_CUDNN_NOTE "cudnn.h not found")
else()
  set(TED_CUDNN_NOTE "cudnn-frontend not found (scripts/common.sh fetches it from PyPI; or set TED_CUDNN_FRONTEND_DIR)")
endif()
