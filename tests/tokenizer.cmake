# The byte-level BPE tokenizer: reference cases from ../shared/data, special tokens, decoding,
# hostile input, and broken tokenizer.json files.
qvl_add_test(test_tokenizer SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_tokenizer.c LIBS qvl-runtime)
