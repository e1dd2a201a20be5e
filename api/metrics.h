/* metrics.h - GET /metrics in the Prometheus text format (version 0.0.4).
 *
 * The engine's figures under vLLM V1's names (vllm:num_requests_running,
 * vllm:kv_cache_usage_perc, vllm:prompt_tokens_total, the latency
 * histograms, ...) with a model_name label, so dashboards built for vLLM
 * work unchanged; parley's own figures under parley: names (engine step
 * timing, gateway requests, upstream replicas; jobs and the conversation
 * pools through a metrics hook of the jobs API). Counters take the _total
 * suffix on their samples, HELP and TYPE lines, as prometheus_client writes
 * them. A scrape reads counters kept by the sink wrappers (req_metrics.h)
 * and each backend's stats: its cost does not grow with open streams.
 */
#ifndef PL_API_METRICS_H
#define PL_API_METRICS_H

#include <event2/buffer.h>

#include "api/server.h"
#include "backends/req_metrics.h"

/** Register GET /metrics. */
void pl_metrics_register(pl_server *s);
/** Append the whole exposition (models, then the metrics hooks) to out. */
void pl_metrics_render(pl_server *s, struct evbuffer *out);

/** Write the # HELP and # TYPE lines of a family. type: "counter" (the
 *  name gets _total), "gauge" or "histogram". */
void pl_prom_family(struct evbuffer *b, const char *name, const char *type,
                    const char *help);
/** Write one sample: name[suffix]{labels} value. labels: 'k="v",...'
 *  already escaped, or NULL/"" for none. */
void pl_prom_sample(struct evbuffer *b, const char *name, const char *suffix,
                    const char *labels, double v);
/** Write a histogram's _bucket (cumulative, le last), _count and _sum. */
void pl_prom_histogram(struct evbuffer *b, const char *name, const char *labels,
                       const pl_hist *h);
/** Escape a label value (backslash, quote, newline) into out. */
void pl_prom_escape(char *out, size_t n, const char *v);

#endif
