# libqvl-graph: builder, validator, fusion pass, planner, executor, dumps and cross-check.
# Numeric tests run graphs on the reference backend and skip when it is not built.
set(QVL_GRAPH_TEST_DEFS "")
if(TARGET qvl-reference)
  list(APPEND QVL_GRAPH_TEST_DEFS "QVL_REFERENCE_SO=\"$<TARGET_FILE:qvl-reference>\"")
endif()
foreach(t build fuse plan exec dump crosscheck split)
  qvl_add_test(test_graph_${t}
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_graph_${t}.c ${CMAKE_CURRENT_SOURCE_DIR}/test_graph_util.c
    LIBS qvl-graph qvl-test-support m
    DEFS ${QVL_GRAPH_TEST_DEFS})
  if(TARGET qvl-reference)
    add_dependencies(test_graph_${t} qvl-reference)
  endif()
endforeach()
