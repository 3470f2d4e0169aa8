"""Importing Megatron-LM indexed datasets, written here byte by byte from the format description."""

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.data import DataError, DataLoader, ShardCorruptError, read_manifest, verify_dataset
from runwright.data.builder.megatron import import_megatron
from runwright.spec import DataSpec

EOD = 7
VOCAB = 100_000  # above 65,536: Megatron stores int32 (dtype code 4)


def write_megatron_pair(prefix: Path, documents: list[list[int]], dtype=np.int32, code=4) -> None:
    """What Megatron's builder writes: tokens back to back; MMIDIDX header, sizes, pointers."""
    tokens = np.concatenate([np.asarray(d, dtype=dtype) for d in documents])
    prefix.with_suffix(".bin").write_bytes(tokens.tobytes())
    sizes = np.array([len(d) for d in documents], dtype=np.int32)
    pointers = np.concatenate([[0], np.cumsum(sizes[:-1])]).astype(np.int64) * tokens.itemsize
    doc_index = np.arange(len(documents) + 1, dtype=np.int64)
    header = b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", code)
    header += struct.pack("<Q", len(documents)) + struct.pack("<Q", doc_index.shape[0])
    prefix.with_suffix(".idx").write_bytes(
        header + sizes.tobytes() + pointers.tobytes() + doc_index.tobytes()
    )


def corpus(seed: int, count: int) -> list[list[int]]:
    """Documents as `preprocess_data.py --append-eod` leaves them: EOD as the last token."""
    rng = np.random.default_rng(seed)
    return [
        [*rng.integers(8, VOCAB, size=int(rng.integers(1, 60))).tolist(), EOD] for _ in range(count)
    ]


def test_imported_documents_are_read_by_the_loader(tmp_path: Path) -> None:
    web, code = corpus(0, 50), corpus(1, 30)
    write_megatron_pair(tmp_path / "web_text_document", web)
    write_megatron_pair(tmp_path / "code_text_document", code)
    result = import_megatron(
        {"web": [tmp_path / "web_text_document"], "code": [tmp_path / "code_text_document.bin"]},
        tmp_path / "root",
        vocab_size=VOCAB,
        eod_token_id=EOD,
        strip_eod=True,
    )
    assert result.documents == 80 and result.eod_stripped == 80
    assert result.tokens == sum(len(d) - 1 for d in web + code)
    manifest = read_manifest(result.folder)
    assert manifest.dataset_id == result.dataset_id
    assert {i.path for i in manifest.lineage.inputs} == {
        "web_text_document.bin",
        "web_text_document.idx",
        "code_text_document.bin",
        "code_text_document.idx",
    }
    assert manifest.lineage.stages[0].parameters == {"strip_eod": True, "eod_token_id": EOD}
    assert verify_dataset(result.folder).ok
    # One source read in full, in shuffled order: every document once, one EOD after each.
    web_only = {"sources": [{"name": "web", "weight": 1, "exhaustion": "stop"}]}
    data = DataSpec(sequence_length=16, mixture=web_only)
    with DataLoader(result.folder, data, global_batch_samples=1, epochs=1) as loader:
        stream = np.concatenate([b.tokens.numpy().ravel() for b in loader])
    seen = sorted(tuple(d) for d in np.split(stream, np.flatnonzero(stream == EOD) + 1) if len(d))
    complete = [d for d in seen if d[-1] == EOD]
    assert set(complete) <= {tuple(d) for d in web}
    assert len(complete) >= 40  # the rest is cut by the last, partial row


def test_importing_twice_gives_the_same_dataset_and_keeps_it(tmp_path: Path) -> None:
    write_megatron_pair(tmp_path / "a", corpus(2, 20))
    first = import_megatron(
        {"a": [tmp_path / "a"]}, tmp_path / "root", vocab_size=VOCAB, eod_token_id=EOD
    )
    marker = first.folder / "manifest.json"
    before = marker.stat().st_mtime_ns
    again = import_megatron(
        {"a": [tmp_path / "a"]}, tmp_path / "root", vocab_size=VOCAB, eod_token_id=EOD
    )
    assert again.dataset_id == first.dataset_id and again.reused
    assert marker.stat().st_mtime_ns == before
    assert not list((tmp_path / "root" / "datasets").glob(".import-*"))
    stripped = import_megatron(
        {"a": [tmp_path / "a"]},
        tmp_path / "root",
        vocab_size=VOCAB,
        eod_token_id=EOD,
        strip_eod=True,
    )
    assert stripped.dataset_id != first.dataset_id


def test_uint16_pairs_are_imported(tmp_path: Path) -> None:
    docs = [[1, 2, 3], [4, 5], [6]]
    write_megatron_pair(tmp_path / "small", docs, dtype=np.uint16, code=8)
    result = import_megatron(
        {"s": [tmp_path / "small"]}, tmp_path / "root", vocab_size=50_257, eod_token_id=0
    )
    assert result.documents == 3 and result.tokens == 6


