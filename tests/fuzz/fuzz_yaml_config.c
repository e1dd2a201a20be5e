/* fuzz_yaml_config.c - libFuzzer target: YAML/JSON text through the loader
 * and the config schema (written to a temp file, as the CLI reads it). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "src/config.h"
#include "src/base/yaml_load.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    pl_linemap lm;
    json_t *j = pl_yaml_load_buf("fuzz", (const char *)data, size, &lm, err, sizeof err);
    if (j)
        pl_linemap_line(&lm, "models.a.b[0]");
    json_decref(j);
    pl_linemap_free(&lm);

    static char path[64];
    if (!path[0])
        snprintf(path, sizeof path, "/tmp/parley-fuzz-cfg-%d.yaml", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    pl_opts o;
    pl_config c;
    if (pl_opts_init(&o, err, sizeof err) == 0 && pl_config_load(path, &o, &c, err, sizeof err) == 0)
        pl_config_free(&c);
    pl_opts_free(&o);
    return 0;
}
