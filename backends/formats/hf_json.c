/* hf_json.c - typed, dotted-key lookups into a checkpoint's JSON files
 * (hf_json.h). */
#include "backends/formats/hf_json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int pl_hf_json_fail(const pl_hf_json *j, const char *key, char *err, size_t errlen,
                    const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (err && errlen)
        snprintf(err, errlen, "%s: key '%s%s': %s", j->path, j->prefix, key, why);
    return -1;
}

/* The whole file in memory (jansson's own file reader goes a character at
 * a time: a third of a second for Llama 3's 9 MB tokenizer.json). */
static char *slurp_(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    char *b = NULL;
    long len;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (b = malloc((size_t)len + 1)))
        *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

/* A copy of text (n bytes) where every integer literal too long for
 * jansson's 64-bit integers (outside strings) ends in ".0", a real: what
 * transformers 5 writes for an unlimited model_max_length (int(1e30)).
 * NULL when out of memory. */
static char *big_ints_as_reals_(const char *text, size_t n, size_t *out_n)
{
    char *o = malloc(2 * n + 2);
    size_t k = 0;
    bool in_str = false;
    if (!o)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        char ch = text[i];
        o[k++] = ch;
        if (in_str) {
            if (ch == '\\' && i + 1 < n)
                o[k++] = text[++i];
            else if (ch == '"')
                in_str = false;
            continue;
        }
        if (ch == '"') {
            in_str = true;
            continue;
        }
        bool start = (ch >= '0' && ch <= '9') && (i == 0 || !strchr("0123456789.eE+-", text[i - 1]));
        if (!start)
            continue;
        size_t j = i + 1;
        while (j < n && text[j] >= '0' && text[j] <= '9')
            j++;
        memcpy(o + k, text + i + 1, j - i - 1);
        k += j - i - 1;
        if (j - i > 18 && (j >= n || !strchr(".eE", text[j]))) {
            o[k++] = '.';
            o[k++] = '0';
        }
        i = j - 1;
    }
    *out_n = k;
    return o;
}

int pl_hf_json_load(pl_hf_json *j, const char *dir, const char *name, bool required,
                    char *err, size_t errlen)
{
    json_error_t je;
    size_t n = 0;
    char *text;
    j->root = j->view = NULL;
    j->prefix[0] = '\0';
    j->seen = json_object();
    j->defaulted = json_object();
    snprintf(j->path, sizeof j->path, "%s/%s", dir, name);
    if (!j->seen || !j->defaulted) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (access(j->path, F_OK) != 0) {
        if (!required)
            return 0;
        snprintf(err, errlen, "%s: missing (a Hugging Face checkpoint folder has config.json, "
                 "safetensors weights, tokenizer.json and tokenizer_config.json)", j->path);
        goto fail;
    }
    if (!(text = slurp_(j->path, &n))) {
        snprintf(err, errlen, "%s: cannot read", j->path);
        goto fail;
    }
    j->root = json_loadb(text, n, JSON_REJECT_DUPLICATES, &je);
    if (!j->root && strstr(je.text, "too big integer")) {
        size_t n2 = 0;
        char *t2 = big_ints_as_reals_(text, n, &n2);
        if (t2)
            j->root = json_loadb(t2, n2, JSON_REJECT_DUPLICATES, &je);
        free(t2);
    }
    free(text);
    if (!j->root) {
        snprintf(err, errlen, "%s:%d: %s", j->path, je.line, je.text);
        goto fail;
    }
    if (!json_is_object(j->root)) {
        snprintf(err, errlen, "%s:1: not a JSON object", j->path);
        goto fail;
    }
    return 0;
fail:
    pl_hf_json_free(j);
    return -1;
}

void pl_hf_json_free(pl_hf_json *j)
{
    json_decref(j->view);
    json_decref(j->root);
    json_decref(j->seen);
    json_decref(j->defaulted);
    j->root = j->view = j->seen = j->defaulted = NULL;
}

