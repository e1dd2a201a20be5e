/* tokenizer_hf_config.c - the special tokens of a Hugging Face tokenizer:
 * what its post-processor adds around a text (TemplateProcessing: BOS
 * before, EOS after), what tokenizer_config.json names (bos_token,
 * eos_token, unk_token, pad_token; add_bos_token and add_eos_token, which
 * override the post-processor as transformers does), and the chat template.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/text/tokenizer_hf_internal.h"

/* The TemplateProcessing step of a post-processor (maybe in a Sequence). */
static json_t *template_of_(json_t *pp)
{
    const char *type = json_string_value(json_object_get(pp, "type"));
    if (type && !strcmp(type, "TemplateProcessing"))
        return pp;
    if (!type || strcmp(type, "Sequence"))
        return NULL;
    json_t *v;
    size_t i;
    json_each_(json_object_get(pp, "processors"), i, v) {
        json_t *t = template_of_(v);
        if (t)
            return t;
    }
    return NULL;
}

/* The id of a template's special token by its name in special_tokens. */
static int32_t template_id_(const hf_tok *h, json_t *tpl, const char *name)
{
    json_t *st = json_object_get(json_object_get(tpl, "special_tokens"), name);
    json_t *ids = json_object_get(st, "ids");
    if (json_array_size(ids) == 1 && json_is_integer(json_array_get(ids, 0)))
        return (int32_t)json_integer_value(json_array_get(ids, 0));
    return pl_hf_tok_find_(h, name);
}

/* single: [SpecialToken*, Sequence A, SpecialToken*]: one before is BOS,
 * one after is EOS. */
static int read_template_(hf_tok *h, char *err, size_t n)
{
    json_t *tpl = template_of_(pl_hf_json_get(&h->tj, "post_processor")), *v;
    size_t i;
    int before = 0, after = 0, seen_a = 0;
    if (!tpl)
        return 0;
    json_each_(json_object_get(tpl, "single"), i, v) {
        const char *sp = json_string_value(json_object_get(json_object_get(v, "SpecialToken"), "id"));
        if (json_object_get(v, "Sequence")) {
            seen_a = 1;
        } else if (sp && !seen_a) {
            before++;
            h->v.bos = template_id_(h, tpl, sp);
        } else if (sp) {
            after++;
            h->v.eos = h->v.tail = template_id_(h, tpl, sp);
            h->v.tail_own = true;   /* eos_token may name another */
        }
    }
    if (before > 1 || after > 1 || !seen_a)
        return pl_hf_json_fail(&h->tj, "post_processor", err, n, "a template other than "
                               "[BOS] $A [EOS] is not supported");
    h->v.add_bos = before;
    h->v.add_eos = after;
    return 0;
}

/* A special token in tokenizer_config.json: a string or {"content": s}. */
static const char *config_token_(const hf_tok *h, const char *key)
{
    json_t *v = pl_hf_json_get(&h->cj, key);
    if (json_is_object(v))
        v = json_object_get(v, "content");
    return json_string_value(v);
}

static int config_id_(hf_tok *h, const char *key, int32_t *id, char *err, size_t n)
{
    const char *s = config_token_(h, key);
    if (!s)
        return 0;
    int32_t k = pl_hf_tok_find_(h, s);
    if (k < 0)
        return pl_hf_json_fail(&h->cj, key, err, n, "'%.64s' is not a token of tokenizer.json",
                               s);
    *id = k;
    return 0;
}

static int read_config_(hf_tok *h, char *err, size_t n)
{
    int32_t bos = -1, eos = -1;
    bool b;
    if (config_id_(h, "bos_token", &bos, err, n) < 0 ||
        config_id_(h, "eos_token", &eos, err, n) < 0 ||
        config_id_(h, "pad_token", &h->v.pad, err, n) < 0 ||
        config_id_(h, "unk_token", &h->v.unk, err, n) < 0)
        return -1;
    if (h->v.bos < 0)
        h->v.bos = bos;
    if (eos >= 0)
        h->v.eos = eos;
    int rc = pl_hf_json_bool(&h->cj, "add_bos_token", false, &b, err, n);
    if (rc < 0)
        return -1;
    if (rc == 0) {
        h->v.add_bos = b;
        h->v.bos = b && bos >= 0 ? bos : h->v.bos;
    }
    if ((rc = pl_hf_json_bool(&h->cj, "add_eos_token", false, &b, err, n)) < 0)
        return -1;
    if (rc == 0)
        h->v.add_eos = b;
    if (h->v.add_bos < 0)
        h->v.add_bos = 0;
    if (h->v.add_eos < 0)
        h->v.add_eos = 0;
    if (h->v.add_bos > 0 && h->v.bos < 0)
        return pl_hf_json_fail(&h->cj, "add_bos_token", err, n, "true, but no bos_token");
    return 0;
}

static char *read_file_(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long len;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && len < (64L << 20) &&
        fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)len + 1))) {
        size_t k = fread(buf, 1, (size_t)len, f);
        buf[k] = '\0';
    }
    fclose(f);
    return buf;
}

/* tokenizer_config.json's chat_template (a string, or a list of
 * {name, template} whose "default" is taken), else chat_template.jinja,
 * else chat_template.json's chat_template. */
static int read_template_text_(hf_tok *h, const char *dir, pl_hf_text *text, char *err,
                               size_t n)
{
    json_t *ct = pl_hf_json_get(&h->cj, "chat_template"), *v;
    size_t i;
    json_each_(json_is_array(ct) ? ct : NULL, i, v)
        if (!strcmp(json_string_value(json_object_get(v, "name")) ?: "", "default"))
            ct = json_object_get(v, "template");
    if (ct && !json_is_string(ct))
        return pl_hf_json_fail(&h->cj, "chat_template", err, n, "must be a string, or a list "
                               "with a \"default\" template");
    char path[4200];
    if (ct) {
        text->chat_template = strdup(json_string_value(ct));
        return text->chat_template ? 0 : -1;
    }
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    if ((text->chat_template = read_file_(path)))
        return 0;
    pl_hf_json j;
    if (pl_hf_json_load(&j, dir, "chat_template.json", false, err, n) < 0)
        return -1;
    const char *s = json_string_value(pl_hf_json_get(&j, "chat_template"));
    text->chat_template = s ? strdup(s) : NULL;
    pl_hf_json_free(&j);
    return 0;
}

static char *token_text_(const hf_tok *h, int32_t id)
{
    return strdup(id >= 0 && id < h->n ? h->tok[id] : "");
}

int pl_hf_tok_specials_(hf_tok *h, const char *dir, pl_hf_text *text, char *err, size_t n)
{
    if (read_template_(h, err, n) < 0 || read_config_(h, err, n) < 0 ||
        read_template_text_(h, dir, text, err, n) < 0)
        return -1;
    const char *bos = config_token_(h, "bos_token"), *eos = config_token_(h, "eos_token");
    text->bos_text = bos ? strdup(bos) : token_text_(h, h->v.bos);
    text->eos_text = eos ? strdup(eos) : token_text_(h, h->v.eos);
    if (!text->bos_text || !text->eos_text) {
        snprintf(err, n, "out of memory");
        return -1;
    }
    return 0;
}

void pl_hf_text_free(pl_hf_text *text)
{
    if (!text)
        return;
    free(text->chat_template);
    free(text->bos_text);
    free(text->eos_text);
    memset(text, 0, sizeof *text);
}
