# Grammar-constrained output (qvl/grammar.h, qvl/grammar_sampler.h).
# test_grammar: the GBNF parser's errors, the matcher, the token mask against feeding each
# token by hand, the constraint on logits, generated strings against the matcher.
qvl_add_test(test_grammar SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_grammar.c LIBS qvl-runtime m)

# grammar_schema: JSON Schemas compiled to GBNF; generated strings validate with python-jsonschema,
# valid instances are accepted and invalid ones refused, unsupported keywords named. Skipped (77)
# without jsonschema (scripts/install-deps.sh installs it into .pydeps/).
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME grammar_schema COMMAND ${Python3_EXECUTABLE}
    ${CMAKE_CURRENT_LIST_DIR}/grammar_schema_test.py $<TARGET_FILE:qvl-grammar>
    ${CMAKE_CURRENT_BINARY_DIR}/grammar_schema)
  set_tests_properties(grammar_schema PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
endif()

# cli_grammar: qvl run --json-schema / --grammar / --json on a random-weight model with the
# real tokenizer; answers parse and validate at temperature 0 and 1 over several seeds; bad
# flags, grammars and schemas give one line. Skipped (77) without the tokenizer or jsonschema.
if(Python3_Interpreter_FOUND)
  add_test(NAME cli_grammar COMMAND ${Python3_EXECUTABLE}
    ${CMAKE_CURRENT_LIST_DIR}/cli_grammar_test.py $<TARGET_FILE:qvl> $<TARGET_FILE:qvl-grammar>
    ${CMAKE_SOURCE_DIR} ${QVL_SHARED_DATA_DIR} ${CMAKE_CURRENT_BINARY_DIR}/cli_grammar)
  set_tests_properties(cli_grammar PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
endif()
