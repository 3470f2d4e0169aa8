"""Recipe functions are code: a registry of the ones runwright vouches for, and the gate that
refuses every other one unless the caller allows code (docs/trust.md).

A recipe names functions in two fields: a `custom-v1` filter's `function` and a source's
`extract`. Naming `module:function` imports that module and calls that function on every
document, so `function: os:system` would hand each document's text to a shell. A recipe is data
(it may come from a colleague, a repository, a server), and data must never reach a shell; so a
recipe may name a *registered* function (a versioned name such as `paragraphs-v1`, below) freely,
and a `module:function` only when whoever runs the build allows code: `runwright data build
--allow-code` or `build_dataset(..., allow_code=True)`. Without that, loading the recipe fails,
naming the field, before anything is read or written.
"""

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from runwright.data.errors import RecipeError
from runwright.data.registry import Registry

if TYPE_CHECKING:
    from runwright.data.builder.recipe import Recipe

RecipeFunction = Callable[..., Any]
"""A filter `(text) -> None | reason`, or an extractor `(relative_path, text) -> strings`."""

FUNCTIONS: Registry[RecipeFunction] = Registry("recipe function")
"""Functions a recipe may name without `--allow-code`. A Python program may register its own
(`FUNCTIONS.register("mine-v1", fn)`): registering is writing code, which its author may do."""


def paragraphs(relative_path: str, text: str) -> list[str]:
    """paragraphs-v1 (an extractor): the blank-line-separated paragraphs of a text."""
    return [p.strip() for p in text.replace("\r\n", "\n").split("\n\n") if p.strip()]


def replacement_characters(text: str) -> str | None:
    """replacement-char-v1 (a filter): drop text holding U+FFFD, the mark of a failed decode."""
    return "replacement-character" if "\ufffd" in text else None


FUNCTIONS.register("paragraphs-v1", paragraphs)
FUNCTIONS.register("replacement-char-v1", replacement_characters)


def load_callable(ref: str) -> Callable[..., Any]:
    """Import `module:name`. This runs code: only `functions.check_code` decides to call it."""
    module, sep, name = ref.partition(":")
    if not sep or not module or not name:
        raise RecipeError(f"function {ref!r} must be written as 'package.module:name'")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError, TypeError) as exc:
        raise RecipeError(
            f"cannot import {ref!r} ({exc}); write it as 'package.module:name'"
        ) from None


def recipe_functions(recipe: "Recipe") -> list[tuple[str, str]]:
    """(field, reference) of every function a recipe names, e.g. ("filters[0].function", ...)."""
    found = [
        (f"sources[{k}].extract", s.extract) for k, s in enumerate(recipe.sources) if s.extract
    ]
    found += [
        (f"filters[{k}].function", f.function)
        for k, f in enumerate(recipe.filters)
        if f.kind == "custom-v1" and f.function
    ]
    return found


def resolve_function(ref: str) -> RecipeFunction:
    """A registered function, else the imported `module:function` (only after `check_code`)."""
    if ref in FUNCTIONS.names():
        return FUNCTIONS.get(ref)
    return load_callable(ref)


def check_code(recipe: "Recipe", allow_code: bool, where: str = "recipe") -> None:
    """Refuse a recipe naming unregistered functions unless code is allowed; with code allowed,
    import each one now, so a wrong name fails the build before it starts, not per document."""
    registered = FUNCTIONS.names()
    for field, ref in recipe_functions(recipe):
        if ref in registered:
            continue
        if not allow_code:
            raise RecipeError(
                f"{where}: {field} names {ref!r}, which is code, not a registered recipe "
                f"function ({', '.join(registered)}). Use a registered one, or, if you trust "
                "this recipe to run code as you, pass --allow-code (library: allow_code=True)"
            )
        fn = load_callable(ref)
        if not callable(fn):
            raise RecipeError(f"{where}: {field} names {ref!r}, which is not callable")
