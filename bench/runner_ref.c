/* runner_ref.c - write the CPU runner's reference figures for the CUDA
 * runner's test on a GPU machine (tests/test_cuda_ref.c): the schedule of
 * tests/runner_ref.h run on MODEL, one line per (step, sequence) with the
 * greedy id and the raw logits of the CPU's best REF_TOPK ids.
 * scripts/device_bundle.sh runs it on the random "ref" model (the same
 * bytes bench/make_random_gguf.py writes on the GPU machine).
 *
 * usage: runner_ref MODEL.gguf OUT.txt
 */
#include <stdio.h>
#include <stdlib.h>

#include "backends/engine/cpu/cpu_runner.h"
#include "backends/formats/gguf.h"
#include "backends/engine/model/model.h"
#include "tests/runner_ref.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL.gguf OUT.txt\n", argv[0]);
        return 2;
    }
    char err[256];
    pl_gguf *g = pl_gguf_open(argv[1], err, sizeof err);
    pl_model *m = g ? pl_model_load(g, NULL, err, sizeof err) : NULL;
    if (!m) {
        fprintf(stderr, "%s: %s\n", argv[1], err);
        return 1;
    }
    pl_runner_info w = ref_want();
    pl_runner *r = pl_cpu_runner_new(m, &w, 0, err, sizeof err);
    FILE *f = r ? fopen(argv[2], "w") : NULL;
    if (!f) {
        fprintf(stderr, "%s\n", r ? argv[2] : err);
        return 1;
    }
    r->keep_logits = true;
    static ref_step t;
    static int32_t gen[REF_NGEN + 1][REF_NS];
    int nv = m->n_vocab;
    fprintf(f, "# runner_ref: %s, n_vocab %d, %d sequences, %d decode steps\n", argv[1], nv,
            REF_NS, REF_NGEN);
    for (int step = 0; step <= REF_NGEN; step++) {
        const pl_step_output *o;
        int tk = r->ops->launch(r, ref_build(&t, step, gen, nv));
        if (tk < 0 || r->ops->wait(r, tk, &o) != 0) {
            fprintf(stderr, "step %d failed\n", step);
            return 1;
        }
        for (int s = 0; s < REF_NS; s++) {
            const float *lg = o->logits + (size_t)s * nv;
            int top[REF_TOPK];
            ref_topk(lg, nv, top);
            gen[step][s] = o->sampled[s];
            fprintf(f, "%d %d %d", step, s, o->sampled[s]);
            for (int k = 0; k < REF_TOPK; k++)
                fprintf(f, " %d:%.6f", top[k], lg[top[k]]);
            fprintf(f, "\n");
        }
    }
    fclose(f);
    r->ops->free(r);
    pl_model_free(m);
    pl_gguf_free(g);
    printf("%s: %d steps x %d sequences\n", argv[2], REF_NGEN + 1, REF_NS);
    return 0;
}
