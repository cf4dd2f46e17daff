"""The package reads as one design: two floors (the chapters' mechanisms, the engine above them), modules a
reader can hold in one sitting, one name per function, imports in course order.

Only the source is read (`ast`), nothing is imported or run: the test takes well under a second.
"""

import ast
import collections
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "transformer"
SOURCES = sorted(PACKAGE.rglob("*.py"))


def module_name(path: Path) -> str:
    """src/transformer/engine/config.py -> "engine.config"."""
    return ".".join(path.relative_to(PACKAGE).with_suffix("").parts)


MODULES = {module_name(p): ast.parse(p.read_text(encoding="utf-8")) for p in SOURCES}
ENGINE = {m for m in MODULES if m.startswith("engine.")}
# What both floors stand on: the error family, file writes, the refusals of what a user
# hands in (the doors' rules, written once) and the memory probe they ask. Exported by the
# chapter that first needs each, imported by any module, importing only each other.
BOTTOM = {
    "errors",
    "files",
    "checks",
    "data_checks",
    "search_checks",
    "stats_checks",
    "memory",
}
CHAPTERS = set(MODULES) - ENGINE - {"__init__", "__main__", "engine.__init__"}
LONGEST_MODULE = 400  # lines: a module a reader can hold in one sitting (STYLE.md)
# Modules still over it, each at most its length today: the list only shrinks, and a
# module in it may not grow (the redesign splits them: two ideas each).
OVER_ONE_SITTING = {}


def functions(tree: ast.Module):
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]


def code_lines(fn: ast.FunctionDef) -> int:
    """Lines from `def` to the last statement, minus the docstring's."""
    lines = fn.end_lineno - fn.lineno + 1
    first = fn.body[0]
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        lines -= first.end_lineno - first.lineno + 1
    return lines


def course_position() -> dict[str, int]:
    """Each generated module -> the position in `_toc.yml` of the notebook it is exported from."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    order = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    position = {}
    for path in SOURCES:
        header = re.search(
            r"File to edit: (?:\.\./)+(notebooks/\S+)\.ipynb",
            path.read_text(encoding="utf-8"),
        )
        if header:
            position[module_name(path)] = order.index(header.group(1))
    return position


def package_imports(module: str) -> set[str]:
    """The package's modules that `module` imports (at the top or inside a function), as MODULES names."""
    package = module.split(".")[
        :-1
    ]  # the folder the module sits in, below transformer/
    found = set()
    for node in ast.walk(MODULES[module]):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                names = [node.module] if node.module else [a.name for a in node.names]
                found.update(".".join([*base, n]) for n in names)
            elif (node.module or "").startswith("transformer."):
                found.add(node.module.removeprefix("transformer."))
            elif node.module == "transformer":
                found.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(
                a.name.removeprefix("transformer.")
                for a in node.names
                if a.name.startswith("transformer.")
            )
    return found & set(MODULES)


def test_a_module_fits_in_one_sitting():
    """About 400 lines a module; the few still over it may not grow, and leave the list once split."""
    lines = {
        module_name(p): len(p.read_text(encoding="utf-8").splitlines()) for p in SOURCES
    }
    over = {
        m: n for m, n in lines.items() if n > OVER_ONE_SITTING.get(m, LONGEST_MODULE)
    }
    assert not over, (
        f"modules over one sitting ({LONGEST_MODULE} lines, or their ceiling): {over}"
    )
    split = sorted(
        m for m, n in OVER_ONE_SITTING.items() if lines.get(m, 0) <= LONGEST_MODULE
    )
    assert not split, f"{split} fit in one sitting now: take them off OVER_ONE_SITTING"


def test_the_bottom_floor_imports_only_itself():
    upward = sorted((m, d) for m in BOTTOM for d in package_imports(m) - BOTTOM)
    assert not upward, f"the bottom floor imports modules above it: {upward}"


def top_function(module: str, name: str) -> ast.FunctionDef:
    return next(
        n
        for n in MODULES[module].body
        if isinstance(n, ast.FunctionDef) and n.name == name
    )


def called(fn: ast.FunctionDef) -> set[str]:
    """The names a function calls: f(...), x.f(...)."""
    return {
        n.func.id if isinstance(n.func, ast.Name) else n.func.attr
        for n in ast.walk(fn)
        if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute))
    }


