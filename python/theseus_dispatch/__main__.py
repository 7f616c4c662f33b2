"""`python -m theseus_dispatch ARGS` runs the installed `theseus` binary with ARGS."""

import os
import sys

from theseus_dispatch import find_theseus_bin


def _run() -> None:
    binary = find_theseus_bin()
    if sys.platform == "win32":
        import subprocess

        sys.exit(subprocess.call([binary, *sys.argv[1:]]))
    os.execvp(binary, [binary, *sys.argv[1:]])


if __name__ == "__main__":
    _run()
