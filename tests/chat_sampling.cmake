# Chat template rendering (models/qwen3vl), sampling and generation_config.json (runtime).
qvl_add_test(test_chat SOURCES test_chat.c LIBS qvl-qwen3vl)
qvl_add_test(test_sampling SOURCES test_sampling.c LIBS qvl-runtime m)
qvl_add_test(test_gen_config SOURCES test_gen_config.c LIBS qvl-runtime)
