"""The tokenizer stage: load a HF `tokenizers` tokenizer.json, or train byte-level BPE.

The trained tokenizer is byte-level (GPT-2 style pre-tokenization, 256-symbol initial alphabet),
so it never produces unknown tokens; the EOD token is its first special token (id 0).
Its identity is the sha256 of the saved tokenizer.json, which the manifest and every cursor
carry; a different tokenizer is a different dataset.
"""

from collections.abc import Iterable, Iterator
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from runwright.data.builder.recipe import TokenizerRecipe
from runwright.data.errors import RecipeError
from runwright.data.format.dataset import file_sha256
from runwright.data.format.manifest import TokenizerRecord


def _bounded(texts: Iterable[str], max_chars: int) -> Iterator[str]:
    used = 0
    for text in texts:
        if used >= max_chars:
            return
        piece = text[: max_chars - used]
        used += len(piece)
        yield piece


def train_bpe(texts: Iterable[str], recipe: TokenizerRecipe) -> Tokenizer:
    spec = recipe.train
    if spec is None:
        raise RecipeError("tokenizer.train is required to train a tokenizer")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        min_frequency=spec.min_frequency,
        special_tokens=[recipe.eod_token],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_bounded(texts, spec.max_training_chars), trainer=trainer)
    return tok


def load_tokenizer(recipe: TokenizerRecipe) -> Tokenizer:
    if recipe.path is None:
        raise RecipeError("tokenizer.path is required to load a tokenizer")
    try:
        tok = Tokenizer.from_file(recipe.path)
    except Exception as exc:  # tokenizers raises plain Exception for unreadable files
        raise RecipeError(f"cannot load tokenizer {recipe.path}: {exc}") from None
    if tok.token_to_id(recipe.eod_token) is None:
        raise RecipeError(
            f"tokenizer {recipe.path} has no token {recipe.eod_token!r}; set tokenizer.eod_token "
            "to one of its special tokens"
        )
    return tok


def save_and_describe(
    tok: Tokenizer, folder: Path, recipe: TokenizerRecipe, trained: bool
) -> TokenizerRecord:
    path = Path(folder) / "tokenizer.json"
    tok.save(str(path))
    eod = tok.token_to_id(recipe.eod_token)
    if eod is None:
        raise RecipeError(f"tokenizer has no EOD token {recipe.eod_token!r}")
    specials = {
        t.content: tok.token_to_id(t.content)
        for t in tok.get_added_tokens_decoder().values()
        if t.special
    }
    return TokenizerRecord(
        sha256=file_sha256(path),
        vocab_size=tok.get_vocab_size(with_added_tokens=True),
        eod_token=recipe.eod_token,
        eod_token_id=eod,
        special_tokens=dict(sorted(specials.items())),
        trained=trained,
    )
