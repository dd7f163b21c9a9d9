# Fuzz targets for every parser that reads files or text from strangers (tests/fuzz/).
#
# Always (any compiler): each target tests/fuzz/fuzz_<name>.c is linked with
# tests/fuzz/replay_main.c into fuzz_replay_<name>, and a ctest `fuzz_<name>` replays the
# committed corpus (tests/fuzz/corpus/<name>/) and crash regressions
# (tests/fuzz/regressions/<name>/). In a -DQVL_SANITIZE=ON build that replay runs under
# ASan+UBSan.
#
# With -DQVL_FUZZ=ON (needs clang: CC=clang) each target is also built as a libFuzzer program
# fuzz_<name> (-fsanitize=fuzzer,address,undefined), and the parser libraries get coverage
# instrumentation. scripts/fuzz.sh configures such a build and runs every target.
option(QVL_FUZZ "Also build the fuzz targets as libFuzzer programs (clang only)" OFF)

set(QVL_FUZZ_SRC ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
set(QVL_FUZZ_TARGETS safetensors config gen_config tokenizer_load tokenizer_encode chat
    plugins_yaml ids image weights_index serve_request gguf video)

if(QVL_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "QVL_FUZZ=ON needs clang (configure with CC=clang)")
  endif()
  set(QVL_FUZZ_SAN address,undefined)
  # Coverage feedback must come from the parsers themselves, not only from the harness.
  foreach(lib qvl-core qvl-graph qvl-runtime qvl-qwen3vl)
    target_compile_options(${lib} PRIVATE -fsanitize=fuzzer-no-link,${QVL_FUZZ_SAN}
      -fno-omit-frame-pointer)
  endforeach()
  target_link_options(qvl-core PRIVATE -fsanitize=${QVL_FUZZ_SAN})
endif()

foreach(name ${QVL_FUZZ_TARGETS})
  set(srcs ${QVL_FUZZ_SRC}/fuzz_${name}.c)
  set(libs qvl-qwen3vl qvl-core)
  if(name MATCHES "^(safetensors|gguf|gen_config|tokenizer_load|tokenizer_encode|video)$")
    set(libs qvl-runtime qvl-core) # parsers of the runtime layer need nothing model-specific
  endif()
  if(name STREQUAL "ids")
    list(APPEND srcs ${CMAKE_SOURCE_DIR}/tools/cli.c) # cli_parse_ids lives in the tool sources
  endif()
  if(name STREQUAL "serve_request") # qvl serve's request parser and its data: URL pictures
    pkg_check_modules(QVL_FUZZ_CJSON REQUIRED IMPORTED_TARGET libcjson)
    list(APPEND srcs ${CMAKE_SOURCE_DIR}/tools/serve/serve_request.c
      ${CMAKE_SOURCE_DIR}/tools/serve/serve_structured.c ${CMAKE_SOURCE_DIR}/tools/serve/serve_tools.c
      ${CMAKE_SOURCE_DIR}/tools/serve/serve_fields.c
      ${CMAKE_SOURCE_DIR}/tools/serve/serve_pyjson.c
      ${CMAKE_SOURCE_DIR}/tools/serve/serve_json.c
      ${CMAKE_SOURCE_DIR}/tools/serve/serve_image.c ${CMAKE_SOURCE_DIR}/tools/serve/serve_budget.c
      ${CMAKE_SOURCE_DIR}/tools/serve/serve_video.c ${CMAKE_SOURCE_DIR}/tools/video_files.c)
    list(APPEND libs qvl-engine PkgConfig::QVL_FUZZ_CJSON Threads::Threads)
  endif()

  set(variants replay)
  if(QVL_FUZZ)
    list(APPEND variants fuzzer)
  endif()
  foreach(variant ${variants})
    if(variant STREQUAL "replay")
      set(exe fuzz_replay_${name})
      add_executable(${exe} ${srcs} ${QVL_FUZZ_SRC}/replay_main.c)
    else()
      set(exe fuzz_${name})
      add_executable(${exe} ${srcs})
    endif()
    target_include_directories(${exe} PRIVATE ${QVL_FUZZ_SRC} ${CMAKE_SOURCE_DIR}/tools)
    target_link_libraries(${exe} PRIVATE ${libs} m)
    target_compile_definitions(${exe} PRIVATE _GNU_SOURCE
      QVL_SHARED_DATA_DIR="${QVL_SHARED_DATA_DIR}")
    if(QVL_FUZZ)
      set(flags -fsanitize=${QVL_FUZZ_SAN} -fno-omit-frame-pointer)
      if(variant STREQUAL "fuzzer")
        set(flags -fsanitize=fuzzer,${QVL_FUZZ_SAN} -fno-omit-frame-pointer)
      endif()
      target_compile_options(${exe} PRIVATE ${flags})
      target_link_options(${exe} PRIVATE ${flags})
    endif()
  endforeach()

  # The replay: every corpus and regression file must run without a crash, a sanitizer report
  # or a failed property check. (Each directory holds a .gitkeep, so it exists when empty.)
  add_test(NAME fuzz_${name}
    COMMAND fuzz_replay_${name} ${QVL_FUZZ_SRC}/corpus/${name} ${QVL_FUZZ_SRC}/regressions/${name})
  set_tests_properties(fuzz_${name} PROPERTIES TIMEOUT 600)
endforeach()

# Limits and message rules that came out of fuzzing, asserted directly.
qvl_add_test(test_hostile_limits SOURCES ${QVL_FUZZ_SRC}/test_hostile_limits.c LIBS qvl-runtime)

# The bounded whole-file reader (qvl/file.h) and the loaders on it: FIFOs, devices, directories.
qvl_add_test(test_read_file SOURCES ${QVL_FUZZ_SRC}/test_read_file.c LIBS qvl-qwen3vl)
# Decompression bombs: pixel limit and what a PNG/JPEG of its size can hold.
qvl_add_test(test_image_limits SOURCES ${QVL_FUZZ_SRC}/test_image_limits.c
  LIBS qvl-runtime qvl-test-image-write)
