/* remote_constrain.c - a constraint in the fields each upstream kind
 * enforces, and refusals where it cannot.
 *
 *   kind      regex / choice                  JSON schema / json_object
 *   vllm      structured_outputs {regex|choice|json}, or guided_* before 0.10.2
 *   sglang    regex (choice as a regex)       response_format (chat), json_schema
 *   llamacpp  grammar (GBNF, regex_gbnf.c)    json_schema
 *   ollama    refused: no field for it        response_format (Ollama's format)
 *   openai, parley: guided_* / response_format, as parley itself takes them
 *
 * A job's request gets the kind's field. An OpenAI request keeps the
 * client's body as written; parley adds the kind's field only when the
 * upstream would not understand the field the client used (a guided_regex
 * for a vLLM that takes structured_outputs only, for SGLang or llama-server).
 * A family of constraints a replica was probed not to enforce, or that its
 * kind cannot express, is refused with a 400 naming the upstream, never
 * sent to be dropped. tool_choice "required" or a named function: vLLM,
 * SGLang, OpenAI and parley enforce it; llama-server takes "required" only
 * (a named function becomes "required" over that one tool); Ollama has no
 * tool_choice, so it is refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/constrain/constraint.h"
#include "backends/constrain/regex.h"
#include "backends/remote/remote_internal.h"

/* Where a client put its constraint. */
enum {
    CL_RF = 1,                   /* response_format json_object / json_schema */
    CL_SO = 2,                   /* structured_outputs {choice|regex|json} */
    CL_GUIDED = 4,               /* guided_choice / guided_regex / guided_json */
    CL_NATIVE = 8,               /* the upstream's own: grammar, json_schema, regex, ebnf */
};

static const char *const state_names[] = {"unknown", "enforced", "ignored", "refused",
                                          "unsupported"};

const char *pl_remote_cstate_name(remote_cstate s)
{
    return (unsigned)s < sizeof state_names / sizeof *state_names ? state_names[s] : "?";
}

static remote_cfamily family_of(pl_constraint_kind k)
{
    return k == PL_CONSTRAINT_REGEX || k == PL_CONSTRAINT_CHOICE ? REMOTE_CF_REGEX
                                                                 : REMOTE_CF_JSON;
}

static bool bad_state(remote_cstate s)
{
    return s == REMOTE_C_IGNORED || s == REMOTE_C_REFUSED || s == REMOTE_C_UNSUPPORTED;
}

remote_target pl_remote_target_of(remote_backend *rb)
{
    remote_target t = {.kind = rb->o.kind, .model = rb->upstream_model};
    for (int i = 0; i < rb->n_reps; i++)
        if (rb->reps[i].caps.style_known) {
            t.guided = rb->reps[i].caps.guided;
            t.version = rb->reps[i].caps.version;
            break;
        }
    return t;
}

/* ---- what the client wrote ---- */

static int client_fields(const json_t *c, bool chat, pl_remote_kind kind)
{
    int f = 0;
    const char *rft = json_string_value(json_object_get(json_object_get(c, "response_format"),
                                                        "type"));
    if (rft && (!strcmp(rft, "json_object") || !strcmp(rft, "json_schema")))
        f |= CL_RF;
    if (json_object_get(c, "structured_outputs"))
        f |= CL_SO;
    if (json_object_get(c, "guided_choice") || json_object_get(c, "guided_regex") ||
        json_object_get(c, "guided_json"))
        f |= CL_GUIDED;
    if ((kind == PL_REMOTE_LLAMACPP &&
         (json_object_get(c, "grammar") || json_object_get(c, "json_schema"))) ||
        (kind == PL_REMOTE_SGLANG && (json_object_get(c, "regex") || json_object_get(c, "ebnf") ||
                                      (!chat && json_object_get(c, "json_schema")))))
        f |= CL_NATIVE;
    return f;
}

/* Whether t's upstream enforces the constraint in the client's fields f. */
static bool understood(const remote_target *t, int f, bool chat)
{
    switch (t->kind) {
    case PL_REMOTE_VLLM:
        return (f & CL_RF) || ((f & CL_SO) && !t->guided) ||
               ((f & CL_GUIDED) && (t->guided || (t->version && t->version < 1200)));
    case PL_REMOTE_SGLANG:
        return (f & (CL_RF | CL_NATIVE)) != 0;
    case PL_REMOTE_LLAMACPP:
        return (f & CL_NATIVE) || ((f & CL_RF) && chat);
    case PL_REMOTE_OLLAMA:
        return (f & CL_RF) && chat;
    default:                     /* openai, parley: as the client wrote it */
        return true;
    }
}

