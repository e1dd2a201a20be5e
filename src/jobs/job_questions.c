/* job_questions.c - the job schema's questions (inline or a JSONL file) and
 * answer validation: the extraction regex (PCRE2) and choice matching. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "src/jobs/job_spec_internal.h"

/* The default extraction: the last "Answer: X" (also "answer is (X)",
 * "**Answer:** X"), X a single letter not followed by a word character. */
static const char default_regex[] =
    "(?i)\\banswer\\b\\s*(?:is\\s*)?[:\\-]?\\s*\\**\\s*\\(?([A-Z])\\)?(?![A-Za-z0-9])";

/* ---- validation ---- */

static bool compile_regex(spec_ctx *c, const char *path)
{
    pl_job_spec *s = c->spec;
    int ec;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)s->extract_regex, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF, &ec, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        spec_problem(c, path, NULL, "invalid regex at offset %zu: %s", (size_t)off,
                     (const char *)msg);
        return false;
    }
    s->re_ = re;
    s->md_ = pcre2_match_data_create_from_pattern(re, NULL);
    return s->md_ != NULL;
}

void spec_parse_validation(spec_ctx *c, json_t *root)
{
    pl_job_spec *s = c->spec;
    static const char *const keys[] = {"enabled", "extract_regex", "mode", NULL};
    json_t *v = json_object_get(root, "validation");
    s->validation = true;
    const char *rx = default_regex;
    if (json_is_boolean(v)) {
        s->validation = json_is_true(v);
    } else if (json_is_object(v)) {
        json_t *en = json_object_get(v, "enabled");
        if (en && !json_is_boolean(en))
            spec_problem(c, "validation", "enabled", "must be true or false");
        else if (en)
            s->validation = json_is_true(en);
        json_t *r = json_object_get(v, "extract_regex");
        if (r && !json_is_string(r))
            spec_problem(c, "validation", "extract_regex", "must be a string");
        else if (r)
            rx = json_string_value(r);
        json_t *mode = json_object_get(v, "mode");
        const char *ms = json_string_value(mode);
        if (mode && (!ms || (strcmp(ms, "reprompt") && strcmp(ms, "constrained"))))
            spec_problem(c, "validation", "mode", "must be reprompt or constrained");
        else if (ms)
            s->constrained = !strcmp(ms, "constrained");
        spec_unknown_keys(c, "validation", v, keys);
    } else if (v) {
        spec_problem(c, "", "validation", "must be true, false or a mapping");
    }
    s->extract_regex = strdup(rx);
    compile_regex(c, rx == default_regex ? "validation" : "validation.extract_regex");
}

char *pl_job_answer_regex(int n_choices)
{
    char *re = malloc(96);
    if (re)
        snprintf(re, 96, "(?:[ -~]{1,%d}\\n)?Answer: [A-%c]", PL_JOB_REASONING_CHARS,
                 pl_job_choice_label(n_choices > 0 ? n_choices - 1 : 0));
    return re;
}

void spec_free_regex(pl_job_spec *s)
{
    pcre2_match_data_free(s->md_);
    pcre2_code_free(s->re_);
    s->md_ = s->re_ = NULL;
}

static int match_choice(const pl_job_question *q, const char *t, size_t n)
{
    while (n && (isspace((unsigned char)*t) || strchr("(*[\"'", *t)))
        t++, n--;
    while (n && (isspace((unsigned char)t[n - 1]) || strchr(")*].:,\"'", t[n - 1])))
        n--;
    if (n == 1 && isalpha((unsigned char)*t)) {
        int i = toupper((unsigned char)*t) - 'A';
        if (i < q->n_choices)
            return i;
    }
    for (int i = 0; i < q->n_choices; i++)
        if (strlen(q->choices[i]) == n && !strncasecmp(q->choices[i], t, n))
            return i;
    return -1;
}

/* The default extraction also accepts a reply that is nothing but one
 * choice: "B", "(B)", "B) Paris", "Paris" (small models often answer so). */
static int bare_choice(const pl_job_question *q, const char *t, size_t n)
{
    while (n && isspace((unsigned char)*t))
        t++, n--;
    while (n && isspace((unsigned char)t[n - 1]))
        n--;
    if (n == 0 || memchr(t, '\n', n))
        return -1;
    int i = match_choice(q, t, n);
    if (i >= 0)
        return i;
    size_t k = *t == '(' ? 1 : 0;
    if (n < k + 2 || !isalpha((unsigned char)t[k]) || !strchr(").:", t[k + 1]))
        return -1;
    i = toupper((unsigned char)t[k]) - 'A';
    if (i >= q->n_choices)
        return -1;
    size_t rest = k + 2;
    while (rest < n && isspace((unsigned char)t[rest]))
        rest++;
    if (rest == n || (n - rest == strlen(q->choices[i]) &&
                      !strncasecmp(t + rest, q->choices[i], n - rest)))
        return i;
    return -1;
}

