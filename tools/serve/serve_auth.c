/* Key list loading and matching. */
#define _POSIX_C_SOURCE 200809L

#include "serve_auth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Constant-time comparison: the time taken says nothing about how much of the key matched. */
static bool key_matches(const char *given, const char *key) {
    size_t gl = strlen(given), kl = strlen(key);
    unsigned char diff = (unsigned char)(gl != kl);
    for (size_t i = 0; i < kl; i++) diff |= (unsigned char)(key[i] ^ (i < gl ? given[i] : 0));
    return diff == 0;
}

static bool add_key(serve_config *cfg, const char *key, size_t len) {
    char *copy = malloc(len + 1);
    if (!copy) return false;
    memcpy(copy, key, len);
    copy[len] = '\0';
    cfg->api_keys[cfg->n_api_keys++] = copy;
    return true;
}

static bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

static bool load_file(serve_config *cfg, char *msg, size_t msg_len) {
    FILE *f = fopen(cfg->api_key_file, "r");
    if (!f) {
        snprintf(msg, msg_len, "--api-key-file %s: cannot be read", cfg->api_key_file);
        return false;
    }
    char line[SERVE_MAX_KEY_BYTES + 4];
    size_t line_no = 0, from_file = 0;
    bool ok = true;
    while (ok && fgets(line, sizeof line, f)) {
        line_no++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n' && !feof(f)) {
            snprintf(msg, msg_len, "--api-key-file %s: line %zu is longer than %d bytes",
                     cfg->api_key_file, line_no, SERVE_MAX_KEY_BYTES);
            ok = false;
            break;
        }
        char *s = line;
        while (is_blank(*s)) s++;
        len = strlen(s);
        while (len > 0 && is_blank(s[len - 1])) len--;
        if (len == 0 || s[0] == '#') continue;
        for (size_t i = 0; i < len; i++)
            if ((unsigned char)s[i] <= ' ' || s[i] == 0x7f) {
                snprintf(msg, msg_len, "--api-key-file %s: line %zu: a key may not hold blanks "
                         "or control characters", cfg->api_key_file, line_no);
                ok = false;
                break;
            }
        if (!ok) break;
        if (cfg->n_api_keys >= SERVE_MAX_KEYS) {
            snprintf(msg, msg_len, "--api-key-file %s: more than %d keys", cfg->api_key_file,
                     SERVE_MAX_KEYS);
            ok = false;
        } else if (!add_key(cfg, s, len)) {
            snprintf(msg, msg_len, "out of memory");
            ok = false;
        }
        from_file++;
    }
    if (ok && ferror(f)) {
        snprintf(msg, msg_len, "--api-key-file %s: read error", cfg->api_key_file);
        ok = false;
    }
    fclose(f);
    if (ok && from_file == 0) {
        snprintf(msg, msg_len, "--api-key-file %s: holds no key", cfg->api_key_file);
        ok = false;
    }
    return ok;
}

bool serve_auth_load(serve_config *cfg, char *msg, size_t msg_len) {
    cfg->api_keys = NULL;
    cfg->n_api_keys = 0;
    if (!cfg->api_key && !cfg->api_key_file) return true;
    cfg->api_keys = calloc(SERVE_MAX_KEYS + 1, sizeof *cfg->api_keys);
    if (!cfg->api_keys) {
        snprintf(msg, msg_len, "out of memory");
        return false;
    }
    if (cfg->api_key && !add_key(cfg, cfg->api_key, strlen(cfg->api_key))) {
        snprintf(msg, msg_len, "out of memory");
        serve_auth_free(cfg);
        return false;
    }
    if (cfg->api_key_file && !load_file(cfg, msg, msg_len)) {
        serve_auth_free(cfg);
        return false;
    }
    return true;
}

void serve_auth_free(serve_config *cfg) {
    for (size_t i = 0; i < cfg->n_api_keys; i++) free(cfg->api_keys[i]);
    free(cfg->api_keys);
    cfg->api_keys = NULL;
    cfg->n_api_keys = 0;
}

int serve_auth_key_index(struct MHD_Connection *c, const serve_config *cfg) {
    if (cfg->n_api_keys == 0) return SERVE_KEY_NONE;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return SERVE_KEY_DENIED;
    h += 7;
    while (*h == ' ') h++;
    int found = SERVE_KEY_DENIED;
    for (size_t i = 0; i < cfg->n_api_keys; i++)
        if (key_matches(h, cfg->api_keys[i]) && found == SERVE_KEY_DENIED) found = (int)i;
    return found;
}