/* ---- the kinds' fields ---- */

static json_t *text_json(const pl_sampling *s)
{
    return s->constraint_text ? json_loads(s->constraint_text, JSON_DECODE_ANY, NULL) : NULL;
}

static json_t *rf_schema(json_t *schema)
{
    return json_pack("{s:s, s:{s:s, s:o}}", "type", "json_schema", "json_schema", "name",
                     "constraint", "schema", schema);
}

/* response_format for JSON, guided_* for the rest: what parley takes. */
static int put_openai(json_t *o, const pl_sampling *s, json_t *v)
{
    switch (s->constraint) {
    case PL_CONSTRAINT_JSON_OBJECT:
        return json_object_set_new(o, "response_format", json_pack("{s:s}", "type", "json_object"));
    case PL_CONSTRAINT_JSON_SCHEMA:
        return json_object_set_new(o, "response_format", rf_schema(json_incref(v)));
    case PL_CONSTRAINT_CHOICE:
        return json_object_set(o, "guided_choice", v);
    default:
        return json_object_set_new(o, "guided_regex", json_string(s->constraint_text));
    }
}

static int put_vllm(json_t *o, const pl_sampling *s, json_t *v, const remote_target *t)
{
    static const char *const so_key[] = {[PL_CONSTRAINT_JSON_SCHEMA] = "json",
                                         [PL_CONSTRAINT_REGEX] = "regex",
                                         [PL_CONSTRAINT_CHOICE] = "choice"};
    if (s->constraint == PL_CONSTRAINT_JSON_OBJECT)
        return put_openai(o, s, v);       /* response_format, in every version */
    if (t->guided && s->constraint == PL_CONSTRAINT_JSON_SCHEMA)
        return json_object_set(o, "guided_json", v);
    if (t->guided)
        return put_openai(o, s, v);       /* guided_regex, guided_choice */
    json_t *val = s->constraint == PL_CONSTRAINT_REGEX ? json_string(s->constraint_text)
                                                        : json_incref(v);
    return json_object_set_new(o, "structured_outputs",
                               json_pack("{s:o}", so_key[s->constraint], val));
}

/* A regex or choice constraint as a regex, for kinds that take one (JSON
 * goes as a schema, so the whitespace setting plays no part here). */
static char *regex_of(const pl_sampling *s, pl_err *err)
{
    char *re = pl_constraint_regex(s->constraint, s->constraint_text, PL_JSON_WS_COMPACT, err);
    if (!re && err->status == 400)
        snprintf(err->param, sizeof err->param, "%s", pl_constraint_name(s->constraint));
    return re;
}

static int put_sglang(json_t *o, const pl_sampling *s, json_t *v, bool chat, pl_err *err)
{
    if (s->constraint == PL_CONSTRAINT_JSON_OBJECT)
        return chat ? put_openai(o, s, v)
                    : json_object_set_new(o, "json_schema", json_string("{\"type\":\"object\"}"));
    if (s->constraint == PL_CONSTRAINT_JSON_SCHEMA)
        return chat ? put_openai(o, s, v)
                    : json_object_set_new(o, "json_schema", json_string(s->constraint_text));
    char *re = regex_of(s, err);
    if (!re)
        return -1;
    int rc = json_object_set_new(o, "regex", json_string(re));
    free(re);
    return rc;
}

static int put_llamacpp(json_t *o, const pl_sampling *s, json_t *v, pl_err *err)
{
    if (s->constraint == PL_CONSTRAINT_JSON_OBJECT)
        return json_object_set_new(o, "json_schema", json_pack("{s:s}", "type", "object"));
    if (s->constraint == PL_CONSTRAINT_JSON_SCHEMA)
        return json_object_set(o, "json_schema", v);
    char msg[300], *re = regex_of(s, err);
    if (!re)
        return -1;
    char *g = pl_regex_gbnf(re, strlen(re), msg, sizeof msg);
    free(re);
    if (!g)
        return pl_err_set(err, 400, "invalid_request_error", pl_constraint_name(s->constraint),
                          "invalid_constraint", "cannot write the %s constraint as a "
                          "llama.cpp grammar: %s", pl_constraint_name(s->constraint), msg);
    int rc = json_object_set_new(o, "grammar", json_string(g));
    free(g);
    return rc;
}