int pl_job_spec_extract(pl_job_spec *s, const pl_job_question *q,
                        const char *text, size_t len)
{
    if (!s->re_ || !text)
        return -1;
    pcre2_match_data *md = s->md_;
    PCRE2_SIZE start = 0, ms = 0, me = 0;
    bool found = false;
    while (start <= len) {
        int rc = pcre2_match(s->re_, (PCRE2_SPTR)text, len, start, 0, md, NULL);
        if (rc < 0)
            break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        int g = rc > 1 && ov[2] != PCRE2_UNSET ? 1 : 0;
        ms = ov[2 * g];
        me = ov[2 * g + 1];
        found = true;
        start = ov[1] > ov[0] ? ov[1] : ov[0] + 1;
    }
    if (found)
        return match_choice(q, text + ms, me - ms);
    return strcmp(s->extract_regex, default_regex) == 0 ? bare_choice(q, text, len) : -1;
}

/* ---- questions ---- */

static void parse_answer(spec_ctx *c, const char *base, json_t *a, pl_job_question *q)
{
    q->answer = -1;
    if (!a || json_is_null(a))
        return;
    if (json_is_integer(a) && json_integer_value(a) >= 0 &&
        json_integer_value(a) < q->n_choices)
        q->answer = (int)json_integer_value(a);
    else if (json_is_string(a))
        q->answer = match_choice(q, json_string_value(a), strlen(json_string_value(a)));
    if (q->answer < 0)
        spec_problem(c, base, "answer", "must be one of the choices (a letter, the text, or an index)");
}

static void parse_choices(spec_ctx *c, const char *base, json_t *ch, pl_job_question *q)
{
    if (!json_is_array(ch) || json_array_size(ch) < 2 ||
        json_array_size(ch) > PL_JOB_MAX_CHOICES) {
        spec_problem(c, base, "choices", "must be a list of 2..%d strings", PL_JOB_MAX_CHOICES);
        return;
    }
    q->choices = calloc(json_array_size(ch), sizeof *q->choices);
    size_t i;
    json_t *x;
    json_array_foreach(ch, i, x) {
        /* YAML reads `2` or `1.5` as numbers: take them as their text. */
        if (json_is_integer(x)) {
            char t[32];
            snprintf(t, sizeof t, "%lld", (long long)json_integer_value(x));
            q->choices[q->n_choices++] = strdup(t);
        } else if (json_is_real(x)) {
            char t[32];
            snprintf(t, sizeof t, "%g", json_real_value(x));
            q->choices[q->n_choices++] = strdup(t);
        } else if (!json_is_string(x)) {
            spec_problem(c, base, "choices", "choice %zu must be a string", i);
        } else {
            q->choices[q->n_choices++] = strdup(json_string_value(x));
        }
    }
}

/* Keys other than the known ones are kept in metadata (dataset fields). */
static void parse_metadata(spec_ctx *c, const char *base, json_t *o, pl_job_question *q)
{
    json_t *md = json_object_get(o, "metadata");
    if (md && !json_is_object(md))
        spec_problem(c, base, "metadata", "must be a mapping");
    q->metadata = json_is_object(md) ? json_deep_copy(md) : json_object();
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        if (strcmp(k, "id") && strcmp(k, "question_id") && strcmp(k, "text") &&
            strcmp(k, "question") && strcmp(k, "choices") && strcmp(k, "answer") &&
            strcmp(k, "metadata"))
            json_object_set(q->metadata, k, v);
    }
    if (json_object_size(q->metadata) == 0) {   /* the usual case: keep nothing */
        json_decref(q->metadata);
        q->metadata = NULL;
    }
}

