/* main.c - the parley binary: `serve`, `run`, `bench`, ... */
#include <stdio.h>
#include <string.h>

#include "src/cmd_run.h"
#include "src/cmd_serve.h"
#include "src/config.h"
#include "src/base/log.h"
#include "src/options.h"

#define PARLEY_VERSION "0.1.0"

static void usage(FILE *f)
{
    fprintf(f, "parley %s - an OpenAI-compatible server for multi-agent conversations\n\n"
               "usage: parley serve [options]\n"
               "       parley run JOB.yaml [--backend mock] [--output DIR] [--live] [options]\n"
               "       parley --version\n\n"
               "serve options:\n", PARLEY_VERSION);
    pl_opts_print_help(f, PL_OPT_SERVE);
}

/* default < env < config < command line: parse the command line once to
 * find --config, load it, then parse the command line again on top. */
static int load_opts(int argc, char **argv, pl_opts *o, pl_config *cfg)
{
    char err[512];
    char *pos[4];
    int npos, rc;
    memset(cfg, 0, sizeof *cfg);
    if (pl_opts_init(o, err, sizeof err) < 0)
        goto fail;
    rc = pl_opts_parse_args(o, argc, argv, 2, pos, 4, &npos, err, sizeof err);
    if (rc != 0)
        goto fail_rc;
    if (npos > 0) {
        snprintf(err, sizeof err, "unexpected argument '%s'", pos[0]);
        goto fail;
    }
    if (o->config[0]) {
        if (pl_config_load(o->config, o, cfg, err, sizeof err) < 0)
            goto fail;
        rc = pl_opts_parse_args(o, argc, argv, 2, pos, 4, &npos, err, sizeof err);
        if (rc != 0)
            goto fail_rc;
    }
    pl_opts_apply_log(o);
    return 0;
fail_rc:
    if (rc == 1) {
        usage(stdout);
        return 1;
    }
fail:
    fprintf(stderr, "parley: %s\n", err);
    return -1;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("parley %s\n", PARLEY_VERSION);
        return 0;
    }
    if (!strcmp(argv[1], "run"))
        return pl_cmd_run(argc, argv);
    if (strcmp(argv[1], "serve") != 0) {
        fprintf(stderr, "parley: unknown command '%s' (see parley --help)\n", argv[1]);
        return 2;
    }
    pl_opts o;
    pl_config cfg;
    int rc = load_opts(argc, argv, &o, &cfg);
    if (rc == 0)
        rc = pl_cmd_serve(&o, &cfg);
    else
        rc = rc == 1 ? 0 : 2;
    pl_config_free(&cfg);
    pl_opts_free(&o);
    return rc;
}
