"""The committed generated code matches every ``protos/*.proto`` byte for byte.

Regenerates with the pinned grpcio-tools exactly as ``make protos`` does (same flags, and ``-I``
at a copy of the repository layout, so the generated import paths are identical) and compares.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import protos

PROTOS_DIR = Path(protos.__file__).resolve().parent
GENERATED = [
    "stepstream_pb2.py",
    "stepstream_pb2.pyi",
    "stepstream_pb2_grpc.py",
    "mlagents_demo_pb2.py",
    "mlagents_demo_pb2.pyi",
    "mlagents_unity_pb2.py",
    "mlagents_unity_pb2.pyi",
    "unity_to_external_pb2.py",
    "unity_to_external_pb2.pyi",
    "unity_to_external_pb2_grpc.py",
]


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("protoc")
    (root / "protos").mkdir()
    shutil.copy(PROTOS_DIR / "stepstream.proto", root / "protos" / "stepstream.proto")
    command = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        "-I.",
        "--python_out=.",
        "--pyi_out=.",
        "--grpc_python_out=.",
        "protos/stepstream.proto",
    ]
    result = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, f"protoc failed: {result.stderr}"
    # The .demo file messages: no service, so no --grpc_python_out (as in `make protos`).
    shutil.copy(PROTOS_DIR / "mlagents_demo.proto", root / "protos" / "mlagents_demo.proto")
    demo_command = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        "-I.",
        "--python_out=.",
        "--pyi_out=.",
        "protos/mlagents_demo.proto",
    ]
    result = subprocess.run(demo_command, cwd=root, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, f"protoc failed: {result.stderr}"
    # The Unity messages (no service) and the service Unity calls, as in `make protos`.
    for name, grpc_out in (("mlagents_unity.proto", []), ("unity_to_external.proto", ["--grpc_python_out=."])):
        shutil.copy(PROTOS_DIR / name, root / "protos" / name)
        unity_command = [sys.executable, "-m", "grpc_tools.protoc", "-I.", "--python_out=.", "--pyi_out=.", *grpc_out]
        result = subprocess.run(
            [*unity_command, f"protos/{name}"], cwd=root, capture_output=True, text=True, timeout=120, check=False
        )
        assert result.returncode == 0, f"protoc failed: {result.stderr}"
    return root / "protos"


@pytest.mark.parametrize("name", GENERATED)
def test_committed_generated_code_matches_the_proto(regenerated: Path, name: str) -> None:
    committed = (PROTOS_DIR / name).read_bytes()
    fresh = (regenerated / name).read_bytes()
    assert committed == fresh, f"protos/{name} is stale: run `make protos` and commit the result"


def test_protocol_version_is_a_positive_int() -> None:
    assert type(protos.PROTOCOL_VERSION) is int
    assert protos.PROTOCOL_VERSION >= 1
