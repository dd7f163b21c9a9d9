# The Pascal build (-DQVL_PASCAL_BUILD=ON): libqvl-cuda_sm61.so with sm_61 machine code and
# compute_61 PTX on a machine whose CUDA (13) no longer targets Pascal. No nvcc takes part:
#   clang (Debian's clang-14 will do)  .cu -> compute_61 PTX        (--cuda-device-only -S)
#   CUDA 12.9 ptxas (PyPI)             PTX -> sm_61 cubin, ptxas -v report   } scripts/pascal_fatbin.py
#   nvFatbin 12.9 (PyPI)               cubin + PTX -> fat binary              }
#   clang                              .cu host side with the fat binary embedded (--cuda-host-only)
# The CUDA 12.9 pieces live in .pascal/cuda (scripts/install-pascal-sdk.sh, run by
# ./scripts/install-deps.sh --pascal), laid out as the CUDA installation clang's --cuda-path
# expects. Its headers are CUDA 12.9's, not the machine's CUDA 13: the runtime linked in must
# match them, and the runtime has to be 12.x to run on Pascal. clang-14 still needs
# clang-stubs/ with them (CUDA 12 removed the texture<> template clang's wrappers name), and
# it writes PTX ISA 7.5 (the newest it knows), which every driver since CUDA 11.5 can JIT.
# The runtime is linked statically (libcudart_static.a), so the plugin needs only the driver.
#
# Defines the target qvl-cuda_sm61 from QVL_CUDA_HOST_SOURCES (C, compiled as usual) and
# QVL_CUDA_SOURCES (through the steps above); build/backends/cuda_sm61/sm61/ keeps each file's
# PTX, cubin, fat binary and ptxas report for scripts/check_pascal_binary.py.

set(QVL_PASCAL_SDK "${PROJECT_SOURCE_DIR}/.pascal/cuda" CACHE PATH
    "CUDA 12.x pieces for QVL_PASCAL_BUILD (made by ./scripts/install-deps.sh --pascal)")
set(_pz_fix "run ./scripts/install-deps.sh --pascal")

# The distribution's default clang first (Debian 12: clang-14, what CI uses and
# scripts/pascal-known-spills.txt was made with); -DQVL_PASCAL_CLANG=... picks another.
find_program(QVL_PASCAL_CLANG NAMES clang++ clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14)
find_package(Python3 COMPONENTS Interpreter QUIET)
set(_pz_missing "")
if(NOT QVL_PASCAL_CLANG)
  set(_pz_missing "clang++ (Debian package clang)")
elseif(NOT Python3_Interpreter_FOUND)
  set(_pz_missing "python3")
else()
  foreach(_f bin/ptxas include/cuda_runtime.h include/crt/host_config.h
             nvvm/libdevice/libdevice.10.bc lib64/libcudart_static.a lib64/libnvfatbin.so.12)
    if(NOT EXISTS "${QVL_PASCAL_SDK}/${_f}")
      set(_pz_missing "${QVL_PASCAL_SDK}/${_f}")
      break()
    endif()
  endforeach()
endif()
if(_pz_missing)
  message(FATAL_ERROR "qvl: QVL_PASCAL_BUILD=ON needs ${_pz_missing}: ${_pz_fix}")
endif()
execute_process(COMMAND "${QVL_PASCAL_SDK}/bin/ptxas" --version
                OUTPUT_VARIABLE _pz_ptxas_ver RESULT_VARIABLE _pz_rc ERROR_QUIET)
if(NOT _pz_rc EQUAL 0 OR NOT _pz_ptxas_ver MATCHES "release (1[0-2]|[89])\\.[0-9]+")
  message(FATAL_ERROR "qvl: QVL_PASCAL_BUILD=ON needs a ptxas of CUDA 8 to 12 (sm_61) in ${QVL_PASCAL_SDK}/bin: ${_pz_fix}")
endif()
string(REGEX MATCH "release [0-9.]+" _pz_ptxas_ver "${_pz_ptxas_ver}")

set(_pz_dir ${CMAKE_CURRENT_BINARY_DIR}/sm61)
file(MAKE_DIRECTORY ${_pz_dir})
set(_pz_common -x cuda --cuda-gpu-arch=sm_61 --cuda-path=${QVL_PASCAL_SDK} -Wno-unknown-cuda-version
    -std=c++17 -Wall -Wextra -I${CMAKE_CURRENT_SOURCE_DIR}/clang-stubs
    -I${CMAKE_CURRENT_SOURCE_DIR} -I${PROJECT_SOURCE_DIR}/core/include)
if(QVL_WERROR)
  list(APPEND _pz_common -Werror)
