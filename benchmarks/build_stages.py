"""Build throughput with the language and PII stages against without (issue 26), same run.

The corpus is data_build.py's generated JSONL (Zipf words, log-normal lengths, 2% exact and 2%
near copies), with an e-mail address, an IP address, a phone number or a credential planted in
one document in 20 so the PII stage has work. Each round builds the same inputs twice into
fresh roots, interleaved so both see the same machine: the data_build recipe as is (the
baseline), and the same recipe with `language: {}` and `pii: {action: redact}`. The stage cost
alone (identification and scrubbing in one process, no build around it) is measured too. Wall
time on a shared machine is noisy, so each build's CPU seconds (its own and its workers') are
recorded as well, and the stage-only figures are CPU time.
Writes benchmarks/results/build_stages.json.

    .venv/bin/python benchmarks/build_stages.py [--megabytes 10] [--rounds 2]
"""

import argparse
import importlib.util
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from runwright.data import build_dataset, load_recipe
from runwright.data.builder.language import identify
from runwright.data.builder.pii import scrub
from runwright.data.builder.recipe import PII_KINDS, LanguageSpec

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "build_stages.json"
STAGES = """
language: {}
pii: {action: redact}
"""
PLANTS = (
    "write to jane.doe{k}@example.org",
    "host 10.{a}.{b}.7 answered",
    "call +1 415 555 {k:04d}",
    "key AKIA{k:016d}",
)


def _data_build():
    spec = importlib.util.spec_from_file_location("data_build", HERE / "data_build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["data_build"] = module
    spec.loader.exec_module(module)
    return module


def plant(folder: Path, every: int = 20) -> int:
    planted = 0
    for path in sorted(folder.glob("*.jsonl")):
        lines = path.read_text().splitlines()
        for i in range(0, len(lines), every):
            doc = json.loads(lines[i])
            k = planted
            doc["text"] += " " + PLANTS[k % len(PLANTS)].format(k=k, a=k % 250, b=k // 250 % 250)
            lines[i] = json.dumps(doc)
            planted += 1
        path.write_text("\n".join(lines) + "\n")
    return planted


def _cpu() -> float:
    """CPU seconds of this process and its reaped children (the build's partition workers)."""
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def build_seconds(recipe_text: str, work: Path, name: str) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds, result) of one build into a fresh root."""
    (work / f"{name}.yaml").write_text(recipe_text)
    recipe = load_recipe(work / f"{name}.yaml")
    cpu, began = _cpu(), time.perf_counter()
    result = build_dataset(recipe, work / f"root-{name}")
    return time.perf_counter() - began, _cpu() - cpu, result


def stage_only(folder: Path, limit: int = 4000) -> dict:
    texts = []
    for path in sorted(folder.glob("*.jsonl")):
        texts += [json.loads(line)["text"] for line in path.read_text().splitlines()]
    texts = texts[:limit]
    chars = sum(len(t) for t in texts)
    spec = LanguageSpec()
    identify("warm the model up", spec)
    began = time.process_time()
    for t in texts:
        identify(t, spec)
    lang_s = time.process_time() - began
    began = time.process_time()
    for t in texts:
        scrub(t, PII_KINDS)
    pii_s = time.process_time() - began
    return {
        "documents": len(texts),
        "megabytes": round(chars / 1e6, 2),
        "language_mb_per_s": round(chars / 1e6 / lang_s, 2),
        "pii_mb_per_s": round(chars / 1e6 / pii_s, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    # tokenizers' BPE trainer runs a rayon thread pool whose idle threads spin: on a shared
    # machine that makes CPU seconds meaningless. Both builds train single-threaded.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    data_build = _data_build()
    base_recipe = data_build.RECIPE
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "in").mkdir()
        corpus = data_build.generate(work / "in", args.megabytes)
        corpus["planted_pii"] = plant(work / "in")
        without, with_stages, cpu_without, cpu_with = [], [], [], []
        for r in range(args.rounds):
            seconds, cpu, plain = build_seconds(base_recipe, work, f"plain-{r}")
            without.append(seconds)
            cpu_without.append(cpu)
            seconds, cpu, staged = build_seconds(base_recipe + STAGES, work, f"staged-{r}")
            with_stages.append(seconds)
            cpu_with.append(cpu)
        alone = stage_only(work / "in")
    profile = staged.manifest.statistics.profile
    web = profile.sources["web"]
    base, staged_s = statistics.median(without), statistics.median(with_stages)
    mb = corpus["bytes"] / 1e6
    result = {
        "benchmark": "build_stages",
        "cores": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "corpus": corpus,
        "rounds": args.rounds,
        "tokenizers_parallelism": os.environ["TOKENIZERS_PARALLELISM"],
        "without_seconds": [round(s, 2) for s in without],
        "with_seconds": [round(s, 2) for s in with_stages],
        "without_mb_per_minute": round(mb / base * 60, 1),
        "with_mb_per_minute": round(mb / staged_s * 60, 1),
        "throughput_ratio_with_over_without": round(base / staged_s, 3),
        "without_cpu_seconds": [round(s, 2) for s in cpu_without],
        "with_cpu_seconds": [round(s, 2) for s in cpu_with],
        "cpu_ratio_with_over_without": round(
            statistics.median(cpu_with) / statistics.median(cpu_without), 3
        ),
        "stage_only": alone,
        "pii_found": web.pii,
        "languages": profile.languages,
        "baseline": "the data_build recipe without the language and PII stages, same run",
    }
    assert plain.manifest.statistics.profile is not None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"{mb:.1f} MB: without {base:.1f} s, with language + PII {staged_s:.1f} s "
        f"(throughput ratio {result['throughput_ratio_with_over_without']}, CPU ratio "
        f"{result['cpu_ratio_with_over_without']}); stages alone: "
        f"language {alone['language_mb_per_s']} MB/s, PII {alone['pii_mb_per_s']} MB/s"
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
