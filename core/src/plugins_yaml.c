/* plugins.yaml: read with libyaml's document API into a qvl_plugin_config.
 *
 * The format is small and strict on purpose: a typo in a key or a quoted number should be
 * reported, not silently ignored, because the result decides which code runs. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "qvl/file.h"
#include "qvl/registry.h"

/* A plugins.yaml is a few hundred bytes; anything this big is not one. */
#define QVL_PLUGINS_MAX_BYTES (1u << 20)
/* Real files list a handful of backends with a few options each. The duplicate checks are
 * quadratic, so without these bounds a 1 MiB file of distinct keys takes minutes to refuse. */
#define QVL_PLUGINS_MAX_BACKENDS 256
#define QVL_PLUGINS_MAX_OPTIONS 256
/* A plugins.yaml nests at most four deep (backends, an entry, options, a value); libyaml's time
 * grows with the square of flow nesting, so deeper [ { are refused before it sees them. */
#define QVL_PLUGINS_MAX_FLOW_DEPTH 32

typedef struct parse_ctx {
    const char *file; /* for messages */
    yaml_document_t *doc;
    qvl_error *err;
} parse_ctx;

static int line_of(const yaml_node_t *node) { return (int)node->start_mark.line + 1; }

static bool is_scalar(const yaml_node_t *node) { return node && node->type == YAML_SCALAR_NODE; }

static const char *scalar_text(const yaml_node_t *node) {
    return (const char *)node->data.scalar.value;
}

/* A plain scalar YAML reads as null: empty, ~ or null. */
static bool is_null(const yaml_node_t *node) {
    if (!is_scalar(node) || node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
    const char *s = scalar_text(node);
    return s[0] == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 ||
           strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0;
}

static const char *node_kind(const yaml_node_t *node) {
    switch (node->type) {
    case YAML_SCALAR_NODE: return is_null(node) ? "nothing" : "a scalar";
    case YAML_SEQUENCE_NODE: return "a sequence";
    case YAML_MAPPING_NODE: return "a mapping";
    default: return "nothing";
    }
}

/* Copy a scalar as a C string; strings with NUL bytes inside ("\0" escapes) are refused. */
static qvl_status dup_scalar(parse_ctx *c, const yaml_node_t *node, const char *what,
                             char **out) {
    const char *s = scalar_text(node);
    size_t len = node->data.scalar.length;
    if (strlen(s) != len)
        return qvl_fail(c->err, QVL_E_INVALID, "%s:%d: %s contains a NUL byte", c->file,
                        line_of(node), what);
    *out = strdup(s);
    if (!*out) return qvl_fail(c->err, QVL_E_NOMEM, "%s: out of memory", c->file);
    return QVL_OK;
}

static bool valid_name(const char *s) {
    if (!s[0]) return false;
    for (const char *p = s; *p; p++) {
        char ch = *p;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
        if (!ok) return false;
    }
    return true;
}

/* priority: a plain decimal integer that fits a long. */
static qvl_status parse_priority(parse_ctx *c, const yaml_node_t *node, long *out) {
    if (!is_scalar(node) || node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE || is_null(node))
        return qvl_fail(c->err, QVL_E_INVALID, "%s:%d: priority must be an integer, not %s",
                        c->file, line_of(node),
                        is_scalar(node) && !is_null(node) ? "a quoted string" : node_kind(node));
    const char *s = scalar_text(node);
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE)
        return qvl_fail(c->err, QVL_E_INVALID, "%s:%d: priority must be an integer, not '%s'",
                        c->file, line_of(node), s);
    *out = v;
    return QVL_OK;
}

/* required, fallback: true or false (YAML 1.2 core spellings). */
static qvl_status parse_bool(parse_ctx *c, const yaml_node_t *node, const char *key, bool *out) {
    if (is_scalar(node) && node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
        const char *s = scalar_text(node);
        if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE")) {
            *out = true;
            return QVL_OK;
        }
        if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE")) {
            *out = false;
            return QVL_OK;
        }
        if (!is_null(node))
            return qvl_fail(c->err, QVL_E_INVALID,
                            "%s:%d: %s must be true or false, not '%s'", c->file,
                            line_of(node), key, s);
    }
    return qvl_fail(c->err, QVL_E_INVALID, "%s:%d: %s must be true or false, not %s",
                    c->file, line_of(node), key,
                    is_scalar(node) && !is_null(node) ? "a quoted string" : node_kind(node));
}

