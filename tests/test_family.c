/* test_family.c - a family registered from tests/ alone (family_testfam.c,
 * issue 46) works end to end: the registry finds it by its GGUF and HF
 * names and lists it; its fixture (tiny_testfam.gguf, tiny_qwen2's weights
 * under its name) loads as it and gives bit for bit tiny_qwen2's logits on
 * the CPU forward pass (qwen2's own are checked against llama.cpp in
 * test_cpu_forward); opened as an engine it renders its chat style (ChatML:
 * its file has no template), its tool calls parse in that style's format,
 * and greedy decoding on the CPU runner gives tiny_qwen2's tokens. */
#include <criterion/criterion.h>
#include <event2/event.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/oai_params.h"
#include "api/oai_tools.h"
#include "backends/text/tool_format.h"
#include "backends/engine/families/family.h"
#include "backends/engine_open.h"
#include "src/options.h"
#include "tests/helpers/backend_sink.h"
#include "tests/helpers/families.h"
#include "tests/helpers/forced.h"

extern const pl_family pl_family_testfam;

static void register_(void)
{
    if (!pl_family_find("parley-testfam", 14))
        cr_assert_eq(pl_family_register(&pl_family_testfam), 0);
}

TestSuite(family, .init = register_);

Test(family, registry_finds_and_lists_it)
{
    cr_expect_eq(pl_family_find("parley-testfam", 14), &pl_family_testfam);
    cr_expect_eq(pl_family_find("parley-testfamily", 14), &pl_family_testfam, "len bytes");
    cr_expect_null(pl_family_find("parley-testfamily", 17));
    cr_expect_eq(pl_family_find_hf("ParleyTestFamForCausalLM"), &pl_family_testfam.hf[0]);
    cr_expect_eq(pl_family_register(&pl_family_testfam), -1, "a name is registered once");
    cr_expect_str_eq(pl_family_names(false), "llama (with or without experts), qwen2, qwen3, "
                     "qwen3moe, qwen35 (Qwen3.5 Gated DeltaNet hybrids), qwen35moe (Qwen3.5 "
                     "Gated DeltaNet hybrids with experts), gemma2, gemma3, gemma4, "
                     "gpt-oss, smollm3, mistral3, bert (an encoder: embeddings), "
                     "parley-testfam (a test's)");
    cr_expect(strstr(pl_family_names(true), "Gemma3ForConditionalGeneration (its text), "
                     "Gemma4ForCausalLM, Gemma4ForConditionalGeneration (its text), "
                     "GptOssForCausalLM, "), "%s", pl_family_names(true));
    cr_expect(strstr(pl_family_names(true), "Qwen3_5ForCausalLM, "
                     "Qwen3_5ForConditionalGeneration (its text)"), "%s", pl_family_names(true));
    cr_expect(strstr(pl_family_names(true), "BertModel, ParleyTestFamForCausalLM"), "%s",
              pl_family_names(true));
    pl_chat_style s;
    cr_assert_eq(pl_family_chat_style(&pl_family_testfam, &s), 0);
    cr_expect(s.tmpl == PL_CHAT_TMPL_CHATML && s.flags == PL_CHAT_F_QWEN_TOOLS);
    cr_expect_eq(pl_family_chat_style(&pl_family_qwen2, &s), -1, "qwen2 files carry theirs");
    cr_expect(pl_family_runs(&pl_family_testfam, PL_FAMILY_RUNS_CPU) &&
              !pl_family_runs(&pl_family_testfam, PL_FAMILY_RUNS_CUDA));
}

Test(family, loads_and_runs_as_its_formula)
{
    pl_test_loaded t = pl_test_load_fixture("tiny_testfam.gguf", NULL);
    pl_test_loaded q = pl_test_load_fixture("tiny_qwen2.gguf", NULL);
    cr_assert_eq(t.m->family, &pl_family_testfam);
    cr_expect_str_eq(t.m->arch_name, "parley-testfam");
    cr_expect(t.m->n_layer == q.m->n_layer && t.m->n_embd == q.m->n_embd &&
              t.m->n_vocab == q.m->n_vocab && t.m->layers[0].bq && t.m->rope_neox);
    enum { N = 6 };
    const int32_t tok[N] = {72, 101, 108, 108, 111, 33}, pos[N] = {0, 1, 2, 3, 4, 5}, seq[N] = {0};
    size_t nv = (size_t)t.m->n_vocab;
    float *lt = malloc(N * nv * sizeof *lt), *lq = malloc(N * nv * sizeof *lq);
    pl_test_fwd wt = pl_test_fwd_new(t.m, 1, 64, 16, N, 1 << 30, 0);
    pl_test_fwd wq = pl_test_fwd_new(q.m, 1, 64, 16, N, 1 << 30, 0);
    pl_test_fwd_run(&wt, tok, pos, seq, N, lt);
    pl_test_fwd_run(&wq, tok, pos, seq, N, lq);
    for (size_t i = 0; i < N * nv; i++)
        cr_assert(isfinite(lt[i]), "logit %zu", i);
    cr_expect_eq(memcmp(lt, lq, N * nv * sizeof *lt), 0, "tiny_qwen2's logits, bit for bit");
    pl_test_fwd_free(&wt);
    pl_test_fwd_free(&wq);
    free(lt);
    free(lq);
    pl_test_unload(&t);
    pl_test_unload(&q);
}

