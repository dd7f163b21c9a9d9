/* The progress line's share done and time left (tools/progress_eta.c): the percentage rounded
 * down, no estimate until a second and 2% have passed (no rate yet) nor at the end, then the
 * time so far scaled by what is left, in seconds, minutes or hours; shares outside [0, 1]
 * (NaN included) clamped; a short buffer truncated, still terminated. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "progress_eta.h"

static void expect(double elapsed, double fraction, const char *want) {
    char buf[64];
    progress_eta_text(elapsed, fraction, buf, sizeof buf);
    assert_string_equal(buf, want);
}

static void test_eta(void **state) {
    (void)state;
    expect(0.5, 0.5, "50%");                        /* under a second: no rate yet */
    expect(30.0, 0.01, "1%");                       /* under 2%: no rate yet */
    expect(10.0, 0.25, "25%, about 30 s left");
    expect(10.0, 0.999, "99%, about 0 s left");
    expect(60.0, 0.3, "30%, about 2 min 20 s left"); /* 140 s */
    expect(600.0, 0.1, "10%, about 1 h 30 min left"); /* 5400 s */
    expect(100.0, 1.0, "100%");
    expect(5.0, 1.7, "100%");
    expect(5.0, -0.2, "0%");
    expect(5.0, NAN, "0%");
    char small[6];
    progress_eta_text(10.0, 0.25, small, sizeof small);
    assert_string_equal(small, "25%, ");
    progress_eta_text(10.0, 0.25, small, 0); /* nothing written */
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_eta)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
