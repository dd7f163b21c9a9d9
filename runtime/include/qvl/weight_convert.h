/* Converting stored weights to the dtype the graphs read, once at load (--weights q8_0 etc.). */
#ifndef QVL_WEIGHT_CONVERT_H
#define QVL_WEIGHT_CONVERT_H

#include <stddef.h>
#include <stdint.h>

#include <stdbool.h>

#include "qvl/dtype.h"
#include "qvl/safetensors.h"
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

/* One piece of src written as dtype `to` (a file writer filling a tensor chunk by chunk): the
 * nbytes at byte_offset of the converted data, which must start on a whole block of src's
 * dtype. Adds the piece's error sums to sums[2]; *last says whether it ends the tensor. Errors
 * name the tensor. */
qvl_status qvl_convert_piece(const qvl_st_tensor *src, qvl_dtype to, uint64_t byte_offset,
                             void *dst, size_t nbytes, int threads, double sums[2], bool *last,
                             qvl_error *err);
/* One line on stdout for a converted tensor: name (padded to name_width), shape, the dtypes and
 * the RMS error the sums give, relative to the source's RMS. */
void qvl_print_conversion(int name_width, const char *name, const qvl_st_tensor *src,
                          qvl_dtype to, const double sums[2]);

/* Tell the kernel that the pages fully inside [p, p+bytes) of a read-only file mapping are not
 * needed any more (they leave the process's resident set; the file stays intact). */
void qvl_release_mapped_pages(const void *p, size_t bytes);

#endif