int pl_hf_json_narrow(pl_hf_json *j, const char *key, const pl_hf_default *defaults,
                      char *err, size_t errlen)
{
    json_t *sub = pl_hf_json_get(j, key);
    if (sub && !json_is_object(sub))
        return pl_hf_json_fail(j, key, err, errlen, "must be an object");
    json_t *v = sub ? json_deep_copy(sub) : json_object();
    for (const pl_hf_default *d = defaults; v && d && d->key; d++) {
        if (json_object_get(v, d->key))
            continue;
        json_object_set_new(j->defaulted, d->key, json_true());
        json_object_set_new(v, d->key, d->is_bool ? json_boolean(d->value != 0)
                                       : d->is_int ? json_integer((json_int_t)d->value)
                                                   : json_real(d->value));
    }
    if (!v)
        return snprintf(err, errlen, "out of memory"), -1;
    json_decref(j->view);
    j->view = v;
    json_object_clear(j->seen);
    snprintf(j->prefix, sizeof j->prefix, "%s.", key);
    return 0;
}

bool pl_hf_json_is_default(const pl_hf_json *j, const char *key)
{
    return j->defaulted && json_object_get(j->defaulted, key);
}

const char *pl_hf_json_unread(const pl_hf_json *j, const char *const *harmless)
{
    json_t *v = j->view ? j->view : j->root, *x;
    const char *k;
    json_object_foreach(json_is_object(v) ? v : NULL, k, x) {
        bool ok = json_is_null(x) || (j->seen && json_object_get(j->seen, k)) ||
                  pl_hf_json_is_default(j, k);
        for (const char *const *h = harmless; !ok && h && *h; h++)
            ok = !strcmp(*h, k);
        if (!ok)
            return k;
    }
    return NULL;
}

json_t *pl_hf_json_get(const pl_hf_json *j, const char *key)
{
    json_t *v = j->view ? j->view : j->root;
    const char *p = key;
    const char *dot0 = strchr(key, '.');
    size_t n0 = dot0 ? (size_t)(dot0 - key) : strlen(key);
    if (j->seen && n0 < 256) {
        char first[256];
        memcpy(first, key, n0);
        first[n0] = '\0';
        json_object_set_new(j->seen, first, json_true());
    }
    while (v && *p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        char part[256];
        if (n >= sizeof part || !json_is_object(v))
            return NULL;
        memcpy(part, p, n);
        part[n] = '\0';
        v = json_object_get(v, part);
        p += n + (dot ? 1 : 0);
    }
    return json_is_null(v) ? NULL : v;
}

/* The value, or NULL with rc set: 1 absent and optional, -1 absent and
 * required. */
static json_t *lookup_(const pl_hf_json *j, const char *key, bool required, int *rc, char *err,
                       size_t errlen)
{
    json_t *v = pl_hf_json_get(j, key);
    if (v)
        return v;
    *rc = required ? pl_hf_json_fail(j, key, err, errlen, "missing") : 1;
    return NULL;
}

int pl_hf_json_int(const pl_hf_json *j, const char *key, bool required, long long lo,
                   long long hi, long long *out, char *err, size_t errlen)
{
    int rc;
    json_t *v = lookup_(j, key, required, &rc, err, errlen);
    if (!v)
        return rc;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return pl_hf_json_fail(j, key, err, errlen, "must be an integer in [%lld, %lld]", lo,
                               hi);
    *out = json_integer_value(v);
    return 0;
}

int pl_hf_json_num(const pl_hf_json *j, const char *key, bool required, double lo, double hi,
                   double *out, char *err, size_t errlen)
{
    int rc;
    json_t *v = lookup_(j, key, required, &rc, err, errlen);
    if (!v)
        return rc;
    double d = json_number_value(v);
    if (!json_is_number(v) || !isfinite(d) || d < lo || d > hi)
        return pl_hf_json_fail(j, key, err, errlen, "must be a number in [%g, %g]", lo, hi);
    *out = d;
    return 0;
}

int pl_hf_json_bool(const pl_hf_json *j, const char *key, bool required, bool *out, char *err,
                    size_t errlen)
{
    int rc;
    json_t *v = lookup_(j, key, required, &rc, err, errlen);
    if (!v)
        return rc;
    if (!json_is_boolean(v))
        return pl_hf_json_fail(j, key, err, errlen, "must be true or false");
    *out = json_is_true(v);
    return 0;
}

int pl_hf_json_str(const pl_hf_json *j, const char *key, bool required, const char **out,
                   char *err, size_t errlen)
{
    int rc;
    json_t *v = lookup_(j, key, required, &rc, err, errlen);
    if (!v)
        return rc;
    if (!json_is_string(v))
        return pl_hf_json_fail(j, key, err, errlen, "must be a string");
    *out = json_string_value(v);
    return 0;
}
