# qvl-bench-tokenizer: encode speed of a tokenizer.json on one core (a developer tool, not installed).
add_executable(qvl-bench-tokenizer ${CMAKE_CURRENT_LIST_DIR}/qvl_bench_tokenizer.c)
target_link_libraries(qvl-bench-tokenizer PRIVATE qvl-runtime qvl-core)
