/* What shape inference (ops_infer.c) reads of the op table (ops.c) beyond qvl/ops.h. Internal
 * to libqvl-core: hidden from the shared library's symbols. */
#ifndef QVL_OPS_TABLE_H
#define QVL_OPS_TABLE_H

#include "qvl/ops.h"

/* The member of qvl_params op reads ("none": it takes no params; also for an unknown op). */
__attribute__((visibility("hidden"))) const char *ops_params_member(qvl_op op);

#endif