/* The kind's own field for s's constraint. */
static int put_native(json_t *o, const pl_sampling *s, const remote_target *t, bool chat,
                      pl_err *err)
{
    json_t *v = text_json(s);
    int rc;
    if (s->constraint != PL_CONSTRAINT_JSON_OBJECT && s->constraint != PL_CONSTRAINT_REGEX && !v)
        return pl_err_set(err, 400, "invalid_request_error", NULL, "invalid_constraint",
                          "the %s constraint is not valid JSON", pl_constraint_name(s->constraint));
    switch (t->kind) {
    case PL_REMOTE_VLLM:
        rc = put_vllm(o, s, v, t);
        break;
    case PL_REMOTE_SGLANG:
        rc = put_sglang(o, s, v, chat, err);
        break;
    case PL_REMOTE_LLAMACPP:
        rc = put_llamacpp(o, s, v, err);
        break;
    default:                     /* ollama (JSON only, checked before), openai, parley */
        rc = put_openai(o, s, v);
        break;
    }
    json_decref(v);
    if (rc < 0 && !err->status)
        pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    return rc < 0 ? -1 : 0;
}

/* llama-server reads a json_object's schema from response_format.schema and
 * takes any JSON value without one: give it {"type": "object"} (a copy; the
 * client's body is shared). */
static int object_schema_for_llamacpp(json_t *o)
{
    json_t *rf = json_object_get(o, "response_format");
    const char *type = json_string_value(json_object_get(rf, "type"));
    if (!type || strcmp(type, "json_object") || json_object_get(rf, "schema"))
        return 0;
    json_t *c = json_deep_copy(rf);
    if (!c || json_object_set_new(c, "schema", json_pack("{s:s}", "type", "object")) < 0 ||
        json_object_set_new(o, "response_format", c) < 0)
        return -1;
    return 0;
}

/* tool_choice "required" or {"type": "function", ...} with tools. */
static bool forced_tools(const json_t *c, const char **name)
{
    json_t *tc = json_object_get(c, "tool_choice");
    json_t *tools = json_object_get(c, "tools");
    *name = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
    if (!json_is_array(tools) || !json_array_size(tools))
        return false;
    return json_is_object(tc) ? *name != NULL
                               : json_is_string(tc) && !strcmp(json_string_value(tc), "required");
}

/* llama-server takes "required" only: a named function is "required" over
 * a tools list holding that one function. */
static int put_named_tool_llamacpp(json_t *o, const char *name, pl_err *err)
{
    json_t *keep = json_array(), *tl;
    size_t i;
    json_array_foreach(json_object_get(o, "tools"), i, tl) {
        const char *n = json_string_value(json_object_get(json_object_get(tl, "function"),
                                                          "name"));
        if (n && !strcmp(n, name))
            json_array_append(keep, tl);
    }
    if (!json_array_size(keep)) {
        json_decref(keep);
        return pl_err_set(err, 400, "invalid_request_error", "tool_choice", "invalid_value",
                          "tool_choice names the function '%s', which is not in tools", name);
    }
    json_object_set_new(o, "tools", keep);
    json_object_set_new(o, "tool_choice", json_string("required"));
    return 0;
}

int pl_remote_put_constraint(json_t *o, const pl_gen_request *req, const remote_target *t,
                             pl_err *err)
{
    const pl_sampling *s = &req->sampling;
    const json_t *c = req->oai_body;
    bool chat = req->messages != NULL;
    const char *name;
    err->status = 0;
    if (c && t->kind == PL_REMOTE_LLAMACPP && forced_tools(c, &name) && name &&
        put_named_tool_llamacpp(o, name, err) < 0)
        return -1;
    if (s->constraint == PL_CONSTRAINT_NONE)
        return 0;
    if (c && understood(t, client_fields(c, chat, t->kind), chat))
        return t->kind == PL_REMOTE_LLAMACPP && s->constraint == PL_CONSTRAINT_JSON_OBJECT &&
               object_schema_for_llamacpp(o) < 0
                   ? pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory")
                   : 0;
    return put_native(o, s, t, chat, err);
}

/* ---- refusals ---- */

