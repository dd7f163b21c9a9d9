# qvl-graph: dump, fuse, plan and cross-check the Qwen3-VL graphs from a config.json.
# The graph library already owns the target name qvl-graph, so the program's target is
# qvl-graph-tool with the file name qvl-graph.
add_executable(qvl-graph-tool ${CMAKE_CURRENT_SOURCE_DIR}/qvl-graph.c
  ${CMAKE_CURRENT_SOURCE_DIR}/graph_groups.c ${CMAKE_CURRENT_SOURCE_DIR}/graph_split_stats.c
  ${CMAKE_CURRENT_SOURCE_DIR}/cli.c)
target_include_directories(qvl-graph-tool PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(qvl-graph-tool PRIVATE qvl-qwen3vl qvl-graph qvl-core)
set_target_properties(qvl-graph-tool PROPERTIES OUTPUT_NAME qvl-graph
  INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
install(TARGETS qvl-graph-tool RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
