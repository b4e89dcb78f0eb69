# Finds NCCL where users have it, in this order, and says which one was taken:
#   1. NCCL_HOME (a CMake variable or the environment): a build of NCCL or an unpacked tarball;
#   2. the CUDA toolkit (CUDAToolkit_INCLUDE_DIRS, CUDAToolkit_LIBRARY_DIR): NVIDIA's installers
#      and container images put it there;
#   3. the system: Debian's and Ubuntu's libnccl-dev (/usr/include, /usr/lib/<arch>);
#   4. the nvidia-nccl-cu13 (or -cu12) wheel that PyTorch brings, in python3's site-packages
#      (nvidia/nccl/{include,lib}; it has libnccl.so.2 and no unversioned link). python3 is
#      TED_NCCL_PYTHON, else Python3_EXECUTABLE, else the first on PATH (an active venv's).
# Each place must hold both nccl.h and the library. Sets TED_HAVE_NCCL, TED_NCCL_INCLUDE_DIR,
# TED_NCCL_LIBRARY, TED_NCCL_VERSION and TED_NCCL_SOURCE (the place, in words), and the
# interface target ted_nccl. TED_NCCL_SYSTEM_PREFIXES replaces the system's prefixes (tests).
function(ted_nccl_try source include_dirs library_dirs)
  if(TED_HAVE_NCCL)
    return()
  endif()
  find_path(_nccl_header nccl.h PATHS ${include_dirs} NO_DEFAULT_PATH NO_CACHE)
  find_library(_nccl_library NAMES nccl libnccl.so.2 PATHS ${library_dirs} NO_DEFAULT_PATH
    NO_CACHE)
  if(_nccl_header AND _nccl_library)
    file(STRINGS "${_nccl_header}/nccl.h" _lines REGEX "#define NCCL_(MAJOR|MINOR|PATCH) ")
    set(_version "")
    foreach(_part MAJOR MINOR PATCH)
      string(REGEX MATCH "NCCL_${_part} ([0-9]+)" _ "${_lines}")
      list(APPEND _version "${CMAKE_MATCH_1}")
    endforeach()
    list(JOIN _version "." _version)
    set(TED_HAVE_NCCL ON PARENT_SCOPE)
    set(TED_NCCL_INCLUDE_DIR "${_nccl_header}" PARENT_SCOPE)
    set(TED_NCCL_LIBRARY "${_nccl_library}" PARENT_SCOPE)
    set(TED_NCCL_VERSION "${_version}" PARENT_SCOPE)
    set(TED_NCCL_SOURCE "${source}" PARENT_SCOPE)
  endif()
endfunction()

function(ted_find_nccl)
  set(TED_HAVE_NCCL OFF)
  set(_home "${NCCL_HOME}")
  if(NOT _home AND DEFINED ENV{NCCL_HOME})
    set(_home "$ENV{NCCL_HOME}")
  endif()
  if(_home)
    ted_nccl_try("NCCL_HOME=${_home}" "${_home}/include" "${_home}/lib;${_home}/lib64")
    if(NOT TED_HAVE_NCCL)
      message(WARNING "NCCL_HOME=${_home} has no nccl.h and libnccl: looking elsewhere")
    endif()
  endif()
  ted_nccl_try("the CUDA toolkit" "${CUDAToolkit_INCLUDE_DIRS}"
    "${CUDAToolkit_LIBRARY_DIR};${CUDAToolkit_LIBRARY_ROOT}/lib;${CUDAToolkit_LIBRARY_ROOT}/lib64")
  set(_prefixes "${CMAKE_SYSTEM_PREFIX_PATH}")
  if(DEFINED TED_NCCL_SYSTEM_PREFIXES)
    set(_prefixes "${TED_NCCL_SYSTEM_PREFIXES}")
  endif()
  set(_includes "")
  set(_libraries "")
  foreach(_prefix IN LISTS _prefixes)
    list(APPEND _includes "${_prefix}/include")
    if(CMAKE_LIBRARY_ARCHITECTURE)
      list(APPEND _libraries "${_prefix}/lib/${CMAKE_LIBRARY_ARCHITECTURE}")
    endif()
    list(APPEND _libraries "${_prefix}/lib" "${_prefix}/lib64")
  endforeach()
  ted_nccl_try("the system (libnccl-dev)" "${_includes}" "${_libraries}")
  if(NOT TED_HAVE_NCCL)
    set(_python "${TED_NCCL_PYTHON}")
    if(NOT _python)
      set(_python "${Python3_EXECUTABLE}")
    endif()
    if(NOT _python)
      find_program(_python NAMES python3 NO_CACHE)
    endif()
    if(_python)
      execute_process(COMMAND "${_python}" -c
        "import nvidia.nccl as m; print(list(m.__path__)[0], end='')"
        OUTPUT_VARIABLE _wheel ERROR_QUIET RESULT_VARIABLE _status)
      if(_status EQUAL 0 AND _wheel)
        ted_nccl_try("the PyPI wheel nvidia-nccl (${_wheel})" "${_wheel}/include" "${_wheel}/lib")
      endif()
    endif()
  endif()
  foreach(_name TED_HAVE_NCCL TED_NCCL_INCLUDE_DIR TED_NCCL_LIBRARY TED_NCCL_VERSION
                TED_NCCL_SOURCE)
    set(${_name} "${${_name}}" PARENT_SCOPE)
  endforeach()
  if(TED_HAVE_NCCL AND NOT TARGET ted_nccl)
    add_library(ted_nccl INTERFACE)
    target_include_directories(ted_nccl SYSTEM INTERFACE "${TED_NCCL_INCLUDE_DIR}")
    target_link_libraries(ted_nccl INTERFACE "${TED_NCCL_LIBRARY}")
  endif()
endfunction()
