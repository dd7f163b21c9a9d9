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

# Structured output through qvl serve (tests/serve_structured_test.py): response_format
# json_schema over a dozen schemas and json_object at temperature 0 and 1, streamed and not,
# every answer validated with python-jsonschema; logit_bias bans and forces; logprobs sorted
# and consistent, streamed = whole; n choices. Skipped (77) without the tokenizer or jsonschema.
if(Python3_Interpreter_FOUND)
  add_test(NAME serve_structured COMMAND ${Python3_EXECUTABLE}
    ${CMAKE_CURRENT_LIST_DIR}/serve_structured_test.py $<TARGET_FILE:qvl> ${QVL_SHARED_DATA_DIR}
    ${CMAKE_CURRENT_BINARY_DIR}/serve_structured)
  set_tests_properties(serve_structured PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77)
endif()

# Function calling through qvl serve (tests/serve_tools_test.py): the tools prompt against the
# chat template (jinja2, when installed), tool_choice required / named / auto / none, arguments
# validated against the functions' schemas, streamed tool-call deltas = the whole message, a
# second turn with role "tool" results, and the 400s. Skipped (77) without the tokenizer or
# jsonschema.
if(Python3_Interpreter_FOUND)
  add_test(NAME serve_tools COMMAND ${Python3_EXECUTABLE}
    ${CMAKE_CURRENT_LIST_DIR}/serve_tools_test.py $<TARGET_FILE:qvl> ${QVL_SHARED_DATA_DIR}
    ${CMAKE_CURRENT_BINARY_DIR}/serve_tools)
  set_tests_properties(serve_tools PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77)
endif()

# The official OpenAI client against qvl serve (tests/serve_openai_test.py):
# beta.chat.completions.parse with a Pydantic model, tool calls required and named, a second
# turn, a streamed call. Skipped (77) without the tokenizer or the openai package (.pydeps).
if(Python3_Interpreter_FOUND)
  add_test(NAME serve_openai COMMAND ${Python3_EXECUTABLE}
    ${CMAKE_CURRENT_LIST_DIR}/serve_openai_test.py $<TARGET_FILE:qvl> ${QVL_SHARED_DATA_DIR}
    ${CMAKE_CURRENT_BINARY_DIR}/serve_openai)
  set_tests_properties(serve_openai PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
endif()

# The chat page at GET / (tests/serve_webui_test.py): the page byte for byte with its headers
# (Content-Security-Policy holding the page's own script and style hashes, no-cache), no key
# needed for / while the API keeps needing one, no reference to another host, 404 with
# --no-webui. Skipped (77) without the tokenizer.
if(Python3_Interpreter_FOUND)
  add_test(NAME serve_webui COMMAND ${Python3_EXECUTABLE}
    ${CMAKE_CURRENT_LIST_DIR}/serve_webui_test.py $<TARGET_FILE:qvl> ${CMAKE_SOURCE_DIR}
    ${QVL_SHARED_DATA_DIR} ${CMAKE_CURRENT_BINARY_DIR}/serve_webui)
  set_tests_properties(serve_webui PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()

# The chat page in headless Chromium over the DevTools Protocol
# (tests/serve_webui_browser_test.py, tests/cdp.py): behind --api-key, a question with a picture
# streams the API's own temperature-0 answer, a second turn, the timings line, Stop. The
# screenshot lands in build/tests/serve_webui_browser/webui.png. Skipped (77) without Chromium
# (scripts/install-deps.sh installs it) or the tokenizer.
if(Python3_Interpreter_FOUND)
  add_test(NAME serve_webui_browser COMMAND ${Python3_EXECUTABLE}
    ${CMAKE_CURRENT_LIST_DIR}/serve_webui_browser_test.py $<TARGET_FILE:qvl> ${CMAKE_SOURCE_DIR}
    ${QVL_SHARED_DATA_DIR} ${CMAKE_CURRENT_BINARY_DIR}/serve_webui_browser)
  set_tests_properties(serve_webui_browser PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
endif()

# qvl serve stopping under load (tests/serve_shutdown_test.py): SIGTERM with --parallel 2 busy
# (one stream, one whole answer) and two requests queued; every client gets its 503 or its
# stream's error event and [DONE]. Skipped (77) without the tokenizer.
if(Python3_Interpreter_FOUND)
  add_test(NAME serve_shutdown COMMAND ${Python3_EXECUTABLE}
    ${CMAKE_CURRENT_LIST_DIR}/serve_shutdown_test.py $<TARGET_FILE:qvl> ${QVL_SHARED_DATA_DIR}
    ${CMAKE_CURRENT_BINARY_DIR}/serve_shutdown)
  set_tests_properties(serve_shutdown PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
endif()

# llama-server's surface (tests/serve_llama_test.py): its flags as /props, /slots and
# /v1/models/{id} report them, /tokenize and /detokenize, /v1/completions (raw prompt, token
# ids, streamed, legacy logprobs, the OpenAI client when .pydeps has it), refused and ignored
# fields, CORS. Skipped (77) without the tokenizer.
if(Python3_Interpreter_FOUND)
  add_test(NAME serve_llama COMMAND ${Python3_EXECUTABLE}
    ${CMAKE_CURRENT_LIST_DIR}/serve_llama_test.py $<TARGET_FILE:qvl> ${QVL_SHARED_DATA_DIR}
    ${CMAKE_CURRENT_BINARY_DIR}/serve_llama)
  set_tests_properties(serve_llama PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
endif()
