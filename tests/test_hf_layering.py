"""The Hugging Face import's place in the layering: checkpoint does not import interop (the
folder format registers itself), and no module imports another module's private name."""

from __future__ import annotations

import ast
from pathlib import Path

import attnviz

ROOT = Path(attnviz.__file__).parent


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            yield node.level, node.module or "", [a.name for a in node.names]


def test_checkpoint_and_weights_do_not_import_interop():
    for name in ("checkpoint.py", "weights.py"):
        mods = [m for _, m, _ in _imports(ROOT / name)]
        assert not any("interop" in m for m in mods), (name, mods)


def test_no_loading_module_imports_a_private_name():
    """checkpoint, weights and interop (the modules that load models) use public names only."""
    paths = [ROOT / "checkpoint.py", ROOT / "weights.py", *(ROOT / "interop").rglob("*.py")]
    bad = [
        f"{path.relative_to(ROOT)}: {module}.{n}"
        for path in paths
        for _, module, names in _imports(path)
        for n in names
        if n.startswith("_") and not n.startswith("__")
    ]
    assert not bad, bad


def test_hf_folders_open_through_the_registered_format():
    from attnviz.checkpoint import FOLDER_FORMATS
    from attnviz.interop.hf import is_hf_folder, load_hf_checkpoint

    assert (is_hf_folder, load_hf_checkpoint) in FOLDER_FORMATS
