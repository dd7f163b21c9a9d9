/* Progress share and time left (progress_eta.h). */
#include "progress_eta.h"

#include <math.h>
#include <stdio.h>

void progress_eta_text(double elapsed, double fraction, char *buf, size_t n) {
    if (n == 0) return;
    if (!(fraction > 0.0)) fraction = 0.0; /* NaN too */
    if (fraction > 1.0) fraction = 1.0;
    const int pct = (int)floor(fraction * 100.0);
    if (elapsed < 1.0 || fraction < 0.02 || fraction >= 1.0) {
        snprintf(buf, n, "%d%%", pct);
        return;
    }
    const double left = elapsed * (1.0 - fraction) / fraction;
    const long s = lround(left);
    if (s < 60) snprintf(buf, n, "%d%%, about %ld s left", pct, s);
    else if (s < 3600) snprintf(buf, n, "%d%%, about %ld min %ld s left", pct, s / 60, s % 60);
    else snprintf(buf, n, "%d%%, about %ld h %ld min left", pct, s / 3600, s % 3600 / 60);
}
