/* auth.h - who may call: API keys, per-key rate limits, browser origins.
 *
 * Keys are compared in constant time (the time depends on the configured
 * keys' lengths only, never on how much of a guess is right). Rate limits
 * are token buckets per key: requests per minute, and tokens per minute
 * charged with each reply's usage (a request is admitted while its key's
 * token bucket is positive). Everything runs on the main thread.
 */
#ifndef PL_API_AUTH_H
#define PL_API_AUTH_H

#include <stdbool.h>

#include <event2/keyvalq_struct.h>

typedef struct pl_auth pl_auth;

typedef struct pl_auth_opts {
    const char *const *keys;     /**< API keys (copied); none: no authentication */
    int n_keys;
    const char *origins;         /**< allowed browser origins, comma-separated ("*": any) */
    const char *hosts;           /**< Host names allowed without keys, comma-separated
                                      (".d.example": d.example and its subdomains; "*": any) */
    int rpm, tpm;                /**< per-key limits; 0: none */
} pl_auth_opts;

/** Returns NULL on OOM. */
pl_auth *pl_auth_new(const pl_auth_opts *o);
void pl_auth_free(pl_auth *a);

bool pl_auth_needs_key(const pl_auth *a);
/** The key index for an Authorization header value, or -1. With no keys
 *  configured every caller is key 0. */
int pl_auth_check_key(const pl_auth *a, const char *authorization);
/** The key index for a bare key (Anthropic's x-api-key header), or -1;
 *  compared as pl_auth_check_key compares a bearer token. */
int pl_auth_check_api_key(const pl_auth *a, const char *key);
/** May a page from origin call us? host: the request's Host header. */
bool pl_auth_origin_allowed(const pl_auth *a, const char *origin, const char *host);

/** The address the server listens on (copied), for pl_auth_host_allowed. */
void pl_auth_set_bound(pl_auth *a, const char *bound_host);
/**
 * DNS rebinding: without API keys, a page on another site could reach us
 * through a name that resolves to our address, and read the replies as its
 * own origin. So then a request's Host (host may be NULL: HTTP/1.0) must
 * name localhost, a loopback address, the bound address (any IP address
 * when bound to all), or one of the allowed hosts. With keys: always true.
 */
bool pl_auth_host_allowed(const pl_auth *a, const char *host);

/**
 * Admit one request of key (from pl_auth_check_key) now. Adds OpenAI's
 * x-ratelimit-* headers to out when limits are set. Returns 0, or the
 * seconds to wait (>= 1) when the key is over a limit; *which says
 * "requests" or "tokens".
 */
int pl_auth_admit(pl_auth *a, int key, struct evkeyvalq *out, const char **which);
/** Charge tokens a reply used to key's token bucket. */
void pl_auth_charge(pl_auth *a, int key, long tokens);

#endif
