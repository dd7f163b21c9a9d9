/* The share of a long step done and the time it has left, as a progress line shows them. */
#ifndef QVL_TOOLS_PROGRESS_ETA_H
#define QVL_TOOLS_PROGRESS_ETA_H

#include <stddef.h>

/* "37%" and, once the step has run long enough for a rate (1 s and 2% done), ", about 1 min
 * 10 s left" (the time so far scaled by what is left: the step's work goes at a steady
 * rate). fraction is clamped to [0, 1]; elapsed in seconds. Always terminated (n > 0). */
void progress_eta_text(double elapsed, double fraction, char *buf, size_t n);

#endif
