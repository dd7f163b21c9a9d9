/* Per-backend memory lines (memory_report.h). */
#include "memory_report.h"

static double mib(double bytes) { return bytes / 1048576.0; }

void memory_report_line(FILE *f, const char *lead, const qvl_model_backend_memory *r) {
    fprintf(f, "%s%-10s weights %.1f MiB", lead, r->name, mib((double)r->weights_bytes));
    if (r->weights_mapped_bytes)
        fprintf(f, " (+%.1f MiB read from the file mapping)", mib((double)r->weights_mapped_bytes));
    fprintf(f, ", KV %.1f MiB, activations %.2f MiB", mib((double)r->kv_bytes),
            mib((double)r->activation_bytes));
    const double ours = (double)r->weights_bytes + (double)r->kv_bytes + (double)r->activation_bytes;
    if (r->device_total > 0 && !r->host_memory) {
        const double used = (double)(r->device_total - r->device_free);
        fprintf(f, ", scratch %.1f MiB; %.0f of %.0f MiB in use", mib(used > ours ? used - ours : 0),
                mib(used), mib((double)r->device_total));
    }
    fprintf(f, "\n");
}
