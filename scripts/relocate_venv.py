"""Rewrite a virtual environment built at BUILD to work at FINAL before it is renamed there.

    python scripts/relocate_venv.py BUILD FINAL

A venv is not relocatable: its scripts carry the absolute path of its interpreter in their
shebang (and activate scripts in VIRTUAL_ENV). The build path is replaced by the final path
in bin/ and in pyvenv.cfg (its informational ``command``). Used by install_vllm.sh and
install_vllm_mlx.sh, which build in a temporary folder and rename it into place.
"""

import sys
from pathlib import Path

old, new = sys.argv[1].encode(), sys.argv[2].encode()
build = Path(sys.argv[1])
for path in [*(build / "bin").iterdir(), build / "pyvenv.cfg"]:
    if path.is_file() and not path.is_symlink() and old in (data := path.read_bytes()):
        path.write_bytes(data.replace(old, new))