static pl_backend *open_(struct event_base *base, const char *fixture, char *path, size_t n)
{
    const char *src = getenv("PARLEY_SRC");
    snprintf(path, n, "%s/tests/fixtures/%s", src ? src : ".", fixture);
    pl_opts o;
    char err[512];
    cr_assert_eq(pl_opts_init(&o, err, sizeof err), 0, "%s", err);
    o.engine.cpu.threads = 2;
    o.engine.kv_cache_mb = 16;
    pl_engine_open_opts eo = {.model_path = path, .device = "cpu", .cfg = &o.engine};
    pl_backend *b = pl_engine_open(base, &eo, err, sizeof err);
    pl_opts_free(&o);
    cr_assert_not_null(b, "%s: %s", fixture, err);
    return b;
}

static void tokenize_(pl_backend *b, const pl_gen_request *r, int32_t **ids, int *n)
{
    pl_err e;
    cr_assert_eq(b->ops->tokenize(b, r, false, ids, n, &e), 0, "%s", e.message);
}

/* Greedy text of 8 tokens after the prompt ids. */
static void greedy_(struct event_base *base, pl_backend *b, const int32_t *ids, int n,
                    pl_test_got *g)
{
    pl_gen_request r = {.prompt_tokens = ids, .n_prompt_tokens = n};
    pl_sampling_defaults(&r.sampling);
    r.sampling.temperature = 0;
    r.sampling.max_tokens = 8;
    memset(g, 0, sizeof *g);
    uint64_t id;
    pl_err e;
    cr_assert_eq(pl_backend_submit(b, &r, pl_test_got_sink(g), &id, &e), 0, "%s", e.message);
    pl_test_run_until(base, pl_test_got_done, g, 60000);
    cr_assert(g->done && !g->res.error, "%s", g->res.error ? g->err.message : "timed out");
}

Test(family, engine_renders_parses_and_generates, .timeout = 120)
{
    struct event_base *base = event_base_new();
    char pt[1024], pq[1024];
    pl_backend *bt = open_(base, "tiny_testfam.gguf", pt, sizeof pt);
    pl_backend *bq = open_(base, "tiny_qwen2.gguf", pq, sizeof pq);

    /* Its chat style, ChatML: the chat's tokens are those of its text. */
    const pl_chat_message msgs[] = {{.role = "system", .content = "Be brief."},
                                    {.role = "user", .content = "hi"}};
    pl_gen_request chat = {.messages = msgs, .n_messages = 2, .add_generation_prompt = true};
    pl_gen_request text = {.prompt = "<|im_start|>system\nBe brief.<|im_end|>\n"
                                     "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"};
    int32_t *ci, *ti;
    int cn, tn;
    tokenize_(bt, &chat, &ci, &cn);
    tokenize_(bt, &text, &ti, &tn);
    cr_expect_eq(cn, tn);
    cr_expect(cn == tn && !memcmp(ci, ti, (size_t)cn * sizeof *ci), "ChatML's rendering");

    /* Its tool calls: the style's format, read back by the API. */
    cr_assert_not_null(bt->ops->tool_format);
    cr_expect_eq(bt->ops->tool_format(bt), &pl_tool_hermes, "the hermes format");
    json_t *body = json_loads("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
                              "\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
                              "\"get_w\",\"parameters\":{\"type\":\"object\"}}}]}", 0, NULL);
    pl_oai_params p;
    pl_err e;
    cr_assert_eq(pl_oai_parse(body, true, &p, &e), 0, "%s", e.message);
    p.tool_format = bt->ops->tool_format(bt);
    const char *reply = "<tool_call>\n{\"name\": \"get_w\", \"arguments\": {\"c\": 1}}\n"
                        "</tool_call>";
    pl_oai_tool_reply tr;
    pl_oai_tools_reply(&p, reply, strlen(reply), PL_FINISH_STOP, &tr);
    cr_expect_eq(json_array_size(tr.calls), 1);
    json_t *fn = json_object_get(json_array_get(tr.calls, 0), "function");
    cr_expect_str_eq(json_string_value(json_object_get(fn, "name")), "get_w");
    cr_expect_str_eq(json_string_value(json_object_get(fn, "arguments")), "{\"c\":1}");
    cr_expect_str_eq(tr.finish, "tool_calls");
    pl_oai_tool_reply_free(&tr);
    pl_oai_params_free(&p);
    json_decref(body);

    /* The CPU runner: tiny_qwen2's greedy tokens. */
    pl_test_got gt, gq;
    greedy_(base, bt, ci, cn, &gt);
    greedy_(base, bq, ci, cn, &gq);
    cr_expect_eq(gt.res.completion_tokens, 8);
    cr_expect_eq(gt.len, gq.len);
    cr_expect(gt.len == gq.len && !memcmp(gt.text, gq.text, gt.len), "'%s' vs '%s'", gt.text,
              gq.text);
    free(ci);
    free(ti);
    pl_backend_free(bt);
    pl_backend_free(bq);
    event_base_free(base);
}