/* Why kind cannot express family at all, or NULL. */
static const char *inexpressible(pl_remote_kind kind, remote_cfamily f, bool chat)
{
    if (kind != PL_REMOTE_OLLAMA)
        return NULL;
    if (f == REMOTE_CF_REGEX)
        return "Ollama takes a JSON schema only (its format), no regex or choice list";
    return chat ? NULL : "Ollama's completions endpoint takes no JSON schema (chat does)";
}

/* The client's field that holds its constraint, for messages. */
static const char *client_param(const json_t *c)
{
    static const char *const keys[] = {"response_format", "structured_outputs", "guided_regex",
                                       "guided_choice", "guided_json"};
    for (size_t i = 0; c && i < sizeof keys / sizeof *keys; i++)
        if (json_object_get(c, keys[i]))
            return keys[i];
    return NULL;
}

static int refuse(remote_backend *rb, const remote_replica *rep, pl_constraint_kind k,
                  const char *param, const char *why, pl_err *err)
{
    return pl_err_set(err, 400, "invalid_request_error", param, "constraint_not_enforced",
                      "model '%s': the upstream %s (%s) does not enforce a %s constraint%s%s%s: "
                      "%s", rb->base.model, rep->shown_url, pl_remote_kind_name(rep->kind),
                      pl_constraint_name(k), param ? " (" : "", param ? param : "",
                      param ? ")" : "", why);
}

static int check_tools(remote_backend *rb, const json_t *c, pl_err *err)
{
    const char *name;
    if (!c || rb->o.kind != PL_REMOTE_OLLAMA || !forced_tools(c, &name))
        return 0;
    return pl_err_set(err, 400, "invalid_request_error", "tool_choice", "constraint_not_enforced",
                      "model '%s': the upstream %s (ollama) does not enforce tool_choice %s%s%s: "
                      "Ollama's OpenAI API has no tool_choice; send \"auto\"", rb->base.model,
                      rb->n_reps ? rb->reps[0].shown_url : "", name ? "naming '" : "\"required\"",
                      name ? name : "", name ? "'" : "");
}

int pl_remote_check_constraint(remote_backend *rb, pl_constraint_kind k, bool chat,
                               const json_t *client, const char *param, pl_err *err)
{
    if (check_tools(rb, client, err) < 0)
        return -1;
    if (k == PL_CONSTRAINT_NONE)
        return 0;
    remote_cfamily f = family_of(k);
    if (!param)
        param = client_param(client);
    for (int i = 0; i < rb->n_reps; i++) {
        const remote_replica *rep = &rb->reps[i];
        const char *why = inexpressible(rep->kind != PL_REMOTE_AUTO ? rep->kind : rb->o.kind, f,
                                        chat);
        if (why)
            return refuse(rb, rep, k, param, why, err);
        if (bad_state(rep->caps.state[f]))
            return refuse(rb, rep, k, param, rep->caps.why[f], err);
    }
    return 0;
}

static const char *fields_of(const remote_replica *rep)
{
    switch (rep->kind) {
    case PL_REMOTE_VLLM:
        return rep->caps.guided ? "guided_*, response_format" : "structured_outputs";
    case PL_REMOTE_SGLANG:
        return "regex, response_format";
    case PL_REMOTE_LLAMACPP:
        return "grammar (GBNF), json_schema";
    case PL_REMOTE_OLLAMA:
        return "response_format";
    default:
        return "guided_*, response_format";
    }
}

json_t *pl_remote_caps_json(const remote_replica *rep)
{
    const remote_caps *c = &rep->caps;
    remote_cstate st[REMOTE_CF_N];
    json_t *notes = json_array();
    for (int f = 0; f < REMOTE_CF_N; f++) {
        const char *why = inexpressible(rep->kind, (remote_cfamily)f, true);
        st[f] = why ? REMOTE_C_UNSUPPORTED : c->state[f];
        why = why ? why : c->why[f];
        if (why[0])
            json_array_append_new(notes, json_string(why));
    }
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:o}", "regex",
                     pl_remote_cstate_name(st[REMOTE_CF_REGEX]), "choice",
                     pl_remote_cstate_name(st[REMOTE_CF_REGEX]), "json_schema",
                     pl_remote_cstate_name(st[REMOTE_CF_JSON]), "json_object",
                     pl_remote_cstate_name(st[REMOTE_CF_JSON]), "tool_choice",
                     rep->kind == PL_REMOTE_OLLAMA ? "unsupported" : "enforced", "fields",
                     fields_of(rep), "notes", notes);
}
