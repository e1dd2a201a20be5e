/* chat_template.h - native chat-template rendering.
 *
 * A GGUF carries its chat template as Jinja source
 * (tokenizer.chat_template). parley does not run Jinja: it recognises the
 * template's family by distinctive markers and renders the conversation with
 * a small C renderer per family that reproduces the official template's
 * output byte for byte (checked against jinja2 in tests/test_chat_template.c,
 * fixtures from tests/fixtures/gen_chat_template_fixtures.py).
 *
 * Two levels:
 *  - pl_chat_tmpl: the family alone ("chatml", "llama3", ...), as named by
 *    --chat-template; pl_chat_tmpl_render() renders its canonical form.
 *  - pl_chat_style: a family plus the variant details read from one
 *    template's source (a default system prompt, Mistral's spacing, Gemma's
 *    BOS, ...); pl_chat_style_render() renders exactly that template.
 *
 * Messages carry role and content, and for the templates that render them
 * (Qwen3, gpt-oss's harmony) an assistant turn's reasoning and tool calls.
 * Roles other than system, user and assistant are rendered as the family's
 * template would render them (ChatML and Llama 3 print any role; Qwen 2.5
 * wraps "tool" in <tool_response>; harmony names the last call's function;
 * strict families reject what their template rejects).
 */
#ifndef PL_CHAT_TEMPLATE_H
#define PL_CHAT_TEMPLATE_H

#include <stdbool.h>

#include "backends/backend.h"

typedef enum pl_chat_tmpl {
    PL_CHAT_TMPL_CHATML = 0, /**< <|im_start|>role\n...<|im_end|>\n (Qwen, SmolLM, Hermes) */
    PL_CHAT_TMPL_LLAMA3,     /**< <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    PL_CHAT_TMPL_LLAMA2,     /**< <s>[INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] ... </s> */
    PL_CHAT_TMPL_MISTRAL,    /**< <s>[INST] ... [/INST]...</s>, strict alternation */
    PL_CHAT_TMPL_GEMMA,      /**< <start_of_turn>user|model\n...<end_of_turn>\n */
    PL_CHAT_TMPL_PHI3,       /**< <|role|>\n...<|end|>\n */
    PL_CHAT_TMPL_ZEPHYR,     /**< <|role|>\n...</s>\n */
    PL_CHAT_TMPL_HARMONY,    /**< gpt-oss: <|start|>role<|channel|>...<|message|>...<|end|> */
    PL_CHAT_TMPL_UNKNOWN,    /**< not recognised: the caller decides (error or fallback) */
} pl_chat_tmpl;

/** Variant bits of a pl_chat_style, read from the template source. */
enum {
    /** chatml: Qwen 2.5's tool branch ("tool" turns in <tool_response>,
     *  other unknown roles dropped). */
    PL_CHAT_F_QWEN_TOOLS = 1u << 0,
    /** llama3: the assistant header is added even without
     *  add_generation_prompt (the first Llama 3 release). */
    PL_CHAT_F_ALWAYS_GEN = 1u << 1,
    /** mistral: an optional leading system message is merged into the first
     *  user turn, turns are " [INST] ... [/INST]" and " answer</s>". */
    PL_CHAT_F_MISTRAL_SYSTEM = 1u << 2,
    /** mistral (legacy): a space follows each answer's EOS (v0.1). */
    PL_CHAT_F_EOS_SPACE = 1u << 3,
    /** gemma: the template starts with bos_token (gemma-1.1 and later). */
    PL_CHAT_F_BOS = 1u << 4,
    /** gemma: a leading system message becomes the first user turn's
     *  prefix as it is, and a blank line (Gemma 3). Without it (Gemma 1
     *  and 2, whose templates raise), the text is folded in trimmed, as
     *  llama.cpp's server does. */
    PL_CHAT_F_GEMMA_SYSTEM = 1u << 5,
    /** chatml: Qwen3's thinking: an assistant turn's <think>...</think> is
     *  dropped before the last user query and kept after it, and
     *  enable_thinking=false closes an empty think block after the
     *  generation prompt. */
    PL_CHAT_F_QWEN3_THINK = 1u << 6,
    /** chatml: Qwen3.5's template (chat_template_qwen35.c): trimmed
     *  texts, a think block on every assistant turn after the last user
     *  query, a generation prompt that opens the reasoning, and the
     *  qwen3_coder tool format (<function=...><parameter=...>). */
    PL_CHAT_F_QWEN35 = 1u << 7,
    /** gemma: Gemma 4's template (chat_template_gemma4.c): <|turn>ROLE
     *  turns, a system turn for the system text, the tools and <|think|>
     *  (enable_thinking), native tools (<|tool_call>call:NAME{...}) and
     *  the thought channel (<|channel>thought\n...<channel|>). What a
     *  gemma4 file without a template is rendered with:
     *  {PL_CHAT_TMPL_GEMMA, PL_CHAT_F_GEMMA4}. */
    PL_CHAT_F_GEMMA4 = 1u << 8,
};

