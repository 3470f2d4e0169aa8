"""`runwright data build|verify|inspect|import-megatron` on bad input, tried as an attacker would.

Every row runs the real CLI in-process against real files and asserts: the exit status (2 for a
clear error, 1 for a failed verification), no traceback, a message naming the file or field, and
no partial write (a failed build publishes no dataset; a read-only command changes no byte of
the dataset it reads). The fuzz tests at the end throw mutated recipes and manifests at the same
commands. docs/trust.md states the trust model these rows check.
"""

import contextlib
import hashlib
import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.data import build_dataset
from runwright.spec import canonical_json, sha256_hex

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "data"
TINY_RECIPE = yaml.safe_load((EXAMPLES / "tiny.yaml").read_text())
runner = CliRunner()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny example dataset, built once; every case works on its own copy."""
    return build_dataset(EXAMPLES / "tiny.yaml", tmp_path_factory.mktemp("tiny")).folder


def invoke(args: list[object]):
    return runner.invoke(app, [str(a) for a in args])


def assert_clean(result, code: int, needles: tuple[str, ...]) -> None:
    """The exit status, no traceback, and every needle in the output."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.output
    assert result.exit_code == code, result.output
    flat = " ".join(result.output.split())  # rich wraps long lines
    for needle in needles:
        assert needle in flat, f"{needle!r} not in {flat!r}"


