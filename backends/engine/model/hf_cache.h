/* hf_cache.h - what `--model X` names: a GGUF file, a Hugging Face
 * checkpoint folder, or ORG/NAME in the local Hugging Face cache.
 *
 * The cache is read as huggingface_hub lays it out, offline:
 * CACHE/models--ORG--NAME/snapshots/REV, with REV from refs/main (or the
 * revision asked for, or the only snapshot). CACHE is each of $HF_HUB_CACHE,
 * $HUGGINGFACE_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub and
 * ~/.cache/huggingface/hub that is set, in that order. Nothing is
 * downloaded.
 */
#ifndef PL_HF_CACHE_H
#define PL_HF_CACHE_H

#include <stddef.h>

typedef enum pl_model_kind {
    PL_MODEL_KIND_GGUF = 1,      /**< a file (read as GGUF) */
    PL_MODEL_KIND_HF = 2,        /**< a checkpoint folder (config.json, ...) */
} pl_model_kind;

/**
 * Resolve spec. An existing file is a GGUF; an existing folder must hold
 * config.json; anything else that looks like ORG/NAME (or a bare NAME) is
 * looked up in the cache. revision: NULL, "" or "main" follow refs/main,
 * else a snapshot hash or another ref under refs/. Writes the file or
 * folder into out. Returns its kind, or -1 with a message in err that names
 * every folder searched.
 */
int pl_hf_resolve(const char *spec, const char *revision, char *out, size_t n, char *err,
                  size_t errlen);

#endif
