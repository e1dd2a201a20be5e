/* regex_internal.h - the parse tree shared by regex_parse.c (pattern ->
 * tree) and regex_dfa.c (tree -> NFA -> minimal DFA). */
#ifndef PL_CONSTRAIN_REGEX_INTERNAL_H
#define PL_CONSTRAIN_REGEX_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

typedef enum rx_type {
    RX_EMPTY = 0,                /* matches "" */
    RX_SET,                      /* one byte out of set */
    RX_CAT,                      /* kids in sequence */
    RX_ALT,                      /* one of the kids */
    RX_REP,                      /* kid {min, max}; max -1 = unbounded */
} rx_type;

typedef struct rx_node {
    rx_type type;
    int min, max;
    uint8_t set[32];             /* RX_SET: bit b = byte b */
    struct rx_node *kid, *last;  /* first and last child */
    struct rx_node *next;        /* next sibling */
} rx_node;

/* Nodes come from blocks freed all at once. */
typedef struct rx_arena {
    struct rx_block *blocks;
    size_t used;
} rx_arena;

rx_node *rx_new_(rx_arena *a, rx_type t);
void rx_arena_free_(rx_arena *a);
void rx_add_kid_(rx_node *parent, rx_node *kid);

/* Parse into a tree. NULL with err set on a bad or unsupported pattern. */
rx_node *rx_parse_(rx_arena *a, const char *pattern, size_t len, int flags, char *err,
                   size_t errlen);

#endif
