/* st_config.h - a sentence-transformers folder's own files, which say how
 * an encoder's rows become an embedding: modules.json (Transformer, then
 * Pooling, then optionally Normalize), the Pooling module's config.json
 * (1_Pooling/config.json: pooling_mode_*) and sentence_bert_config.json
 * (max_seq_length). Modules parley does not run (Dense, LayerNorm, ...) and
 * pooling modes it does not implement are refused, naming the file and key.
 */
#ifndef PL_ST_CONFIG_H
#define PL_ST_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/engine/model/encoder.h"

typedef struct pl_st_config {
    bool present;                /**< the folder has modules.json */
    pl_pooling pooling;          /**< the Pooling module's mode; NONE: none */
    bool normalize;              /**< a Normalize module follows */
    int max_seq_length;          /**< sentence_bert_config.json's; 0: not given */
    int dim;                     /**< word_embedding_dimension; 0: not given */
} pl_st_config;

/** Read dir's files into *out (all zero when there is no modules.json).
 *  0, or -1 with "FILE: key: why" in err. */
int pl_st_config_read(const char *dir, pl_st_config *out, char *err, size_t errlen);

#endif
