# Chat template rendering, sampling and generation_config.json (models/qwen3vl).
qvl_add_test(test_chat SOURCES test_chat.c LIBS qvl-qwen3vl)
qvl_add_test(test_sampling SOURCES test_sampling.c LIBS qvl-qwen3vl m)
qvl_add_test(test_gen_config SOURCES test_gen_config.c LIBS qvl-qwen3vl)
