/* detok.c - streaming detokeniser: UTF-8 completion, stop strings across
 * token boundaries with hold-back of possible stop prefixes. See detok.h.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/text/detok.h"
#include "src/base/utf8.h"

int pl_detok_init(pl_detok *d, const pl_tokenizer *tok,
                  const char *const *stops, int n_stops, bool special)
{
    memset(d, 0, sizeof *d);
    d->tok = tok;
    d->special = special;
    d->stopped = -1;
    if (n_stops > PL_DETOK_MAX_STOPS || n_stops < 0)
        return -1;
    for (int i = 0; i < n_stops; i++) {
        size_t n = stops[i] ? strlen(stops[i]) : 0;
        if (n == 0)
            continue;
        if (!(d->stops[d->n_stops] = strdup(stops[i])))
            goto fail;
        d->stop_len[d->n_stops++] = n;
        if (n > d->max_stop)
            d->max_stop = n;
    }
    d->hold_cap = 256 + 2 * d->max_stop;
    d->out_cap = 3 * d->hold_cap + 4;
    d->hold = malloc(d->hold_cap);
    d->out = malloc(d->out_cap);
    if (!d->hold || !d->out)
        goto fail;
    return 0;
fail:
    pl_detok_free(d);
    return -1;
}

void pl_detok_free(pl_detok *d)
{
    for (int i = 0; i < d->n_stops; i++)
        free(d->stops[i]);
    free(d->hold);
    free(d->out);
    memset(d, 0, sizeof *d);
    d->stopped = -1;
}

void pl_detok_reset(pl_detok *d)
{
    d->hold_len = 0;
    d->stopped = -1;
}

/* Bytes at the end of s[0..len) that start a UTF-8 sequence the next
 * bytes could still complete (0 when the end is complete or invalid). */
static size_t utf8_incomplete_tail(const char *s, size_t len)
{
    for (size_t back = 1; back <= 3 && back <= len; back++) {
        uint8_t b = (uint8_t)s[len - back];
        if ((b & 0xc0) == 0x80)
            continue;
        size_t need = b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 :
                      b >= 0xf0 && b <= 0xf4 ? 4 : 1;
        return need > back ? back : 0;
    }
    return 0;
}

static int ensure(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    char *p = realloc(*buf, c);
    if (!p)
        return -1;
    *buf = p;
    *cap = c;
    return 0;
}

/* Emit hold[0..n) as valid UTF-8 into out, then drop it from hold. */
static int emit(pl_detok *d, size_t n, pl_detok_out *o)
{
    if (ensure(&d->out, &d->out_cap, 3 * n + 1))
        return -1;
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        size_t k = pl_utf8_seq_len((const unsigned char *)d->hold + i, n - i);
        if (k) {
            memcpy(d->out + w, d->hold + i, k);
            w += k;
            i += k;
        } else {
            memcpy(d->out + w, PL_UTF8_REPLACEMENT, 3);
            w += 3;
            i++;
        }
    }
    memmove(d->hold, d->hold + n, d->hold_len - n);
    d->hold_len -= n;
    o->text = d->out;
    o->len = w;
    return 0;
}

/* Earliest complete stop string in hold, searching only where one could
 * end in the bytes added since from. Returns its index or -1, *at = pos. */
static int find_stop(const pl_detok *d, size_t from, size_t *at)
{
    int best = -1;
    for (int i = 0; i < d->n_stops; i++) {
        size_t sl = d->stop_len[i];
        size_t start = from >= sl - 1 ? from - (sl - 1) : 0;
        if (d->hold_len - start < sl)
            continue;
        const char *p = memmem(d->hold + start, d->hold_len - start,
                               d->stops[i], sl);
        if (p && (best < 0 || (size_t)(p - d->hold) < *at)) {
            best = i;
            *at = (size_t)(p - d->hold);
        }
    }
    return best;
}

/* Longest suffix of hold that is a proper prefix of a stop string. */
static size_t stop_prefix_len(const pl_detok *d)
{
    size_t kmax = d->max_stop ? d->max_stop - 1 : 0;
    if (kmax > d->hold_len)
        kmax = d->hold_len;
    for (size_t k = kmax; k > 0; k--) {
        const char *tail = d->hold + d->hold_len - k;
        for (int i = 0; i < d->n_stops; i++)
            if (d->stop_len[i] > k && !memcmp(d->stops[i], tail, k))
                return k;
    }
    return 0;
}

int pl_detok_feed_bytes(pl_detok *d, const char *bytes, size_t len,
                        pl_detok_out *o)
{
    o->text = d->out;
    o->len = 0;
    o->stop = -1;
    if (d->stopped >= 0)
        return 1;
    if (ensure(&d->hold, &d->hold_cap, d->hold_len + len))
        return -1;
    size_t from = d->hold_len;
    memcpy(d->hold + d->hold_len, bytes, len);
    d->hold_len += len;
    size_t at = 0;
    int s = find_stop(d, from, &at);
    if (s >= 0) {
        d->stopped = s;
        o->stop = s;
        if (emit(d, at, o))
            return -1;
        d->hold_len = 0;
        return 1;
    }
    size_t keep = stop_prefix_len(d);
    size_t inc = utf8_incomplete_tail(d->hold, d->hold_len);
    if (inc > keep)
        keep = inc;
    return emit(d, d->hold_len - keep, o);
}

int pl_detok_feed(pl_detok *d, int32_t id, pl_detok_out *o)
{
    size_t len = 0;
    const char *b = NULL;
    if (d->tok && (d->special || !pl_tokenizer_token_hidden(d->tok, id)))
        b = pl_tokenizer_token_bytes(d->tok, id, &len);
    return pl_detok_feed_bytes(d, b ? b : "", len, o);
}

int pl_detok_flush(pl_detok *d, pl_detok_out *o)
{
    o->stop = -1;
    return emit(d, d->hold_len, o);
}