def test_the_beam_search_and_the_training_loop_each_hold_their_loop_in_one_function():
    """A loop a reader can hold is one function: the search's and the run's loops are
    in their bodies, not cut into helpers that pass parallel lists to each other."""
    search, run = (
        top_function("decoding", "_beam_search"),
        top_function("engine.trainer", "_train"),
    )
    for fn in (search, run):
        assert any(isinstance(n, ast.While) for n in ast.walk(fn)), fn.name
    helpers = {n for n in called(search) if n.startswith("_")}
    assert helpers <= {"_start"}, f"_beam_search calls helpers of its loop: {helpers}"
    door = top_function("decoding", "beam_search")
    assert not any(isinstance(n, (ast.While, ast.For)) for n in ast.walk(door))
    assert {"train_step", "validation_metrics", "collate"} <= called(run)


def test_the_chapters_never_import_the_engine():
    """Two floors: the chapters' mechanisms stand on nothing above them; the engine stands on the chapters."""
    upward = sorted(
        (m, d)
        for m in CHAPTERS
        for d in package_imports(m)
        if d in ENGINE or d == "engine"
    )
    assert not upward, f"chapter modules importing the engine: {upward}"
    assert ENGINE >= {
        "engine.config",
        "engine.checkpoints",
        "engine.trainer",
        "engine.cli",
    }


def test_no_two_top_level_functions_or_classes_share_a_name():
    where = collections.defaultdict(list)
    for m, tree in MODULES.items():
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                where[node.name].append(m)
    assert not {name: ms for name, ms in where.items() if len(ms) > 1}


def test_no_module_imports_one_the_course_builds_later():
    """A chapter's module uses only what the chapters before it (or the same notebook) built: the plumbing the
    chapters need (errors, atomic files, the tokenizer) is exported by the chapter that first needs it, and
    what needs the appendices (loading a shipped model, scoring a named split) is exported by them."""
    position = course_position()
    forward = {
        (m, d)
        for m in position
        if m not in BOTTOM
        for d in package_imports(m)
        if d in position and d not in BOTTOM and position[d] > position[m]
    }
    assert not forward, (
        f"modules importing one the course builds later: {sorted(forward)}"
    )


def test_no_module_imports_a_private_name_of_another():
    """A leading underscore means "this module's own": what another module needs is public, named once."""
    private = sorted(
        (m, node.module or ".", a.name)
        for m, tree in MODULES.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and (node.level == 1 or (node.module or "").startswith("transformer"))
        for a in node.names
        if a.name.startswith("_") and not a.name.endswith("__")  # __version__ is public
    )
    assert not private, (
        f"(module, from, private name) imported across modules: {private}"
    )


def test_no_notebook_directive_leaks_into_the_package():
    leaked = [
        f"{p.name}:{i}"
        for p in SOURCES
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if line.lstrip().startswith("#|")
    ]
    assert not leaked, f"notebook directives (#| ...) in generated modules: {leaked}"


def test_tools_and_benches_use_the_package_not_each_other():
    """A tool or bench needs another's function: that function belongs in the package. Only bench/timing.py, the
    benches' one shared helper beside them, is imported from a script's own folder; nobody edits sys.path."""
    for folder, allowed in (("tools", set()), ("bench", {"timing"})):
        scripts = {p.stem for p in (ROOT / folder).glob("*.py")}
        for path in sorted((ROOT / folder).glob("*.py")):
            text = path.read_text(encoding="utf-8")
            assert "sys.path" not in text, f"{folder}/{path.name} edits sys.path"
            for node in ast.walk(ast.parse(text)):
                names = (
                    [node.module]
                    if isinstance(node, ast.ImportFrom) and node.module
                    else [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else []
                )
                found = {n.split(".")[0] for n in names} & (scripts - allowed)
                assert not found, f"{folder}/{path.name} imports {found} from {folder}/"


def test_train_and_data_export_only_what_they_define():
    """Tools, tests, benches and notebooks import a name from the module that defines it, not via a hub."""
    for hub in ("engine.trainer", "data"):
        tree = MODULES[hub]
        defined = {
            n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))
        }
        exported = next(
            ast.literal_eval(n.value)
            for n in tree.body
            if isinstance(n, ast.Assign)
            and getattr(n.targets[0], "id", "") == "__all__"
        )
        assert set(exported) <= defined, (hub, set(exported) - defined)
    users = [
        *ROOT.glob("tools/*.py"),
        *ROOT.glob("tests/*.py"),
        *ROOT.glob("bench/*.py"),
        *ROOT.glob("bench/*.sh"),
        *ROOT.glob("notebooks/*.ipynb"),
    ]
    pattern = re.compile(
        r"from transformer\.(engine\.trainer|data) import (?:\(([^)]*)\)|([\w, ]+))"
    )
    for path in users:
        text = path.read_text(encoding="utf-8").replace('\\n",\n    "', "\n")
        for hub, in_parentheses, on_one_line in pattern.findall(text):
            names = in_parentheses or on_one_line
            tree = MODULES[hub]
            defined = {
                n.name
                for n in tree.body
                if isinstance(n, (ast.FunctionDef, ast.ClassDef))
            }
            for name in (x.strip() for x in names.replace("\n", ",").split(",")):
                assert not name or name in defined, (
                    f"{path.name} imports {name} from transformer.{hub}"
                )