def test_bad_inputs_name_the_problem(tmp_path: Path) -> None:
    write_megatron_pair(tmp_path / "big", [[5, 70_000]])
    with pytest.raises(DataError, match=r"token id 70000.*--vocab-size"):
        import_megatron(
            {"s": [tmp_path / "big"]}, tmp_path / "root", vocab_size=50_000, eod_token_id=0
        )
    with pytest.raises(DataError, match="does not exist"):
        import_megatron(
            {"s": [tmp_path / "nope"]}, tmp_path / "root", vocab_size=10, eod_token_id=0
        )
    with pytest.raises(DataError, match="--eod-token-id"):
        import_megatron(
            {"s": [tmp_path / "big"]}, tmp_path / "root", vocab_size=VOCAB, eod_token_id=VOCAB
        )
    (tmp_path / "big.bin").write_bytes(b"\x00" * 4)
    with pytest.raises(ShardCorruptError, match=r"big\.bin"):
        import_megatron(
            {"s": [tmp_path / "big"]}, tmp_path / "root", vocab_size=VOCAB, eod_token_id=0
        )
    assert not (tmp_path / "root" / "datasets").exists() or not any(
        (tmp_path / "root" / "datasets").iterdir()
    )


def test_cli_imports_and_refuses_bad_input_without_a_traceback(tmp_path: Path) -> None:
    write_megatron_pair(tmp_path / "web", corpus(3, 10))
    write_megatron_pair(tmp_path / "code", corpus(4, 10))
    runner = CliRunner()
    args = [
        "data",
        "import-megatron",
        str(tmp_path / "web"),
        f"code={tmp_path / 'code'}",
        "--vocab-size",
        str(VOCAB),
        "--eod-token-id",
        str(EOD),
        "--strip-eod",
        "--root",
        str(tmp_path / "root"),
        "--json",
    ]
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    summary = json.loads(out.output)
    assert summary["documents"] == 20 and summary["eod_stripped"] == 20
    manifest = read_manifest(Path(summary["folder"]))
    assert set(manifest.sources("train")) == {"megatron", "code"}
    bad = runner.invoke(app, [*args[:4], "--vocab-size", "10", "--eod-token-id", "0", "--json"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    assert "--vocab-size" in bad.output


def test_export_writes_megatron_pairs_with_eod_and_round_trips(tmp_path: Path) -> None:
    from runwright.data import export_megatron
    from runwright.data.format.pretokenized import write_pretokenized

    docs = {"code": [[11, 12, 13], [14]], "prose": [[21, 22], [23, 24, 25], [26]]}
    write_pretokenized(tmp_path / "ds", docs, vocab_size=1000, eod_token_id=2)
    result = export_megatron(tmp_path / "ds", tmp_path / "out" / "corpus")
    assert result.documents == 5 and result.tokens == 10 + 5
    prefix = result.prefixes["prose"]
    assert prefix.name == "corpus_prose_document"
    # The files, read back by the format description: uint16 (code 8), EOD after every document.
    raw = prefix.with_suffix(".idx").read_bytes()
    assert raw[:9] == b"MMIDIDX\x00\x00" and raw[17] == 8
    assert struct.unpack_from("<QQ", raw, 18) == (3, 4)
    assert np.frombuffer(raw, np.int32, 3, 34).tolist() == [3, 4, 2]
    assert np.frombuffer(raw, np.int64, 3, 46).tolist() == [0, 6, 14]
    stream = np.frombuffer(prefix.with_suffix(".bin").read_bytes(), np.uint16).tolist()
    assert stream == [21, 22, 2, 23, 24, 25, 2, 26, 2]
    # Importing the export with --strip-eod gives back the same documents.
    back = import_megatron(
        {src: [p] for src, p in result.prefixes.items()},
        tmp_path / "root",
        vocab_size=1000,
        eod_token_id=2,
        strip_eod=True,
    )
    assert back.documents == 5 and back.tokens == 10
    with pytest.raises(DataError, match="never overwrites"):
        export_megatron(tmp_path / "ds", tmp_path / "out" / "corpus")


def test_cli_exports(tmp_path: Path) -> None:
    from runwright.data.format.pretokenized import write_pretokenized

    write_pretokenized(tmp_path / "ds", {"web": [[5, 6], [7]]}, vocab_size=100, eod_token_id=0)
    out = CliRunner().invoke(
        app, ["data", "export-megatron", str(tmp_path / "ds"), str(tmp_path / "m"), "--json"]
    )
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["tokens"] == 5
    again = CliRunner().invoke(
        app, ["data", "export-megatron", str(tmp_path / "ds"), str(tmp_path / "m"), "--json"]
    )
    assert again.exit_code == 2 and "Traceback" not in again.output
