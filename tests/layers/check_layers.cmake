# Checks that the layers include each other only downwards (docs/ARCHITECTURE.md):
#   tools -> engine -> models -> runtime -> graph -> core;  backends -> core;
#   and the server (tools/serve) sees the engine but no model: serve -> engine -> ...
# Run as: cmake -DQVL_SOURCE_DIR=<checkout> -P check_layers.cmake
# Every `#include "qvl/NAME"` in a layer's sources is mapped to the layer whose include/qvl/
# directory holds NAME; a header no layer owns, or one owned by a layer the includer may not
# see, is reported with file and line, and the script fails.
cmake_minimum_required(VERSION 3.20)
if(NOT QVL_SOURCE_DIR)
  message(FATAL_ERROR "check_layers: pass -DQVL_SOURCE_DIR=<checkout>")
endif()

# Layer name, then the directories (relative to the checkout) whose sources belong to it.
set(QVL_LAYER_DIRS_core core)
set(QVL_LAYER_DIRS_graph graph)
set(QVL_LAYER_DIRS_runtime runtime)
set(QVL_LAYER_DIRS_models models)
set(QVL_LAYER_DIRS_engine engine)
set(QVL_LAYER_DIRS_backends backends)
set(QVL_LAYER_DIRS_tools tools)
set(QVL_LAYER_DIRS_serve tools/serve)
# Sources under these directories belong to the layer named there, not to the enclosing one.
set(QVL_LAYER_SKIP_tools tools/serve)
# What each layer may include (itself included).
set(QVL_LAYER_MAY_core core)
set(QVL_LAYER_MAY_graph graph core)
set(QVL_LAYER_MAY_runtime runtime graph core)
set(QVL_LAYER_MAY_models models runtime graph core)
set(QVL_LAYER_MAY_engine engine models runtime graph core)
set(QVL_LAYER_MAY_backends backends core)
set(QVL_LAYER_MAY_tools tools engine models runtime graph core)
set(QVL_LAYER_MAY_serve serve engine runtime graph core)
set(QVL_LAYERS core graph runtime models engine backends tools serve)

# Who owns each public header: core/include, graph/include, runtime/include, models/*/include.
set(owners)
foreach(layer core graph runtime models engine backends)
  foreach(dir ${QVL_LAYER_DIRS_${layer}})
    file(GLOB_RECURSE headers RELATIVE ${QVL_SOURCE_DIR} ${QVL_SOURCE_DIR}/${dir}/*)
    foreach(h ${headers})
      if(h MATCHES "/include/qvl/([^/]+)$")
        set(name ${CMAKE_MATCH_1})
        if(DEFINED QVL_OWNER_${name} AND NOT QVL_OWNER_${name} STREQUAL layer)
          message(SEND_ERROR "qvl/${name} is published by both ${QVL_OWNER_${name}} and ${layer}")
        endif()
        set(QVL_OWNER_${name} ${layer})
      endif()
    endforeach()
  endforeach()
endforeach()

set(violations 0)
set(checked 0)
foreach(layer ${QVL_LAYERS})
  foreach(dir ${QVL_LAYER_DIRS_${layer}})
    file(GLOB_RECURSE sources RELATIVE ${QVL_SOURCE_DIR}
      ${QVL_SOURCE_DIR}/${dir}/*.c ${QVL_SOURCE_DIR}/${dir}/*.h
      ${QVL_SOURCE_DIR}/${dir}/*.cu ${QVL_SOURCE_DIR}/${dir}/*.cuh ${QVL_SOURCE_DIR}/${dir}/*.def)
    foreach(src ${sources})
      set(skipped FALSE)
      foreach(skip ${QVL_LAYER_SKIP_${layer}})
        if(src MATCHES "^${skip}/")
          set(skipped TRUE)
        endif()
      endforeach()
      if(skipped)
        continue()
      endif()
      math(EXPR checked "${checked} + 1")
      file(STRINGS ${QVL_SOURCE_DIR}/${src} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"qvl/")
      foreach(line ${lines})
        if(NOT line MATCHES "\"qvl/([^\"]+)\"")
          continue()
        endif()
        set(name ${CMAKE_MATCH_1})
        if(NOT DEFINED QVL_OWNER_${name})
          message(SEND_ERROR "${src}: includes qvl/${name}, which no layer publishes")
          math(EXPR violations "${violations} + 1")
        elseif(NOT QVL_OWNER_${name} IN_LIST QVL_LAYER_MAY_${layer})
          message(SEND_ERROR "${src}: ${layer} includes qvl/${name} of ${QVL_OWNER_${name}} "
            "(${layer} may include only: ${QVL_LAYER_MAY_${layer}})")
          math(EXPR violations "${violations} + 1")
        endif()
      endforeach()
    endforeach()
  endforeach()
endforeach()

if(violations GREATER 0)
  message(FATAL_ERROR "check_layers: ${violations} include(s) point up or sideways")
endif()
message(STATUS "check_layers: ${checked} files, every qvl/ include points down")
