# The plugin registry: plugins.yaml parsing, library resolution, loading and selection.
# The test plugins are MODULE libraries in the build tree (tests/plugins/); their paths reach
# the test through compile definitions.
set(QVL_TEST_PLUGINS dummy wrong_abi no_entry null_entry incomplete)
set(QVL_TEST_PLUGIN_DEFS "")
foreach(p ${QVL_TEST_PLUGINS})
  add_library(qvl-test-plugin-${p} MODULE ${CMAKE_CURRENT_SOURCE_DIR}/plugins/${p}.c)
  target_link_libraries(qvl-test-plugin-${p} PRIVATE qvl-core)
  set_target_properties(qvl-test-plugin-${p} PROPERTIES
    OUTPUT_NAME qvl-${p}
    C_VISIBILITY_PRESET hidden
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/plugins)
  string(TOUPPER ${p} P)
  list(APPEND QVL_TEST_PLUGIN_DEFS "QVL_TEST_${P}_SO=\"$<TARGET_FILE:qvl-test-plugin-${p}>\"")
endforeach()

# The real reference backend, found by the default search, once its target exists.
if(TARGET qvl-reference)
  list(APPEND QVL_TEST_PLUGIN_DEFS "QVL_REFERENCE_SO=\"$<TARGET_FILE:qvl-reference>\"")
endif()

# Two programs on one set of helpers: plugins.yaml parsing and locating the file (yaml), and
# resolving, loading and selecting backends (load).
foreach(part yaml load)
  qvl_add_test(test_plugins_${part}
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_plugins_${part}.c
            ${CMAKE_CURRENT_SOURCE_DIR}/test_plugins_util.c
    DEFS ${QVL_TEST_PLUGIN_DEFS})
  foreach(p ${QVL_TEST_PLUGINS})
    add_dependencies(test_plugins_${part} qvl-test-plugin-${p})
  endforeach()
  if(TARGET qvl-reference)
    add_dependencies(test_plugins_${part} qvl-reference)
  endif()
endforeach()
