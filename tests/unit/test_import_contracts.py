"""The package layers: import-linter's contracts (``[tool.importlinter]`` in pyproject.toml) hold, and bite.

``make test`` runs these, so CI checks the layers as it checks behaviour: protos <- common <- processor |
trainer | envclient <- cli, the processor free of trainer code and TensorFlow, no import cycles.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("protos", "common", "processor", "trainer", "envclient", "cli")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the packages under ``root``, with the contracts of ``root/pyproject.toml``."""
    env = {**os.environ, "PYTHONPATH": str(root)}  # analyse this checkout, not an installed copy
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_layer_contracts_hold() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        (
            "processor/wire.py",
            "import tensorflow",
            "The processor runs policies without trainer code, TensorFlow or the ONNX converter",
        ),
        (
            "processor/wire.py",
            "import trainer.networks",
            "The processor runs policies without trainer code, TensorFlow or the ONNX converter",
        ),
        (
            "processor/wire.py",
            "import onnx",
            "The processor runs policies without trainer code, TensorFlow or the ONNX converter",
        ),
        ("trainer/export.py", "import processor.inference", "The trainers never import the processor"),
        ("common/specs.py", "import cli.main", "common imports none of the packages above it"),
        ("envclient/runner.py", "import common.config_sections", "envclient needs nothing from the YAML schema"),
        ("protos/__init__.py", "import common.errors", "Layers: protos <- common"),
        ("processor/metrics.py", "import processor.server", "No import cycles between the modules of a package"),
    ],
    ids=[
        "processor-tensorflow",
        "processor-trainer",
        "processor-onnx",
        "trainer-processor",
        "common-cli",
        "envclient-yaml",
        "protos-common",
        "cycle",
    ],
)
def test_a_violation_breaks_its_contract(tmp_path: Path, module: str, line: str, broken: str) -> None:
    """Each contract fails on a deliberate violation in a copy of the tree (so none checks nothing)."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    path = tmp_path / module
    path.write_text(path.read_text() + f"\n{line}  # deliberate violation\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0, result.stdout
    broken_section = result.stdout.split("Broken contracts")[-1]
    assert broken in " ".join(broken_section.split()), result.stdout


def test_the_processor_loads_neither_h5py_nor_tensorflow() -> None:
    """Serving and inference import no buffer code (h5py) and no trainer framework."""
    code = (
        "import sys\n"
        "import processor.server, processor.servicer, processor.inference\n"
        "print(sorted(m for m in ('h5py', 'tensorflow', 'keras', 'trainer') if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", result.stdout
