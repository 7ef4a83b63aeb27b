# klaraptor for CMake projects: compile every CUDA source through klaraptor-cc.
#
#   list(APPEND CMAKE_MODULE_PATH /path/to/klaraptor/cmake)   # or -DCMAKE_MODULE_PATH=…
#   project(app LANGUAGES CXX CUDA)
#   include(Klaraptor)
#
# It sets CMAKE_CUDA_COMPILER_LAUNCHER, so that CUDA targets created after the include
# compile with `klaraptor-cc <nvcc> <arguments>`. The link stays CMake's (the host C++
# compiler): the objects klaraptor-cc writes carry the runtime, and the rational programs of
# the kernels the profile database has a profile of (see docs/build-systems.md in klaraptor).
#
# Options (cache variables):
#   KLARAPTOR_CC        klaraptor-cc to use (default: found on the PATH, else in the
#                       klaraptor tree this file belongs to: target/release, target/debug).
#   KLARAPTOR_CACHE     a compiler cache for the CUDA compiles: ccache (or a path to it);
#                       empty (the default) for none; "AUTO" takes ccache where installed.
#                       Checked with ccache only (sccache handles nvcc itself, bypassing
#                       klaraptor-cc's compile: not supported).
#   KLARAPTOR_PROFILE_DB  when set, the profile database every compile uses (exported to the
#                       compiles as KLARAPTOR_PROFILE_DB through the launcher); by default
#                       klaraptor-cc finds klaraptor-profiles/ at or above the directory the
#                       compile runs in (the build tree), else the user cache.
#
# klaraptor_use_launcher(<target>…) sets the launcher of targets created before the include,
# or in projects that set CMAKE_CUDA_COMPILER_LAUNCHER for other purposes.

include_guard(GLOBAL)

get_filename_component(_klaraptor_root "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)

if(NOT KLARAPTOR_CC)
  find_program(KLARAPTOR_CC
    NAMES klaraptor-cc
    HINTS "${_klaraptor_root}/target/release" "${_klaraptor_root}/target/debug"
    DOC "klaraptor-cc, the CUDA compiler driver klaraptor compiles through")
endif()
if(NOT KLARAPTOR_CC OR NOT EXISTS "${KLARAPTOR_CC}")
  message(FATAL_ERROR
    "klaraptor: klaraptor-cc was not found (KLARAPTOR_CC=${KLARAPTOR_CC}): put it on the "
    "PATH, build it (scripts/setup in the klaraptor tree), or pass -DKLARAPTOR_CC=/path/to/klaraptor-cc")
endif()

set(KLARAPTOR_CACHE "" CACHE STRING
  "Compiler cache for the CUDA compiles: ccache, a path to it, AUTO, or empty")
set(KLARAPTOR_PROFILE_DB "" CACHE PATH
  "Profile database for klaraptor-cc (empty: klaraptor-profiles/ above the build tree, else the user cache)")

set(_klaraptor_cache "")
if(KLARAPTOR_CACHE STREQUAL "AUTO")
  find_program(_klaraptor_cache_found NAMES ccache)
  if(_klaraptor_cache_found)
    set(_klaraptor_cache "${_klaraptor_cache_found}")
  endif()
elseif(KLARAPTOR_CACHE)
  find_program(_klaraptor_cache_found NAMES "${KLARAPTOR_CACHE}")
  if(NOT _klaraptor_cache_found)
    message(FATAL_ERROR "klaraptor: KLARAPTOR_CACHE=${KLARAPTOR_CACHE} was not found")
  endif()
  set(_klaraptor_cache "${_klaraptor_cache_found}")
endif()

# The launcher: [cmake -E env KLARAPTOR_PROFILE_DB=… KLARAPTOR_CACHE=…] klaraptor-cc. CMake
# runs it as `<launcher…> <nvcc> <arguments>`; klaraptor-cc takes the nvcc it is given. A
# cache is not put in front of klaraptor-cc (it would take the nvcc argument for a second
# source file and not cache): klaraptor-cc hands the command to the cache itself
# (KLARAPTOR_CACHE), as `<cache> klaraptor-cc <arguments>` with the nvcc in KLARAPTOR_NVCC.
set(KLARAPTOR_LAUNCHER "")
set(_klaraptor_env "")
if(KLARAPTOR_PROFILE_DB)
  get_filename_component(_klaraptor_db "${KLARAPTOR_PROFILE_DB}" ABSOLUTE)
  list(APPEND _klaraptor_env "KLARAPTOR_PROFILE_DB=${_klaraptor_db}")
endif()
if(_klaraptor_cache)
  list(APPEND _klaraptor_env "KLARAPTOR_CACHE=${_klaraptor_cache}")
endif()
if(_klaraptor_env)
  list(APPEND KLARAPTOR_LAUNCHER "${CMAKE_COMMAND}" -E env ${_klaraptor_env})
endif()
list(APPEND KLARAPTOR_LAUNCHER "${KLARAPTOR_CC}")

set(CMAKE_CUDA_COMPILER_LAUNCHER "${KLARAPTOR_LAUNCHER}")

function(klaraptor_use_launcher)
  foreach(t IN LISTS ARGN)
    set_property(TARGET "${t}" PROPERTY CUDA_COMPILER_LAUNCHER "${KLARAPTOR_LAUNCHER}")
  endforeach()
endfunction()

message(STATUS "klaraptor: CUDA compiles go through ${KLARAPTOR_LAUNCHER}")
