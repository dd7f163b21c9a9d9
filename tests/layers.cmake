# The layer arrows (tools -> engine -> models -> runtime -> graph -> core; backends -> core; the
# server in tools/serve sees the engine, never a model) hold in every
# `#include "qvl/..."` of the sources: tests/layers/check_layers.cmake.
add_test(NAME check_layers COMMAND ${CMAKE_COMMAND} -DQVL_SOURCE_DIR=${CMAKE_SOURCE_DIR}
  -P ${CMAKE_CURRENT_LIST_DIR}/layers/check_layers.cmake)
