/* test_auth.c - api/auth.c's Host check (DNS rebinding, issue 36): which
 * Host values a keyless server answers, for each kind of bound address. */
#include <criterion/criterion.h>

#include "api/auth.h"

static pl_auth *keyless(const char *bound, const char *hosts)
{
    pl_auth_opts o = {.hosts = hosts};
    pl_auth *a = pl_auth_new(&o);
    cr_assert_not_null(a);
    pl_auth_set_bound(a, bound);
    return a;
}

static void expect_hosts(pl_auth *a, const char *const *ok, const char *const *refused)
{
    for (; *ok; ok++)
        cr_expect(pl_auth_host_allowed(a, *ok), "Host '%s' is allowed", *ok);
    for (; *refused; refused++)
        cr_expect(!pl_auth_host_allowed(a, *refused), "Host '%s' is refused", *refused);
}

Test(auth, loopback_bind_answers_local_names_only)
{
    pl_auth *a = keyless("127.0.0.1", "");
    const char *ok[] = {"localhost", "localhost:8000", "LocalHost:1", "app.localhost:8000",
                        "127.0.0.1:8000", "127.1.2.3", "[::1]:8000", NULL};
    const char *bad[] = {"evil.example", "evil.example:8000", "localhost.evil.example",
                         "10.0.0.5:8000", "[::1", "", ":8000", "[fe80::1]:80", NULL};
    expect_hosts(a, ok, bad);
    cr_expect(pl_auth_host_allowed(a, NULL), "no Host (HTTP/1.0): nothing to check");
    pl_auth_free(a);
}

Test(auth, wildcard_bind_answers_any_address_but_names_must_be_allowed)
{
    const char *binds[] = {"0.0.0.0", "::"};
    for (int i = 0; i < 2; i++) {
        pl_auth *a = keyless(binds[i], "parley.internal, .corp.example");
        const char *ok[] = {"10.0.0.5:8000", "[2001:db8::7]:8000", "parley.internal:8000",
                            "corp.example", "gpu1.corp.example:8000", NULL};
        const char *bad[] = {"evil.example", "xcorp.example", "corp.example.evil.example",
                             "parley.internal.evil", NULL};
        expect_hosts(a, ok, bad);
        pl_auth_free(a);
    }
}

Test(auth, specific_bind_answers_its_own_address)
{
    pl_auth *a = keyless("10.0.0.5", "");
    const char *ok[] = {"10.0.0.5:8000", "127.0.0.1", "localhost", NULL};
    const char *bad[] = {"10.0.0.6:8000", "evil.example", NULL};
    expect_hosts(a, ok, bad);
    pl_auth_free(a);
    a = keyless("my-box", "");
    cr_expect(pl_auth_host_allowed(a, "MY-BOX:8000"), "the name it was told to bind");
    pl_auth_free(a);
}

Test(auth, star_or_api_keys_turn_the_check_off)
{
    pl_auth *a = keyless("127.0.0.1", "*");
    cr_expect(pl_auth_host_allowed(a, "anything.example"));
    pl_auth_free(a);
    const char *keys[] = {"k"};
    pl_auth_opts o = {.keys = keys, .n_keys = 1};
    a = pl_auth_new(&o);
    pl_auth_set_bound(a, "127.0.0.1");
    cr_expect(pl_auth_host_allowed(a, "evil.example"), "with keys, the key protects");
    pl_auth_free(a);
}

/* Anthropic's SDKs send the key bare, in x-api-key: the same keys, the
 * same indices, as a bearer token. */
Test(auth, x_api_key_is_a_bare_key)
{
    const char *keys[] = {"alpha", "beta"};
    pl_auth_opts o = {.keys = keys, .n_keys = 2};
    pl_auth *a = pl_auth_new(&o);
    cr_assert_not_null(a);
    cr_expect_eq(pl_auth_check_api_key(a, "alpha"), 0);
    cr_expect_eq(pl_auth_check_api_key(a, "beta"), 1);
    cr_expect_eq(pl_auth_check_api_key(a, " beta "), 1);
    cr_expect_eq(pl_auth_check_key(a, "Bearer beta"), 1);
    cr_expect_eq(pl_auth_check_api_key(a, "Bearer beta"), -1);
    cr_expect_eq(pl_auth_check_api_key(a, "alph"), -1);
    cr_expect_eq(pl_auth_check_api_key(a, ""), -1);
    cr_expect_eq(pl_auth_check_api_key(a, NULL), -1);
    pl_auth_free(a);
    pl_auth *none = pl_auth_new(&(pl_auth_opts){0});
    cr_expect_eq(pl_auth_check_api_key(none, NULL), 0);
    pl_auth_free(none);
}
