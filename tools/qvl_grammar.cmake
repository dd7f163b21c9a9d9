# qvl-grammar: GBNF / JSON Schema grammars from the command line: print, generate, match, and
# time the allowed-token mask over a tokenizer's vocabulary (a developer tool, not installed).
add_executable(qvl-grammar ${CMAKE_CURRENT_LIST_DIR}/qvl_grammar_tool.c)
target_link_libraries(qvl-grammar PRIVATE qvl-runtime qvl-core)
