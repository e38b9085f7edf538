"""Regenerate the admin API's Python code (``gen/``) from ``protos/``.

``protoc`` (from grpcio-tools, a dev dependency) writes ``gannet/admin/v1/admin_pb2*.py``; the
files are flattened into one folder and the gRPC module's import of ``gannet.admin.v1`` is
rewritten to ``gannet.node.api.gen``, because ``gannet`` is this project's namespace package.
``python -m gannet.node.api.generating`` rewrites ``gen/``; the test suite regenerates into a
temporary folder and compares, so committed code never goes stale.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

API_DIR = Path(__file__).resolve().parent
PROTO_ROOT = API_DIR / "protos"
GEN_DIR = API_DIR / "gen"
PROTO_FILES = ("gannet/admin/v1/admin.proto",)
GENERATED_NAMES = ("admin_pb2.py", "admin_pb2.pyi", "admin_pb2_grpc.py")
_PROTO_IMPORT = "from gannet.admin.v1 import admin_pb2"
_PACKAGE_IMPORT = "from gannet.node.api.gen import admin_pb2"


def generate(out_dir: Path) -> list[Path]:
    """Write the generated modules into ``out_dir``; returns their paths."""
    from grpc_tools import protoc  # noqa: PLC0415 — dev dependency, needed only here

    well_known = Path(protoc.__file__).resolve().parent / "_proto"
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "protoc",
            f"-I{PROTO_ROOT}",
            f"-I{well_known}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            *(str(PROTO_ROOT / name) for name in PROTO_FILES),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed: {' '.join(args)}")
        produced = Path(tmp) / "gannet" / "admin" / "v1"
        written = []
        for name in GENERATED_NAMES:
            text = (produced / name).read_text()
            target = out_dir / name
            target.write_text(text.replace(_PROTO_IMPORT, _PACKAGE_IMPORT))
            written.append(target)
    return written


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        for path in generate(Path(tmp)):
            shutil.copyfile(path, GEN_DIR / path.name)
            print(f"wrote {GEN_DIR / path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
