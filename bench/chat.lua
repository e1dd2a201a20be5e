-- wrk script: non-streaming chat completions (max_tokens 16) on the mock backend.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local key = os.getenv("PARLEY_BENCH_KEY")
if key and key ~= "" then wrk.headers["Authorization"] = "Bearer " .. key end
wrk.body = '{"model":"mock","max_tokens":16,"messages":[{"role":"user","content":"Which option is right?"}]}'

done = function(summary, latency, requests)
  io.write(string.format("RESULT requests=%d duration_us=%d errors=%d rps=%.1f p50_ms=%.3f p99_ms=%.3f\n",
    summary.requests, summary.duration,
    summary.errors.connect + summary.errors.read + summary.errors.write +
    summary.errors.status + summary.errors.timeout,
    summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
