/* test_remote_probe.c - what a vLLM upstream's /metrics says about its
 * capacity (backends/remote/remote_probe.c): the cache's geometry and
 * usage, and the capacity they give, by the KV rule (free blocks over a
 * request's estimated need, issue 41) or under --capacity worst-case by
 * seed 000's KV tokens / max_model_len. */
#include <criterion/criterion.h>

#include <string.h>

#include "backends/remote/remote_internal.h"
#include "backends/req_metrics.h"

static const char metrics_v1[] =
    "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
    "# TYPE vllm:cache_config_info gauge\n"
    "vllm:cache_config_info{block_size=\"16\",cache_dtype=\"auto\",num_gpu_blocks=\"1000\"} 1.0\n"
    "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
    "# TYPE vllm:kv_cache_usage_perc gauge\n"
    "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.25\n";

Test(remote_probe, reads_the_cache_geometry_and_usage)
{
    long blocks, bs;
    cr_assert_eq(pl_remote_parse_vllm_metrics(metrics_v1, strlen(metrics_v1), &blocks, &bs), 0);
    cr_assert_eq(blocks, 1000);
    cr_assert_eq(bs, 16);
    double u = pl_remote_parse_vllm_usage(metrics_v1, strlen(metrics_v1));
    cr_assert_float_eq(u, 0.25, 1e-9);
    static const char old[] = "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.5\n"
                              "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.7\n";
    cr_assert_float_eq(pl_remote_parse_vllm_usage(old, strlen(old)), 0.6, 1e-9,
                       "the name before V1, two engines: their mean");
    static const char none[] = "# vllm:kv_cache_usage_perc 0.3\nvllm:kv_cache_usage_percx 0.3\n";
    cr_assert_lt(pl_remote_parse_vllm_usage(none, strlen(none)), 0, "comments and other names");
    static const char bad[] = "vllm:kv_cache_usage_perc{} 7\n";
    cr_assert_lt(pl_remote_parse_vllm_usage(bad, strlen(bad)), 0, "not a fraction");
}

static void probe(remote_backend *rb, remote_replica *rep, const char *body)
{
    memset(rep, 0, sizeof *rep);
    rep->rb = rb;
    rep->kind = PL_REMOTE_VLLM;
    rep->max_model_len = 4096;
    rep->outstanding = 2;
    pl_remote_apply_capacity(rep, body, strlen(body));
}

/* 750 free blocks; nothing learnt yet: a request counts a 256-token
 * reply (16 blocks), each of the 2 on it may grow by one: 2 + (750 - 32)
 * / 16 = 46. Learnt 40-token prompts and 24-token replies: 4 blocks a
 * request, 2 of growth each: 2 + (750 - 4) / 4 = 188. Worst case: 1000 *
 * 16 / 4096 = 3 whatever the usage. */
Test(remote_probe, capacity_by_the_kv_rule_or_the_worst_case)
{
    remote_backend rb;
    memset(&rb, 0, sizeof rb);
    remote_replica rep;
    probe(&rb, &rep, metrics_v1);
    cr_assert_eq(rep.reported_cap, 46);
    pl_req_metrics m;
    memset(&m, 0, sizeof m);
    for (int i = 0; i < 10; i++) {
        pl_dispatch_est_observe(&m.replies, 24);
        pl_dispatch_est_observe(&m.uncached_prompts, 40);
    }
    rb.base.metrics = &m;
    probe(&rb, &rep, metrics_v1);
    cr_assert_eq(rep.reported_cap, 188);
    rb.base.metrics = NULL;
    rb.o.worst_case_capacity = true;
    probe(&rb, &rep, metrics_v1);
    cr_assert_eq(rep.reported_cap, 3);
    rb.o.worst_case_capacity = false;
    static const char no_usage[] =
        "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1000\"} 1.0\n";
    probe(&rb, &rep, no_usage);
    cr_assert_eq(rep.reported_cap, 3, "no usage reported: the worst case");
}