/** Chat-template keyword arguments (vLLM's chat_template_kwargs), as the
 *  templates that read them understand them. */
typedef struct pl_chat_kwargs {
    pl_thinking enable_thinking;
    /** harmony: "low", "medium", "high"; NULL: "medium". */
    const char *reasoning_effort;
    /** harmony: the system message's first line; NULL: the template's. */
    const char *model_identity;
    /** harmony: OpenAI's tools array (borrowed), rendered as TypeScript
     *  declarations in the developer message; NULL: none. */
    json_t *tools;
    /** harmony: the system message's "Current date" (YYYY-MM-DD); NULL:
     *  today, local time, as transformers' strftime_now gives it. */
    const char *date;
} pl_chat_kwargs;

/** A family with the variant details of one template. */
typedef struct pl_chat_style {
    pl_chat_tmpl tmpl;
    unsigned flags;          /**< PL_CHAT_F_* bits */
    char *default_system;    /**< owned; inserted when messages[0] is not a
                                  system message; NULL = none */
} pl_chat_style;

/** Family of a GGUF tokenizer.chat_template source, by its markers.
 *  NULL, empty or unrecognised source gives PL_CHAT_TMPL_UNKNOWN. */
pl_chat_tmpl pl_chat_tmpl_detect(const char *jinja_src);

/** Family named by --chat-template NAME ("chatml", "llama3", "llama2",
 *  "mistral", "gemma", "phi3", "zephyr", "harmony"). Returns 0 and *out, or -1 for an
 *  unknown name (*out untouched). */
int pl_chat_tmpl_from_name(const char *name, pl_chat_tmpl *out);

/** The --chat-template name of a family; "unknown" for UNKNOWN. Static. */
const char *pl_chat_tmpl_name(pl_chat_tmpl t);

/** Comma-separated list of the accepted names, for help and errors. Static. */
const char *pl_chat_tmpl_names(void);

/**
 * Read family, variant bits and default system prompt from a template
 * source. A default system prompt is taken from a literal
 * '<|im_start|>system\n...<|im_end|>' in a ChatML template (SmolLM2, Qwen).
 * Returns 0 (s->tmpl may be UNKNOWN), -1 on out of memory. Free with
 * pl_chat_style_free().
 */
int pl_chat_style_init(pl_chat_style *s, const char *jinja_src);

/** The canonical style of a family (what --chat-template NAME selects):
 *  no default system prompt; gemma with BOS; mistral as v0.2 (legacy). */
void pl_chat_style_from_tmpl(pl_chat_style *s, pl_chat_tmpl t);

/** The tool-call format of a style's template (tool_format.h): hermes
 *  for Qwen 2.5's tool branch, qwen3_coder for Qwen3.5's, llama3,
 *  mistral, harmony, else generic.
 *  Static, never NULL. */
const struct pl_tool_format *pl_chat_style_tool_format(const pl_chat_style *s);

/** The reasoning format of a style's template (reasoning_format.h):
 *  harmony, qwen3 for Qwen3's thinking, qwen35 for Qwen3.5's (whose
 *  prompt opens the think block), else NULL. Static. */
const struct pl_reasoning_format *pl_chat_style_reasoning_format(const pl_chat_style *s);

/** Free what pl_chat_style_init allocated; s is reset to UNKNOWN. */
void pl_chat_style_free(pl_chat_style *s);

/**
 * Render messages[0..n) with a style into a malloc'd NUL-terminated string
 * (*out, the caller frees). bos_text / eos_text are the model's BOS and EOS
 * token texts as the template's bos_token / eos_token (NULL = "").
 * add_generation_prompt ends with the assistant header where the template
 * has one. Returns 0, or -1 with *err set: 400 (param "messages") for what
 * the real template rejects (n < 1, a NULL role, roles it forbids,
 * non-alternating turns), 500 for out of memory or an UNKNOWN style.
 * A NULL content renders as "".
 */
int pl_chat_style_render(const pl_chat_style *s, const pl_chat_message *msgs,
                         int n, bool add_generation_prompt,
                         const char *bos_text, const char *eos_text,
                         char **out, pl_err *err);

/** pl_chat_style_render() with keyword arguments (kw may be NULL: none).
 *  A style whose template does not read a keyword ignores it, as Jinja
 *  does. */
int pl_chat_style_render_kw(const pl_chat_style *s, const pl_chat_message *msgs,
                            int n, bool add_generation_prompt,
                            const char *bos_text, const char *eos_text,
                            const pl_chat_kwargs *kw, char **out, pl_err *err);

/** pl_chat_style_render() with the canonical style of family t. */
int pl_chat_tmpl_render(pl_chat_tmpl t, const pl_chat_message *msgs, int n,
                        bool add_generation_prompt, const char *bos_text,
                        const char *eos_text, char **out, pl_err *err);

#endif