static void free_options(qvl_options *o) {
    for (size_t i = 0; i < o->n; i++) {
        free((char *)o->keys[i]);
        free((char *)o->values[i]);
    }
    free((void *)o->keys);
    free((void *)o->values);
    memset(o, 0, sizeof *o);
}

/* options: a flat mapping of scalar keys to scalar values, kept as strings. */
static qvl_status parse_options(parse_ctx *c, const char *backend, const yaml_node_t *node,
                                qvl_options *out) {
    if (is_null(node)) return QVL_OK; /* `options:` with nothing after it */
    if (node->type != YAML_MAPPING_NODE)
        return qvl_fail(c->err, QVL_E_INVALID,
                        "%s:%d: options of backend '%s' must be a mapping (key: value), not %s",
                        c->file, line_of(node), backend, node_kind(node));
    size_t n = (size_t)(node->data.mapping.pairs.top - node->data.mapping.pairs.start);
    if (n == 0) return QVL_OK;
    if (n > QVL_PLUGINS_MAX_OPTIONS)
        return qvl_fail(c->err, QVL_E_LIMIT, "%s:%d: backend '%s' has %zu options, at most %d",
                        c->file, line_of(node), backend, n, QVL_PLUGINS_MAX_OPTIONS);
    char **keys = calloc(n, sizeof *keys);
    char **values = calloc(n, sizeof *values);
    if (!keys || !values) {
        free(keys);
        free(values);
        return qvl_fail(c->err, QVL_E_NOMEM, "%s: out of memory", c->file);
    }
    out->keys = (const char *const *)keys;
    out->values = (const char *const *)values;
    for (size_t i = 0; i < n; i++) {
        const yaml_node_pair_t *pair = &node->data.mapping.pairs.start[i];
        const yaml_node_t *k = yaml_document_get_node(c->doc, pair->key);
        const yaml_node_t *v = yaml_document_get_node(c->doc, pair->value);
        if (!is_scalar(k) || is_null(k))
            return qvl_fail(c->err, QVL_E_INVALID,
                            "%s:%d: option names of backend '%s' must be plain words", c->file,
                            line_of(k), backend);
        if (!is_scalar(v) || is_null(v))
            return qvl_fail(c->err, QVL_E_INVALID,
                            "%s:%d: option '%s' of backend '%s' must have a scalar value, not %s",
                            c->file, line_of(v), scalar_text(k), backend, node_kind(v));
        for (size_t j = 0; j < out->n; j++)
            if (strcmp(keys[j], scalar_text(k)) == 0)
                return qvl_fail(c->err, QVL_E_INVALID,
                                "%s:%d: option '%s' of backend '%s' is given twice", c->file,
                                line_of(k), keys[j], backend);
        qvl_status st = dup_scalar(c, k, "an option name", &keys[i]);
        if (st == QVL_OK) st = dup_scalar(c, v, "an option value", &values[i]);
        out->n = i + 1; /* so that free_options frees what was copied */
        if (st != QVL_OK) return st;
    }
    return QVL_OK;
}

static void free_spec(qvl_plugin_spec *s) {
    free(s->name);
    free(s->library);
    free_options(&s->options);
    memset(s, 0, sizeof *s);
}

static const yaml_node_t *find_key(parse_ctx *c, const yaml_node_t *map, const char *key) {
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        const yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        if (is_scalar(k) && strcmp(scalar_text(k), key) == 0)
            return yaml_document_get_node(c->doc, p->value);
    }
    return NULL;
}

