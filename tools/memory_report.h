/* The memory of a loaded model per backend, one line each (qvl run's summary, qvl-bench). */
#ifndef QVL_TOOLS_MEMORY_REPORT_H
#define QVL_TOOLS_MEMORY_REPORT_H

#include <stdio.h>

#include "qvl/qwen3vl_model.h"

/* "cuda_sm61  weights 812.0 MiB, KV 224.0 MiB, activations 41.2 MiB, scratch 3.0 MiB; 1100 of
 * 2048 MiB in use". Scratch (what the backend holds beyond the model's buffers: its own
 * workspaces) only where the device reports its memory. */
void memory_report_line(FILE *f, const char *lead, const qvl_model_backend_memory *r);

#endif
