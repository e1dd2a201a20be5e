/* yaml_load.c - YAML/JSON files into jansson trees via libyaml events.
 *
 * Anchors and aliases: an anchored node is kept once built; an alias is a
 * deep copy of it. Every copy counts its nodes against YL_MAX_ALIAS_NODES,
 * so a "billion laughs" file (aliases of aliases, each level ten times the
 * last) is refused after a bounded amount of work and memory. A merge key
 * (`<<: *base`, or a list of them) adds the keys the mapping does not give
 * itself, earlier sources first, as PyYAML reads it. */
#include "src/base/yaml_load.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#define YL_MAX_DEPTH 64
/* Values that aliases may copy in one file, all aliases together: far more
 * than a job or config file repeats (PyYAML anchors repeated objects), far
 * less than a billion laughs. */
#define YL_MAX_ALIAS_NODES 100000

typedef struct yl_ctx {
    yaml_parser_t parser;
    pl_linemap *lines;
    const char *name;
    char *err;
    size_t errlen;
    json_t *anchors;             /* anchor name -> its value */
    long alias_nodes;            /* values copied by aliases so far */
} yl_ctx;

static json_t *yl_node(yl_ctx *c, yaml_event_t *ev, const char *path, int depth);

static void yl_fail(yl_ctx *c, int line, const char *msg)
{
    if (c->err && c->err[0] == '\0')
        snprintf(c->err, c->errlen, "%s:%d: %s", c->name, line, msg);
}

static void yl_note_line(yl_ctx *c, const char *path, int line)
{
    if (c->lines && c->lines->lines)
        json_object_set_new(c->lines->lines, path, json_integer(line));
}

static int yl_next(yl_ctx *c, yaml_event_t *ev)
{
    if (yaml_parser_parse(&c->parser, ev))
        return 0;
    char msg[256];
    snprintf(msg, sizeof msg, "%s%s%s", c->parser.problem ? c->parser.problem : "parse error",
             c->parser.context ? " " : "", c->parser.context ? c->parser.context : "");
    yl_fail(c, (int)c->parser.problem_mark.line + 1, msg);
    return -1;
}

/* YAML 1.2 core schema resolution of a plain scalar. */
static json_t *yl_plain_scalar(const char *s, size_t len)
{
    if (len == 0 || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
        !strcmp(s, "NULL"))
        return json_null();
    if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE"))
        return json_true();
    if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE"))
        return json_false();
    char *end;
    errno = 0;
    long long ll = strtoll(s, &end, 10);
    if (*end == '\0' && errno == 0 && (s[0] == '-' || s[0] == '+' || (s[0] >= '0' && s[0] <= '9')))
        return json_integer(ll);
    if (strspn(s, "+-0123456789.eE") == len && strpbrk(s, "0123456789")) {
        double d = strtod(s, &end);
        if (*end == '\0' && isfinite(d))
            return json_real(d);
    }
    return json_stringn(s, len);
}

static json_t *yl_scalar(yl_ctx *c, yaml_event_t *ev)
{
    const char *s = (const char *)ev->data.scalar.value;
    size_t len = ev->data.scalar.length;
    if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return json_stringn(s, len);
    if (strlen(s) != len) {
        yl_fail(c, (int)ev->start_mark.line + 1, "NUL byte in scalar");
        return NULL;
    }
    json_t *v = yl_plain_scalar(s, len);
    if (!v)
        yl_fail(c, (int)ev->start_mark.line + 1, "scalar is not valid UTF-8");
    return v;
}

/* `<<: SOURCE`: SOURCE is a mapping or a list of mappings; their keys
 * join the mapping after its own ones (see the file comment). */
static int yl_merge_add(yl_ctx *c, json_t *merges, json_t *v, int line)
{
    size_t i;
    json_t *x;
    if (json_is_object(v))
        return json_array_append(merges, v);
    if (!json_is_array(v)) {
        yl_fail(c, line, "a merge key (<<) takes a mapping or a list of mappings");
        return -1;
    }
    json_array_foreach(v, i, x) {
        if (!json_is_object(x)) {
            yl_fail(c, line, "a merge key (<<) takes a mapping or a list of mappings");
            return -1;
        }
        json_array_append(merges, x);
    }
    return 0;
}

static void yl_merge_apply(yl_ctx *c, json_t *obj, json_t *merges, const char *path,
                           int line)
{
    size_t i;
    json_t *src, *v;
    const char *k;
    json_array_foreach(merges, i, src) {
        json_object_foreach(src, k, v) {
            if (json_object_get(obj, k))
                continue;
            json_object_set(obj, k, v);
            size_t plen = strlen(path) + strlen(k) + 2;
            char *sub = malloc(plen);
            if (sub) {
                snprintf(sub, plen, "%s%s%s", path, path[0] ? "." : "", k);
                yl_note_line(c, sub, line);
                free(sub);
            }
        }
    }
}

