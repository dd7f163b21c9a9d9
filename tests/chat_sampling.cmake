# Chat template rendering (models/qwen3vl), sampling and generation_config.json (runtime).
qvl_add_test(test_chat SOURCES test_chat.c LIBS qvl-qwen3vl)
qvl_add_test(test_sampling SOURCES test_sampling.c LIBS qvl-runtime m)
qvl_add_test(test_sampling_penalties SOURCES test_sampling_penalties.c LIBS qvl-runtime m)
qvl_add_test(test_gen_config SOURCES test_gen_config.c LIBS qvl-runtime)

# qvl's rendering against the model's chat_template.jinja run by Jinja2 (tests/chat_template_test.py,
# through qvl-chat-render): the same bytes for every conversation. Skipped (77) without the
# template in the shared data or Jinja2 in .pydeps/.
pkg_check_modules(CJSON_CHAT_TEST REQUIRED IMPORTED_TARGET libcjson)
add_executable(qvl-chat-render ${CMAKE_CURRENT_LIST_DIR}/chat_render_main.c)
target_link_libraries(qvl-chat-render PRIVATE qvl-qwen3vl PkgConfig::CJSON_CHAT_TEST)
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME chat_template COMMAND ${Python3_EXECUTABLE}
    ${CMAKE_CURRENT_LIST_DIR}/chat_template_test.py $<TARGET_FILE:qvl-chat-render>
    ${QVL_SHARED_DATA_DIR})
  set_tests_properties(chat_template PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
