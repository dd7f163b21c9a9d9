# Qwen3-VL config parsing, the model graphs (text decoder, vision encoder, their host-side
# inputs) and the qvl-graph tool.
qvl_add_test(test_config SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_config.c LIBS qvl-qwen3vl)

set(QVL_MODEL_GRAPHS_DEFS "")
if(TARGET qvl-reference)
  list(APPEND QVL_MODEL_GRAPHS_DEFS "QVL_REFERENCE_SO=\"$<TARGET_FILE:qvl-reference>\"")
endif()
# The text decoder and the vision encoder graphs: two programs on one harness.
foreach(part text vision)
  qvl_add_test(test_model_graphs_${part}
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_model_graphs_${part}.c
            ${CMAKE_CURRENT_SOURCE_DIR}/test_model_graphs_util.c
    LIBS qvl-qwen3vl qvl-graph qvl-test-support m DEFS ${QVL_MODEL_GRAPHS_DEFS})
  if(TARGET qvl-reference)
    add_dependencies(test_model_graphs_${part} qvl-reference)
  endif()
endforeach()

# The command-line tool: flags, errors, the 2B graphs' fusion summary, DOT output, and a
# cross-check of the reference backend against itself on a tiny config.
add_test(NAME cli_qvl_graph
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli_qvl_graph.sh $<TARGET_FILE:qvl-graph-tool>
          ${QVL_SHARED_DATA_DIR} ${CMAKE_CURRENT_BINARY_DIR})
set_tests_properties(cli_qvl_graph PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
