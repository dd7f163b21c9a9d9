# Per-op placement with fallback (graph/include/qvl/split.h) through the linear test plugin
# (tests/linear_backend/: MATMUL with 2-D f32/bf16 weights only, on a worker-thread pool):
# at top priority it runs the linear layers and the reference runs every other node. The
# fixtures' text and image parity on it, the same greedy ids as the reference, two backends in
# qvl-graph --stats and -v, clean exits every time, and `fallback: false` refusing the model.
# Decode-graph reuse and batched decode on the reference with fused ops off.
add_subdirectory(linear_backend) # qvl-linear and conformance_linear

set(QVL_LINEAR_PLUGINS ${CMAKE_BINARY_DIR}/tests/plugins-linear.yaml)
set(QVL_LINEAR_STRICT_PLUGINS ${CMAKE_BINARY_DIR}/tests/plugins-linear-no-fallback.yaml)
set(QVL_UNFUSED_PLUGINS ${CMAKE_BINARY_DIR}/tests/plugins-reference-unfused-fallback.yaml)
file(GENERATE OUTPUT ${QVL_LINEAR_PLUGINS} CONTENT
"backends:
  - name: linear
    library: $<TARGET_FILE:qvl-linear>
    priority: 10
    required: true
    options: { threads: 3 }
  - name: reference
    library: $<TARGET_FILE:qvl-reference>
    priority: 0
")
file(GENERATE OUTPUT ${QVL_LINEAR_STRICT_PLUGINS} CONTENT
"backends:
  - name: linear
    library: $<TARGET_FILE:qvl-linear>
    priority: 10
    required: true
    fallback: false
  - name: reference
    library: $<TARGET_FILE:qvl-reference>
")
file(GENERATE OUTPUT ${QVL_UNFUSED_PLUGINS} CONTENT
"backends:
  - name: reference
    library: $<TARGET_FILE:qvl-reference>
    required: true
    options: { fused_ops: false }
")

# Text and image parity with Hugging Face, and the KV cache paths, with the linear layers on
# the plugin (test_parity.c, test_vision_parity.c; targets from parity.cmake and vision.cmake).
add_test(NAME test_parity_linear COMMAND $<TARGET_FILE:test_parity>)
set_tests_properties(test_parity_linear PROPERTIES TIMEOUT 900
  ENVIRONMENT "QVL_PLUGINS=${QVL_LINEAR_PLUGINS};QVL_PARITY_BACKENDS=linear")
add_test(NAME test_vision_parity_linear COMMAND $<TARGET_FILE:test_vision_parity>)
set_tests_properties(test_vision_parity_linear PROPERTIES TIMEOUT 900
  ENVIRONMENT "QVL_PLUGINS=${QVL_LINEAR_PLUGINS};QVL_PARITY_BACKENDS=linear")

qvl_add_test(test_decode_reuse SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_decode_reuse.c
  LIBS qvl-qwen3vl qvl-test-support m
  DEFS "QVL_UNFUSED_PLUGINS=\"${QVL_UNFUSED_PLUGINS}\""
       "QVL_LINEAR_PLUGINS=\"${QVL_LINEAR_PLUGINS}\"")
add_dependencies(test_decode_reuse qvl-reference qvl-linear)
# New memory filled with 0xfe bytes (an f16 NaN) by glibc's malloc and by ASan's.
set_tests_properties(test_decode_reuse PROPERTIES
  ENVIRONMENT "MALLOC_PERTURB_=1"
  ENVIRONMENT_MODIFICATION
    "ASAN_OPTIONS=string_append:::malloc_fill_byte=254:max_malloc_fill_size=1048576")

add_test(NAME cli_fallback COMMAND ${CMAKE_CURRENT_LIST_DIR}/cli_fallback.sh
  $<TARGET_FILE:qvl> $<TARGET_FILE:qvl-graph-tool> ${CMAKE_SOURCE_DIR} ${QVL_LINEAR_PLUGINS}
  ${QVL_LINEAR_STRICT_PLUGINS})
set_tests_properties(cli_fallback PROPERTIES TIMEOUT 600)
