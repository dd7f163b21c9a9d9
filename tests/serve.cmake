# qvl serve end to end (tests/serve_test.py): the server is started on a free loopback port
# with a random-weight model made by qvl mkmodel around the real Qwen3-VL tokenizer; skipped
# (exit 77) when ../shared/data has no tokenizer. Python 3's standard library is the client.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME serve COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/serve_test.py
    $<TARGET_FILE:qvl> ${CMAKE_SOURCE_DIR} ${QVL_SHARED_DATA_DIR})
  set_tests_properties(serve PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
else()
  message(STATUS "qvl: no python3: the serve test is not registered")
endif()

# Hostile request bodies (tests/serve_hostile_body_test.py): padded bodies refused without
# building their tree (peak memory read from /proc), memory given back after big bodies, strict
# JSON (U+0000, trailing bytes, duplicate keys), vision tokens typed as text, --image-dir answers.
if(Python3_Interpreter_FOUND)
  add_test(NAME serve_hostile_body COMMAND ${Python3_EXECUTABLE}
    ${CMAKE_CURRENT_LIST_DIR}/serve_hostile_body_test.py $<TARGET_FILE:qvl> ${QVL_SHARED_DATA_DIR})
  set_tests_properties(serve_hostile_body PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
  if(QVL_SANITIZE)
    # ASan's allocator keeps freed blocks in its quarantine and ignores malloc_trim: the
    # memory-given-back check measures glibc's allocator, so it is skipped (and says so) there.
    set_tests_properties(serve_hostile_body PROPERTIES ENVIRONMENT QVL_SANITIZED=1)
  endif()
endif()

# qvl serve under hostile connections (tests/serve_hostile_conn_test.py): slowloris
# against --max-connections-per-ip and --receive-timeout, a client that pipelines and leaves,
# Content-Length framing, the Host check (DNS rebinding).
if(Python3_Interpreter_FOUND)
  add_test(NAME serve_hostile_conn COMMAND ${Python3_EXECUTABLE}
    ${CMAKE_CURRENT_LIST_DIR}/serve_hostile_conn_test.py $<TARGET_FILE:qvl> ${QVL_SHARED_DATA_DIR})
  set_tests_properties(serve_hostile_conn PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
endif()

# qvl serve with videos (tests/serve_video_test.py) on the tiny-tied fixture model: frame lists
# against qvl run --video-frames, streamed, prefix reuse across turns, the video limits, hostile
# frame lists, video_url without a file decoder.
if(Python3_Interpreter_FOUND)
  add_test(NAME serve_video COMMAND ${Python3_EXECUTABLE}
    ${CMAKE_CURRENT_LIST_DIR}/serve_video_test.py $<TARGET_FILE:qvl> ${CMAKE_SOURCE_DIR})
  set_tests_properties(serve_video PROPERTIES TIMEOUT 600)
endif()
