/* qvl-bench-tokenizer TOKENIZER.json [FILE]
 *
 * Measures encode speed on one core: the text (FILE, or English-like text generated from a
 * built-in word list with a fixed seed) is encoded several times and the median rate printed.
 * The tokenizer's piece cache is warm after the first run, as it is in a long-running process. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qvl/file.h"
#include "qvl/tokenizer.h"

#define REPS 7
#define GENERATED_BYTES ((size_t)4 << 20)

static const char *const words[] = {
    "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be",
    "by", "on", "not", "he", "I", "this", "are", "or", "his", "from", "at", "which", "but",
    "have", "an", "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has",
    "there", "been", "if", "more", "when", "will", "would", "who", "so", "no", "she", "other",
    "its", "may", "these", "what", "them", "than", "some", "him", "time", "into", "only", "do",
    "people", "new", "could", "first", "two", "very", "after", "most", "over", "world", "year",
    "years", "work", "through", "between", "government", "system", "however", "example",
    "information", "development", "different", "important", "because", "something", "language",
    "model", "image", "picture", "describe", "question", "answer", "number", "water", "city",
    "country", "history", "children", "school", "family", "student", "problem", "research",
    "university", "computer", "network", "memory", "performance", "tokenizer", "sentence",
    "quickly", "carefully", "beautiful", "interesting", "understand", "remember", "thought",
    "morning", "evening", "mountain", "river", "ocean", "forest", "animal", "weather", "music",
    "don't", "it's", "we're", "they've", "I'll", "she'd", "isn't", "couldn't",
};

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Sentences of 4-22 words with commas, the odd number, and paragraph breaks. */
static char *generate_text(size_t target, size_t *len) {
    char *buf = malloc(target + 256);
    if (!buf) return NULL;
    uint64_t seed = 0x2545F4914F6CDD1Dull;
    size_t n = 0;
    const size_t n_words = sizeof words / sizeof words[0];
    while (n < target) {
        int count = 4 + (int)(rng(&seed) % 19);
        for (int i = 0; i < count && n < target; i++) {
            uint64_t r = rng(&seed);
            char word[32];
            if (r % 29 == 0) {
                snprintf(word, sizeof word, "%u", (unsigned)(r >> 20) % 2100);
            } else {
                snprintf(word, sizeof word, "%s", words[(r >> 8) % n_words]);
                if (i == 0 && word[0] >= 'a' && word[0] <= 'z') word[0] = (char)(word[0] - 32);
            }
            size_t wl = strlen(word);
            memcpy(buf + n, word, wl);
            n += wl;
            if (i + 1 < count) {
                if (r % 11 == 0) buf[n++] = ',';
                buf[n++] = ' ';
            }
        }
        uint64_t r = rng(&seed);
        buf[n++] = ".?!"[r % 7 == 0 ? 1 + (r >> 8) % 2 : 0];
        if (r % 9 == 0) {
            buf[n++] = '\n';
            buf[n++] = '\n';
        } else {
            buf[n++] = ' ';
        }
    }
    *len = n;
    return buf;
}

/* A benchmark text: a regular file of at most 1 GiB (a FIFO or device is refused). */
static char *read_file(const char *path, size_t *len) {
    char *buf;
    qvl_error err = {0};
    if (qvl_read_file(path, (size_t)1 << 30, QVL_E_IO, &buf, len, &err) != QVL_OK) {
        fprintf(stderr, "qvl-bench-tokenizer: %s\n", err.msg);
        return NULL;
    }
    return buf;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s TOKENIZER.json [FILE]\n", argv[0]);
        return 2;
    }
    size_t len;
    char *text = argc == 3 ? read_file(argv[2], &len) : generate_text(GENERATED_BYTES, &len);
    if (!text) {
        fprintf(stderr, "qvl-bench-tokenizer: cannot read %s\n", argc == 3 ? argv[2] : "(memory)");
        return 1;
    }
    qvl_error err = {0};
    qvl_tokenizer *tok;
    double t0 = now();
    if (qvl_tokenizer_load(argv[1], &tok, &err) != QVL_OK) {
        fprintf(stderr, "qvl-bench-tokenizer: %s\n", err.msg);
        free(text);
        return 1;
    }
    double load_s = now() - t0;

    double rate[REPS];
    size_t n_ids = 0;
    for (int r = 0; r < REPS; r++) {
        int32_t *ids;
        t0 = now();
        if (qvl_tokenizer_encode(tok, text, len, &ids, &n_ids, &err) != QVL_OK) {
            fprintf(stderr, "qvl-bench-tokenizer: %s\n", err.msg);
            qvl_tokenizer_free(tok);
            free(text);
            return 1;
        }
        double s = now() - t0;
        free(ids);
        rate[r] = (double)len / 1e6 / (s > 0 ? s : 1e-9);
    }
    double first = rate[0];
    qsort(rate, REPS, sizeof rate[0], cmp_double);
    printf("text: %s, %zu bytes, %zu tokens (%.2f bytes/token)\n",
           argc == 3 ? argv[2] : "generated English", len, n_ids,
           n_ids ? (double)len / (double)n_ids : 0.0);
    printf("load: %.3f s\n", load_s);
    printf("encode: median %.2f MB/s over %d runs (min %.2f, max %.2f, first run %.2f)\n",
           rate[REPS / 2], REPS, rate[0], rate[REPS - 1], first);
    qvl_tokenizer_free(tok);
    free(text);
    return 0;
}
