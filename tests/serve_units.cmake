# qvl serve's pieces that need no model: SHA-256 (the picture and partition digests), prefix
# reuse decisions (partitions by API key and cache_salt, pictures by digest) and the picture
# memory budget.
qvl_add_test(test_sha256 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sha256.c LIBS qvl-runtime)
qvl_add_test(test_prefix_cache SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_prefix_cache.c
  LIBS qvl-engine)
qvl_add_test(test_serve_budget SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_serve_budget.c
  ${CMAKE_SOURCE_DIR}/tools/serve/serve_budget.c LIBS qvl-engine Threads::Threads)
target_include_directories(test_serve_budget PRIVATE ${CMAKE_SOURCE_DIR}/tools/serve)
# The engine under qvl serve and qvl chat (engine/): batch join and leave against each job
# alone, prompts prefilled together (the model's step counts say it happened), cancellation and
# deadline mid-batch, prefix selection, partition isolation, one prefill shared by jobs with one
# prompt (n choices).
qvl_add_test(test_engine SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_engine.c
  ${CMAKE_CURRENT_LIST_DIR}/support/engine_picture.c
  LIBS qvl-engine qvl-qwen3vl qvl-test-support)
add_dependencies(test_engine qvl-reference)
# The engine's per-job logits processing: grammars (with and without a trigger) beside plain
# jobs in the same batched steps, logit_bias, logprobs, and what qvl_engine_prepare refuses.
qvl_add_test(test_engine_constrain SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_engine_constrain.c
  LIBS qvl-engine m)
add_dependencies(test_engine_constrain qvl-reference)
# What qvl run asks of the engine: a prompt as ids holding its pictures' pads, and the
# progress observer (each picture's encoding, each prefill chunk).
qvl_add_test(test_engine_run SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_engine_run.c
  ${CMAKE_CURRENT_LIST_DIR}/support/engine_picture.c
  LIBS qvl-engine)
add_dependencies(test_engine_run qvl-reference)
