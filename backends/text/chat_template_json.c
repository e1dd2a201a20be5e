/* chat_template_json.c - JSON values as Jinja templates print them under
 * transformers: tojson is Python's json.dumps(ensure_ascii=False), str()
 * is Python's, truth is Python's. Templates that render tools and tool
 * calls (gpt-oss's) print JSON this way, so parley must too, byte for
 * byte. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/text/chat_template_internal.h"

/* Python's repr of a float: the shortest digits that read back the same,
 * fixed notation for exponents -4..15, else d.ddde+XX. */
static void put_float(pl_ct_buf *b, double x)
{
    char s[40], digits[24], out[64];
    if (x == 0) {
        pl_ct_put_(b, signbit(x) ? "-0.0" : "0.0");
        return;
    }
    int p = 1;
    for (; p < 17; p++) {
        snprintf(s, sizeof s, "%.*e", p - 1, x);
        if (strtod(s, NULL) == x)
            break;
    }
    snprintf(s, sizeof s, "%.*e", p - 1, x);
    const char *m = s + (s[0] == '-');
    size_t nd = 0;
    for (const char *q = m; *q && *q != 'e'; q++)
        if (*q != '.')
            digits[nd++] = *q;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    int e = atoi(strchr(s, 'e') + 1);
    size_t o = 0;
    if (x < 0)
        out[o++] = '-';
    if (e >= -4 && e < 16) {
        if (e < 0) {
            o += (size_t)snprintf(out + o, sizeof out - o, "0.%.*s%s", -e - 1, "0000", digits);
        } else {
            for (int i = 0; i <= e; i++)
                out[o++] = (size_t)i < nd ? digits[i] : '0';
            o += (size_t)snprintf(out + o, sizeof out - o, ".%s",
                                  (size_t)e + 1 < nd ? digits + e + 1 : "0");
        }
    } else {
        o += (size_t)snprintf(out + o, sizeof out - o, "%c%s%s%s%+03d", digits[0],
                              nd > 1 ? "." : "", digits + 1, "e", e);
    }
    pl_ct_putn_(b, out, o);
}

/* A JSON string as json.dumps writes it: UTF-8 kept, control characters
 * escaped (\uXXXX in lower case but for the five short forms). */
void pl_ct_put_pyjson_string_(pl_ct_buf *b, const char *s, size_t n)
{
    pl_ct_put_(b, "\"");
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n"
                        : c == '\r' ? "\\r" : c == '\t' ? "\\t" : c == '\b' ? "\\b"
                        : c == '\f' ? "\\f" : NULL;
        char u[8];
        if (!esc && c < 0x20) {
            snprintf(u, sizeof u, "\\u%04x", c);
            esc = u;
        }
        if (!esc)
            continue;
        pl_ct_putn_(b, s + run, i - run);
        pl_ct_put_(b, esc);
        run = i + 1;
    }
    pl_ct_putn_(b, s + run, n - run);
    pl_ct_put_(b, "\"");
}

void pl_ct_put_pyjson_(pl_ct_buf *b, json_t *v)
{
    char num[32];
    size_t i;
    const char *k;
    json_t *x;
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        pl_ct_put_(b, "{");
        i = 0;
        json_object_foreach(v, k, x) {
            pl_ct_put_(b, i++ ? ", " : "");
            pl_ct_put_pyjson_string_(b, k, strlen(k));
            pl_ct_put_(b, ": ");
            pl_ct_put_pyjson_(b, x);
        }
        pl_ct_put_(b, "}");
        break;
    case JSON_ARRAY:
        pl_ct_put_(b, "[");
        json_array_foreach(v, i, x) {
            pl_ct_put_(b, i ? ", " : "");
            pl_ct_put_pyjson_(b, x);
        }
        pl_ct_put_(b, "]");
        break;
    case JSON_STRING:
        pl_ct_put_pyjson_string_(b, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        pl_ct_put_(b, num);
        break;
    case JSON_REAL:
        put_float(b, json_real_value(v));
        break;
    case JSON_TRUE:
        pl_ct_put_(b, "true");
        break;
    case JSON_FALSE:
        pl_ct_put_(b, "false");
        break;
    default:
        pl_ct_put_(b, "null");
        break;
    }
}

void pl_ct_put_pystr_(pl_ct_buf *b, json_t *v)
{
    if (json_is_string(v))
        pl_ct_putn_(b, json_string_value(v), json_string_length(v));
    else if (json_is_boolean(v))
        pl_ct_put_(b, json_is_true(v) ? "True" : "False");
    else if (!v || json_is_null(v))
        pl_ct_put_(b, "None");
    else
        pl_ct_put_pyjson_(b, v);
}

bool pl_ct_truthy_(json_t *v)
{
    switch (v ? json_typeof(v) : JSON_NULL) {
    case JSON_OBJECT: return json_object_size(v) > 0;
    case JSON_ARRAY: return json_array_size(v) > 0;
    case JSON_STRING: return json_string_length(v) > 0;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0;
    case JSON_TRUE: return true;
    default: return false;
    }
}