/* Every key of map must be a scalar from `allowed` and appear once. */
static qvl_status check_keys(parse_ctx *c, const yaml_node_t *map, const char *const *allowed,
                             const char *where, const char *expected) {
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        const yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        if (!is_scalar(k))
            return qvl_fail(c->err, QVL_E_INVALID, "%s:%d: keys %s must be plain words, not %s",
                            c->file, line_of(k), where, node_kind(k));
        bool known = false;
        for (size_t i = 0; allowed[i]; i++)
            if (strcmp(scalar_text(k), allowed[i]) == 0) known = true;
        if (!known)
            return qvl_fail(c->err, QVL_E_INVALID, "%s:%d: unknown key '%s' %s (expected %s)",
                            c->file, line_of(k), scalar_text(k), where, expected);
        for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
            const yaml_node_t *prev = yaml_document_get_node(c->doc, q->key);
            if (strcmp(scalar_text(prev), scalar_text(k)) == 0)
                return qvl_fail(c->err, QVL_E_INVALID, "%s:%d: key '%s' is given twice %s",
                                c->file, line_of(k), scalar_text(k), where);
        }
    }
    return QVL_OK;
}

static qvl_status parse_entry(parse_ctx *c, const yaml_node_t *entry, qvl_plugin_spec *spec) {
    static const char *const keys[] = {"name", "library", "priority", "required", "fallback",
                                       "options", NULL};
    if (entry->type != YAML_MAPPING_NODE)
        return qvl_fail(c->err, QVL_E_INVALID,
                        "%s:%d: each entry of backends must be a mapping with a name, not %s",
                        c->file, line_of(entry), node_kind(entry));
    qvl_status st = check_keys(c, entry, keys, "in a backend entry",
                               "name, library, priority, required, fallback, options");
    if (st != QVL_OK) return st;
    spec->line = line_of(entry);

    const yaml_node_t *name = find_key(c, entry, "name");
    if (!name || is_null(name))
        return qvl_fail(c->err, QVL_E_INVALID, "%s:%d: backend entry has no name", c->file,
                        spec->line);
    if (!is_scalar(name))
        return qvl_fail(c->err, QVL_E_INVALID, "%s:%d: name must be a word, not %s", c->file,
                        line_of(name), node_kind(name));
    if ((st = dup_scalar(c, name, "name", &spec->name)) != QVL_OK) return st;
    if (!valid_name(spec->name))
        return qvl_fail(c->err, QVL_E_INVALID,
                        "%s:%d: backend name '%s' may contain only letters, digits, '_' and '-'",
                        c->file, line_of(name), spec->name);

    const yaml_node_t *lib = find_key(c, entry, "library");
    if (lib && !is_null(lib)) {
        if (!is_scalar(lib))
            return qvl_fail(c->err, QVL_E_INVALID, "%s:%d: library of backend '%s' must be a "
                            "path, not %s", c->file, line_of(lib), spec->name, node_kind(lib));
        if ((st = dup_scalar(c, lib, "library", &spec->library)) != QVL_OK) return st;
        if (!spec->library[0])
            return qvl_fail(c->err, QVL_E_INVALID, "%s:%d: library of backend '%s' is empty",
                            c->file, line_of(lib), spec->name);
    }

    const yaml_node_t *prio = find_key(c, entry, "priority");
    if (prio && (st = parse_priority(c, prio, &spec->priority)) != QVL_OK) return st;
    const yaml_node_t *req = find_key(c, entry, "required");
    if (req && (st = parse_bool(c, req, "required", &spec->required)) != QVL_OK) return st;
    /* fallback: false -> no_fallback (a spec made in code, all zero, allows fallback) */
    const yaml_node_t *fb = find_key(c, entry, "fallback");
    bool fallback = true;
    if (fb && (st = parse_bool(c, fb, "fallback", &fallback)) != QVL_OK) return st;
    spec->no_fallback = !fallback;
    const yaml_node_t *opts = find_key(c, entry, "options");
    if (opts && (st = parse_options(c, spec->name, opts, &spec->options)) != QVL_OK) return st;
    return QVL_OK;
}

/* Highest priority first; equal priorities keep their order in the file. */
static void sort_specs(qvl_plugin_spec *specs, size_t n) {
    for (size_t i = 1; i < n; i++) {
        qvl_plugin_spec cur = specs[i];
        size_t j = i;
        while (j > 0 && specs[j - 1].priority < cur.priority) {
            specs[j] = specs[j - 1];
            j--;
        }
        specs[j] = cur;
    }
}

