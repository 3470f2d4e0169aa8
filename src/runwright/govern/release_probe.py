"""The release gates' child process: load an export the way its user would, from its folder
alone, and measure it (govern/release_gates.py starts it).

`python -m runwright.govern.release_probe EXPORT INPUTS OUTPUT` reads the probe rows, the eval
rows and the probe texts from INPUTS (a folder the parent wrote), loads EXPORT with what its
layout is for (transformers' GPT2LMHeadModel and PreTrainedTokenizerFast for hf-gpt2; runwright's
reference GPT and the `tokenizers` file for the runwright layout), and writes into OUTPUT:
result.json (load time, memory, the tokenizer's ids, the eval loss, or the error) and
logits.safetensors. A fresh process, offline: nothing of the training process or of a hub can
stand in for what the export lacks.
"""

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

PROBE_FILE = "probe.safetensors"
TEXTS_FILE = "texts.json"
RESULT_FILE = "result.json"
LOGITS_FILE = "logits.safetensors"


def _status_bytes(field: str) -> int | None:
    """VmRSS / VmHWM of this process from /proc (Linux), in bytes."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    """Start the peak-RSS mark (VmHWM) afresh, so it measures the load, not the imports."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _load(export: Path, release: dict[str, Any]) -> tuple[Any, Any, str]:
    """(model, encode: text -> ids, what loaded it)."""
    if release.get("format") == "hf-gpt2":
        from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

        model = GPT2LMHeadModel.from_pretrained(export, local_files_only=True).eval()
        encode = None
        if (export / "tokenizer.json").is_file():
            tokenizer = PreTrainedTokenizerFast.from_pretrained(export, local_files_only=True)
            encode = lambda text: list(tokenizer(text)["input_ids"])  # noqa: E731
        return model, encode, "transformers GPT2LMHeadModel.from_pretrained"
    from safetensors.torch import load_file

    from runwright.spec import ModelSpec
    from runwright.train.model import GPT

    config = json.loads((export / "config.json").read_text())
    if not isinstance(config.get("model"), dict) or "max_positions" not in config:
        raise ValueError(
            "config.json is not the reference GPT's ({model, max_positions}): a model of the "
            "caller's own cannot be loaded here"
        )
    model = GPT(ModelSpec(**config["model"]), int(config["max_positions"]))
    model.load_state_dict(load_file(export / "model.safetensors"), strict=True)
    model.eval()
    encode = None
    found = sorted((export / "tokenizer").glob("*.json"))
    if found:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(found[0]))
        encode = lambda text: tokenizer.encode(text).ids  # noqa: E731
    return model, encode, "runwright.train.model.GPT + safetensors"


def _logits(model: Any, tokens: Any) -> Any:
    import torch

    if hasattr(model, "transformer"):  # transformers' GPT-2
        return model(tokens).logits
    positions = torch.arange(tokens.shape[1]).expand_as(tokens)
    return model(tokens, positions, torch.zeros_like(tokens))


def probe(export: Path, inputs: Path, output: Path) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F
    from safetensors.torch import load_file, save_file

    release = json.loads((export / "release.json").read_text())
    rows = load_file(inputs / PROBE_FILE)
    texts = json.loads((inputs / TEXTS_FILE).read_text())
    rss_before = _status_bytes("VmRSS")
    peak_reset = _reset_peak()
    started = time.perf_counter()
    model, encode, loader = _load(export, release)
    load_seconds = time.perf_counter() - started
    peak = _status_bytes("VmHWM")
    result: dict[str, Any] = {
        "loader": loader,
        "load_seconds": load_seconds,
        "rss_before_bytes": rss_before,
        "load_peak_bytes": (peak - rss_before) if peak and rss_before and peak_reset else None,
        "tokenizer_ids": [encode(t) for t in texts] if encode else None,
    }
    with torch.no_grad():
        save_file(
            {"logits": _logits(model, rows["probe"]).float().contiguous()}, output / LOGITS_FILE
        )
        if "eval" in rows:
            batch = rows["eval"]
            total, count = 0.0, 0
            for start in range(0, batch.shape[0], 8):
                chunk = batch[start : start + 8]
                logits = _logits(model, chunk[:, :-1]).float()
                total += F.cross_entropy(
                    logits.flatten(0, 1), chunk[:, 1:].flatten(), reduction="sum"
                ).item()
                count += chunk[:, 1:].numel()
            result["eval_loss"] = total / count
            result["eval_tokens"] = count
    return result


def main(argv: list[str]) -> int:
    export, inputs, output = (Path(a) for a in argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        result = probe(export, inputs, output)
    except Exception as exc:  # the parent turns it into the load gate's failure
        result = {
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(limit=6),
        }
    (output / RESULT_FILE).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
