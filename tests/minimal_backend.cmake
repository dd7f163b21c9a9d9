# The minimal backend (tests/minimal_backend/): written by following docs/writing-a-backend.md,
# to prove the document true. It must pass what any backend passes: the op conformance suite
# against the reference, and text and image parity with Hugging Face on the fixtures.
add_subdirectory(minimal_backend) # qvl-minimal and conformance_minimal

# plugins.yaml files for the parity runs that parity.cmake and vision.cmake add (with
# QVL_PARITY_BACKENDS naming the one backend that must load and pass): the minimal backend,
# and the reference with its fused ops off (the unfused graphs on the oracle's own kernels).
set(QVL_MIN_PLUGINS ${CMAKE_BINARY_DIR}/tests/plugins-minimal.yaml)
set(QVL_NOFUSE_PLUGINS ${CMAKE_BINARY_DIR}/tests/plugins-reference-unfused.yaml)
file(GENERATE OUTPUT ${QVL_MIN_PLUGINS} CONTENT
"backends:
  - name: minimal
    library: $<TARGET_FILE:qvl-minimal>
    required: true
")
file(GENERATE OUTPUT ${QVL_NOFUSE_PLUGINS} CONTENT
"backends:
  - name: reference
    library: $<TARGET_FILE:qvl-reference>
    required: true
    options: { fused_ops: false }
")

add_test(NAME cli_qvl_minimal COMMAND ${CMAKE_CURRENT_LIST_DIR}/cli_qvl_minimal.sh
  $<TARGET_FILE:qvl> ${CMAKE_SOURCE_DIR} ${QVL_MIN_PLUGINS} ${QVL_NOFUSE_PLUGINS})
set_tests_properties(cli_qvl_minimal PROPERTIES TIMEOUT 300)
