# qvl serve's request body JSON (tools/serve/serve_json.c, serve_request.c): the value count and
# allocation budget that bound a body's tree, and the strict checks (U+0000, bytes after the
# value, duplicate keys, vision tokens typed as text). The HTTP side is tests/serve_hostile_body.py.
pkg_check_modules(QVL_SERVE_JSON_CJSON REQUIRED IMPORTED_TARGET libcjson)
find_package(Threads REQUIRED)
qvl_add_test(test_serve_json SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_serve_json.c
  ${CMAKE_SOURCE_DIR}/tools/serve/serve_json.c ${CMAKE_SOURCE_DIR}/tools/serve/serve_request.c
  ${CMAKE_SOURCE_DIR}/tools/serve/serve_structured.c ${CMAKE_SOURCE_DIR}/tools/serve/serve_tools.c
  ${CMAKE_SOURCE_DIR}/tools/serve/serve_fields.c
  ${CMAKE_SOURCE_DIR}/tools/serve/serve_pyjson.c
  ${CMAKE_SOURCE_DIR}/tools/serve/serve_image.c ${CMAKE_SOURCE_DIR}/tools/serve/serve_budget.c
  ${CMAKE_SOURCE_DIR}/tools/serve/serve_video.c ${CMAKE_SOURCE_DIR}/tools/video_files.c
  LIBS qvl-engine qvl-qwen3vl qvl-runtime PkgConfig::QVL_SERVE_JSON_CJSON Threads::Threads m)
target_include_directories(test_serve_json PRIVATE ${CMAKE_SOURCE_DIR}/tools)

# The chat template's `tojson` as qvl serve renders a request's tools (tools/serve/serve_pyjson.c)
# against Python's json.dumps(json.loads(body)) (tests/serve_pyjson_test.py, through qvl-pyjson):
# integers as written, floats as Python's repr, for chosen and random numbers.
add_executable(qvl-pyjson ${CMAKE_CURRENT_LIST_DIR}/pyjson_main.c
  ${CMAKE_SOURCE_DIR}/tools/serve/serve_json.c ${CMAKE_SOURCE_DIR}/tools/serve/serve_pyjson.c)
target_include_directories(qvl-pyjson PRIVATE ${CMAKE_SOURCE_DIR}/tools)
target_link_libraries(qvl-pyjson PRIVATE qvl-engine qvl-runtime PkgConfig::QVL_SERVE_JSON_CJSON Threads::Threads m)
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME serve_pyjson COMMAND ${Python3_EXECUTABLE}
    ${CMAKE_CURRENT_LIST_DIR}/serve_pyjson_test.py $<TARGET_FILE:qvl-pyjson>)
  set_tests_properties(serve_pyjson PROPERTIES TIMEOUT 300)
endif()