/* One key and its value into obj. Returns 0, or -1 (reported). */
static int yl_pair(yl_ctx *c, json_t *obj, json_t *merges, int *merge_line,
                   yaml_event_t *kev, const char *path, int depth)
{
    int kline = (int)kev->start_mark.line + 1;
    if (kev->type != YAML_SCALAR_EVENT) {
        yl_fail(c, kline, "mapping keys must be strings");
        return -1;
    }
    char *key = strndup((const char *)kev->data.scalar.value, kev->data.scalar.length);
    bool merge = kev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && key && !strcmp(key, "<<");
    size_t plen = key ? strlen(path) + strlen(key) + 2 : 0;
    char *sub = key ? malloc(plen) : NULL;
    int rc = -1;
    if (!sub) {
        yl_fail(c, kline, "out of memory");
        goto done;
    }
    if (merge ? *merge_line > 0 : json_object_get(obj, key) != NULL) {
        yl_fail(c, kline, "duplicate key");
        goto done;
    }
    snprintf(sub, plen, "%s%s%s", path, path[0] ? "." : "", key);
    if (!merge)
        yl_note_line(c, sub, kline);
    yaml_event_t vev;
    json_t *v = NULL;
    if (yl_next(c, &vev) == 0) {
        v = yl_node(c, &vev, merge ? path : sub, depth + 1);
        yaml_event_delete(&vev);
    }
    if (v && merge) {
        *merge_line = kline;
        rc = yl_merge_add(c, merges, v, kline);
        json_decref(v);
    } else if (v && json_object_set_new(obj, key, v) < 0) {
        yl_fail(c, kline, "key is not valid UTF-8");
    } else if (v) {
        rc = 0;
    }
done:
    free(sub);
    free(key);
    return rc;
}

static json_t *yl_mapping(yl_ctx *c, const char *path, int depth)
{
    json_t *obj = json_object(), *merges = json_array();
    int merge_line = 0;
    for (;;) {
        yaml_event_t kev;
        if (yl_next(c, &kev) < 0)
            goto fail;
        if (kev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&kev);
            yl_merge_apply(c, obj, merges, path, merge_line);
            json_decref(merges);
            return obj;
        }
        int rc = yl_pair(c, obj, merges, &merge_line, &kev, path, depth);
        yaml_event_delete(&kev);
        if (rc < 0)
            goto fail;
    }
fail:
    json_decref(merges);
    json_decref(obj);
    return NULL;
}

static json_t *yl_sequence(yl_ctx *c, const char *path, int depth)
{
    json_t *arr = json_array();
    for (size_t i = 0;; i++) {
        yaml_event_t ev;
        if (yl_next(c, &ev) < 0)
            goto fail;
        if (ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            return arr;
        }
        char sub[1024];
        snprintf(sub, sizeof sub, "%s[%zu]", path, i);
        yl_note_line(c, sub, (int)ev.start_mark.line + 1);
        json_t *v = yl_node(c, &ev, sub, depth + 1);
        yaml_event_delete(&ev);
        if (!v)
            goto fail;
        json_array_append_new(arr, v);
    }
fail:
    json_decref(arr);
    return NULL;
}

static long yl_count(json_t *v)
{
    long n = 1;
    size_t i;
    const char *k;
    json_t *x;
    if (json_is_array(v))
        json_array_foreach(v, i, x) n += yl_count(x);
    else if (json_is_object(v))
        json_object_foreach(v, k, x) n += yl_count(x);
    return n;
}

/* A copy of the anchored value, counted against the file's alias budget. */
static json_t *yl_alias(yl_ctx *c, yaml_event_t *ev)
{
    int line = (int)ev->start_mark.line + 1;
    const char *name = (const char *)ev->data.alias.anchor;
    json_t *v = json_object_get(c->anchors, name);
    if (!v) {
        yl_fail(c, line, "alias of an unknown anchor (an anchor must come before its "
                         "aliases, outside the node it names)");
        return NULL;
    }
    c->alias_nodes += yl_count(v);
    if (c->alias_nodes > YL_MAX_ALIAS_NODES) {
        char msg[160];
        snprintf(msg, sizeof msg, "aliases expand to more than %d values: refused (a "
                 "\"billion laughs\" file?)", YL_MAX_ALIAS_NODES);
        yl_fail(c, line, msg);
        return NULL;
    }
    json_t *copy = json_deep_copy(v);
    if (!copy)
        yl_fail(c, line, "out of memory");
    return copy;
}

