# Images: decoding, preprocessing, 3-D positions, the row-scatter ops, and parity of the whole
# image path with Hugging Face on the committed fixtures.
qvl_add_test(test_image SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_image.c
  LIBS qvl-qwen3vl qvl-test-image-write m)
qvl_add_test(test_scatter_ops SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_scatter_ops.c
  LIBS qvl-test-support m
  DEFS QVL_REFERENCE_SO="$<TARGET_FILE:qvl-reference>")
add_dependencies(test_scatter_ops qvl-reference)
pkg_check_modules(CJSON_VISION_TEST REQUIRED IMPORTED_TARGET libcjson)
qvl_add_test(test_vision_parity SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_vision_parity.c
  ${CMAKE_CURRENT_LIST_DIR}/support/parity_cases.c
  LIBS qvl-qwen3vl qvl-test-support PkgConfig::CJSON_VISION_TEST m)
add_dependencies(test_vision_parity qvl-reference)
# The vision graph a model keeps between encodes: bit for bit what a fresh graph gives.
qvl_add_test(test_vision_reuse SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_vision_reuse.c
  LIBS qvl-qwen3vl qvl-test-support)
add_dependencies(test_vision_reuse qvl-reference)
add_test(NAME cli_qvl_image COMMAND ${CMAKE_CURRENT_LIST_DIR}/cli_qvl_image.sh $<TARGET_FILE:qvl>
  ${CMAKE_SOURCE_DIR} ${QVL_SHARED_DATA_DIR})
set_tests_properties(cli_qvl_image PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
# The same parity on the minimal backend written from docs/writing-a-backend.md, and on the
# reference with its fused ops off (plugins files from minimal_backend.cmake).
add_dependencies(test_vision_parity qvl-minimal)
add_test(NAME test_vision_parity_minimal COMMAND test_vision_parity)
set_tests_properties(test_vision_parity_minimal PROPERTIES TIMEOUT 900
  ENVIRONMENT "QVL_PLUGINS=${QVL_MIN_PLUGINS};QVL_PARITY_BACKENDS=minimal")
add_test(NAME test_vision_parity_reference_unfused COMMAND test_vision_parity)
set_tests_properties(test_vision_parity_reference_unfused PROPERTIES TIMEOUT 900
  ENVIRONMENT "QVL_PLUGINS=${QVL_NOFUSE_PLUGINS};QVL_PARITY_BACKENDS=reference")
# Videos given as frames: prompt ids, grids, positions, pixels, encoder and logits against
# transformers (fixture_videos.json, scripts/make_video_fixtures.py); $QVL_PARITY_BACKENDS picks
# the backends as for the image parity test.
qvl_add_test(test_video_parity SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_video_parity.c
  ${CMAKE_CURRENT_LIST_DIR}/support/parity_cases.c
  LIBS qvl-qwen3vl qvl-test-support PkgConfig::CJSON_VISION_TEST m)
add_dependencies(test_video_parity qvl-reference)
add_test(NAME test_video_parity_kv_f32 COMMAND test_video_parity)
set_tests_properties(test_video_parity_kv_f32 PROPERTIES TIMEOUT 900
  ENVIRONMENT "QVL_PARITY_KV_TYPE=f32")
add_test(NAME cli_qvl_video COMMAND ${CMAKE_CURRENT_LIST_DIR}/cli_qvl_video.sh $<TARGET_FILE:qvl>
  ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_qvl_video PROPERTIES TIMEOUT 300)
# GGUF files made by llama.cpp's converter (tests/fixtures/gguf) against the directories they
# were made from: logits, greedy tokens, image features (test_gguf_parity.c says how close).
qvl_add_test(test_gguf_parity SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gguf_parity.c
  ${CMAKE_CURRENT_LIST_DIR}/support/parity_cases.c
  LIBS qvl-qwen3vl qvl-test-support PkgConfig::CJSON_VISION_TEST m)
add_dependencies(test_gguf_parity qvl-reference)
# The config, tokenizer and generation settings a GGUF gives, against its directory's files.
qvl_add_test(test_gguf_files SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gguf_files.c
  LIBS qvl-qwen3vl)
add_test(NAME cli_gguf COMMAND ${CMAKE_CURRENT_LIST_DIR}/cli_gguf.sh $<TARGET_FILE:qvl>
  ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_gguf PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
