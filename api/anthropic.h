/* anthropic.h - Anthropic's Messages API: POST /v1/messages (plain and
 * streamed with Anthropic's event sequence) and POST
 * /v1/messages/count_tokens, over the OpenAI request core
 * (api/oai_request.h), for agents built on Anthropic's SDKs (the Claude
 * Agent SDK, Claude Code pointed at a local model, LiteLLM's anthropic
 * route).
 *
 * A Messages body becomes a chat-completions body (anthropic_req.c), so
 * both share one set of parameter rules, the model's tool-call and
 * reasoning formats and admission; the reply's reasoning is a thinking
 * block, its calls tool_use blocks. Errors, whoever replies them (the
 * router's 401/404/429, the body reader's 400/413, the endpoint), are in
 * Anthropic's shape on these paths: {"type":"error","error":{"type",
 * "message"}}.
 */
#ifndef PL_API_ANTHROPIC_H
#define PL_API_ANTHROPIC_H

#include <stdbool.h>

#include <jansson.h>

#include "api/server.h"

/** Register POST /v1/messages and POST /v1/messages/count_tokens. */
void pl_anthropic_register(pl_server *s);

/** Whether a request URI (path and query) is one of Anthropic's paths,
 *  whose errors are in Anthropic's shape. */
bool pl_anthropic_path(const char *uri);

/** Anthropic's error object for e (a new reference, NULL on OOM): its type
 *  by status (invalid_request_error, authentication_error,
 *  permission_error, not_found_error, request_too_large,
 *  rate_limit_error, api_error, overloaded_error), its message prefixed
 *  by the parameter it names ("max_tokens: ..."). */
json_t *pl_anthropic_error_json(const pl_err *e);

/* api/anthropic_req.c */

/**
 * The chat-completions body a Messages body stands for: system as the
 * system message; text blocks as text parts; tool_use blocks as the
 * assistant turn's tool_calls (input as the arguments' JSON), tool_result
 * blocks as tool messages before the user turn's text; thinking blocks as
 * the turn's reasoning_content (redacted_thinking is dropped); tools
 * ({name, description, input_schema}) as function tools; tool_choice
 * (auto, any, tool, none; disable_parallel_tool_use) as tool_choice and
 * parallel_tool_calls; stop_sequences as stop; thinking (enabled,
 * adaptive, disabled) as chat_template_kwargs.enable_thinking;
 * metadata.user_id as user. need_max_tokens: max_tokens is required
 * (messages; count_tokens takes none). Returns a new object, or NULL with
 * a 400 naming the Messages field ("messages.1.content.0.type").
 */
json_t *pl_anthropic_chat_body(json_t *body, bool need_max_tokens, pl_err *e);

/** Rename the chat parameter e names (pl_oai_parse's) to its Messages
 *  field: stop -> stop_sequences, tools[0].function.parameters ->
 *  tools.0.input_schema, chat_template_kwargs.enable_thinking -> thinking. */
void pl_anthropic_rename_param(pl_err *e);

#endif
