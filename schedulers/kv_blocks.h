/* kv_blocks.h - the paged KV cache's block manager.
 *
 * The KV cache is cut into num_blocks fixed-size blocks of block_size token
 * positions. A sequence holds a table of block ids; blocks are reference
 * counted so that sequences with a common prefix share them.
 *
 * Prefix caching: a FULL block whose tokens are all computed is "committed":
 * keyed by a chained hash h = H(parent block's hash, its block_size token
 * ids) in a hash table (the ids and parent hash are kept and compared, so a
 * hash collision never aliases two contents). A new sequence looks up the
 * longest run of cached blocks covering its prefix and takes a reference on
 * each. A released block with a hash goes to a cached-free LRU list and is
 * reused as is by a later lookup; when the plain free list is empty the
 * allocator evicts a cached block (dropping its hash): the least recently
 * released, or with retention hints (below) the one whose conversation
 * needs it furthest ahead.
 *
 * Cache groups (schedulers/kv_layout.h): one pool serves every group;
 * each block belongs to the group it was allocated in (pl_kv_blocks_alloc_in)
 * until it is evicted, and lookups name their group, so the blocks of two
 * groups holding the same tokens never alias. The calls without a group
 * are group 0's.
 *
 * Pure data structure: no threads, no I/O. Not thread-safe.
 */
#ifndef PL_KV_BLOCKS_H
#define PL_KV_BLOCKS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct pl_kv_blocks pl_kv_blocks;

/** Counters since creation. */
typedef struct pl_kv_stats {
    int num_blocks;
    int block_size;
    int used;                 /**< blocks with ref > 0 */
    int free;                 /**< blocks on the plain free list */
    int cached_free;          /**< ref == 0 blocks kept for prefix reuse */
    int cached;               /**< blocks with a hash (used or cached-free) */
    uint64_t queries;         /**< prompt tokens looked up */
    uint64_t hits;            /**< of those, tokens served from the cache */
    uint64_t evictions;       /**< cached blocks evicted for reuse */
    uint64_t done_released;   /**< cached blocks released for eviction
                                   first: their conversation finished, or
                                   no later request reuses them
                                   (pl_kv_blocks_release_front) */
    uint64_t need_evictions;  /**< evictions that skipped the LRU block
                                   for one needed later */
    uint64_t partial_hits;    /**< partial-block matches (copy on write) */
    uint64_t partial_tokens;  /**< tokens they served */
    uint64_t tails;           /**< finished sequences' partial last blocks
                                   kept for partial reuse */
} pl_kv_stats;

/** One cache group's blocks (pl_kv_blocks_group_stats). */
typedef struct pl_kv_group_stats {
    int used;                 /**< its blocks with ref > 0 */
    int cached_free;          /**< its ref == 0 blocks kept for reuse */
    int cached;               /**< its blocks with a hash */
} pl_kv_group_stats;

/** Seed of the hash chain: the "parent hash" of a sequence's first block. */
#define PL_KV_HASH_ROOT 0x9e3779b97f4a7c15ull

/** Create a manager of num_blocks blocks of block_size tokens. With
 *  prefix_caching false, commit and lookup do nothing. NULL on bad
 *  arguments or OOM. Free with pl_kv_blocks_free. */
pl_kv_blocks *pl_kv_blocks_new(int num_blocks, int block_size,
                               bool prefix_caching);
void pl_kv_blocks_free(pl_kv_blocks *kv);

/** pl_kv_blocks_new for n_groups cache groups (>= 1) sharing the pool. */
pl_kv_blocks *pl_kv_blocks_new_grouped(int num_blocks, int block_size,
                                       bool prefix_caching, int n_groups);
int pl_kv_blocks_num_groups(const pl_kv_blocks *kv);
/** Group g's figures (0 <= g < pl_kv_blocks_num_groups). */
void pl_kv_blocks_group_stats(const pl_kv_blocks *kv, int g, pl_kv_group_stats *st);

