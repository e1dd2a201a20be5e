/* le.h - little-endian loads from any alignment: the one reader of the
 * GGUF parser (gguf.c, gguf_meta.c) and of quantised blocks (quant.c).
 * Byte-wise, so correct on any host; compilers turn them into one load on
 * little-endian targets.
 */
#ifndef PL_BASE_LE_H
#define PL_BASE_LE_H

#include <stddef.h>
#include <stdint.h>

/** The n-byte (n <= 8) little-endian unsigned integer at p. */
static inline uint64_t pl_le_read(const void *p, size_t n)
{
    const uint8_t *b = (const uint8_t *)p;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}

static inline uint16_t pl_le16(const void *p) { return (uint16_t)pl_le_read(p, 2); }
static inline uint32_t pl_le32(const void *p) { return (uint32_t)pl_le_read(p, 4); }
static inline uint64_t pl_le64(const void *p) { return pl_le_read(p, 8); }

#endif