def tree_hash(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        h.update(str(path.relative_to(folder)).encode())
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


# ---- build: recipes ------------------------------------------------------------------------


def recipe_with(**changes) -> str:
    data = json.loads(json.dumps(TINY_RECIPE))
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        node = data
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return yaml.safe_dump(data)


def alias_bomb() -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for k in range(1, 9):
        lines.append(f"a{k}: &a{k} [" + ", ".join([f"*a{k - 1}"] * 10) + "]")
    return "\n".join(lines) + "\nname: bomb\nsources: *a8\n"


def shell_recipe(marker: Path, field: str) -> str:
    source = {"name": "docs", "kind": "text-v1", "paths": ["docs/*.txt"]}
    data = {
        "name": "shell",
        "sources": [source],
        "tokenizer": {"train": {"vocab_size": 300, "min_frequency": 1}},
        "build": {"workers": 1},
    }
    if field == "filter":
        data["filters"] = [{"kind": "custom-v1", "function": "os:system"}]
    else:
        source["extract"] = "os:system"
    return yaml.safe_dump(data)


def undecodable_file_name(folder: Path) -> str:
    (folder / "docs" / "caf\udce9.txt").write_bytes(b"a document whose name is Latin-1")
    return recipe_with(**{"sources.0.paths": ["docs/*.txt"]})


@dataclass(frozen=True)
class BuildCase:
    recipe: Callable[[Path], str | bytes | None]
    """The recipe text for a case folder (None: the case makes its own path)."""
    needles: tuple[str, ...]
    name: str = "recipe.yaml"
    args: tuple[str, ...] = ()


BUILD_CASES: dict[str, BuildCase] = {
    "deep flow yaml": BuildCase(lambda d: "[" * 5000 + "]" * 5000, ("recipe.yaml", "nesting")),
    "deep block yaml": BuildCase(
        lambda d: "".join("  " * k + "a:\n" for k in range(200)) + "  " * 200 + "b: 1\n",
        ("recipe.yaml", "nested deeper than 64"),
    ),
    "deep json": BuildCase(
        lambda d: "[" * 100_000 + "]" * 100_000, ("recipe.json", "nested deeper"), "recipe.json"
    ),
    "moderately deep json": BuildCase(
        lambda d: '{"name": ' + "[" * 200 + "]" * 200 + "}",
        ("recipe.json", "nested deeper than 64"),
        "recipe.json",
    ),
    "yaml alias bomb": BuildCase(lambda d: alias_bomb(), ("recipe.yaml", "1,000,000 values")),
    "latin-1 recipe": BuildCase(
        lambda d: "name: caf\xe9\n".encode("latin-1"), ("recipe.yaml", "not UTF-8")
    ),
    "recipe is a directory": BuildCase(lambda d: None, ("recipe.yaml", "is a directory")),
    "recipe missing": BuildCase(lambda d: None, ("missing.yaml", "does not exist"), "missing.yaml"),
    "recipe over 1 MiB": BuildCase(
        lambda d: "name: big\n" + "#" * (1 << 20), ("recipe.yaml", "1,048,576-byte limit")
    ),
    "recipe not a mapping": BuildCase(lambda d: "- 1\n- 2\n", ("recipe.yaml", "mapping")),
    "python tag in yaml": BuildCase(
        lambda d: f'!!python/object/apply:os.system ["touch {d / "PWNED"}"]\n',
        ("recipe.yaml", "invalid"),
    ),
    "tokenizer file missing": BuildCase(
        lambda d: recipe_with(tokenizer={"path": "nothere.json"}),
        ("tokenizer.path", "nothere.json", "does not exist"),
    ),
    "tokenizer path is a directory": BuildCase(
        lambda d: recipe_with(tokenizer={"path": "tiny"}), ("tokenizer.path", "is a directory")
    ),
    "tokenizer path is a URL": BuildCase(
        lambda d: recipe_with(tokenizer={"path": "https://example.invalid/tokenizer.json"}),
        ("tokenizer.path", "local file"),
    ),
    "os:system filter": BuildCase(
        lambda d: shell_recipe(d / "PWNED", "filter"),
        ("filters[0].function", "os:system", "--allow-code"),
    ),
    "os:system extract": BuildCase(
        lambda d: shell_recipe(d / "PWNED", "extract"),
        ("sources[0].extract", "os:system", "--allow-code"),
    ),
    "own module without --allow-code": BuildCase(
        lambda d: recipe_with(filters=[{"kind": "custom-v1", "function": "rw_probe:mark"}]),
        ("filters[0].function", "rw_probe:mark", "--allow-code"),
    ),
    "function without colon, code allowed": BuildCase(
        lambda d: recipe_with(filters=[{"kind": "custom-v1", "function": "nocolon"}]),
        ("nocolon", "package.module:name"),
        args=("--allow-code",),
    ),
    "function not importable, code allowed": BuildCase(
        lambda d: recipe_with(filters=[{"kind": "custom-v1", "function": "no_such_mod_x:f"}]),
        ("no_such_mod_x:f", "cannot import"),
        args=("--allow-code",),
    ),
    "custom filter without function": BuildCase(
        lambda d: recipe_with(filters=[{"kind": "custom-v1"}]), ("function",)
    ),
    "a billion workers": BuildCase(
        lambda d: recipe_with(**{"build.workers": 10**9}), ("build.workers",)
    ),
    "infinite backoff": BuildCase(
        lambda d: recipe_with(**{"build.backoff_seconds": float("inf")}),
        ("build.backoff_seconds",),
    ),
    "negative eval seed": BuildCase(lambda d: recipe_with(**{"eval.seed": -1}), ("eval.seed",)),
    "huge minhash seed": BuildCase(
        lambda d: recipe_with(**{"dedup.near.seed": 1 << 40}), ("dedup.near.seed",)
    ),
    "overflowing vocab size": BuildCase(
        lambda d: recipe_with(**{"tokenizer.train.vocab_size": 10**30}), ("vocab_size",)
    ),
    "NaN in json recipe": BuildCase(
        lambda d: json.dumps(TINY_RECIPE)[:-1] + ', "max_tokens_per_shard": NaN}',
        ("recipe.json", "NaN"),
        "recipe.json",
    ),
    "1e999 in json recipe": BuildCase(
        lambda d: json.dumps(TINY_RECIPE)[:-1] + ', "max_tokens_per_shard": 1e999}',
        ("recipe.json", "not finite"),
        "recipe.json",
    ),
    "unset variable": BuildCase(lambda d: recipe_with(name="${NOPE_21}"), ("--set NOPE_21",)),
    "bad --set": BuildCase(lambda d: recipe_with(), ("--set expects",), args=("--set", "oops")),
    "no matching inputs": BuildCase(
        lambda d: recipe_with(**{"sources.0.paths": ["nothing/*.txt"]}), ("no files match",)
    ),
    "a plain input path that does not exist": BuildCase(
        lambda d: recipe_with(**{"sources.1.paths": ["0"]}), ("paths[0]", "does not exist")
    ),
    "input file name not UTF-8": BuildCase(
        undecodable_file_name, ("input file name", "not printable UTF-8", "exclude")
    ),
    "unknown source kind": BuildCase(
        lambda d: recipe_with(**{"sources.0.kind": "exec-v1"}), ("exec-v1",)
    ),
}


@pytest.mark.parametrize("case", BUILD_CASES.values(), ids=BUILD_CASES.keys())
def test_bad_recipes_fail_clearly_and_publish_nothing(case: BuildCase, tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES / "tiny", tmp_path / "tiny")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text(f"touch {tmp_path / 'PWNED'}\n")
    recipe = tmp_path / case.name
    text = case.recipe(tmp_path)
    if isinstance(text, bytes):
        recipe.write_bytes(text)
    elif text is not None:
        recipe.write_text(text)
    elif case.name == "recipe.yaml":
        recipe.mkdir()
    root = tmp_path / "root"
    result = invoke(["data", "build", recipe, "--root", root, *case.args])
    assert_clean(result, 2, case.needles)
    assert not (tmp_path / "PWNED").exists(), "the recipe reached a shell"
    assert not (root / "datasets").exists() or list((root / "datasets").iterdir()) == []


def test_latin1_and_deep_json_records_are_quarantined_and_the_build_finishes(
    tmp_path: Path,
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "ok.txt").write_text("a perfectly ordinary document of text\n")
    (src / "latin.txt").write_bytes(
        "caf\xe9 cr\xe8me br\xfbl\xe9e, encore une fois\n".encode("cp1252")
    )
    (src / "rows.jsonl").write_bytes(
        b'{"text": "a row that is fine and long enough"}\n'
        + '{"text": "caf\xe9"}\n'.encode("latin-1")
        + b"[" * 100_000
        + b"\n"
    )
    (src / "mod.py").write_bytes('"""Docstring caf\xe9."""\n'.encode("latin-1"))
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "name": "latin",
                "sources": [
                    {"name": "notes", "paths": ["src/*.txt"]},
                    {"name": "rows", "kind": "jsonl-v1", "paths": ["src/*.jsonl"]},
                    {"name": "prose", "kind": "python-docs-v1", "paths": ["src/*.py"]},
                ],
                "eval": {"fraction": 0.0},
                "tokenizer": {"train": {"vocab_size": 300, "min_frequency": 1}},
                "build": {"workers": 1},
            }
        )
    )
    result = invoke(["data", "build", recipe, "--root", tmp_path / "root", "--json"])
    assert_clean(result, 0, ())
    summary = json.loads(result.stdout)
    assert summary["quarantined"] == 4
    lines = (Path(summary["folder"]) / "quarantine" / "records.jsonl").read_text().splitlines()
    reasons = sorted(json.loads(line)["reason"] for line in lines)
    assert reasons == [
        "invalid-json",
        "undecodable-bytes",
        "undecodable-bytes",
        "undecodable-bytes",
    ]