static void parse_question(spec_ctx *c, const char *base, json_t *o, int idx,
                           pl_job_question *q)
{
    q->answer = -1;
    if (!json_is_object(o)) {
        spec_problem(c, base, NULL, "must be a mapping with `text` and `choices`");
        return;
    }
    const char *k = "id";
    json_t *id = spec_get2(c, o, base, "id", "question_id", &k);
    char def[32];
    snprintf(def, sizeof def, "q%04d", idx);
    if (json_is_integer(id))
        snprintf(def, sizeof def, "%lld", (long long)json_integer_value(id));
    q->id = id && !json_is_integer(id) ? spec_string(c, base, k, id, false) : strdup(def);
    if (q->id && !pl_job_safe_name(q->id))
        spec_problem(c, base, k, "must be 1-128 characters of [A-Za-z0-9_.-], not starting with '.'");
    json_t *t = spec_get2(c, o, base, "text", "question", &k);
    q->text = spec_string(c, base, k ? k : "text", t, true);
    json_t *ch = json_object_get(o, "choices");
    if (ch)
        parse_choices(c, base, ch, q);
    else if (c->spec->validation)
        spec_problem(c, base, "choices", "missing: validation is on, so answers must be one of the choices");
    parse_answer(c, base, json_object_get(o, "answer"), q);
    parse_metadata(c, base, o, q);
}

static void add_question(spec_ctx *c, const char *base, json_t *o, int *cap)
{
    pl_job_spec *s = c->spec;
    if (s->n_questions == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        pl_job_question *v = realloc(s->questions, (size_t)*cap * sizeof *v);
        if (!v)
            return;
        s->questions = v;
    }
    pl_job_question *q = &s->questions[s->n_questions];
    memset(q, 0, sizeof *q);
    parse_question(c, base, o, s->n_questions, q);
    s->n_questions++;
}

static void read_questions_file(spec_ctx *c, json_t *f, int *cap)
{
    if (!json_is_string(f)) {
        spec_problem(c, "", "questions_file", "must be a path");
        return;
    }
    if (!c->src->base_dir) {
        spec_problem(c, "", "questions_file", "not accepted over HTTP: give `questions` inline");
        return;
    }
    const char *name = json_string_value(f);
    char path[4096];
    if (name[0] == '/')
        snprintf(path, sizeof path, "%s", name);
    else
        snprintf(path, sizeof path, "%s/%s", c->src->base_dir, name);
    FILE *fp = fopen(path, "r");
    if (!fp) {
        spec_problem(c, "", "questions_file", "cannot open %s", path);
        return;
    }
    char *line = NULL;
    size_t lcap = 0;
    int lineno = 0;
    while (getline(&line, &lcap, fp) >= 0) {
        lineno++;
        if (strspn(line, " \t\r\n") == strlen(line))
            continue;
        char base[160];
        snprintf(base, sizeof base, "%s:%d", name, lineno);
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        if (!o)
            spec_problem(c, base, NULL, "invalid JSON: %s", je.text);
        else
            add_question(c, base, o, cap);
        json_decref(o);
    }
    free(line);
    fclose(fp);
}

static void check_duplicate_ids(spec_ctx *c)
{
    pl_job_spec *s = c->spec;
    json_t *seen = json_object();
    for (int i = 0; i < s->n_questions; i++) {
        const char *id = s->questions[i].id;
        if (!id)
            continue;
        json_t *prev = json_object_get(seen, id);
        char p[64];
        snprintf(p, sizeof p, "questions[%d]", i);
        if (prev)
            spec_problem(c, p, "id", "duplicate question id '%s' (also question %lld)", id,
                         (long long)json_integer_value(prev));
        else
            json_object_set_new(seen, id, json_integer(i));
    }
    json_decref(seen);
}

void spec_parse_questions(spec_ctx *c, json_t *root)
{
    pl_job_spec *s = c->spec;
    json_t *qs = json_object_get(root, "questions");
    json_t *qf = json_object_get(root, "questions_file");
    int cap = 0;
    if (qs && qf)
        spec_problem(c, "", "questions", "give `questions` or `questions_file`, not both");
    if (qs && !json_is_array(qs)) {
        spec_problem(c, "", "questions", "must be a list of questions");
    } else if (qs) {
        size_t i;
        json_t *o;
        json_array_foreach(qs, i, o) {
            char base[64];
            snprintf(base, sizeof base, "questions[%zu]", i);
            add_question(c, base, o, &cap);
        }
    }
    if (qf)
        read_questions_file(c, qf, &cap);
    if (!qs && !qf)
        spec_problem(c, "", "questions", "missing required key (or questions_file)");
    else if (s->n_questions == 0)
        spec_problem(c, "", qs ? "questions" : "questions_file", "no questions");
    check_duplicate_ids(c);
}
