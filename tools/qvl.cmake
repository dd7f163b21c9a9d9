add_executable(qvl
  ${CMAKE_CURRENT_LIST_DIR}/qvl_main.c
  ${CMAKE_CURRENT_LIST_DIR}/qvl_run.c
  ${CMAKE_CURRENT_LIST_DIR}/qvl_tokenize.c
  ${CMAKE_CURRENT_LIST_DIR}/qvl_mkmodel.c
  ${CMAKE_CURRENT_LIST_DIR}/cli.c)
target_link_libraries(qvl PRIVATE qvl-qwen3vl m)
install(TARGETS qvl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
