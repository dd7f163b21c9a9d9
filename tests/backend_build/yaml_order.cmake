# cmake -DQVL_SOURCE_DIR=<checkout> -DCASE=<case> -P yaml_order.cmake
# The plugins.yaml list of cmake/QvlBackend.cmake on its own, without a build: qvl_list_backend
# calls in a scrambled order, and the text qvl_backends_yaml renders from them.
#   CASE=order: priorities sorted highest first (negative ones numerically, ties in call
#               order), options as given; prints "order ok" or fails.
#   CASE=twice, bad_priority, bad_options, bad_name: must fail with the one-line reason.
cmake_minimum_required(VERSION 3.20) # the policies of the real build (IN_LIST)
include(${QVL_SOURCE_DIR}/cmake/QvlBackend.cmake)

if(CASE STREQUAL "order")
  qvl_list_backend(low PRIORITY -5)
  qvl_list_backend(mid_a PRIORITY 50 OPTIONS "{ threads: 0 }  # all cores")
  qvl_list_backend(top PRIORITY 100 OPTIONS "{ device: 1, graphs: 0 }")
  qvl_list_backend(zero)
  qvl_list_backend(mid_b PRIORITY 50)
  qvl_list_backend(lower PRIORITY -40)
  qvl_list_backend(nine PRIORITY 9)
  qvl_backends_yaml(text)
  set(want "  - name: top\n    priority: 100\n    options: { device: 1, graphs: 0 }\n"
           "  - name: mid_a\n    priority: 50\n    options: { threads: 0 }  # all cores\n"
           "  - name: mid_b\n    priority: 50\n"
           "  - name: nine\n    priority: 9\n"
           "  - name: zero\n    priority: 0\n"
           "  - name: low\n    priority: -5\n"
           "  - name: lower\n    priority: -40\n")
  string(CONCAT want ${want})
  if(NOT text STREQUAL want)
    message(FATAL_ERROR "order: got\n${text}\nwanted\n${want}")
  endif()
  message(STATUS "order ok")
elseif(CASE STREQUAL "twice")
  qvl_list_backend(same PRIORITY 1)
  qvl_list_backend(same PRIORITY 2)
elseif(CASE STREQUAL "bad_priority")
  qvl_list_backend(p PRIORITY high)
elseif(CASE STREQUAL "bad_options")
  qvl_list_backend(o OPTIONS "threads: 0")
elseif(CASE STREQUAL "bad_name")
  qvl_list_backend("../evil")
else()
  message(FATAL_ERROR "yaml_order.cmake: unknown CASE '${CASE}'")
endif()
