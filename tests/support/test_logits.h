/* Comparing rows of logits in the model tests. */
#ifndef QVL_TEST_LOGITS_H
#define QVL_TEST_LOGITS_H

#include <stdint.h>

/* The lowest index of the largest of v[0, n) (greedy decoding's choice). */
int32_t test_argmax(const float *v, int64_t n);
/* max |a - b| over max |a| (1 when a is all zeros): the difference relative to the row's scale. */
double test_rel_err(const float *a, const float *b, int64_t n);

#endif
