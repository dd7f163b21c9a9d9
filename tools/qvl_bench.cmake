# qvl-bench: prefill/decode speed, load time, peak RSS, per-op profile and roofline probes.
add_executable(qvl-bench
  ${CMAKE_CURRENT_LIST_DIR}/qvl_bench.c
  ${CMAKE_CURRENT_LIST_DIR}/bench_report.c
  ${CMAKE_CURRENT_LIST_DIR}/bench_parallel.c
  ${CMAKE_CURRENT_LIST_DIR}/bench_probe.c
  ${CMAKE_CURRENT_LIST_DIR}/backend_args.c
  ${CMAKE_CURRENT_LIST_DIR}/image_bounds.c
  ${CMAKE_CURRENT_LIST_DIR}/memory_report.c
  ${CMAKE_CURRENT_LIST_DIR}/cli.c)
# On x86 the probe has AVX2/FMA kernels: only that file is compiled with -mavx2 -mfma, and it
# runs only when the CPU reports both.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64|i.86)$")
  target_sources(qvl-bench PRIVATE ${CMAKE_CURRENT_LIST_DIR}/bench_probe_avx2.c)
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/bench_probe_avx2.c
    PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma")
  target_compile_definitions(qvl-bench PRIVATE QVL_BENCH_AVX2=1)
endif()
target_link_libraries(qvl-bench PRIVATE qvl-qwen3vl Threads::Threads m ${CMAKE_DL_LIBS})
install(TARGETS qvl-bench RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
