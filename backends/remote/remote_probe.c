/* remote_probe.c - what upstreams report about themselves: the models they
 * list, their context length and their capacity (vLLM's KV cache from
 * /metrics: its free blocks over a request's need, or under --capacity
 * worst-case its tokens over max_model_len; llama.cpp's slots from /props;
 * parley's `capacity`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/remote/remote_internal.h"
#include "backends/req_metrics.h"
#include "src/base/redact.h"

static pl_remote_kind kind_of_owner(const char *owner)
{
    if (!owner)
        return PL_REMOTE_OPENAI;
    if (!strcmp(owner, "vllm"))
        return PL_REMOTE_VLLM;
    if (!strcmp(owner, "sglang"))
        return PL_REMOTE_SGLANG;
    if (!strcmp(owner, "llamacpp"))
        return PL_REMOTE_LLAMACPP;
    if (!strcmp(owner, "library") || !strcmp(owner, "ollama"))
        return PL_REMOTE_OLLAMA;
    return PL_REMOTE_OPENAI;
}

int pl_remote_parse_models(const char *body, size_t len, const char *model, bool *found,
                           int *max_model_len, int *capacity, char **only_id,
                           pl_remote_kind *guess)
{
    json_t *root = json_loadb(body, len, 0, NULL);
    json_t *data = json_object_get(root, "data");
    *found = false;
    *max_model_len = *capacity = 0;
    if (only_id)
        *only_id = NULL;
    if (!json_is_array(data)) {
        json_decref(root);
        return -1;
    }
    size_t i;
    json_t *m;
    json_array_foreach(data, i, m) {
        const char *id = json_string_value(json_object_get(m, "id"));
        if (!id)
            continue;
        if (only_id && json_array_size(data) == 1)
            *only_id = strdup(id);
        if (guess)
            *guess = json_is_integer(json_object_get(m, "capacity"))
                   ? PL_REMOTE_PARLEY
                   : kind_of_owner(json_string_value(json_object_get(m, "owned_by")));
        if (model && strcmp(id, model) != 0)
            continue;
        *found = true;
        json_t *ml = json_object_get(m, "max_model_len");
        json_t *cap = json_object_get(m, "capacity");
        *max_model_len = json_is_integer(ml) ? (int)json_integer_value(ml) : 0;
        *capacity = json_is_integer(cap) ? (int)json_integer_value(cap) : 0;
        break;
    }
    json_decref(root);
    return 0;
}

/* The value of label `name` inside a Prometheus label set {a="1",b="2"}. */
static long label_value(const char *labels, const char *end, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = labels; p && p < end; p = strchr(p, ',')) {
        if (*p == ',' || *p == '{')
            p++;
        while (*p == ' ')
            p++;
        if (p + n + 2 < end && !strncmp(p, name, n) && p[n] == '=' && p[n + 1] == '"') {
            const char *v = p + n + 2;
            char *e;
            long x = strtol(v, &e, 10);
            return e > v && *e == '"' ? x : -1;
        }
    }
    return -1;
}

int pl_remote_parse_vllm_metrics(const char *text, size_t len, long *blocks, long *block_size)
{
    static const char key[] = "vllm:cache_config_info{";
    const char *end = text + len;
    for (const char *p = text; p && p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        if ((size_t)(le - p) > sizeof key - 1 && !memcmp(p, key, sizeof key - 1)) {
            const char *close = memchr(p, '}', (size_t)(le - p));
            if (!close)
                return -1;
            *blocks = label_value(p + sizeof key - 2, close, "num_gpu_blocks");
            *block_size = label_value(p + sizeof key - 2, close, "block_size");
            return *blocks > 0 && *block_size > 0 ? 0 : -1;
        }
        p = nl ? nl + 1 : NULL;
    }
    return -1;
}

