# What a hostile tokenizer.json can make encoding cost: Split regex step allowance, added tokens
# found in one pass. The timeout is a hang guard (the old added-token search took minutes on
# test_long_added_token), not a speed assertion.
qvl_add_test(test_tokenizer_cost SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer_cost.c
  LIBS qvl-runtime)
set_tests_properties(test_tokenizer_cost PROPERTIES TIMEOUT 120)
