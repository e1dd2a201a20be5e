/* yaml_load.c - YAML/JSON files into jansson trees via libyaml events. */
#include "src/base/yaml_load.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#define YL_MAX_DEPTH 64

typedef struct yl_ctx {
    yaml_parser_t parser;
    pl_linemap *lines;
    const char *name;
    char *err;
    size_t errlen;
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

static json_t *yl_mapping(yl_ctx *c, const char *path, int depth)
{
    json_t *obj = json_object();
    for (;;) {
        yaml_event_t kev;
        if (yl_next(c, &kev) < 0)
            goto fail;
        if (kev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&kev);
            return obj;
        }
        int kline = (int)kev.start_mark.line + 1;
        if (kev.type != YAML_SCALAR_EVENT) {
            yl_fail(c, kline, "mapping keys must be strings");
            yaml_event_delete(&kev);
            goto fail;
        }
        char *key = strndup((const char *)kev.data.scalar.value, kev.data.scalar.length);
        yaml_event_delete(&kev);
        if (json_object_get(obj, key)) {
            yl_fail(c, kline, "duplicate key");
            free(key);
            goto fail;
        }
        size_t plen = strlen(path) + strlen(key) + 2;
        char *sub = malloc(plen);
        snprintf(sub, plen, "%s%s%s", path, path[0] ? "." : "", key);
        yl_note_line(c, sub, kline);
        yaml_event_t vev;
        json_t *v = NULL;
        if (yl_next(c, &vev) == 0) {
            v = yl_node(c, &vev, sub, depth + 1);
            yaml_event_delete(&vev);
        }
        free(sub);
        if (!v || json_object_set_new(obj, key, v) < 0) {
            if (v)
                yl_fail(c, kline, "key is not valid UTF-8");
            free(key);
            goto fail;
        }
        free(key);
    }
fail:
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

static json_t *yl_node(yl_ctx *c, yaml_event_t *ev, const char *path, int depth)
{
    int line = (int)ev->start_mark.line + 1;
    if (depth > YL_MAX_DEPTH) {
        yl_fail(c, line, "nesting too deep");
        return NULL;
    }
    switch (ev->type) {
    case YAML_SCALAR_EVENT: return yl_scalar(c, ev);
    case YAML_MAPPING_START_EVENT: return yl_mapping(c, path, depth);
    case YAML_SEQUENCE_START_EVENT: return yl_sequence(c, path, depth);
    case YAML_ALIAS_EVENT: yl_fail(c, line, "YAML aliases are not supported"); return NULL;
    default: yl_fail(c, line, "unexpected YAML event"); return NULL;
    }
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
    yl_ctx c = {.lines = lines, .name = name, .err = err, .errlen = errlen};
    if (err && errlen)
        err[0] = '\0';
    if (lines)
        lines->lines = json_object();
    if (!yaml_parser_initialize(&c.parser)) {
        yl_fail(&c, 0, "out of memory");
        return NULL;
    }
    yaml_parser_set_input_string(&c.parser, (const unsigned char *)buf, len);
    json_t *root = yl_document(&c);
    yaml_parser_delete(&c.parser);
    return root;
}

json_t *pl_yaml_load_file(const char *path, pl_linemap *lines, char *err,
                          size_t errlen)
{
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