endif()
# Device code is always optimised (-O3 -DNDEBUG, as nvcc's Release) whatever the build type;
# the host side of the .cu files is launch glue, built -O2 as position-independent code.
# -fcuda-short-ptr: 32-bit addresses for shared, local and constant memory, as nvcc's code
# has; clang's default of 64 costs every shared-memory pointer two registers, which made the
# GEMM tiles and flash attention spill under their __launch_bounds__.
set(_pz_device ${_pz_common} --cuda-device-only -O3 -DNDEBUG -fcuda-short-ptr)
set(_pz_host ${_pz_common} --cuda-host-only -O2 -fPIC -fvisibility=hidden)

# A probe compile at configure time, so a clang that cannot do this fails here in one line.
execute_process(
  COMMAND ${QVL_PASCAL_CLANG} ${_pz_device} -S ${CMAKE_CURRENT_SOURCE_DIR}/cu_probe.cu -o ${_pz_dir}/probe.ptx
  RESULT_VARIABLE _pz_rc OUTPUT_QUIET ERROR_VARIABLE _pz_err)
if(NOT _pz_rc EQUAL 0)
  string(REGEX MATCH "[^\n]*error[^\n]*" _pz_err "${_pz_err}")
  message(FATAL_ERROR "qvl: QVL_PASCAL_BUILD=ON: ${QVL_PASCAL_CLANG} cannot compile CUDA for sm_61 with ${QVL_PASCAL_SDK} (${_pz_err}); ${_pz_fix}")
endif()
message(STATUS "qvl: cuda_sm61 Pascal build: sm_61 SASS + compute_61 PTX by ${QVL_PASCAL_CLANG} "
               "and ptxas ${_pz_ptxas_ver} from ${QVL_PASCAL_SDK}")

file(GLOB _pz_headers ${CMAKE_CURRENT_SOURCE_DIR}/*.h ${CMAKE_CURRENT_SOURCE_DIR}/*.cuh
     ${CMAKE_CURRENT_SOURCE_DIR}/clang-stubs/*.h)
set(_pz_objs "")
foreach(_src ${QVL_CUDA_SOURCES})
  get_filename_component(_name ${_src} NAME_WE)
  set(_in ${CMAKE_CURRENT_SOURCE_DIR}/${_src})
  set(_b ${_pz_dir}/${_name})
  # Host and device compiles are separate runs: one -cuid for both, so names clang derives from
  # it (externalised static device variables) agree between the two sides.
  add_custom_command(OUTPUT ${_b}.ptx
    COMMAND ${QVL_PASCAL_CLANG} ${_pz_device} -cuid=qvl_${_name} -S ${_in} -o ${_b}.ptx
    DEPENDS ${_in} ${_pz_headers}
    COMMENT "sm_61: ${_src} -> compute_61 PTX"
    VERBATIM)
  add_custom_command(OUTPUT ${_b}.fatbin ${_b}.cubin ${_b}.ptxas.txt
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/pascal_fatbin.py --sdk ${QVL_PASCAL_SDK}
            --ptx ${_b}.ptx --cubin ${_b}.cubin --log ${_b}.ptxas.txt --out ${_b}.fatbin
    DEPENDS ${_b}.ptx ${PROJECT_SOURCE_DIR}/scripts/pascal_fatbin.py
    COMMENT "sm_61: ${_name}.ptx -> sm_61 cubin (ptxas ${_pz_ptxas_ver}) + fat binary"
    VERBATIM)
  add_custom_command(OUTPUT ${_b}.o
    COMMAND ${QVL_PASCAL_CLANG} ${_pz_host} -cuid=qvl_${_name}
            -Xclang -fcuda-include-gpubinary -Xclang ${_b}.fatbin -c ${_in} -o ${_b}.o
    DEPENDS ${_in} ${_pz_headers} ${_b}.fatbin
    COMMENT "sm_61: ${_src} host side"
    VERBATIM)
  list(APPEND _pz_objs ${_b}.o)
endforeach()
set_source_files_properties(${_pz_objs} PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)

add_library(qvl-cuda_sm61 MODULE ${QVL_CUDA_HOST_SOURCES} ${_pz_objs})
target_include_directories(qvl-cuda_sm61 PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_include_directories(qvl-cuda_sm61 SYSTEM PRIVATE ${QVL_PASCAL_SDK}/include)
target_link_libraries(qvl-cuda_sm61 PRIVATE qvl-core ${QVL_PASCAL_SDK}/lib64/libcudart_static.a
                      ${CMAKE_DL_LIBS} Threads::Threads rt m)
set_target_properties(qvl-cuda_sm61 PROPERTIES
  OUTPUT_NAME qvl-cuda_sm61
  PREFIX lib
  C_VISIBILITY_PRESET hidden)
