/* tile_emu.c - a C model of the AMX tile operations (see tile_emu.h). */
#include "backends/engine/cpu/tile_emu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fault(const char *what)
{
    fprintf(stderr, "tile_emu: %s (the CPU would fault)\n", what);
    abort();
}

static pl_tile_emu *emu(void *ctx, int t)
{
    pl_tile_emu *e = ctx;
    if (!e->configured)
        fault("tile operation without a tile configuration");
    if (t < 0 || t > 7 || e->rows[t] == 0)
        fault("tile register not configured");
    return e;
}

/* LDTILECFG, palette 1: colsb of tile t at bytes 16 + 2t, rows at 48 + t;
 * at most 16 rows of 64 bytes; a tile is either unused (0 x 0) or both set.
 * Tiles are zeroed. */
static void emu_config(void *ctx, const uint8_t *cfg)
{
    pl_tile_emu *e = ctx;
    memset(e, 0, sizeof(*e));
    if (cfg[0] != 1)
        fault("palette other than 1");
    for (int i = 2; i < 16; i++)
        if (cfg[i])
            fault("reserved config bytes set");
    for (int t = 0; t < 8; t++) {
        e->colsb[t] = (uint16_t)(cfg[16 + 2 * t] | cfg[17 + 2 * t] << 8);
        e->rows[t] = cfg[48 + t];
        if (e->colsb[t] > 64 || e->rows[t] > 16 || !e->colsb[t] != !e->rows[t])
            fault("tile shape out of palette 1's limits");
    }
    e->configured = 1;
}

static void emu_zero(void *ctx, int t)
{
    memset(emu(ctx, t)->data[t], 0, sizeof(((pl_tile_emu *)0)->data[0]));
}

/* TILELOADD: row r from p + r * stride, colsb bytes; the rest is zero. */
static void emu_load(void *ctx, int t, const void *p, size_t stride)
{
    pl_tile_emu *e = emu(ctx, t);
    memset(e->data[t], 0, sizeof(e->data[t]));
    for (int r = 0; r < e->rows[t]; r++)
        memcpy(e->data[t][r], (const uint8_t *)p + (size_t)r * stride, e->colsb[t]);
}

static void emu_store(void *ctx, int t, void *p, size_t stride)
{
    pl_tile_emu *e = emu(ctx, t);
    for (int r = 0; r < e->rows[t]; r++)
        memcpy((uint8_t *)p + (size_t)r * stride, e->data[t][r], e->colsb[t]);
}

/* TDPBSSD: for m < c.rows, k < a.colsb / 4, n < c.colsb / 4:
 *   c[m].dword[n] += sum_i s8(a[m].byte[4k + i]) * s8(b[k].byte[4n + i]),
 * wrapping; with a.rows == c.rows, a.colsb == 4 b.rows, b.colsb == c.colsb,
 * all multiples of 4 (else #UD). */
static void emu_dp(void *ctx, int c, int a, int b)
{
    pl_tile_emu *e = emu(emu(emu(ctx, c), a), b);
    if (c == a || c == b || a == b)
        fault("TDPBSSD with repeated registers");
    if (e->rows[a] != e->rows[c] || e->colsb[a] != 4 * e->rows[b] ||
        e->colsb[b] != e->colsb[c] || e->colsb[c] % 4 || e->colsb[a] % 4)
        fault("TDPBSSD shapes do not match");
    for (int m = 0; m < e->rows[c]; m++)
        for (int n = 0; n < e->colsb[c] / 4; n++) {
            int32_t acc;
            memcpy(&acc, &e->data[c][m][4 * n], 4);
            uint32_t u = (uint32_t)acc;
            for (int k = 0; k < e->colsb[a] / 4; k++)
                for (int i = 0; i < 4; i++)
                    u += (uint32_t)((int32_t)(int8_t)e->data[a][m][4 * k + i] *
                                    (int8_t)e->data[b][k][4 * n + i]);
            memcpy(&e->data[c][m][4 * n], &u, 4);
        }
}

static void emu_release(void *ctx)
{
    memset(ctx, 0, sizeof(pl_tile_emu));
}

const pl_tile_ops pl_tile_emu_ops = {emu_config, emu_zero, emu_load, emu_store, emu_dp,
                                     emu_release};
