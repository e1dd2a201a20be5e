/* sha256.h - SHA-256 (FIPS 180-4), for fingerprints of job specs. Not for
 * secrets: plain C, no constant-time care. */
#ifndef PL_SHA256_H
#define PL_SHA256_H

#include <stddef.h>
#include <stdint.h>

/** The digest of data[0..len) as 64 lowercase hex digits and a NUL. */
void pl_sha256_hex(const void *data, size_t len, char out[65]);

#endif
