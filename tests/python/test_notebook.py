"""examples/debate.ipynb runs top to bottom against the mock backend
(nbclient), so the notebook a researcher starts from cannot rot."""
import json
import os

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

from conftest import ROOT, Server  # noqa: E402


def test_debate_notebook_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("PARLEY_JOBS_DIR", str(tmp_path / "jobs"))
    # scripts/test.sh exports PARLEY_MODEL as the GGUF path; the notebook reads
    # PARLEY_MODEL as a served model name, so let it ask /v1/models instead.
    monkeypatch.delenv("PARLEY_MODEL", raising=False)
    s = Server("--backend", "mock", "--mock-mode", "echo", "--log-level", "warn")
    try:
        monkeypatch.setenv("PARLEY_URL", s.url)
        monkeypatch.setenv("PARLEY_EXPERIMENT", "nb_ci")
        nb = nbformat.read(os.path.join(ROOT, "examples", "debate.ipynb"), as_version=4)
        nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": str(tmp_path)}}).execute()
        outs = {i: c.get("outputs", []) for i, c in enumerate(nb.cells)
                if c.cell_type == "code"}
        text = "\n".join(o.get("text", "") for v in outs.values() for o in v
                         if o.get("output_type") == "stream")
        assert "completed" in text and "'succeeded': 8" in text, text
        assert "8/8" in text, "the tqdm bar reached the end"
        assert os.path.exists(tmp_path / "jobs" / "nb_ci" / "nb_ci_index.jsonl")
        tables = [o for v in outs.values() for o in v if o.get("output_type") == "execute_result"]
        assert any("accuracy" in o["data"].get("text/plain", "") for o in tables)
        images = [o for v in outs.values() for o in v if "image/png" in o.get("data", {})]
        assert len(images) == 1, "one figure: accuracy and answer changes per round"
        if os.environ.get("PARLEY_NOTEBOOK_OUT"):     # keep the executed notebook to look at
            nbformat.write(nb, os.environ["PARLEY_NOTEBOOK_OUT"])
    finally:
        assert s.stop() == 0


def test_debate_notebook_gives_results_on_the_default_model(tmp_path, monkeypatch):
    """The notebook's job uses constrained validation (issue 35.6): on the
    small default model every reply ends with a valid answer, so its
    conversations succeed instead of failing after their re-prompts."""
    from conftest import MODEL_PATH
    if not os.path.exists(MODEL_PATH):
        pytest.fail("default model missing: %s (run scripts/fetch_model.sh)" % MODEL_PATH)
    monkeypatch.setenv("PARLEY_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.delenv("PARLEY_MODEL", raising=False)
    s = Server("--model", MODEL_PATH, "--log-level", "warn")
    try:
        monkeypatch.setenv("PARLEY_URL", s.url)
        monkeypatch.setenv("PARLEY_EXPERIMENT", "nb_model")
        monkeypatch.setenv("PARLEY_NB_QUESTIONS", "1")
        monkeypatch.setenv("PARLEY_NB_ROUNDS", "1")
        nb = nbformat.read(os.path.join(ROOT, "examples", "debate.ipynb"), as_version=4)
        nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                resources={"metadata": {"path": str(tmp_path)}}).execute()
        text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                         for o in c.get("outputs", []) if o.get("output_type") == "stream")
        assert "completed" in text and "'succeeded': 1" in text and "'failed': 0" in text, text
        index = os.path.join(tmp_path, "jobs", "nb_model", "nb_model_index.jsonl")
        with open(index) as f:
            lines = [json.loads(x) for x in f]
        assert len(lines) == 1 and lines[0]["final_answer"] in "ABCD", lines
    finally:
        assert s.stop() == 0