double pl_remote_parse_vllm_usage(const char *text, size_t len)
{
    static const char *const names[] = {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"};
    const char *end = text + len;
    double sum = 0;
    int n = 0;
    for (const char *p = text; p && p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        for (int k = 0; k < 2 && *p != '#'; k++) {
            size_t kl = strlen(names[k]);
            if ((size_t)(le - p) <= kl || memcmp(p, names[k], kl) || (p[kl] != '{' && p[kl] != ' '))
                continue;
            const char *v = le;                  /* the value: after the last space */
            while (v > p && v[-1] != ' ')
                v--;
            char buf[64], *e;
            size_t vl = (size_t)(le - v) < sizeof buf - 1 ? (size_t)(le - v) : sizeof buf - 1;
            memcpy(buf, v, vl);
            buf[vl] = '\0';
            double x = strtod(buf, &e);
            if (e > buf && x >= 0 && x <= 1) {   /* a fraction, despite the name */
                sum += x;
                n++;
            }
        }
        p = nl ? nl + 1 : NULL;
    }
    return n ? sum / n : -1;                     /* engines of one server: their mean */
}

/* A vLLM replica's capacity by the KV rule (schedulers/dispatch.h): the
 * requests on it now plus those of the estimated need (this model's
 * uncached prompts and replies so far, req_metrics) its free blocks hold,
 * once each request on it has room to grow by a reply. */
static int vllm_kv_capacity(const remote_replica *rep, long blocks, long bs, double usage)
{
    const pl_req_metrics *m = rep->rb->base.metrics;   /* NULL before any request */
    pl_dispatch_kv kv = {
        .block_size = (int)bs, .total = (int)blocks, .free = (int)((double)blocks * (1 - usage)),
        .prompt_tokens = m && m->uncached_prompts.n ? (int)(m->uncached_prompts.mean + 0.5) : 0,
        .reply_tokens = m ? pl_dispatch_est_value(&m->replies) : 0,
    };
    long grow = (pl_dispatch_reply_budget(0, kv.reply_tokens) + bs - 1) / bs;
    long res = (long)rep->outstanding * grow;
    kv.reserved = res > kv.free ? kv.free : (int)res;
    return pl_dispatch_kv_bound(&kv, rep->outstanding, pl_dispatch_kv_need(&kv, 0, 0), 1000000);
}

int pl_remote_parse_props(const char *body, size_t len, int *slots, int *n_ctx)
{
    json_t *root = json_loadb(body, len, 0, NULL);
    json_t *ts = json_object_get(root, "total_slots");
    json_t *ctx = json_object_get(json_object_get(root, "default_generation_settings"), "n_ctx");
    int rc = json_is_integer(ts) && json_integer_value(ts) > 0 ? 0 : -1;
    if (rc == 0)
        *slots = (int)json_integer_value(ts);
    *n_ctx = json_is_integer(ctx) ? (int)json_integer_value(ctx) : 0;
    json_decref(root);
    return rc;
}

const char *pl_remote_capacity_path(pl_remote_kind k)
{
    return k == PL_REMOTE_VLLM ? "/metrics" : k == PL_REMOTE_LLAMACPP ? "/props" : NULL;
}

void pl_remote_apply_capacity(remote_replica *rep, const char *body, size_t len)
{
    if (rep->kind == PL_REMOTE_VLLM) {
        long blocks, bs;
        if (pl_remote_parse_vllm_metrics(body, len, &blocks, &bs) < 0)
            return;
        double usage = pl_remote_parse_vllm_usage(body, len);
        if (!rep->rb->o.worst_case_capacity && usage >= 0 && blocks <= 1 << 30) {
            rep->reported_cap = vllm_kv_capacity(rep, blocks, bs, usage);
        } else if (rep->max_model_len > 0) {   /* seed 000: full-length sequences */
            long cap = blocks * bs / rep->max_model_len;
            rep->reported_cap = cap < 1 ? 1 : cap > 1000000 ? 1000000 : (int)cap;
        }
    } else if (rep->kind == PL_REMOTE_LLAMACPP) {
        int slots, n_ctx;
        if (pl_remote_parse_props(body, len, &slots, &n_ctx) == 0) {
            rep->reported_cap = slots;
            if (n_ctx > 0 && !rep->max_model_len)
                rep->max_model_len = n_ctx;
        }
    }
}

int pl_remote_apply_models(remote_replica *rep, const char *body, size_t len)
{
    remote_backend *rb = rep->rb;
    bool found;
    int ml, cap;
    pl_remote_kind guess = PL_REMOTE_OPENAI;
    if (pl_remote_parse_models(body, len, rb->upstream_model, &found, &ml, &cap, NULL,
                               &guess) < 0)
        return -1;
    if (rep->kind == PL_REMOTE_AUTO)
        rep->kind = guess;
    if (ml > 0)
        rep->max_model_len = ml;
    if (rep->kind == PL_REMOTE_PARLEY && cap > 0)
        rep->reported_cap = cap;
    if (found)
        pl_remote_embed_apply_models(rb, body, len);
    return 0;
}

static size_t get_write(char *p, size_t sz, size_t n, void *ud)
{
    evbuffer_add(ud, p, sz * n);
    return sz * n;
}

long pl_remote_get_blocking(const char *url, const char *api_key, int timeout_ms,
                            struct evbuffer *out, char *err, size_t errlen)
{
    CURL *e = curl_easy_init();
    struct curl_slist *h = NULL;
    char auth[1024];
    if (!e)
        return -1;
    if (api_key && *api_key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", api_key);
        h = curl_slist_append(h, auth);
    }
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, get_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, out);
    CURLcode rc = curl_easy_perform(e);
    long status = -1;
    char shown[2048];
    pl_redact_url(url, shown, sizeof shown);
    if (rc == CURLE_OK)
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    else
        snprintf(err, errlen, "%s: %s", shown, curl_easy_strerror(rc));
    curl_slist_free_all(h);
    curl_easy_cleanup(e);
    return status;
}

int pl_remote_list_models(const char *base_url, const char *api_key, int timeout_ms,
                          char ***ids, int *n, char *err, size_t errlen)
{
    char url[2048], shown[2048];
    snprintf(url, sizeof url, "%s/models", base_url);
    pl_redact_url(url, shown, sizeof shown);
    struct evbuffer *b = evbuffer_new();
    long st = pl_remote_get_blocking(url, api_key, timeout_ms, b, err, errlen);
    json_t *root = NULL, *data;
    *ids = NULL;
    *n = 0;
    if (st != 200) {
        if (st > 0)
            snprintf(err, errlen, "%s: HTTP %ld", shown, st);
        goto fail;
    }
    root = json_loadb((const char *)evbuffer_pullup(b, -1), evbuffer_get_length(b), 0, NULL);
    data = json_object_get(root, "data");
    if (!json_is_array(data)) {
        snprintf(err, errlen, "%s: not an OpenAI model list", shown);
        goto fail;
    }
    *ids = calloc(json_array_size(data) + 1, sizeof **ids);
    size_t i;
    json_t *m;
    json_array_foreach(data, i, m) {
        const char *id = json_string_value(json_object_get(m, "id"));
        if (id)
            (*ids)[(*n)++] = strdup(id);
    }
    json_decref(root);
    evbuffer_free(b);
    return 0;
fail:
    json_decref(root);
    evbuffer_free(b);
    return -1;
}
