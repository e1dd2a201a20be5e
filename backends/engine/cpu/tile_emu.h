/* tile_emu.h - the AMX tile operations the int8 kernels use, as a table
 * (pl_tile_ops) with two implementations: the CPU's instructions
 * (qdot_amx.c) and a C model of them here, written from the Intel SDM's
 * pseudo-code for LDTILECFG, TILELOADD, TILESTORED, TILEZERO and TDPBSSD,
 * shape checks included, so that CPUs without AMX run the kernels too.
 */
#ifndef PL_CPU_TILE_EMU_H
#define PL_CPU_TILE_EMU_H

#include <stddef.h>
#include <stdint.h>

/** Tile operations; t, c, a, b are tile register numbers (0..7). */
typedef struct pl_tile_ops {
    void (*config)(void *ctx, const uint8_t *cfg);   /**< 64-byte palette-1 config */
    void (*zero)(void *ctx, int t);
    void (*load)(void *ctx, int t, const void *p, size_t stride);
    void (*store)(void *ctx, int t, void *p, size_t stride);
    void (*dp)(void *ctx, int c, int a, int b);      /**< TDPBSSD c += a . b */
    void (*release)(void *ctx);
} pl_tile_ops;

/** The model's state: 8 tiles of 16 rows x 64 bytes and their shapes. */
typedef struct pl_tile_emu {
    int configured;
    uint8_t rows[8];
    uint16_t colsb[8];
    uint8_t data[8][16][64];
} pl_tile_emu;

/** The C model; ctx is a pl_tile_emu. An operation the CPU would refuse
 *  (#UD/#GP: no config, a bad shape) aborts: it is a bug in the kernel. */
extern const pl_tile_ops pl_tile_emu_ops;

#endif
