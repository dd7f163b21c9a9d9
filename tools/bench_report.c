/* Printing qvl-bench's figures. 1 GB = 1e9 bytes throughout (bandwidth convention); memory
 * sizes are also given in MiB where people compare them with top/free. */
#include "bench_report.h"
#include "qvl/dtype_mix.h"
#include "memory_report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

bench_spread bench_spread_of(double *values, int n) {
    bench_spread s = {0, 0, 0, n};
    if (n <= 0) return s;
    qsort(values, (size_t)n, sizeof *values, cmp_double);
    s.min = values[0];
    s.max = values[n - 1];
    s.median = n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
    return s;
}

/* ---- derived figures ---------------------------------------------------------------------- */

static double decode_gbs(const bench_results *r) {
    return (double)r->load.decode_weight_bytes * r->decode_tps.median / 1e9;
}

static double prefill_gflops(const bench_results *r) {
    return r->n_prompt > 0 ? r->prefill_flops * r->prefill_tps.median / (double)r->n_prompt / 1e9
                           : 0.0;
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

static double vision_gflops(const bench_results *r) {
    return r->vision_ms.median > 0 ? r->vision_flops / (r->vision_ms.median * 1e-3) / 1e9 : 0.0;
}

static double mib(uint64_t bytes) { return (double)bytes / 1048576.0; }

/* The probe a part's matmuls are measured against. A part counts as int8 work when most of its
 * matrices are multiplied with int8 dot products, which run about twice the fp32 FMA rate per
 * instruction (against the FMA probe they would read over 100%). Prefill and vision multiply
 * many rows at once, so what counts is the backend's GEMM: on a device every quantised dtype
 * (dp4a and the like); on the host CPU (cpu_avx2) only the k-quants, q4_k and q6_k, while q8_0
 * weights are dequantised to f32 panels and multiplied with FMAs (backends/cpu_avx2
 * avx_linear.c), so a q8_0 vision tower measured against the int8 probe read half its share.
 * value 0: no probe of that arithmetic here (a device probe measures fp32 FMA only), and no
 * fraction is given. */
typedef struct peak {
    double value;
    const char *name, *unit, *json; /* "FMA peak", "GFLOP/s", "fma" */
} peak;

static bool int8_gemm(const bench_probe *p, qvl_dtype dt) {
    if (!qvl_dtype_is_quant(dt)) return false;
    return p->device || dt != QVL_Q8_0;
}

static peak peak_for(const bench_probe *p, const size_t counts[QVL_DTYPE_COUNT]) {
    size_t quant = 0, other = 0;
    for (int d = 0; d < QVL_DTYPE_COUNT; d++) {
        if (int8_gemm(p, (qvl_dtype)d)) quant += counts[d];
        else other += counts[d];
    }
    if (quant <= other) return (peak){p->gflops, "FMA peak", "GFLOP/s", "fma"};
    return (peak){p->giops, "int8 dot-product peak", "GOP/s", "int8"};
}

/* " / int8 dot-product peak 310.2 GOP/s (48.3%)", or why there is no fraction. A figure over
 * its probe is capped at 100% and says so: the probe, not the kernel, fell short. */
static void print_of_peak(FILE *f, double achieved, peak pk) {
    if (!(pk.value > 0)) {
        fprintf(f, " (quantised: int8 dot products, which no probe here measures)\n");
        return;
    }
    const double r = achieved / pk.value;
    if (r > 1.0)
        fprintf(f, " / %s %.1f %s (100%%: capped, %.1f%% measured; the probe reached less than "
                "this kernel)\n", pk.name, pk.value, pk.unit, 100 * r);
    else
        fprintf(f, " / %s %.1f %s (%.1f%%)\n", pk.name, pk.value, pk.unit, 100 * r);
}

static double profile_total(const qvl_op_profile *p) {
    double s = 0;
    for (int op = 0; op < QVL_OP_COUNT; op++) s += p->seconds[op];
    return s;
}

/* Ops that ran, most expensive first. Returns how many. */
static int ops_by_time(const qvl_op_profile *a, const qvl_op_profile *b, int *order) {
    int n = 0;
    for (int op = 0; op < QVL_OP_COUNT; op++)
        if (a->calls[op] || b->calls[op]) order[n++] = op;
    for (int i = 1; i < n; i++) /* insertion sort: a handful of entries */
        for (int j = i; j > 0; j--) {
            double x = a->seconds[order[j]] + b->seconds[order[j]];
            double y = a->seconds[order[j - 1]] + b->seconds[order[j - 1]];
            if (x <= y) break;
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    return n;
}

/* ---- text --------------------------------------------------------------------------------- */

/* Each op kind's rate while it ran (its qvl_node_flops over its profiled seconds) against its
 * probe: which kernel falls short of the peak, not just that the part does. Only the ops whose
 * arithmetic is counted (matrix products, attention with a static mask). The matrix products
 * take the part's peak (mats); attention multiplies f32 activations: always the FMA peak. */
static void print_op_rates(FILE *f, const char *title, const qvl_op_profile *p,
                           const bench_probe *probe, peak mats) {
    static const qvl_op_profile none;
    int order[QVL_OP_COUNT];
    int n = ops_by_time(p, &none, order), shown = 0;
    for (int i = 0; i < n; i++) {
        const int op = order[i];
        if (!(p->flops[op] > 0) || !(p->seconds[op] > 0)) continue;
        if (shown++ == 0) fprintf(f, "  %s, per op while it ran:\n", title);
        const peak pk = op == QVL_OP_ATTENTION ? (peak){probe->gflops, "FMA peak", "GFLOP/s", "fma"}
                                               : mats;
        const double rate = p->flops[op] / p->seconds[op] / 1e9;
        fprintf(f, "    %-14s %9.2f %s", qvl_op_name((qvl_op)op), rate, pk.unit);
        if (pk.value > 0) fprintf(f, " (%.1f%% of the %s)", 100 * rate / pk.value, pk.name);
        fputc('\n', f);
    }
}

static void print_spread(FILE *f, const char *what, const bench_spread *s, const char *unit) {
    fprintf(f, "  %-22s %10.3f %s  (median of %d; min %.3f, max %.3f)\n", what, s->median, unit,
            s->n, s->min, s->max);
}

static void print_profile_text(FILE *f, const bench_results *r) {
    int order[QVL_OP_COUNT];
    int n = ops_by_time(&r->prof_prefill, &r->prof_decode, order);
    double tp = profile_total(&r->prof_prefill), td = profile_total(&r->prof_decode);
    fprintf(f, "  per-op time, one prefill of %lld tokens | one decode step (seconds, share, calls):\n",
            (long long)r->n_prompt);
    for (int i = 0; i < n; i++) {
        int op = order[i];
        fprintf(f, "    %-14s %10.4f %5.1f%% %5llu | %10.5f %5.1f%% %5llu\n",
                qvl_op_name((qvl_op)op), r->prof_prefill.seconds[op],
                100 * ratio(r->prof_prefill.seconds[op], r->prof_prefill_wall),
                (unsigned long long)r->prof_prefill.calls[op], r->prof_decode.seconds[op],
                100 * ratio(r->prof_decode.seconds[op], r->prof_decode_wall),
                (unsigned long long)r->prof_decode.calls[op]);
    }
    fprintf(f, "    %-14s %10.4f %5.1f%%       | %10.5f %5.1f%%        (graph build, plan, copies)\n",
            "outside ops", r->prof_prefill_wall - tp,
            100 * ratio(r->prof_prefill_wall - tp, r->prof_prefill_wall), r->prof_decode_wall - td,
            100 * ratio(r->prof_decode_wall - td, r->prof_decode_wall));
}

/* One graph run's per-op table (title names it). */
static void print_one_profile_text(FILE *f, const char *title, const qvl_op_profile *p,
                                   double wall) {
    static const qvl_op_profile none;
    int order[QVL_OP_COUNT];
    int n = ops_by_time(p, &none, order);
    double total = profile_total(p);
    fprintf(f, "  per-op time, %s (seconds, share, calls):\n", title);
    for (int i = 0; i < n; i++)
        fprintf(f, "    %-14s %10.5f %5.1f%% %5llu\n", qvl_op_name((qvl_op)order[i]),
                p->seconds[order[i]], 100 * ratio(p->seconds[order[i]], wall),
                (unsigned long long)p->calls[order[i]]);
    fprintf(f, "    %-14s %10.5f %5.1f%%        (graph build, plan, copies)\n", "outside ops",
            wall - total, 100 * ratio(wall - total, wall));
}

void bench_describe_weights(bench_results *r) {
    char text[48], vision[48];
    qvl_dtype_mix(r->load.text_matrices, false, " + ", text, sizeof text);
    qvl_dtype_mix(r->load.vision_matrices, false, " + ", vision, sizeof vision);
    if (!text[0]) snprintf(text, sizeof text, "%s", r->weights); /* nothing bound yet */
    if (!vision[0] || !strcmp(text, vision))
        snprintf(r->weights_mix, sizeof r->weights_mix, "%s", text);
    else
        snprintf(r->weights_mix, sizeof r->weights_mix, "%s (text), %s (vision)", text, vision);
}

void bench_print_text(FILE *f, const bench_results *r) {
    const qvl_model_load_stats *l = &r->load;
    fprintf(f, "qvl-bench: %s\n", r->model_dir);
    fprintf(f, "  backend %s (%s), weights %s%s, threads %s", r->backend, r->device,
            r->weights_mix[0] ? r->weights_mix : r->weights,
            r->weights_requested ? " (from --weights)" : " (as stored)",
            r->threads < 0 ? "backend default" : "");
    if (r->threads >= 0) fprintf(f, "%lld", (long long)r->threads);
    fprintf(f, "\n  prompt %lld tokens, %lld decode tokens, %lld repetitions\n",
            (long long)r->n_prompt, (long long)r->n_gen, (long long)r->reps);
    fprintf(f, "  %-22s %10.3f s    (config %.3f, map %.3f, backend %.3f, weights %.3f, cache %.3f)\n",
            "load", r->load_seconds, l->config_seconds, l->map_seconds, l->backend_seconds,
            l->bind_seconds, l->cache_seconds);
    fprintf(f, "  %-22s %10.1f MiB in place (no copy), %.1f MiB converted/uploaded; KV cache %.1f MiB %s\n",
            "weights", mib(l->weights_in_place_bytes), mib(l->weights_copied_bytes),
            mib(l->kv_bytes), qvl_dtype_name(l->kv_dtype));
    fprintf(f, "  %-22s %10.3f s    (load %.3f s + first prefill of %lld tokens %.3f s, cold)\n",
            "time to first token", r->load_seconds + r->first_prefill_seconds, r->load_seconds,
            (long long)r->n_prompt, r->first_prefill_seconds);
    print_spread(f, "prefill", &r->prefill_tps, "tok/s");
    print_spread(f, "decode", &r->decode_tps, "tok/s");
    if (r->parallel > 1) {
        char what[48];
        snprintf(what, sizeof what, "decode x%lld batched", (long long)r->parallel);
        print_spread(f, what, &r->parallel_tps, "tok/s");
        fprintf(f, "  %-22s %10.2f x one sequence's decode (total tokens per second)\n", "",
                ratio(r->parallel_tps.median, r->decode_tps.median));
        snprintf(what, sizeof what, "decode x%lld, ids only", (long long)r->parallel);
        if (r->parallel_greedy_tps.median > 0) {
            print_spread(f, what, &r->parallel_greedy_tps, "tok/s");
            fprintf(f, "  %-22s %10s greedy tokens chosen on the device, no logits to the host\n",
                    "", "");
        } else {
            fprintf(f, "  %-22s %10s (the output's backend has no ARGMAX)\n", what, "-");
        }
        snprintf(what, sizeof what, "prefill x%lld batched", (long long)r->parallel);
        print_spread(f, what, &r->parallel_prefill_tps, "tok/s");
        fprintf(f, "  %-22s %10.2f x one prompt's prefill (%lld prompts in one graph)\n", "",
                ratio(r->parallel_prefill_tps.median, r->prefill_tps.median),
                (long long)r->parallel);
    }
    fprintf(f, "  %-22s %10.1f MiB after load, %.1f MiB after the runs (decode reads %.1f MiB of weights)\n",
            "peak RSS", mib(r->rss_after_load), mib(r->rss_peak), mib(l->decode_weight_bytes));
    if (r->has_device_memory)
        fprintf(f, "  %-22s %10.1f MiB (free memory before load minus after)\n", "device memory",
                (double)r->device_memory_bytes / 1048576.0);
    fprintf(f, "  placement: %s\n", r->placement);
    for (size_t i = 0; i < r->n_mem; i++) memory_report_line(f, "  memory: ", &r->mem[i]);
    if (r->has_vision) {
        char what[64];
        snprintf(what, sizeof what, "vision %lldx%lld", (long long)r->image_w, (long long)r->image_h);
        print_spread(f, what, &r->vision_ms, "ms   ");
        fprintf(f, "  %-22s grid %lldx%lldx%lld patches -> %lld tokens; first encode (cold) %.1f ms\n",
                "", (long long)r->image_grid.t, (long long)r->image_grid.h,
                (long long)r->image_grid.w, (long long)r->vision_tokens, r->vision_first_ms);
    } else if (r->image_requested) {
        fprintf(f, "  vision %lldx%lld: %s\n", (long long)r->image_w, (long long)r->image_h,
                r->vision_note ? r->vision_note : "not measured");
    }
    if (r->profiled) print_profile_text(f, r);
    if (r->parallel_profiled) {
        char title[64];
        snprintf(title, sizeof title, "one batched decode step of %lld sequences",
                 (long long)r->parallel);
        print_one_profile_text(f, title, &r->prof_parallel, r->prof_parallel_wall);
    }
    if (r->vision_profiled)
        print_one_profile_text(f, "one vision encode", &r->prof_vision, r->prof_vision_wall);
    if (r->probed) {
        const bench_probe *p = &r->probe;
        char who[32] = "the device"; /* threads == 0: the backend probed its device */
        if (p->threads > 0) snprintf(who, sizeof who, "%d threads", p->threads);
        fprintf(f, "  roofline probes (%s): read %.2f GB/s over %.0f MiB; FMA peak %.1f GFLOP/s (%s)",
                who, p->gbs, mib(p->bytes), p->gflops, p->kind);
        if (p->giops > 0) fprintf(f, "; int8 dot-product peak %.1f GOP/s", p->giops);
        fputc('\n', f);
        fprintf(f, "  decode: achieved %.2f GB/s of weights read / probe %.2f GB/s (%.1f%%; ceiling %.2f tok/s)\n",
                decode_gbs(r), p->gbs, 100 * ratio(decode_gbs(r), p->gbs),
                ratio(p->gbs * 1e9, (double)l->decode_weight_bytes));
        fprintf(f, "  prefill: %.2f GFLOP/s", prefill_gflops(r));
        print_of_peak(f, prefill_gflops(r), peak_for(p, l->text_matrices));
        if (r->has_vision) {
            fprintf(f, "  vision: %.2f GFLOP/s", vision_gflops(r));
            print_of_peak(f, vision_gflops(r), peak_for(p, l->vision_matrices));
        }
        if (r->profiled)
            print_op_rates(f, "prefill", &r->prof_prefill, p, peak_for(p, l->text_matrices));
        if (r->vision_profiled)
            print_op_rates(f, "vision", &r->prof_vision, p, peak_for(p, l->vision_matrices));
    }
}

/* ---- JSON --------------------------------------------------------------------------------- */

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

static void json_num(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.6g", v);
    else fputs("null", f);
}

/* ", "prefill_probe": "int8", "prefill_fraction": 0.48": the fraction capped at 1 as in the
 * text, null without a probe of that arithmetic. */
static void json_fraction(FILE *f, const char *what, double achieved, peak pk) {
    fprintf(f, ", \"%s_probe\": \"%s\", \"%s_fraction\": ", what, pk.json, what);
    json_num(f, pk.value > 0 ? fmin(achieved / pk.value, 1.0) : NAN);
}

static void json_spread(FILE *f, const bench_spread *s) {
    fputs("{\"median\": ", f);
    json_num(f, s->median);
    fputs(", \"min\": ", f);
    json_num(f, s->min);
    fputs(", \"max\": ", f);
    json_num(f, s->max);
    fprintf(f, ", \"n\": %d}", s->n);
}

static void json_profile(FILE *f, const qvl_op_profile *p, double wall) {
    fputs("{\"wall_s\": ", f);
    json_num(f, wall);
    fputs(", \"ops\": {", f);
    bool first = true;
    for (int op = 0; op < QVL_OP_COUNT; op++) {
        if (!p->calls[op]) continue;
        fprintf(f, "%s\"%s\": {\"s\": ", first ? "" : ", ", qvl_op_name((qvl_op)op));
        json_num(f, p->seconds[op]);
        fprintf(f, ", \"calls\": %llu}", (unsigned long long)p->calls[op]);
        first = false;
    }
    fputs("}}", f);
}

void bench_print_json(FILE *f, const bench_results *r) {
    const qvl_model_load_stats *l = &r->load;
    fputs("{\"model\": ", f);
    json_string(f, r->model_dir);
    fputs(", \"backend\": ", f);
    json_string(f, r->backend);
    fputs(", \"device\": ", f);
    json_string(f, r->device);
    fputs(", \"weights\": ", f);
    json_string(f, r->weights);
    fputs(", \"weights_mix\": ", f);
    json_string(f, r->weights_mix);
    fprintf(f, ", \"weights_requested\": %s", r->weights_requested ? "true" : "false");
    if (r->threads < 0) fputs(", \"threads\": null", f);
    else fprintf(f, ", \"threads\": %lld", (long long)r->threads);
    fprintf(f, ", \"n_prompt\": %lld, \"n_gen\": %lld, \"reps\": %lld", (long long)r->n_prompt,
            (long long)r->n_gen, (long long)r->reps);
    fputs(",\n \"load\": {\"seconds\": ", f);
    json_num(f, r->load_seconds);
    fprintf(f, ", \"config_s\": %.6g, \"map_s\": %.6g, \"backend_s\": %.6g, \"bind_s\": %.6g, "
               "\"cache_s\": %.6g, \"weights_in_place_bytes\": %zu, \"weights_copied_bytes\": %zu, "
               "\"kv_bytes\": %zu}",
            l->config_seconds, l->map_seconds, l->backend_seconds, l->bind_seconds,
            l->cache_seconds, l->weights_in_place_bytes, l->weights_copied_bytes, l->kv_bytes);
    fputs(",\n \"first_token\": {\"load_s\": ", f);
    json_num(f, r->load_seconds);
    fputs(", \"prefill_s\": ", f);
    json_num(f, r->first_prefill_seconds);
    fprintf(f, ", \"n_prompt\": %lld}", (long long)r->n_prompt);
    fputs(",\n \"prefill_tok_s\": ", f);
    json_spread(f, &r->prefill_tps);
    fputs(",\n \"decode_tok_s\": ", f);
    json_spread(f, &r->decode_tps);
    if (r->parallel > 1) {
        fprintf(f, ",\n \"parallel\": {\"sequences\": %lld, \"total_decode_tok_s\": ",
                (long long)r->parallel);
        json_spread(f, &r->parallel_tps);
        fputs(", \"total_decode_ids_only_tok_s\": ", f);
        json_spread(f, &r->parallel_greedy_tps);
        fputs(", \"batched_prefill_tok_s\": ", f);
        json_spread(f, &r->parallel_prefill_tps);
        fputc('}', f);
    }
    fputs(",\n \"placement\": ", f);
    json_string(f, r->placement);
    fputs(", \"backends\": [", f);
    for (size_t i = 0; i < r->n_mem; i++) {
        const qvl_model_backend_memory *b = &r->mem[i];
        fprintf(f, "%s{\"name\": ", i ? ", " : "");
        json_string(f, b->name);
        fprintf(f, ", \"weights_bytes\": %zu, \"weights_mapped_bytes\": %zu, \"kv_bytes\": %zu, "
                   "\"activation_bytes\": %zu}",
                b->weights_bytes, b->weights_mapped_bytes, b->kv_bytes, b->activation_bytes);
    }
    fputc(']', f);
    fprintf(f, ",\n \"peak_rss_bytes\": {\"after_load\": %llu, \"after_runs\": %llu}",
            (unsigned long long)r->rss_after_load, (unsigned long long)r->rss_peak);
    if (r->has_device_memory)
        fprintf(f, ", \"device_memory_bytes\": %lld", (long long)r->device_memory_bytes);
    else
        fputs(", \"device_memory_bytes\": null", f);
    fputs(",\n \"vision\": ", f);
    if (r->has_vision) {
        fprintf(f, "{\"image\": \"%lldx%lld\", \"grid\": [%lld, %lld, %lld], \"tokens\": %lld, "
                   "\"encode_ms\": ",
                (long long)r->image_w, (long long)r->image_h, (long long)r->image_grid.t,
                (long long)r->image_grid.h, (long long)r->image_grid.w, (long long)r->vision_tokens);
        json_spread(f, &r->vision_ms);
        fputs(", \"first_ms\": ", f);
        json_num(f, r->vision_first_ms);
        fputs(", \"flop\": ", f);
        json_num(f, r->vision_flops);
        fputs(", \"gflop_s\": ", f);
        json_num(f, vision_gflops(r));
        fputc('}', f);
    } else if (r->image_requested) {
        fprintf(f, "{\"image\": \"%lldx%lld\", \"encode_ms\": null, \"note\": ",
                (long long)r->image_w, (long long)r->image_h);
        json_string(f, r->vision_note ? r->vision_note : "not measured");
        fputc('}', f);
    } else {
        fputs("null", f);
    }
    fputs(",\n \"profile\": ", f);
    if (r->profiled) {
        fputs("{\"prefill\": ", f);
        json_profile(f, &r->prof_prefill, r->prof_prefill_wall);
        fputs(", \"decode\": ", f);
        json_profile(f, &r->prof_decode, r->prof_decode_wall);
        if (r->parallel_profiled) {
            fputs(", \"batched_step\": ", f);
            json_profile(f, &r->prof_parallel, r->prof_parallel_wall);
        }
        if (r->vision_profiled) {
            fputs(", \"vision\": ", f);
            json_profile(f, &r->prof_vision, r->prof_vision_wall);
        }
        fputc('}', f);
    } else {
        fputs("null", f);
    }
    fputs(",\n \"roofline\": ", f);
    if (r->probed) {
        const bench_probe *p = &r->probe;
        fprintf(f, "{\"probe_threads\": %d, \"probe_bytes\": %zu, \"read_probe_gb_s\": ",
                p->threads, p->bytes);
        json_num(f, p->gbs);
        fputs(", \"fma_kind\": ", f);
        json_string(f, p->kind);
        fputs(", \"peak_gflop_s\": ", f);
        json_num(f, p->gflops);
        fputs(", \"peak_int8_gop_s\": ", f);
        json_num(f, p->giops > 0 ? p->giops : NAN);
        fprintf(f, ", \"decode_weight_bytes\": %zu, \"decode_gb_s\": ", l->decode_weight_bytes);
        json_num(f, decode_gbs(r));
        fputs(", \"decode_fraction\": ", f);
        json_num(f, ratio(decode_gbs(r), p->gbs));
        fputs(", \"decode_ceiling_tok_s\": ", f);
        json_num(f, ratio(p->gbs * 1e9, (double)l->decode_weight_bytes));
        fputs(", \"prefill_flop\": ", f);
        json_num(f, r->prefill_flops);
        fputs(", \"prefill_gflop_s\": ", f);
        json_num(f, prefill_gflops(r));
        json_fraction(f, "prefill", prefill_gflops(r), peak_for(p, l->text_matrices));
        if (r->has_vision) {
            fputs(", \"vision_gflop_s\": ", f);
            json_num(f, vision_gflops(r));
            json_fraction(f, "vision", vision_gflops(r), peak_for(p, l->vision_matrices));
        }
        fputc('}', f);
    } else {
        fputs("null", f);
    }
    fputs("}\n", f);
}