static qvl_status parse_backends(parse_ctx *c, const yaml_node_t *seq, qvl_plugin_config *cfg) {
    if (seq->type != YAML_SEQUENCE_NODE)
        return qvl_fail(c->err, QVL_E_INVALID,
                        "%s:%d: backends must be a sequence of entries (- name: ...), not %s",
                        c->file, line_of(seq), node_kind(seq));
    size_t n = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (n == 0)
        return qvl_fail(c->err, QVL_E_INVALID, "%s: no backends listed", c->file);
    if (n > QVL_PLUGINS_MAX_BACKENDS)
        return qvl_fail(c->err, QVL_E_LIMIT, "%s:%d: %zu backends listed, at most %d", c->file,
                        line_of(seq), n, QVL_PLUGINS_MAX_BACKENDS);
    cfg->specs = calloc(n, sizeof *cfg->specs);
    if (!cfg->specs) return qvl_fail(c->err, QVL_E_NOMEM, "%s: out of memory", c->file);
    for (size_t i = 0; i < n; i++) {
        const yaml_node_t *entry =
            yaml_document_get_node(c->doc, seq->data.sequence.items.start[i]);
        cfg->n = i + 1; /* so that qvl_plugins_free frees a partial entry */
        qvl_status st = parse_entry(c, entry, &cfg->specs[i]);
        if (st != QVL_OK) return st;
        for (size_t j = 0; j < i; j++)
            if (strcmp(cfg->specs[j].name, cfg->specs[i].name) == 0)
                return qvl_fail(c->err, QVL_E_INVALID,
                                "%s:%d: backend '%s' is listed twice (first at line %d)", c->file,
                                cfg->specs[i].line, cfg->specs[i].name, cfg->specs[j].line);
    }
    sort_specs(cfg->specs, cfg->n);
    return QVL_OK;
}

static qvl_status parse_root(parse_ctx *c, qvl_plugin_config *cfg) {
    static const char *const keys[] = {"backends", NULL};
    const yaml_node_t *root = yaml_document_get_root_node(c->doc);
    if (!root || is_null(root))
        return qvl_fail(c->err, QVL_E_INVALID, "%s: no backends listed", c->file);
    if (root->type != YAML_MAPPING_NODE)
        return qvl_fail(c->err, QVL_E_INVALID,
                        "%s:%d: the top level must be a mapping with a 'backends' key, not %s",
                        c->file, line_of(root), node_kind(root));
    qvl_status st = check_keys(c, root, keys, "at the top level", "backends");
    if (st != QVL_OK) return st;
    const yaml_node_t *backends = find_key(c, root, "backends");
    if (!backends || is_null(backends))
        return qvl_fail(c->err, QVL_E_INVALID, "%s: no backends listed", c->file);
    return parse_backends(c, backends, cfg);
}

/* libyaml's reader errors carry a byte offset, the others a mark; report both as LINE:COL. */
static qvl_status syntax_error(const yaml_parser_t *p, const char *file, const char *text,
                               size_t len, qvl_error *err) {
    if (p->error == YAML_MEMORY_ERROR)
        return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory while reading YAML", file);
    size_t line = p->problem_mark.line, col = p->problem_mark.column;
    if (p->error == YAML_READER_ERROR) {
        line = col = 0;
        for (size_t i = 0; i < p->problem_offset && i < len; i++) {
            if (text[i] == '\n') {
                line++;
                col = 0;
            } else {
                col++;
            }
        }
    }
    const char *problem = p->problem ? p->problem : "malformed YAML";
    if (p->context)
        return qvl_fail(err, QVL_E_PARSE, "%s:%zu:%zu: %s (%s)", file, line + 1, col + 1,
                        problem, p->context);
    return qvl_fail(err, QVL_E_PARSE, "%s:%zu:%zu: %s", file, line + 1, col + 1, problem);
}

static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