def test_registered_functions_run_without_allow_code(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    shutil.copytree(EXAMPLES / "tiny", tmp_path / "tiny")
    recipe.write_text(
        recipe_with(
            filters=[{"kind": "custom-v1", "function": "replacement-char-v1"}],
            **{"sources.0.extract": "paragraphs-v1"},
        )
    )
    result = invoke(["data", "build", recipe, "--root", tmp_path / "root"])
    assert_clean(result, 0, ("dataset",))


def test_allow_code_runs_the_callers_own_function(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "ran.txt"
    (tmp_path / "rw_probe.py").write_text(
        "from pathlib import Path\n\n\ndef mark(text):\n"
        f"    Path({str(marker)!r}).write_text(text)\n    return None\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "rw_probe", raising=False)
    shutil.copytree(EXAMPLES / "tiny", tmp_path / "tiny")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(recipe_with(filters=[{"kind": "custom-v1", "function": "rw_probe:mark"}]))
    refused = invoke(["data", "build", recipe, "--root", tmp_path / "root"])
    assert_clean(refused, 2, ("--allow-code",))
    assert not marker.exists()
    allowed = invoke(["data", "build", recipe, "--root", tmp_path / "root", "--allow-code"])
    assert_clean(allowed, 0, ("dataset",))
    assert marker.exists()


# ---- verify / inspect: manifests -----------------------------------------------------------


def reseal(data: dict) -> dict:
    """What an attacker does after editing: recompute the id, so the manifest agrees with
    itself (the hashed part is everything but dataset_id, build and statistics.profile)."""
    hashed = {k: v for k, v in data.items() if k not in ("dataset_id", "build")}
    statistics = data.get("statistics")
    if isinstance(statistics, dict):  # a fuzzed manifest may have lost or replaced it
        hashed["statistics"] = {k: v for k, v in statistics.items() if k != "profile"}
    data["dataset_id"] = sha256_hex(canonical_json(hashed))
    return data


def edit(mutate: Callable[[dict], object], sealed: bool = True) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        path = folder / "manifest.json"
        data = json.loads(path.read_text())
        mutate(data)
        path.write_text(json.dumps(reseal(data) if sealed else data))

    return apply


def stats(data: dict, split: str = "train", source: str = "notes") -> dict:
    return data["statistics"]["splits"][split][source]


def setitem(target: dict, key: str, value: object) -> None:
    target[key] = value


def flip_byte(folder: Path) -> None:
    path = next(folder.glob("*-train-00000.bin"))
    data = bytearray(path.read_bytes())
    data[0] ^= 1
    path.write_bytes(bytes(data))


def replace_with_dir(name: str) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        path = next(folder.glob(name))
        path.unlink()
        path.mkdir()

    return apply


def no_shards(data: dict) -> None:
    data["shards"] = []
    data["statistics"]["splits"] = {}
    data["statistics"]["records_read"] = {}
    data["split"]["eval_documents"] = 0


def oversize(folder: Path) -> None:
    with open(folder / "manifest.json", "ab") as fh:
        fh.truncate(65 << 20)  # sparse: 65 MiB long, next to nothing on disk


def deep_manifest(folder: Path) -> None:
    data = json.loads((folder / "manifest.json").read_text())
    data["tags"] = {"x": json.loads("[" * 200 + "]" * 200)}
    (folder / "manifest.json").write_text(json.dumps(data))


@dataclass(frozen=True)
class ReadCase:
    change: Callable[[Path], None]
    code: int
    needles: tuple[str, ...]
    commands: tuple[str, ...] = ("verify", "inspect")
    target: str = "folder"
    """`folder`, `manifest` (the file itself) or `parent`."""


VERIFY_FAILS = ("verify",)
READ_CASES: dict[str, ReadCase] = {
    # Silent passes: self-consistent manifests the shards do not bear out -> exit 1.
    "documents edited, id recomputed": ReadCase(
        edit(lambda d: setitem(stats(d), "documents", 5)),
        1,
        ("statistics.splits.train.notes", "the shards hold"),
        VERIFY_FAILS,
    ),
    "tokens edited, id recomputed": ReadCase(
        edit(lambda d: setitem(stats(d, "eval", "records"), "tokens", 10_000)),
        1,
        ("statistics.splits.eval.records",),
        VERIFY_FAILS,
    ),
    "histogram edited": ReadCase(
        edit(lambda d: setitem(stats(d), "length_histogram", {"1": 1})),
        1,
        ("length_histogram",),
        VERIFY_FAILS,
    ),
    "chars_per_token edited": ReadCase(
        edit(lambda d: setitem(stats(d), "chars_per_token", 9.5)),
        1,
        ("chars_per_token",),
        VERIFY_FAILS,
    ),
    "records_read edited": ReadCase(
        edit(lambda d: setitem(d["statistics"]["records_read"], "notes", 400)),
        1,
        ("statistics.records_read.notes",),
        VERIFY_FAILS,
    ),
    "duplicate_rate edited": ReadCase(
        edit(lambda d: setitem(d["statistics"], "duplicate_rate", 0.5)),
        1,
        ("statistics.duplicate_rate",),
        VERIFY_FAILS,
    ),
    "eval_documents edited": ReadCase(
        edit(lambda d: setitem(d["split"], "eval_documents", 30)),
        1,
        ("split.eval_documents",),
        VERIFY_FAILS,
    ),
    "statistics for a source with no shards": ReadCase(
        edit(lambda d: setitem(d["statistics"]["splits"]["train"], "ghost", stats(d))),
        1,
        ("statistics.splits.train.ghost", "no shard"),
        VERIFY_FAILS,
    ),
    "vocab_size edited": ReadCase(
        edit(lambda d: setitem(d["tokenizer"], "vocab_size", 50_000)),
        1,
        ("tokenizer.json", "vocabulary of"),
        VERIFY_FAILS,
    ),
    "eod id edited": ReadCase(
        edit(lambda d: setitem(d["tokenizer"], "eod_token_id", 7)),
        1,
        ("tokenizer.json", "has id"),
        VERIFY_FAILS,
    ),
    "vocab shrunk below the ids": ReadCase(
        edit(
            lambda d: (
                setitem(d["tokenizer"], "vocab_size", 2)
                or setitem(d["tokenizer"], "eod_token_id", 0)
            )
        ),
        1,
        ("outside the vocabulary",),
        VERIFY_FAILS,
    ),
    "shard counts edited": ReadCase(
        edit(lambda d: setitem(d["shards"][0], "documents", 99)),
        1,
        ("manifest says",),
        VERIFY_FAILS,
    ),
    "shard dtype edited": ReadCase(
        edit(lambda d: setitem(d["shards"][0], "dtype", "int32")),
        1,
        ("dtype uint16, manifest says int32",),
        VERIFY_FAILS,
    ),
    "shard byte flipped": ReadCase(flip_byte, 1, ("sha256 differs",), VERIFY_FAILS),
    "shard missing": ReadCase(
        lambda f: next(f.glob("*-train-00000.bin")).unlink(), 1, ("missing",), VERIFY_FAILS
    ),
    "shard is a directory": ReadCase(
        replace_with_dir("*-train-00000.idx"), 1, ("not a regular file",), VERIFY_FAILS
    ),
    "tokenizer missing": ReadCase(
        lambda f: (f / "tokenizer.json").unlink(), 1, ("tokenizer.json", "missing"), VERIFY_FAILS
    ),
    "tokenizer is a directory": ReadCase(
        replace_with_dir("tokenizer.json"), 1, ("tokenizer.json", "missing"), VERIFY_FAILS
    ),
    "nothing to verify": ReadCase(edit(no_shards), 1, ("nothing to verify",), VERIFY_FAILS),
    # Names that escape their folder, and other invalid manifests -> exit 2.
    "tokenizer file escapes": ReadCase(
        edit(lambda d: setitem(d["tokenizer"], "file", "./../../../PWNED.txt")),
        2,
        ("tokenizer.file", "PWNED.txt"),
    ),
    "shard name escapes": ReadCase(
        edit(lambda d: setitem(d["shards"][0], "name", "../x")), 2, ("shard name", "'../x'")
    ),
    "absolute shard name": ReadCase(
        edit(lambda d: setitem(d["shards"][0], "name", "/etc/passwd")), 2, ("shard name",)
    ),
    "shard source escapes": ReadCase(
        edit(lambda d: setitem(d["shards"][0], "source", "../../evil")), 2, ("../../evil",)
    ),
    "quarantine file escapes": ReadCase(
        edit(lambda d: setitem(d["build"], "quarantine_file", "../../etc/passwd")),
        2,
        ("build.quarantine_file",),
    ),
    "dataset id is a path": ReadCase(
        edit(lambda d: setitem(d, "dataset_id", "../../x"), sealed=False), 2, ("dataset_id",)
    ),
    "statistics edited, id kept": ReadCase(
        edit(lambda d: setitem(stats(d), "documents", 5), sealed=False),
        2,
        ("does not match the manifest content",),
    ),
    "NaN statistic": ReadCase(
        edit(lambda d: setitem(d["statistics"], "duplicate_rate", float("nan")), sealed=False),
        2,
        ("manifest.json", "NaN"),
    ),
    "overflowing float": ReadCase(
        lambda f: (f / "manifest.json").write_text(
            (f / "manifest.json")
            .read_text()
            .replace('"duplicate_rate": 0.125', '"duplicate_rate": 1e999')
        ),
        2,
        ("not finite",),
    ),
    "count beyond int64": ReadCase(
        edit(lambda d: setitem(d["shards"][0], "tokens", 10**30)), 2, ("shards.0.tokens",)
    ),
    "float dtype": ReadCase(
        edit(lambda d: setitem(d["shards"][0], "dtype", "float64")), 2, ("shard dtype",)
    ),
    "eod outside vocabulary": ReadCase(
        edit(lambda d: setitem(d["tokenizer"], "eod_token_id", 10**6)), 2, ("eod_token_id",)
    ),
    "deeply nested manifest": ReadCase(deep_manifest, 2, ("nested deeper than 64",)),
    "manifest over 64 MiB": ReadCase(
        oversize,
        2,
        ("67,108,864-byte limit",),
    ),
    "manifest is a directory": ReadCase(
        lambda f: (f / "manifest.json").unlink() or (f / "manifest.json").mkdir(),
        2,
        ("manifest.json", "is a directory"),
    ),
    "manifest missing": ReadCase(
        lambda f: (f / "manifest.json").unlink(), 2, ("no manifest.json",)
    ),
    "manifest not JSON": ReadCase(
        lambda f: (f / "manifest.json").write_bytes(b"\xff\xfe not json"), 2, ("not a valid",)
    ),
    "manifest not an object": ReadCase(
        lambda f: (f / "manifest.json").write_text("[1, 2]"), 2, ("not a valid",)
    ),
    "manifest file instead of folder": ReadCase(
        lambda f: None, 2, ("is a file", "dataset folder"), target="manifest"
    ),
    "folder without a dataset": ReadCase(lambda f: None, 2, ("no manifest.json",), target="parent"),
}


@pytest.mark.parametrize("case", READ_CASES.values(), ids=READ_CASES.keys())
def test_bad_datasets_fail_clearly_and_change_nothing(
    case: ReadCase, tiny: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "ds" / tiny.name
    shutil.copytree(tiny, folder)
    case.change(folder)
    target = {"folder": folder, "manifest": folder / "manifest.json", "parent": folder.parent}
    before = tree_hash(tmp_path)
    for command in case.commands:
        result = invoke(["data", command, target[case.target]])
        assert_clean(result, case.code, case.needles)
    assert tree_hash(tmp_path) == before
    assert not list(tmp_path.parent.glob("PWNED*"))


def test_the_untouched_copy_verifies(tiny: Path, tmp_path: Path) -> None:
    shutil.copytree(tiny, tmp_path / "ds")
    assert_clean(invoke(["data", "verify", tmp_path / "ds"]), 0, ("verified",))


REMOTE_CASES = {
    "tokenizer file escapes the cache": (
        lambda d: setitem(d["tokenizer"], "file", "./../../../PWNED.txt"),
        ("tokenizer.file", "PWNED.txt"),
    ),
    "shard escapes the cache": (
        lambda d: setitem(d["shards"][0], "name", "../x"),
        ("shard name",),
    ),
    "dataset id escapes the cache": (
        lambda d: (reseal(d), setitem(d, "dataset_id", "../../../x")),
        ("dataset_id",),
    ),
}


@pytest.mark.parametrize("mutate, needles", REMOTE_CASES.values(), ids=REMOTE_CASES.keys())
def test_a_remote_manifest_cannot_name_files_outside_the_cache(
    mutate, needles, tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`local://` goes through the URL path of open_dataset: fsspec, then the node cache."""
    remote = tmp_path / "remote" / "a" / "b" / "c"
    shutil.copytree(tiny, remote)
    (tmp_path / "remote" / "PWNED.txt").write_text("secret")
    data = json.loads((remote / "manifest.json").read_text())
    mutate(data)
    if data["dataset_id"].startswith("../"):
        (remote / "manifest.json").write_text(json.dumps(data))
    else:
        (remote / "manifest.json").write_text(json.dumps(reseal(data)))
    cache = tmp_path / "cache" / "x" / "y"
    cache.mkdir(parents=True)
    monkeypatch.setenv("RUNWRIGHT_DATA_CACHE", str(cache))
    for command in ("inspect", "verify"):
        result = invoke(["data", command, f"local://{remote}"])
        assert_clean(result, 2, needles)
    assert [p.name for p in tmp_path.rglob("PWNED*")] == ["PWNED.txt"]
    assert list(cache.iterdir()) == []


IMPORT_CASES = {
    "source name escapes": (["../evil={shard}"], ("source name", "../evil")),
    "overflowing vocab size": (["{shard}", "--vocab-size", str(10**30)], ("vocab_size",)),
    "eod outside vocabulary": (["{shard}", "--eod-token-id", "400"], ("eod_token_id",)),
    "prefix missing": (["{shard}-nope"], ("does not exist",)),
}


@pytest.mark.parametrize("args, needles", IMPORT_CASES.values(), ids=IMPORT_CASES.keys())
def test_bad_megatron_imports_fail_clearly(args, needles, tiny: Path, tmp_path: Path) -> None:
    shard = next(tiny.glob("notes-train-*.idx")).with_suffix("")
    argv = [a.format(shard=shard) for a in args]
    if "--vocab-size" not in argv:
        argv += ["--vocab-size", "300"]
    if "--eod-token-id" not in argv:
        argv += ["--eod-token-id", "0"]
    result = invoke(["data", "import-megatron", *argv, "--root", tmp_path / "root"])
    assert_clean(result, 2, needles)
    assert not list(tmp_path.parent.glob("evil*")) and not (tmp_path / "evil").exists()
    assert [p for p in (tmp_path / "root" / "datasets").glob("*")] == []


# ---- fuzz ----------------------------------------------------------------------------------

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def paths_of(value, prefix=()):
    """Every (path) into a JSON-like value, the root included."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths_of(v, (*prefix, k))
    elif isinstance(value, list):
        for k, v in enumerate(value):
            yield from paths_of(v, (*prefix, k))


def mutated(base: dict, data: st.DataObject) -> object:
    doc = json.loads(json.dumps(base))
    for _ in range(data.draw(st.integers(1, 3))):
        paths = list(paths_of(doc))
        path = data.draw(st.sampled_from(paths))
        if not path:
            doc = data.draw(values)
            continue
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if data.draw(st.booleans()) and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = data.draw(values)
    return doc


def dump(doc: object, as_json: bool) -> str:
    return json.dumps(doc) if as_json else yaml.safe_dump(doc)


FUZZ = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@FUZZ
@given(data=st.data(), as_json=st.booleans())
def test_fuzzed_recipes_never_crash(data: st.DataObject, as_json: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        shutil.copytree(EXAMPLES / "tiny", folder / "tiny")
        recipe = folder / ("r.json" if as_json else "r.yaml")
        recipe.write_text(dump(mutated(TINY_RECIPE, data), as_json))
        result = invoke(["data", "build", recipe, "--root", folder / "root"])
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(
            result.exception
        )
        assert "Traceback" not in result.output and result.exit_code in (0, 2)


@FUZZ
@given(data=st.data(), sealed=st.booleans())
def test_fuzzed_manifests_never_crash(tiny: Path, data: st.DataObject, sealed: bool) -> None:
    base = json.loads((tiny / "manifest.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "ds"
        shutil.copytree(tiny, folder)
        doc = mutated(base, data)
        if sealed and isinstance(doc, dict):
            with contextlib.suppress(TypeError, ValueError):  # canonical JSON refused a value
                reseal(doc)
        (folder / "manifest.json").write_text(json.dumps(doc))
        for command in ("verify", "inspect"):
            result = invoke(["data", command, folder])
            assert result.exception is None or isinstance(result.exception, SystemExit), repr(
                result.exception
            )
            assert "Traceback" not in result.output and result.exit_code in (0, 1, 2)