int pl_kv_blocks_block_size(const pl_kv_blocks *kv);
int pl_kv_blocks_num_blocks(const pl_kv_blocks *kv);
/** Blocks an allocation can get now: free + cached-free. */
int pl_kv_blocks_num_available(const pl_kv_blocks *kv);

/** Take a block with ref 1: from the free list, else the LRU cached-free
 *  block (its hash is dropped). Returns the id, or -1 when none is left. */
int32_t pl_kv_blocks_alloc(pl_kv_blocks *kv);
/** pl_kv_blocks_alloc for cache group `group` (< num_groups). */
int32_t pl_kv_blocks_alloc_in(pl_kv_blocks *kv, int group);

/** Add a reference to a block in use. */
void pl_kv_blocks_ref(pl_kv_blocks *kv, int32_t id);

/** Drop a reference; at zero the block goes to the tail of the cached-free
 *  LRU when it has a hash, else to the free list. */
void pl_kv_blocks_release(pl_kv_blocks *kv, int32_t id);

/** pl_kv_blocks_release, but a block that becomes cached-free goes to the
 *  front of eviction (marked as of a finished conversation, counted in
 *  done_released): its contents stay reusable until it is evicted. */
void pl_kv_blocks_release_front(pl_kv_blocks *kv, int32_t id);

int pl_kv_blocks_refcount(const pl_kv_blocks *kv, int32_t id);

/** The chained hash of a block: parent hash and block_size ids. */
uint64_t pl_kv_blocks_hash(uint64_t parent, const int32_t *ids, int n);

/**
 * Longest cached prefix of tokens[0..n): walks full blocks from the root,
 * stops at the first miss or after max_blocks. Takes a reference on each
 * hit (a cached-free block leaves the LRU) and writes its id to
 * out_blocks. *last_hash receives the hash of the last hit block
 * (PL_KV_HASH_ROOT when none). Counts nothing: see pl_kv_blocks_count.
 * Returns the number of blocks hit.
 */
int pl_kv_blocks_lookup(pl_kv_blocks *kv, const int32_t *tokens, int n,
                        int max_blocks, int32_t *out_blocks,
                        uint64_t *last_hash);

/** The committed full block of group `group` holding ids[0..block_size)
 *  after parent hash `parent`, or -1 (also when prefix caching is off).
 *  Read-only: takes no reference. */
int32_t pl_kv_blocks_find(const pl_kv_blocks *kv, int group, uint64_t parent,
                          const int32_t *ids);

/** Whether block id would be reused without taking it from the free or
 *  evictable ones: in use, or kept (pl_kv_blocks_needed_now). */
bool pl_kv_blocks_held(const pl_kv_blocks *kv, int32_t id);

/** The scheduling tick (a step number): blocks committed during tick t
 *  serve partial matches from tick t + 1 on. */
void pl_kv_blocks_set_tick(pl_kv_blocks *kv, uint64_t tick);

/**
 * Partial-block reuse: the committed block after parent hash `parent`
 * whose first k ids equal tokens[0..k), for the largest k in
 * [1, min(max_k, block_size - 1)], among blocks committed before the
 * current tick. Returns its id and *k_out = k (counted as a partial hit),
 * or -1 and *k_out = 0. Takes no reference: the caller copies the block's
 * first k positions into a block of its own (copy on write) before the
 * next step writes anything, and must not let a step of this tick
 * overwrite it first (KV copies run before the step they precede).
 */
int32_t pl_kv_blocks_lookup_partial(pl_kv_blocks *kv, uint64_t parent,
                                    const int32_t *tokens, int max_k, int *k_out);

/** pl_kv_blocks_lookup_partial in group `group`, read-only and counting
 *  nothing (see pl_kv_blocks_count_partial). */
int32_t pl_kv_blocks_find_partial(const pl_kv_blocks *kv, int group, uint64_t parent,
                                  const int32_t *tokens, int max_k, int *k_out);
/** Count one partial hit serving k tokens. */
void pl_kv_blocks_count_partial(pl_kv_blocks *kv, int k);

/** Add to the counters: `queried` prompt tokens looked up, `hit` found. */
void pl_kv_blocks_count(pl_kv_blocks *kv, int queried, int hit);

