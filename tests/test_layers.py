"""The layer rules of ARCHITECTURE.md, checked on the source: every import of a runwright module,
read with `ast` (nothing is imported), including imports inside functions and under
TYPE_CHECKING, since a lazy import is still a dependency.

Each rule names a package (or a bottom module) and what it must not import. Where the drawing is
wrong and the code right, the exception is recorded in ALLOWED with its reason; an exception that
no longer matches an import fails the test, so the list cannot go stale.
"""

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "runwright"

FACES = {"cli", "server"}
CONTROL_PLANE = {"control", "store"}


@dataclass(frozen=True)
class Import:
    source: str
    """The importing file, relative to src/runwright (`ckpt/fence.py`)."""
    line: int
    target: str
    """The imported module or name, absolute (`runwright.store.EventRecord`)."""

    @property
    def package(self) -> str:
        """The importing top-level package or bottom module (`ckpt`, `layout`, `errors`)."""
        return self.source.split("/")[0].removesuffix(".py")

    @property
    def target_package(self) -> str:
        """The imported top-level package or module; `` for the `runwright` root itself (its
        `__version__`, its lazy `init`)."""
        parts = self.target.split(".")
        return parts[1] if len(parts) > 1 and _is_module(parts[1]) else ""

    def __str__(self) -> str:
        return f"{self.source}:{self.line} imports {self.target}"


def _is_module(name: str, src: Path = SRC) -> bool:
    return (src / name).is_dir() or (src / f"{name}.py").is_file()


