# JSON element bounds before cJSON: exact counts on valid files, and the safetensors header,
# index.json, tokenizer.json and config.json refusing trees far beyond what a valid file needs.
pkg_check_modules(CJSON_BOUNDS_TEST REQUIRED IMPORTED_TARGET libcjson)
qvl_add_test(test_json_bounds SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_json_bounds.c
  LIBS qvl-qwen3vl qvl-runtime PkgConfig::CJSON_BOUNDS_TEST)
