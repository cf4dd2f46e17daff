"""The GPU check runs the first time a GPU is lent: nothing it imports is missing from the GPU machine.

The GPU machine has no network and a fixed set of packages (bench/gpu-image-packages.txt, with the date it was
read). Whatever the package imports when it is imported, and whatever bench/gpu_check.sh and the benches it runs
import, must be in that list or among the wheels `tools/gpu_wheels.py` carries. A new dependency fails here, on
the CPU, instead of in the GPU machine's few minutes. Imports inside a function of the package (optional extras:
the figures, ONNX) may instead be an optional dependency in pyproject.toml; an import in an `except ImportError`
branch is a fallback (tomli for Python 3.10) and is not needed where the first choice exists.
"""

import ast
import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import tomllib

from helpers import ROOT, load_tool

PACKAGE = ROOT / "src" / "transformer"
CHECK = ROOT / "bench" / "gpu_check.sh"
WHEELS = load_tool("gpu_wheels")
IMAGE = WHEELS.image_packages()
CARRIED = {WHEELS.normal(n) for n in WHEELS.WHEELS}
DISTRIBUTIONS = (
    importlib.metadata.packages_distributions()
)  # top-level module -> the distributions providing it


def _fallback(node: ast.AST, parents: dict) -> bool:
    """True when `node` sits in an `except ImportError` (or ModuleNotFoundError) handler."""
    while node in parents:
        node = parents[node]
        if (
            isinstance(node, ast.ExceptHandler)
            and isinstance(node.type, ast.Name)
            and node.type.id in ("ImportError", "ModuleNotFoundError")
        ):
            return True
    return False


def imports(tree: ast.AST, where: str) -> list[tuple[str, bool, str]]:
    """(top-level module, inside a function?, where) of every absolute import that is not a fallback."""
    parents = {
        child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        if _fallback(node, parents):
            continue
        in_function, up = False, node
        while up in parents:
            up = parents[up]
            in_function = in_function or isinstance(
                up, (ast.FunctionDef, ast.AsyncFunctionDef)
            )
        found += [
            (n.split(".")[0], in_function, f"{where}:{node.lineno}") for n in names
        ]
    return found


def third_party(found, local=()) -> list[tuple[str, bool, str]]:
    return [
        f
        for f in found
        if f[0] not in sys.stdlib_module_names and f[0] not in ("transformer", *local)
    ]


def distribution(module: str, where: str) -> str:
    names = DISTRIBUTIONS.get(module)
    assert names, f"{where}: `import {module}` names no installed distribution"
    return WHEELS.normal(names[0])


def check_script_python() -> list[tuple[ast.AST, str]]:
    """The Python the check runs: its heredocs, and the bench scripts it starts (with their local modules)."""
    text = CHECK.read_text()
    trees = [
        (ast.parse(block), f"gpu_check.sh heredoc {i}")
        for i, block in enumerate(re.findall(r"<<'EOF'\n(.*?)\nEOF\n", text, re.S))
    ]
    benches = sorted(set(re.findall(r"bench/(\w+)\.py", text)))
    assert benches, "the check starts no bench script: read them another way"
    for name in benches + [
        p.stem for p in (ROOT / "bench").glob("*.py") if p.stem not in benches
    ]:
        path = ROOT / "bench" / f"{name}.py"
        if name in benches or any(
            f"import {name}" in (ROOT / "bench" / f"{b}.py").read_text()
            for b in benches
        ):
            trees.append((ast.parse(path.read_text()), f"bench/{name}.py"))
    return trees


def missing_from_image(found: list[tuple]) -> set[str]:
    """The imports (module, _, where) whose distribution is neither in the GPU image
    nor carried as a wheel, each as "module (where)"."""
    return {
        f"{m} ({where})"
        for m, _, where in found
        if distribution(m, where) not in IMAGE | CARRIED
    }


def test_the_image_list_is_dated_and_lists_the_image_s_packages():
    header = (ROOT / "bench" / "gpu-image-packages.txt").read_text().splitlines()[0]
    assert re.search(r"as read on \d{4}-\d{2}-\d{2}", header), header
    assert {"torch", "safetensors", "sentencepiece"} <= IMAGE and len(IMAGE) > 50


def test_what_importing_the_package_needs_is_in_the_gpu_image_or_carried_as_a_wheel():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += [
            f
            for f in third_party(imports(ast.parse(path.read_text()), path.name))
            if not f[1]
        ]
    missing = missing_from_image(found)
    assert not missing, (
        f"the GPU image lacks {sorted(missing)}: add the distribution to WHEELS in "
        "tools/gpu_wheels.py (and check that its requirements are met)"
    )
    assert {distribution(m, w) for m, _, w in found} >= {
        "pydantic",
        "torch",
        "safetensors",
    }  # the scan sees imports


def test_what_the_gpu_check_and_its_benches_import_is_in_the_image_or_carried():
    found = []
    for tree, where in check_script_python():
        found += third_party(
            imports(tree, where), local=[p.stem for p in (ROOT / "bench").glob("*.py")]
        )
    missing = missing_from_image(found)
    assert not missing, (
        f"the GPU image lacks {sorted(missing)}: carry it (tools/gpu_wheels.py) or do without"
    )
    assert any(m == "torch" for m, _, _ in found)


def test_an_import_inside_a_package_function_is_in_the_image_carried_or_an_optional_extra():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    optional = {
        WHEELS.normal(re.split(r"[\s<>=!~;\[]", spec)[0])
        for specs in extras.values()
        for spec in specs
    }
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += [
            f
            for f in third_party(imports(ast.parse(path.read_text()), path.name))
            if f[1]
        ]
    missing = {
        f"{m} ({where})"
        for m, _, where in found
        if distribution(m, where) not in IMAGE | CARRIED | optional
    }
    assert not missing, missing


def test_the_check_stops_in_its_first_step_with_one_line_when_no_cuda_device_is_visible(
    tmp_path,
):
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHON": sys.executable,
        "OUT": str(tmp_path),
    }
    result = subprocess.run(
        ["bash", str(CHECK)], capture_output=True, text=True, env=env, timeout=300
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "Traceback" not in output and output.count("FAIL") == 1, output
    assert (
        output.splitlines()[0].startswith("torch ")
        and "GPU none" in output.splitlines()[0]
    ), output
    assert "FAIL: no CUDA device is visible" in output and "===" not in output, (
        output
    )  # no step began