/**
 * Commit block id (in use, full, all its tokens computed) whose contents
 * are ids[0..block_size) after a block with hash `parent`. Registers it in
 * the table unless an identical block is already there. Returns the
 * block's chained hash either way (the parent of the next block).
 */
uint64_t pl_kv_blocks_commit(pl_kv_blocks *kv, int32_t id, uint64_t parent,
                             const int32_t *ids);

/**
 * Keep the partial last block of a sequence that ends (block id, in use,
 * its first n ids computed, 0 < n < block_size, after a block with hash
 * `parent`) for partial reuse only: pl_kv_blocks_lookup_partial may serve
 * up to n of its ids from the next tick on; full-block lookups never see
 * it. When released it waits on the cached-free list like a full committed
 * block. Returns false (nothing done) when prefix caching is off, the block
 * is committed already, n is out of range, or a kept block after the same
 * parent already holds these n ids.
 */
bool pl_kv_blocks_commit_tail(pl_kv_blocks *kv, int32_t id, uint64_t parent,
                              const int32_t *ids, int n);

/* ---- retention by next need (DESIGN.md, "Conversation-aware KV") ----
 *
 * A block released to the cached-free list is tagged with the conversation
 * key of the sequence that released it last. The caller hints, per key, how
 * soon that conversation needs its cache again: 0 = now (running, or its
 * next request is blocked on this round's dependencies), larger = later
 * (its place in the dispatch order), PL_KV_NEED_DONE = never. With
 * next-need eviction on, the allocator evicts the cached-free block of the
 * furthest need, the least recently released among equals; untagged blocks
 * and unhinted keys count as need 0. Off: plain LRU (hints are kept). */

#define PL_KV_NEED_DONE (-1)

void pl_kv_blocks_set_next_need(pl_kv_blocks *kv, bool on);

/**
 * Hint conversation key (0 is ignored) with need (>= 0 or
 * PL_KV_NEED_DONE). DONE releases the conversation's blocks at once to
 * the front of eviction, whatever the policy: its cached-free blocks move
 * to the head of the LRU list (still reusable by another conversation
 * that shares their contents, until evicted), its blocks in use follow
 * when released untagged; the key is forgotten. Returns the number of
 * cached-free blocks so released.
 */
int pl_kv_blocks_hint(pl_kv_blocks *kv, uint64_t key, int need);

/** Whether conversation key has been hinted (and not finished since). */
bool pl_kv_blocks_hinted(const pl_kv_blocks *kv, uint64_t key);

/** pl_kv_blocks_release, tagging the block with key when it becomes
 *  cached-free and key has been hinted (and not finished since). */
void pl_kv_blocks_release_tagged(pl_kv_blocks *kv, int32_t id, uint64_t key);

/** Cached-free blocks of conversations needed now (hinted need 0: a
 *  request of theirs runs, or waits on one that runs): evictable, but
 *  admission keeps them (schedulers/dispatch.h, pl_dispatch_kv.kept).
 *  O(hinted conversations). */
int pl_kv_blocks_needed_now(const pl_kv_blocks *kv);

/** The leading full blocks of tokens[0..n) (at most max_blocks) a lookup
 *  would hit without taking them from the free or evictable ones: blocks
 *  in use, or kept (pl_kv_blocks_needed_now); stops at the first other
 *  block. Read-only (no reference, no LRU move). O(blocks walked). */
int pl_kv_blocks_held_prefix(const pl_kv_blocks *kv, const int32_t *tokens, int n,
                             int max_blocks);

void pl_kv_blocks_stats(const pl_kv_blocks *kv, pl_kv_stats *st);

/**
 * Invariant for when no sequence holds blocks: every block has ref 0 and
 * is on exactly one of the free and cached-free lists, every hashed block
 * is in the table, list lengths match the counters. Returns true when it
 * holds; otherwise writes a reason into why (may be NULL).
 */
bool pl_kv_blocks_check_idle(const pl_kv_blocks *kv, char *why, int whylen);

#endif
