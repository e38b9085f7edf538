"""Regenerate the Python code of Gannet's own APIs (``gen/``) from ``protos/``.

``protoc`` (from grpcio-tools, a dev dependency) writes ``gannet/admin/v1/admin_pb2*.py`` (the
admin API) and ``gannet/raft/v1/peer_pb2*.py`` (the Raft peer API); the files are flattened into
one folder and each gRPC module's import of its proto package (``gannet.admin.v1``,
``gannet.raft.v1``) is rewritten to ``gannet.node.protocol.gen``, because ``gannet`` is this
project's namespace package.
``python -m gannet.node.protocol.generating`` rewrites ``gen/``; the test suite regenerates into a
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
PROTO_FILES = ("gannet/admin/v1/admin.proto", "gannet/raft/v1/peer.proto")
GENERATED_NAMES = (
    "admin_pb2.py",
    "admin_pb2.pyi",
    "admin_pb2_grpc.py",
    "peer_pb2.py",
    "peer_pb2.pyi",
    "peer_pb2_grpc.py",
)
_IMPORT_REWRITES = (
    ("from gannet.admin.v1 import admin_pb2", "from gannet.node.protocol.gen import admin_pb2"),
    ("from gannet.raft.v1 import peer_pb2", "from gannet.node.protocol.gen import peer_pb2"),
)


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
        produced = {
            Path(name).stem: Path(tmp) / Path(name).parent for name in PROTO_FILES
        }  # admin -> <tmp>/gannet/admin/v1
        written = []
        for name in GENERATED_NAMES:
            text = (produced[name.split("_pb2")[0]] / name).read_text()
            for proto_import, package_import in _IMPORT_REWRITES:
                text = text.replace(proto_import, package_import)
            target = out_dir / name
            target.write_text(text)
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
