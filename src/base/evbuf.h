/* evbuf.h - small helpers over libevent's evbuffer that every layer which
 * builds text in one (the wire formats, the tool-call formats) shares. */
#ifndef PL_EVBUF_H
#define PL_EVBUF_H

struct evbuffer;

/** The contents of b as a NUL-terminated string (caller frees); frees b.
 *  NULL on out-of-memory (b is freed all the same). */
char *pl_evbuffer_take(struct evbuffer *b);

#endif