def _imports_of(path: Path, src: Path = SRC) -> list[Import]:
    """Every import of a runwright module in `path`, a file under `src` (runwright's folder)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    rel = path.relative_to(src)
    module = ["runwright", *rel.with_suffix("").parts]
    if module[-1] == "__init__":
        module.pop()
    package = module if path.name == "__init__.py" else module[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: `from . import x` inside runwright/ckpt/...
                base = package[: len(package) - node.level + 1]
                origin = ".".join([*base, *([node.module] if node.module else [])])
            else:
                origin = node.module or ""
            # `from a.b import c`: c may be a module or a name; both are recorded.
            targets = [origin, *(f"{origin}.{alias.name}" for alias in node.names)]
        else:
            continue
        found += [
            Import(str(rel), node.lineno, t) for t in targets if t.split(".")[0] == "runwright"
        ]
    return found


IMPORTS = [imp for path in sorted(SRC.rglob("*.py")) for imp in _imports_of(path)]


def _public_names(package: str) -> set[str]:
    """`__all__` of runwright/<package>/__init__.py, read from the source: a literal list, or
    `sorted(NAME)` of a literal mapping NAME (a package that imports its names lazily). A
    bottom module (`events.py`) publishes its public top-level names."""
    init = SRC / package / "__init__.py"
    if not init.exists() and (SRC / f"{package}.py").is_file():
        tree = ast.parse((SRC / f"{package}.py").read_text())
        defined = {
            node.name for node in tree.body if isinstance(node, ast.ClassDef | ast.FunctionDef)
        }
        return {name for name in defined if not name.startswith("_")}
    literals: dict[str, object] = {}
    for node in ast.parse(init.read_text()).body:
        if not isinstance(node, ast.Assign | ast.AnnAssign):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        value = node.value
        if "__all__" in names:
            if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "sorted":
                return set(literals[value.args[0].id])  # type: ignore[arg-type]
            return set(ast.literal_eval(value))
        if value is not None:
            try:
                literals.update(dict.fromkeys(names, ast.literal_eval(value)))
            except ValueError:
                continue
    return set()


@dataclass(frozen=True)
class Rule:
    package: str
    """Top-level package or bottom module the rule is about."""
    forbidden: frozenset[str] | None
    """Top-level packages it must not import; None: nothing of runwright except `allowed`."""
    why: str
    allowed: frozenset[str] = frozenset()
    """With forbidden=None: the only runwright packages it may import."""

    def violated_by(self, imp: Import) -> bool:
        if imp.package != self.package or imp.target_package == self.package:
            return False
        if self.forbidden is None:
            return imp.target_package not in self.allowed
        return imp.target_package in self.forbidden


RULES = [
    Rule(
        "errors",
        None,
        "the one exception hierarchy sits below everything, so every layer may raise from it",
    ),
    Rule(
        "layout",
        None,
        "the run layout is the seam both the controller and the workers import (it is bottom)",
    ),
    Rule(
        "lifetime",
        None,
        "process-lifetime helpers (parent-death signals, launch tags) serve data/, runtime/ and "
        "control/ alike, so they sit at the bottom (not drawn in ARCHITECTURE.md)",
    ),
    Rule(
        "remote",
        None,
        "object-store access (timeouts, retries, the s3fs check) serves ckpt/, data/ and the "
        "store's fence alike, so it sits at the bottom (not drawn in ARCHITECTURE.md)",
        allowed=frozenset({"errors"}),
    ),
    Rule(
        "records",
        None,
        "the one pydantic base of every record sits below everything",
    ),
    Rule(
        "events",
        None,
        "the event vocabulary is the bottom layer both sides of the seam write and read",
        allowed=frozenset({"records"}),
    ),
    Rule(
        "protocol",
        None,
        "the worker protocol is the seam both the controller and the workers import (bottom)",
        allowed=frozenset({"errors", "layout", "records"}),
    ),
    Rule(
        "spec",
        None,
        "spec/ imports nothing of ours but the bottom: errors.py to raise from (SpecError) and "
        "the record base",
        allowed=frozenset({"errors", "records"}),
    ),
    Rule(
        "sched",
        None,
        "the scheduler's core is a pure function of records (inventory, queue, usage), so the "
        "controller, the CLI and benchmarks call it and it calls none of them",
        allowed=frozenset({"errors", "records"}),
    ),
    Rule(
        "data",
        frozenset({*FACES, *CONTROL_PLANE}),
        "data/ is usable inside any training script, without the control plane",
    ),
    Rule(
        "ckpt",
        frozenset({*FACES, *CONTROL_PLANE}),
        "ckpt/ publishes through its Fence protocol, so it never needs the store or controller",
    ),
    Rule(
        "runtime",
        frozenset({*FACES, *CONTROL_PLANE}),
        "a worker talks to the control plane through the file channel, never the database",
    ),
    Rule(
        "observe",
        frozenset({*FACES, "store", "control"}),
        "observe/ sits below the store: it reads events through their shape (observe/records.py)",
    ),
    Rule(
        "store",
        frozenset({*FACES, "control"}),
        "the store holds records; the control plane above it decides what to write",
    ),
    Rule(
        "control",
        frozenset({*FACES, "runtime", "train"}),
        "the control plane is driven by the faces, never the other way, and learns the workers "
        "only through the worker protocol (runwright.protocol), never their own modules",
    ),
    *(
        Rule(
            package,
            frozenset(FACES),
            "cli/ and server/ are the faces: only parse, call one function, render",
        )
        for package in ("plan", "govern", "demo", "drill", "access", "ladder")
    ),
    Rule(
        "train",
        frozenset({*FACES, *CONTROL_PLANE}),
        "the reference trainer is a worker: it uses only what a training script could",
    ),
]

ALLOWED: dict[tuple[str, str], str] = {}
"""(importing file, imported module or name) -> why the drawing is wrong there and the code
right. Empty today: the one place the drawing's words and the code differ, spec/ raising from
errors.py, is written into the spec rule itself (errors.py imports nothing, so it is no layer)."""


def _violations(rule: Rule) -> list[Import]:
    return [
        imp for imp in IMPORTS if rule.violated_by(imp) and (imp.source, imp.target) not in ALLOWED
    ]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.package)
def test_layer_rule_holds(rule):
    assert _is_module(rule.package), f"there is no runwright.{rule.package}: update the rules"
    bad = _violations(rule)
    assert not bad, f"{rule.why}:\n" + "\n".join(f"  {imp}" for imp in bad)


def test_train_uses_only_published_apis():
    """train/ imports runwright's packages only through what they publish (their `__all__`),
    never a module or name behind it, and nothing spelled private."""
    bad = []
    for imp in IMPORTS:
        if imp.package != "train" or imp.target_package in ("", "train"):
            continue
        parts = imp.target.split(".")
        if any(part.startswith("_") for part in parts):
            bad.append(f"{imp} (private)")
        elif len(parts) == 3 and parts[2] not in _public_names(parts[1]):
            bad.append(f"{imp} (not in runwright.{parts[1]}.__all__)")
        elif len(parts) > 3:
            bad.append(f"{imp} (behind the package's published API)")
    assert not bad, "\n".join(bad)


def test_recorded_exceptions_still_match_an_import():
    present = {(imp.source, imp.target) for imp in IMPORTS}
    stale = [key for key in ALLOWED if key not in present]
    assert not stale, f"exceptions no longer needed, remove them: {stale}"


def test_the_reader_sees_lazy_typing_and_relative_imports(tmp_path):
    """The rules are only as good as the import reader: check it on a file made for it."""
    probe = tmp_path / "ckpt" / "sub" / "probe.py"
    probe.parent.mkdir(parents=True)
    (tmp_path / "store").mkdir()
    probe.write_text(
        "from typing import TYPE_CHECKING\n"
        "from .. import fence\n"
        "from ...store import Store\n"
        "if TYPE_CHECKING:\n"
        "    from runwright.control import Controller\n"
        "def later():\n"
        "    import runwright.cli.main\n"
    )
    found = {(imp.line, imp.target) for imp in _imports_of(probe, tmp_path)}
    assert found == {
        (2, "runwright.ckpt"),
        (2, "runwright.ckpt.fence"),
        (3, "runwright.store"),
        (3, "runwright.store.Store"),
        (5, "runwright.control"),
        (5, "runwright.control.Controller"),
        (7, "runwright.cli.main"),
    }
