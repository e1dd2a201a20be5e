/* conv_harness.h - a job's conversations (schedulers/conversation.h) on
 * their own dispatches (one per model, no other client), for the pure
 * scheduler tests: dispatching one request means taking, among the models
 * whose dispatch would admit one, the request first in the job's policy
 * order, as one job's requests are ordered when they meet. */
#ifndef PL_TEST_CONV_HARNESS_H
#define PL_TEST_CONV_HARNESS_H

#include "schedulers/conversation.h"

#define CONV_HARNESS_MODELS 4

typedef struct conv_harness {
    pl_dispatch *d[CONV_HARNESS_MODELS];
    int n_models;
    pl_dispatch_policy policy;
    pl_convs *c;
    pl_conv_req *last;           /* the request the last step admitted */
} conv_harness;

/** Create cfg->n_models dispatches (capacity 1, no reserve) and the
 *  conversations on them. Returns h->c (NULL when pl_convs_new refuses
 *  cfg; the dispatches stay for conv_harness_free). */
pl_convs *conv_harness_new(conv_harness *h, pl_convs_config *cfg);
void conv_harness_free(conv_harness *h);
/** A model's capacity (the in-flight bound of its dispatch). */
void conv_harness_capacity(conv_harness *h, int model, int capacity);
/** Admit the job's best request that may go now; NULL when none can. */
pl_conv_req *conv_harness_dispatch(conv_harness *h);

#endif
