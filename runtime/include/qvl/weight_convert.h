/* Converting stored weights to the dtype the graphs read, once at load (--weights q8_0 etc.). */
#ifndef QVL_WEIGHT_CONVERT_H
#define QVL_WEIGHT_CONVERT_H

#include <stddef.h>
#include <stdint.h>

#include "qvl/dtype.h"
#include "qvl/status.h"

/* n elements of dtype `from` at src (any alignment) into dtype `to` at dst, through f32, on up
 * to `threads` threads (the work is split in chunks of whole blocks of every dtype). n must be
 * a whole number of blocks of both dtypes. */
qvl_status qvl_convert_elements(qvl_dtype from, const void *src, qvl_dtype to, void *dst,
                                int64_t n, int threads, qvl_error *err);
/* The same, and *rel_rms = RMS(result - source) / RMS(source), the source taken as f32 (the
 * absolute RMS error when the source is all zeros): what a quantisation costs a tensor. */
qvl_status qvl_convert_elements_measured(qvl_dtype from, const void *src, qvl_dtype to, void *dst,
                                         int64_t n, int threads, double *rel_rms, qvl_error *err);
/* The same with the two sums behind that ratio, for a tensor converted in several pieces:
 * sums[0] = sum of (result - source)^2, sums[1] = sum of source^2 (sums may be NULL). */
qvl_status qvl_convert_elements_sums(qvl_dtype from, const void *src, qvl_dtype to, void *dst,
                                     int64_t n, int threads, double sums[2], qvl_error *err);

/* Tell the kernel that the pages fully inside [p, p+bytes) of a read-only file mapping are not
 * needed any more (they leave the process's resident set; the file stays intact). */
void qvl_release_mapped_pages(const void *p, size_t bytes);

#endif