void qvl_plugins_free(qvl_plugin_config *cfg) {
    if (!cfg) return;
    for (size_t i = 0; i < cfg->n; i++) free_spec(&cfg->specs[i]);
    free(cfg->specs);
    free(cfg->path);
    free(cfg->dir);
    free(cfg);
}

/* Deepest nesting of flow collections ([ and {) outside quoted scalars and comments, and the
 * 1-based line where it first passes `limit` (0 when it does not). */
static size_t flow_too_deep(const char *text, size_t len, int limit) {
    int depth = 0;
    size_t line = 1;
    char quote = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = text[i];
        if (ch == '\n') line++;
        if (quote) {
            if (quote == '"' && ch == '\\') i++; /* an escaped character, maybe a quote */
            else if (ch == quote) quote = 0;
            continue;
        }
        if (ch == '"' || ch == '\'') quote = ch;
        else if (ch == '#' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t' ||
                               text[i - 1] == '\n'))
            while (i + 1 < len && text[i + 1] != '\n') i++;
        else if (ch == '[' || ch == '{') {
            if (++depth > limit) return line;
        } else if ((ch == ']' || ch == '}') && depth > 0)
            depth--;
    }
    return 0;
}

qvl_status qvl_plugins_parse_string(const char *text, size_t len, const char *path,
                                    qvl_plugin_config **out, qvl_error *err) {
    *out = NULL;
    const char *file = path ? path : "<string>";
    if (!text && len > 0) return qvl_fail(err, QVL_E_INVALID, "%s: no text given", file);
    if (len > QVL_PLUGINS_MAX_BYTES)
        return qvl_fail(err, QVL_E_LIMIT, "%s: %zu bytes, larger than %u: not a plugins.yaml",
                        file, len, QVL_PLUGINS_MAX_BYTES);
    size_t deep = text ? flow_too_deep(text, len, QVL_PLUGINS_MAX_FLOW_DEPTH) : 0;
    if (deep)
        return qvl_fail(err, QVL_E_LIMIT, "%s:%zu: [ and { nest more than %d deep: not a plugins.yaml",
                        file, deep, QVL_PLUGINS_MAX_FLOW_DEPTH);
    qvl_plugin_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg) return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", file);
    if (path && (!(cfg->path = strdup(path)) || !(cfg->dir = dir_of(path)))) {
        qvl_plugins_free(cfg);
        return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", file);
    }

    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        qvl_plugins_free(cfg);
        return qvl_fail(err, QVL_E_NOMEM, "%s: cannot start the YAML parser", file);
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)(text ? text : ""), len);
    qvl_status st;
    if (!yaml_parser_load(&parser, &doc)) {
        st = syntax_error(&parser, file, text, len, err);
    } else {
        parse_ctx c = {file, &doc, err};
        st = parse_root(&c, cfg);
        yaml_document_delete(&doc);
        /* A second document would be ignored silently: refuse it. */
        if (st == QVL_OK) {
            if (!yaml_parser_load(&parser, &doc)) {
                st = syntax_error(&parser, file, text, len, err);
            } else {
                const yaml_node_t *extra = yaml_document_get_root_node(&doc);
                if (extra)
                    st = qvl_fail(err, QVL_E_INVALID,
                                  "%s:%d: only one YAML document is allowed", file,
                                  line_of(extra));
                yaml_document_delete(&doc);
            }
        }
    }
    yaml_parser_delete(&parser);
    if (st != QVL_OK) {
        qvl_plugins_free(cfg);
        return st;
    }
    *out = cfg;
    return QVL_OK;
}

qvl_status qvl_plugins_parse_file(const char *path, qvl_plugin_config **out, qvl_error *err) {
    *out = NULL;
    if (!path || !path[0]) return qvl_fail(err, QVL_E_INVALID, "plugins file: empty path");
    char *text;
    size_t len;
    qvl_status st = qvl_read_file(path, QVL_PLUGINS_MAX_BYTES, QVL_E_NOT_FOUND, &text, &len, err);
    if (st != QVL_OK) return st;
    st = qvl_plugins_parse_string(text, len, path, out, err);
    free(text);
    return st;
}
