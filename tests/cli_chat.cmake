# qvl chat end to end (tests/cli_chat.py): commands, Ctrl-C and Ctrl-D, the context filling up,
# line editing and history, on a pseudo-terminal (Python's pty module: a test tool, not a
# dependency of qvl) and with piped stdin. Skipped (exit 77) when ../shared/data has no
# tokenizer for the tiny random model the test makes with qvl mkmodel.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME cli_chat COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/cli_chat.py
    $<TARGET_FILE:qvl> ${CMAKE_SOURCE_DIR} ${QVL_SHARED_DATA_DIR})
  set_tests_properties(cli_chat PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
else()
  message(STATUS "qvl: no python3: the cli_chat test is not registered")
endif()

# qvl chat's /video (tests/cli_chat_video.py) on the tiny-tied fixture model: greedy ids against
# transformers, the video reused by the next turn, bad videos in one line.
if(Python3_Interpreter_FOUND)
  add_test(NAME cli_chat_video COMMAND ${Python3_EXECUTABLE}
    ${CMAKE_CURRENT_LIST_DIR}/cli_chat_video.py $<TARGET_FILE:qvl> ${CMAKE_SOURCE_DIR})
  set_tests_properties(cli_chat_video PROPERTIES TIMEOUT 600)
endif()
