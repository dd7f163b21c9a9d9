# qvl serve beyond one request at a time, on loopback with the tiny random-weight model around
# the real Qwen3-VL tokenizer (each test exits 77 when ../shared/data has none):
#   serve_deadline  --request-timeout: answers cut with finish_reason length, 503 after waiting
#                   past the deadline, no starvation behind a long request;
#   serve_nginx     scripts/serve-replicas.sh: 2 replicas behind nginx, one killed mid-run, no
#                   request lost (77 also when nginx is not installed: scripts/install-deps.sh);
#   serve_load      scripts/serve-load.py, small: 48 requests from 8 clients, none lost or
#                   duplicated (the 200 x 16 run is by hand: docs/BENCHMARKS.md).
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME serve_deadline COMMAND ${Python3_EXECUTABLE}
    ${CMAKE_CURRENT_LIST_DIR}/serve_deadline_test.py $<TARGET_FILE:qvl> ${QVL_SHARED_DATA_DIR})
  add_test(NAME serve_nginx COMMAND ${Python3_EXECUTABLE}
    ${CMAKE_CURRENT_LIST_DIR}/serve_nginx_test.py $<TARGET_FILE:qvl> ${CMAKE_SOURCE_DIR}
    ${QVL_SHARED_DATA_DIR})
  add_test(NAME serve_load COMMAND ${Python3_EXECUTABLE}
    ${CMAKE_SOURCE_DIR}/scripts/serve-load.py --qvl $<TARGET_FILE:qvl> --shared ${QVL_SHARED_DATA_DIR}
    --requests 48 --clients 8 --max-tokens 16 --parallel 4 --time-limit 120)
  set_tests_properties(serve_load PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
  # Three servers and nginx beside the other tests: minutes on 2 cores under the sanitizers.
  set_tests_properties(serve_nginx PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
  # The expiry case waits out a 16000-token prefill: minutes under the sanitizers.
  set_tests_properties(serve_deadline PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
  if(QVL_SANITIZE)
    set_tests_properties(serve_deadline PROPERTIES ENVIRONMENT QVL_SANITIZED=1)
  endif()
else()
  message(STATUS "qvl: no python3: the serve_deadline, serve_nginx and serve_load tests are not registered")
endif()