# A rule has one home: a rule about the model's sizes in the part it belongs to (configs
# and other parts call it), a rule about what a user hands in in checks.py or search_checks.py, the doors'
# module (the public functions call it where the input enters; the mechanisms inside
# trust their callers). Each message below is the rule's own sentence.
ONE_HOME = {
    "must be a tensor of at least two dimensions": "checks.py",  # attention's Q, K, V
    "must be a boolean tensor": "checks.py",  # a mask
    "tensor of token ids": "search_checks.py",  # a search's source batch
    "outside the source vocabulary": "search_checks.py",
    "give an integer from 1 (greedy decoding)": "search_checks.py",  # the beam
    "the length penalty's exponent": "search_checks.py",  # alpha
    "the hypotheses returned per sentence": "search_checks.py",  # n_best
    "must be a list of {items}": "checks.py",  # translators, tokenizers, the dataset
    "is not valid Unicode": "checks.py",
    "must be an integer >= 1": "search_checks.py",  # a translator's batch size
    "1 cuts nothing": "search_checks.py",  # sampling's top_p
    "does not exist: choose 0 to": "checks.py",  # chapter 14's layer and head numbers
    ": True or False": "checks.py",  # a yes/no setting
    "is not divisible by num_heads": "multihead.py",  # head_width
    "must divide num_heads": "attention_cost.py",  # key_value_heads
    "rotate pairs of dimensions": "modern.py",  # rotary_angles
    "must be a positive even number": "embedding.py",  # the sinusoid
    "a stack needs at least one layer": "blocks.py",  # layer_stack
    "unknown setting(s)": "engine/model_config.py",  # a file's keys and Python's keywords
    # chapter 08's config, whose vocabulary rules the engine's ModelConfig asks too
    "is not a token id of both vocabularies": "model_checks.py",
    "needs one shared vocabulary": "model_checks.py",
}


@pytest.mark.parametrize("message", ONE_HOME)
def test_each_rule_about_the_model_is_stated_in_one_place(message):
    homes = [
        f"{path.relative_to(PACKAGE).as_posix()}:{n}"
        for path in SOURCES
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if message in line
    ]
    assert len(homes) == 1 and homes[0].startswith(ONE_HOME[message] + ":"), (
        f"{message!r} is stated at {homes}: one rule, one place ({ONE_HOME[message]})"
    )


def numeric_defaults(tree: ast.Module):
    """(parameter, value, function) for every parameter whose default is a number
    written in the signature, other than 0 and 1."""
    for fn in functions(tree):
        a = fn.args
        positional = a.posonlyargs + a.args
        pairs = list(zip(positional[len(positional) - len(a.defaults) :], a.defaults))
        pairs += [(k, d) for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
        for arg, default in pairs:
            if (
                isinstance(default, ast.Constant)
                and type(default.value) in (int, float)
                and default.value not in (0, 1)
            ):
                yield arg.arg, default.value, fn.name


def test_a_default_setting_is_written_in_one_signature_and_named_everywhere_else():
    """The output-length rule, the batch of sentences, the held-out share, sacreBLEU's
    resamples, the rotary base: a number that two signatures share is a constant
    they both name, so that changing it changes it everywhere. (The layers' dropout
    = 0.1 is the paper's rate in each layer's own signature, as torch.nn writes it.)"""
    places = collections.defaultdict(list)
    for name, tree in MODULES.items():
        for arg, value, fn in numeric_defaults(tree):
            if arg != "dropout":
                places[arg, value].append(f"{name}.{fn}")
    repeated = {k: v for k, v in places.items() if len(v) > 1}
    assert not repeated, repeated


def test_a_chapter_module_imported_alone_leaves_the_engine_unloaded():
    """`import transformer.attention` (or any chapter) runs the package's __init__, which
    imports the engine's names only when first used: the floors hold at run time too."""
    code = (
        "import sys, transformer.attention, transformer.decoding; "
        "print(sorted(m for m in sys.modules if m.startswith('transformer.engine')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and result.stdout.strip() == "[]", result
