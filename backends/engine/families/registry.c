/* registry.c - the families (family.h): those built in, from the generated
 * family_list.h, then those registered at run time. Every lookup by GGUF or
 * HF name and every list of names goes through here. */
#include "backends/engine/families/family.h"

#include <stdio.h>
#include <string.h>

#define PL_FAMILY(n) &pl_family_##n,
static const pl_family *const builtin_[] = {
#include "backends/engine/families/family_list.h"
};
#undef PL_FAMILY

#define N_BUILTIN ((int)(sizeof builtin_ / sizeof builtin_[0]))
#define MAX_EXTRA 8

static const pl_family *extra_[MAX_EXTRA];
static int n_extra_;

static const pl_family *at_(int i)
{
    return i < N_BUILTIN ? builtin_[i] : i < N_BUILTIN + n_extra_ ? extra_[i - N_BUILTIN] : NULL;
}

const pl_family *pl_family_find(const char *name, size_t len)
{
    const pl_family *f;
    for (int i = 0; (f = at_(i)); i++)
        if (strlen(f->name) == len && memcmp(f->name, name, len) == 0)
            return f;
    return NULL;
}

const pl_hf_arch *pl_family_find_hf(const char *name)
{
    const pl_family *f;
    for (int i = 0; (f = at_(i)); i++)
        for (int j = 0; j < f->n_hf; j++)
            if (!strcmp(f->hf[j].hf_name, name))
                return &f->hf[j];
    return NULL;
}

/* Appends ", " (after the first) and the text to b at *at, truncating. */
static void add_(char *b, size_t n, size_t *at, const char *name, const char *note)
{
    int w = snprintf(b + *at, n - *at, "%s%s%s%s%s", *at ? ", " : "", name,
                     note ? " (" : "", note ? note : "", note ? ")" : "");
    if (w > 0)
        *at = *at + (size_t)w < n ? *at + (size_t)w : n - 1;
}

const char *pl_family_names(bool hf)
{
    static _Thread_local char buf[1024];
    size_t at = 0;
    const pl_family *f;
    buf[0] = 0;
    for (int i = 0; (f = at_(i)); i++) {
        if (!hf)
            add_(buf, sizeof buf, &at, f->name, f->note);
        for (int j = 0; hf && j < f->n_hf; j++)
            add_(buf, sizeof buf, &at, f->hf[j].hf_name,
                 f->hf[j].text_config ? "its text" : NULL);
    }
    return buf;
}

int pl_family_register(const pl_family *f)
{
    if (n_extra_ == MAX_EXTRA || pl_family_find(f->name, strlen(f->name)))
        return -1;
    for (int j = 0; j < f->n_hf; j++)
        if (pl_family_find_hf(f->hf[j].hf_name))
            return -1;
    extra_[n_extra_++] = f;
    return 0;
}

int pl_family_chat_style(const pl_family *f, pl_chat_style *s)
{
    if (!f->chat)
        return -1;
    pl_chat_style_from_tmpl(s, f->chat->tmpl);
    s->flags |= f->chat->flags;
    return 0;
}

bool pl_family_runs(const pl_family *f, unsigned runner)
{
    return (f->runners & runner) != 0;
}
