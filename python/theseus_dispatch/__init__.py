"""theseus: dispatches ML training jobs to Kubernetes (Volcano), Slurm, SSH GPU boxes and this
machine. This package carries the `theseus` binary; `find_theseus_bin()` says where it is."""

import os
import sys
import sysconfig

__all__ = ["find_theseus_bin"]


def find_theseus_bin() -> str:
    """The path of the `theseus` binary installed with this package."""
    name = "theseus" + (sysconfig.get_config_var("EXE") or "")
    candidates = [os.path.join(sysconfig.get_path("scripts"), name)]
    # `pip install --user` puts scripts under the user scheme.
    user_scheme = sysconfig.get_preferred_scheme("user") if sys.version_info >= (3, 10) else (
        "posix_user" if os.name == "posix" else "nt_user"
    )
    candidates.append(os.path.join(sysconfig.get_path("scripts", scheme=user_scheme), name))
    # `pip install --target DIR` puts them under DIR/bin, beside the package.
    candidates.append(os.path.join(os.path.dirname(os.path.dirname(__file__)), "bin", name))
    for path in candidates:
        if os.path.isfile(path):
            return path
    raise FileNotFoundError("the theseus binary is not installed beside this package; looked at " + ", ".join(candidates))
