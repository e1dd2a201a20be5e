#!/usr/bin/env python3
"""lm-evaluation-harness's command line with one more model, `llama-cpp-direct`:
llama-cpp-python's Llama in process, the peer bench/lm_eval_compare.py runs
the same local tasks through (lm_eval's own `gguf` model needs a
llama-cpp-python HTTP server and its extra packages).

The model is a TemplateLM, so lm_eval itself splits each (context,
continuation) pair into tokens exactly as it does for local-completions;
only the scoring is llama.cpp's:
  loglikelihood   one forward over context + continuation with logits for
                  every position (logits_all), log-softmax in float64, the
                  continuation's logprobs summed; greedy when each
                  continuation token is the argmax at its position;
  generate_until  Llama.create_completion on the prompt's token ids,
                  temperature 0, stopped at `until`.
Tokens come from llama.cpp's tokenizer on the same GGUF, without BOS,
reading special tokens' text as those tokens, as parley's /tokenize with
add_special_tokens false.

Usage (arguments as lm_eval's):
  PYTHONPATH=<llama-cpp-python> LLAMA_CPP_LIB_PATH=<its libllama dir> \\
  python bench/lm_eval_llama_cpp.py --model llama-cpp-direct \\
      --model_args model_path=MODEL.gguf,n_threads=2 --tasks ... --include_path ...
"""
import sys

import numpy as np
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model


@register_model("llama-cpp-direct")
class LlamaCppDirect(TemplateLM):
    def __init__(self, model_path, n_ctx=2048, n_threads=2, seed=1234, **kwargs):
        super().__init__()
        import llama_cpp
        self.llm = llama_cpp.Llama(model_path=model_path, n_ctx=int(n_ctx),
                                   n_threads=int(n_threads), n_threads_batch=int(n_threads),
                                   logits_all=True, seed=int(seed), verbose=False)
        self.seed = int(seed)
        self.max_length = int(n_ctx) - 1

    @property
    def eot_token_id(self):
        return self.llm.token_eos()

    def tok_encode(self, string, add_special_tokens=None, **kwargs):
        return self.llm.tokenize(string.encode("utf-8"), add_bos=False, special=True)

    def _score(self, ctx, cont):
        toks = (ctx + cont)[-self.max_length:]
        ctxlen = len(toks) - len(cont)
        self.llm.reset()
        self.llm.eval(toks)
        # Row i holds the logits predicting token i + 1.
        rows = np.asarray(self.llm.scores[ctxlen - 1:len(toks) - 1], dtype=np.float64)
        m = rows.max(axis=1, keepdims=True)
        lse = m[:, 0] + np.log(np.exp(rows - m).sum(axis=1))
        lp = rows[np.arange(len(cont)), cont] - lse
        greedy = bool((rows.argmax(axis=1) == np.asarray(cont)).all())
        return float(lp.sum()), greedy

    def _loglikelihood_tokens(self, requests, disable_tqdm=False, **kwargs):
        return [self._score(ctx, cont) for _, ctx, cont in requests]

    def loglikelihood_rolling(self, requests, disable_tqdm=False):
        raise NotImplementedError("loglikelihood_rolling is not used by the local tasks")

    def generate_until(self, requests, disable_tqdm=False):
        out = []
        for req in requests:
            context, kw = req.args
            until = kw.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            ids = self.tok_encode(context)
            self.llm.reset()
            r = self.llm.create_completion(ids, max_tokens=int(kw.get("max_gen_toks", 256)),
                                           temperature=0.0, stop=until, seed=self.seed)
            out.append(r["choices"][0]["text"])
        return out


if __name__ == "__main__":
    from lm_eval.__main__ import cli_evaluate
    sys.exit(cli_evaluate())
