/* test_job_reasoning.c - a job reply's reasoning set apart before its
 * answer is read (src/jobs/job_reasoning.c): Qwen3's <think> block as
 * vLLM's qwen3 parser splits a whole reply, gpt-oss's harmony channels,
 * and replies in neither form left as they are. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "backends/text/reasoning_format.h"
#include "src/jobs/jobs_internal.h"

typedef struct split {
    char *text, *reasoning;
    size_t len;
    int rc;
} split;

static split run(const char *format, const char *reply)
{
    split s = {.text = strdup(reply), .len = strlen(reply)};
    cr_assert(s.text);
    s.rc = pl_job_reply_split(pl_reasoning_format_find(format), &s.text, &s.len, &s.reasoning);
    cr_assert_eq(strlen(s.text), s.len);
    return s;
}

static void done(split *s)
{
    free(s->text);
    free(s->reasoning);
}

Test(job_reasoning, think_block_is_not_the_answer)
{
    split s = run("qwen3", "<think>Maybe Answer: A.</think>\n\nAnswer: C");
    cr_assert_eq(s.rc, 0);
    cr_assert_str_eq(s.reasoning, "Maybe Answer: A.");
    cr_assert_str_eq(s.text, "\n\nAnswer: C");
    done(&s);
}

Test(job_reasoning, qwen3_without_reasoning_or_unclosed_is_all_text)
{
    split s = run("qwen3", "Answer: B");
    cr_assert_eq(s.rc, 0);
    cr_assert_null(s.reasoning);
    cr_assert_str_eq(s.text, "Answer: B");
    done(&s);
    s = run("qwen3", "<think>still thinking, Answer: A");  /* vLLM: whole reply content */
    cr_assert_null(s.reasoning);
    cr_assert_str_eq(s.text, "<think>still thinking, Answer: A");
    done(&s);
}

Test(job_reasoning, harmony_final_channel_is_the_text)
{
    split s = run("harmony", "<|channel|>analysis<|message|>Answer: A?<|end|>"
                             "<|start|>assistant<|channel|>final<|message|>Answer: C");
    cr_assert_eq(s.rc, 0);
    cr_assert_str_eq(s.reasoning, "Answer: A?");
    cr_assert_str_eq(s.text, "Answer: C");
    done(&s);
    s = run("harmony", "<|channel|>final<|message|>Answer: B<|return|>");
    cr_assert_null(s.reasoning);
    cr_assert_str_eq(s.text, "Answer: B");
    done(&s);
}

Test(job_reasoning, harmony_long_reply_across_chunks)
{
    size_t n = 5000;
    char *reply = malloc(n + 128), *p = reply;
    cr_assert(reply);
    p += sprintf(p, "<|channel|>analysis<|message|>");
    memset(p, 'r', n / 2);
    p += n / 2;
    p += sprintf(p, "<|end|><|start|>assistant<|channel|>final<|message|>");
    memset(p, 'c', n / 2);
    p[n / 2] = '\0';
    split s = run("harmony", reply);
    cr_assert_eq(strlen(s.reasoning), n / 2);
    cr_assert_eq(s.len, n / 2);
    cr_assert_eq(strspn(s.text, "c"), n / 2);
    done(&s);
    free(reply);
}

Test(job_reasoning, other_formats_and_plain_models_unchanged)
{
    split s = run(NULL, "<think>x</think> Answer: A");
    cr_assert_null(s.reasoning);
    cr_assert_str_eq(s.text, "<think>x</think> Answer: A");
    done(&s);
    s = run("harmony", "plain text, Answer: A");  /* a model ignoring the format */
    cr_assert_null(s.reasoning);
    cr_assert_str_eq(s.text, "plain text, Answer: A");
    done(&s);
}
