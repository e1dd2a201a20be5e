/* chat_fixture.h - the conversations of the chat-template fixtures
 * (tests/fixtures/chat_templates.json, harmony_templates.json, written by
 * jinja2) as the messages parley renders, and where a rendering first
 * differs from jinja2's (used by test_chat_template and test_chat_harmony). */
#ifndef PL_TEST_CHAT_FIXTURE_H
#define PL_TEST_CHAT_FIXTURE_H

#include <stddef.h>

#include <jansson.h>

#include "backends/backend.h"

/* A fixture's messages array as borrowed pl_chat_message entries (calloc'd
 * array, *n entries; the strings and tool_calls stay arr's): role,
 * content, the assistant's reasoning under reasoning_key ("thinking" in
 * gpt-oss's fixtures, "reasoning_content" in the others) and tool_calls. */
pl_chat_message *chat_fixture_messages(json_t *arr, const char *reasoning_key, int *n);

/* Index of the first byte where a and b differ, for readable failures. */
size_t chat_fixture_first_diff(const char *a, const char *b);

#endif
