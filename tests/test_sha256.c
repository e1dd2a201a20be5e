/* test_sha256.c - src/base/sha256.c against FIPS 180-4's examples and
 * the padding edges (55, 56, 64 bytes). */
#include <criterion/criterion.h>

#include <string.h>

#include "src/base/sha256.h"

static void check(const char *msg, size_t n, const char *want)
{
    char out[65];
    pl_sha256_hex(msg, n, out);
    cr_expect_str_eq(out, want, "%zu bytes", n);
}

Test(sha256, known_answers)
{
    check("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    check("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    check(m448, 56, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    char a[200];
    memset(a, 'a', sizeof a);
    check(a, 55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
    check(a, 64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
    check(a, 200, "c2a908d98f5df987ade41b5fce213067efbcc21ef2240212a41e54b5e7c28ae5");
}
