/* chat_fixture.c - see chat_fixture.h. */
#include "chat_fixture.h"

#include <criterion/criterion.h>

#include <stdlib.h>

pl_chat_message *chat_fixture_messages(json_t *arr, const char *reasoning_key, int *n)
{
    *n = (int)json_array_size(arr);
    pl_chat_message *m = calloc((size_t)*n, sizeof *m);
    cr_assert_not_null(m);
    for (int i = 0; i < *n; i++) {
        json_t *e = json_array_get(arr, (size_t)i);
        m[i].role = json_string_value(json_object_get(e, "role"));
        m[i].content = json_string_value(json_object_get(e, "content"));
        m[i].reasoning = json_string_value(json_object_get(e, reasoning_key));
        m[i].tool_calls = json_object_get(e, "tool_calls");
    }
    return m;
}

size_t chat_fixture_first_diff(const char *a, const char *b)
{
    size_t i = 0;
    while (a[i] && a[i] == b[i])
        i++;
    return i;
}