static const yaml_char_t *yl_anchor(const yaml_event_t *ev)
{
    switch (ev->type) {
    case YAML_SCALAR_EVENT: return ev->data.scalar.anchor;
    case YAML_MAPPING_START_EVENT: return ev->data.mapping_start.anchor;
    case YAML_SEQUENCE_START_EVENT: return ev->data.sequence_start.anchor;
    default: return NULL;
    }
}

static json_t *yl_node(yl_ctx *c, yaml_event_t *ev, const char *path, int depth)
{
    int line = (int)ev->start_mark.line + 1;
    json_t *v;
    if (depth > YL_MAX_DEPTH) {
        yl_fail(c, line, "nesting too deep");
        return NULL;
    }
    switch (ev->type) {
    case YAML_SCALAR_EVENT: v = yl_scalar(c, ev); break;
    case YAML_MAPPING_START_EVENT: v = yl_mapping(c, path, depth); break;
    case YAML_SEQUENCE_START_EVENT: v = yl_sequence(c, path, depth); break;
    case YAML_ALIAS_EVENT: return yl_alias(c, ev);
    default: yl_fail(c, line, "unexpected YAML event"); return NULL;
    }
    const yaml_char_t *anchor = yl_anchor(ev);
    if (v && anchor && json_object_set(c->anchors, (const char *)anchor, v) < 0) {
        yl_fail(c, line, "anchor name is not valid UTF-8");
        json_decref(v);
        return NULL;
    }
    return v;
}

static json_t *yl_document(yl_ctx *c)
{
    yaml_event_t ev;
    json_t *root = NULL;
    while (yl_next(c, &ev) == 0) {
        yaml_event_type_t t = ev.type;
        if (t == YAML_STREAM_END_EVENT || t == YAML_DOCUMENT_END_EVENT) {
            yaml_event_delete(&ev);
            if (!root)
                root = json_object(); /* empty file: empty mapping */
            return root;
        }
        if (t == YAML_MAPPING_START_EVENT || t == YAML_SEQUENCE_START_EVENT ||
            t == YAML_SCALAR_EVENT || t == YAML_ALIAS_EVENT) {
            if (root) {
                yl_fail(c, (int)ev.start_mark.line + 1, "more than one document");
                yaml_event_delete(&ev);
                break;
            }
            root = yl_node(c, &ev, "", 0);
            yaml_event_delete(&ev);
            if (!root)
                return NULL;
            continue;
        }
        yaml_event_delete(&ev);
    }
    json_decref(root);
    return NULL;
}

json_t *pl_yaml_load_buf(const char *name, const char *buf, size_t len,
                         pl_linemap *lines, char *err, size_t errlen)
{
    yl_ctx c = {.lines = lines, .name = name, .err = err, .errlen = errlen,
                .anchors = json_object()};
    json_t *root = NULL;
    if (err && errlen)
        err[0] = '\0';
    if (lines)
        lines->lines = json_object();
    if (!c.anchors || !yaml_parser_initialize(&c.parser)) {
        yl_fail(&c, 0, "out of memory");
        goto done;
    }
    yaml_parser_set_input_string(&c.parser, (const unsigned char *)buf, len);
    root = yl_document(&c);
    yaml_parser_delete(&c.parser);
done:
    json_decref(c.anchors);
    if (!root)                   /* refused: the caller has nothing to free */
        pl_linemap_free(lines);
    return root;
}

json_t *pl_yaml_load_file(const char *path, pl_linemap *lines, char *err,
                          size_t errlen)
{
    if (lines)
        lines->lines = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 65536 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                snprintf(err, errlen, "%s: out of memory", path);
                return NULL;
            }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0)
            break;
    }
    fclose(f);
    json_t *root = pl_yaml_load_buf(path, buf, len, lines, err, errlen);
    free(buf);
    return root;
}

int pl_linemap_line(const pl_linemap *m, const char *path)
{
    if (!m || !m->lines || !path)
        return 0;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (;;) {
        json_t *v = json_object_get(m->lines, buf);
        if (v)
            return (int)json_integer_value(v);
        char *cut = strrchr(buf, '.');
        char *br = strrchr(buf, '[');
        if (br && (!cut || br > cut))
            cut = br;
        if (!cut)
            return 0;
        *cut = '\0';
    }
}

void pl_linemap_free(pl_linemap *m)
{
    if (m) {
        json_decref(m->lines);
        m->lines = NULL;
    }
}
