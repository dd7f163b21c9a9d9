# The cpu_avx2 backend: what it promises beyond agreeing with the reference op by op (the
# conformance_cpu_avx2 that qvl_add_backend registers in backends/cpu_avx2), and real Qwen3-VL
# graphs (tiny fixture config) cross-checked node by node with qvl-graph.
if(TARGET qvl-cpu_avx2)
  qvl_add_test(test_cpu_avx2_backend
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cpu_avx2_backend.c
    LIBS qvl-test-support m
    DEFS QVL_REFERENCE_SO="$<TARGET_FILE:qvl-reference>"
         QVL_CPU_AVX2_SO="$<TARGET_FILE:qvl-cpu_avx2>")
  add_dependencies(test_cpu_avx2_backend qvl-reference qvl-cpu_avx2)

  # Its vector exponentials, compiled as the backend compiles them.
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
    qvl_add_test(test_avx_math SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_avx_math.c LIBS m)
    target_include_directories(test_avx_math PRIVATE ${CMAKE_SOURCE_DIR}/backends/cpu_avx2)
    target_compile_options(test_avx_math PRIVATE -mavx2 -mfma -mf16c -ffp-contract=off)
    set_tests_properties(test_avx_math PROPERTIES SKIP_RETURN_CODE 77)
  endif()

  # Not a test: the MATMUL kernel's speed next to the roofline probes of the same run
  # (qvl-avx2-linear-bench $<TARGET_FILE:qvl-cpu_avx2> -t 2). Speed is never asserted.
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
    set(QVL_TOOLS_DIR ${CMAKE_SOURCE_DIR}/tools)
    add_executable(qvl-avx2-linear-bench
      ${QVL_TOOLS_DIR}/bench_probe_linear.c
      ${QVL_TOOLS_DIR}/bench_probe.c
      ${QVL_TOOLS_DIR}/bench_probe_avx2.c)
    set_source_files_properties(${QVL_TOOLS_DIR}/bench_probe_avx2.c
      PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma")
    target_compile_definitions(qvl-avx2-linear-bench PRIVATE QVL_BENCH_AVX2=1)
    target_include_directories(qvl-avx2-linear-bench PRIVATE ${QVL_TOOLS_DIR})
    target_link_libraries(qvl-avx2-linear-bench PRIVATE qvl-test-support Threads::Threads m)
    add_dependencies(qvl-avx2-linear-bench qvl-cpu_avx2)
    # The ATTENTION kernel alone at the vision tower's shapes (qvl-avx2-attention-bench
    # $<TARGET_FILE:qvl-cpu_avx2> -t 2): not a test either.
    add_executable(qvl-avx2-attention-bench
      ${QVL_TOOLS_DIR}/bench_probe_attention.c
      ${QVL_TOOLS_DIR}/bench_probe.c
      ${QVL_TOOLS_DIR}/bench_probe_avx2.c)
    target_compile_definitions(qvl-avx2-attention-bench PRIVATE QVL_BENCH_AVX2=1)
    target_include_directories(qvl-avx2-attention-bench PRIVATE ${QVL_TOOLS_DIR})
    target_link_libraries(qvl-avx2-attention-bench PRIVATE qvl-test-support Threads::Threads m)
    add_dependencies(qvl-avx2-attention-bench qvl-cpu_avx2)
  endif()

  if(TARGET qvl-graph-tool)
    set(QVL_AVX2_XCHECK_CONFIG ${CMAKE_SOURCE_DIR}/tests/fixtures/tiny-tied/config.json)
    set(QVL_AVX2_XCHECK_PLUGINS ${CMAKE_CURRENT_BINARY_DIR}/cpu_avx2_xcheck_plugins.yaml)
    file(GENERATE OUTPUT ${QVL_AVX2_XCHECK_PLUGINS} CONTENT
"backends:
  - name: reference
    library: $<TARGET_FILE:qvl-reference>
  - name: cpu_avx2
    library: $<TARGET_FILE:qvl-cpu_avx2>
    options: { threads: 2 }
")
    foreach(g "text-prefill;--tokens;37" "text-decode;--kv;50" "vision;--grid;4x6;--grid;8x8")
      list(GET g 0 kind)
      add_test(NAME cpu_avx2_crosscheck_${kind}
        COMMAND qvl-graph-tool --config ${QVL_AVX2_XCHECK_CONFIG} --graph ${g}
                --plugins ${QVL_AVX2_XCHECK_PLUGINS} --cross-check reference,cpu_avx2)
      set_tests_properties(cpu_avx2_crosscheck_${kind} PROPERTIES
        TIMEOUT 600 PASS_REGULAR_EXPRESSION "cross-check: OK")
    endforeach()
    # The decode graph unfused: store_rows_at and mask_causal_at as primitives.
    add_test(NAME cpu_avx2_crosscheck_text-decode-nofuse
      COMMAND qvl-graph-tool --config ${QVL_AVX2_XCHECK_CONFIG} --graph text-decode --kv 50
              --no-fuse --plugins ${QVL_AVX2_XCHECK_PLUGINS} --cross-check reference,cpu_avx2)
    set_tests_properties(cpu_avx2_crosscheck_text-decode-nofuse PROPERTIES
      TIMEOUT 600 PASS_REGULAR_EXPRESSION "cross-check: OK")
  endif()
endif()

# cpu_avx2's f32 GEMM splits its rows into blocks only past 576 rows (a picture's patches),
# which few conformance cases have: these runs force blocks of 6 rows on every GEMM shape.
if(TARGET qvl-cpu_avx2)
  foreach(op matmul norm_linear mlp_residual)
    qvl_add_conformance(cpu_avx2_gemm_rows6_${op} qvl-cpu_avx2 OP ${op}
                        ENVIRONMENT QVL_AVX2_GEMM_ROWS=6)
  endforeach()
endif()
