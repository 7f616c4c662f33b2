"""theseus launcher: runs a job's Python entrypoint like the `python` CLI would.

Usage: python launcher.py [--jax | --jax-auto] -- (-m module | -c code | script.py) [args...]

Written by theseus next to bootstrap.sh; it is a static file: every value reaches it through
argv or the environment, never through templating.

JAX distributed, when JAX_NUM_PROCESSES > 1 (else neither flag does anything): theseus calls
`jax.distributed.initialize` with JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID and
(if set) JAX_COORDINATOR_BIND_ADDRESS; THESEUS_JAX_INIT_TIMEOUT (seconds) sets the
initialization timeout.
- --jax (`distributed: jax`): before the target runs.
- --jax-auto (`distributed: auto`, the default): right after the job's first `import jax`
  completes (any `import jax...` or `from jax... import` imports the `jax` package first), before
  the job's next statement, so before it can touch a device. An import hook on sys.meta_path
  wraps the `jax` package's loader; only this process fires it (a forked child, e.g. a data
  loader worker that imports jax, does not). A job that never imports jax is untouched: no port
  is bound, no JAX coordination service watches its processes. That is why the hook and not an
  eager initialisation whenever jax is importable: jax is often installed beside torch, and an
  eager start would tie every torch job's processes to a JAX coordination service, which
  (measured with jax 0.10 on CPU, two processes) holds a finished rank 0 at exit until every
  rank ends, and aborts (SIGABRT) a healthy rank when another one dies hard (os._exit, a
  kill); it also binds the coordinator port (torch's MASTER_PORT is the next port, so a job
  that uses both still gets both). When jax is already imported as the launcher starts (a
  sitecustomize or .pth file), it initialises at once.
In both modes, once theseus has initialised, `jax.distributed.initialize(...)` called by the job
(with or without arguments, as scripts written for other launchers do) is a no-op with a
`[theseus]` line instead of JAX's "should only be called once" error; if the job initialised
first, theseus does not initialise again. After a `jax.distributed.shutdown()`, a new call by the
job initialises as JAX would.

The target then runs as `__main__` with sys.argv and sys.path set as python would set them, and
its SystemExit code (or an uncaught exception's exit status 1) is the process's exit status.
"""

import os
import runpy
import sys
import types


def log(message):
    sys.stderr.write("[theseus] " + message + "\n")
    sys.stderr.flush()


def usage(message):
    log("launcher: " + message)
    log("usage: launcher.py [--jax | --jax-auto] -- (-m module | -c code | script.py) [args...]")
    sys.exit(2)


def jax_arguments():
    """The arguments of theseus's `jax.distributed.initialize`, or None for one process."""
    n = int(os.environ.get("JAX_NUM_PROCESSES") or "1")
    if n <= 1:
        return None
    kwargs = {
        "coordinator_address": os.environ["JAX_COORDINATOR_ADDRESS"],
        "num_processes": n,
        "process_id": int(os.environ["JAX_PROCESS_ID"]),
    }
    bind = os.environ.get("JAX_COORDINATOR_BIND_ADDRESS")
    if bind:
        kwargs["coordinator_bind_address"] = bind
    timeout = os.environ.get("THESEUS_JAX_INIT_TIMEOUT")
    if timeout:
        kwargs["initialization_timeout"] = int(timeout)
    return kwargs


def init_jax(jax, kwargs, when):
    """Initialises JAX distributed (unless the job already did) and guards it (guard_jax)."""
    real = guard_jax(jax, kwargs)
    if jax_initialized():
        log("JAX distributed was already initialised (by the job); theseus does not initialise it again")
        return
    log(
        "jax.distributed.initialize(coordinator_address=%s, num_processes=%d, process_id=%d) %s"
        % (kwargs["coordinator_address"], kwargs["num_processes"], kwargs["process_id"], when)
    )
    real(**kwargs)


def jax_initialized():
    """Whether JAX distributed is initialised (`is_initialized` is missing from older JAX)."""
    from jax._src import distributed as impl

    return getattr(impl.global_state, "client", None) is not None


def guard_jax(jax, kwargs):
    """Makes the job's own `jax.distributed.initialize(...)` a logged no-op while JAX distributed
    is initialised; returns JAX's own function."""
    from jax._src import distributed as impl

    real = getattr(impl.initialize, "theseus_real", impl.initialize)

    def initialize(*args, **kw):
        if not jax_initialized():
            return real(*args, **kw)
        given = [repr(a) for a in args] + ["%s=%r" % item for item in sorted(kw.items())]
        log(
            "the job's jax.distributed.initialize(%s) is ignored: JAX distributed is already initialised "
            "(process %d of %d, coordinator %s)"
            % (", ".join(given)[:300], kwargs["process_id"], kwargs["num_processes"], kwargs["coordinator_address"])
        )

    initialize.__doc__ = real.__doc__
    initialize.__wrapped__ = real
    initialize.theseus_real = real
    impl.initialize = initialize
    jax.distributed.initialize = initialize
    return real


class JaxImportHook:
    """A sys.meta_path finder that calls `after(jax)` right after the `jax` package is executed,
    before the import statement that asked for it returns (see the module doc)."""

    def __init__(self, after):
        self.after = after
        self.pid = os.getpid()
        self.fired = False

    def install(self):
        sys.meta_path.insert(0, self)

    def remove(self):
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "jax" or self.fired or os.getpid() != self.pid:
            return None
        self.fired = True
        self.remove()
        spec = None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if find is not None:
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            # jax is not installed (the job's import fails as it would) or is not a package
            # this hook can wrap: it runs as it would, without theseus's initialisation.
            if spec is not None:
                log("cannot wrap the loader of jax (%r); JAX distributed is not initialised by theseus" % spec.loader)
            return spec
        loader = spec.loader
        real_exec = loader.exec_module
        after = self.after

        def exec_module(module):
            try:
                real_exec(module)
            finally:
                loader.__dict__.pop("exec_module", None)
            after(module)

        loader.exec_module = exec_module
        return spec


def parse(argv):
    """Splits argv into (jax mode: None, "jax" or "auto"; python options, target kind, target,
    args)."""
    jax = None
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] in ("--jax", "--jax-auto"):
            if jax is not None:
                usage("--jax and --jax-auto are given together or twice")
            jax = "jax" if argv[i] == "--jax" else "auto"
        else:
            usage("unknown option %r" % argv[i])
        i += 1
    if i == len(argv):
        usage("missing --")
    rest = argv[i + 1 :]
    options = []
    while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c", "-"):
        opt = rest.pop(0)
        if opt in ("-W", "-X"):
            if not rest:
                usage("%s needs a value" % opt)
            options.append((opt, rest.pop(0)))
        elif opt.startswith("-W") or opt.startswith("-X"):
            options.append((opt[:2], opt[2:]))
        elif opt in ("-u", "-B", "-E", "-s", "-I", "-O", "-OO", "-q", "-v"):
            options.append((opt, None))
        else:
            usage("unsupported python option %r" % opt)
    if not rest:
        usage("nothing to run")
    if rest[0] in ("-m", "-c"):
        if len(rest) < 2:
            usage("%s needs a value" % rest[0])
        return jax, options, rest[0], rest[1], rest[2:]
    if rest[0] == "-":
        usage("reading the program from stdin is not supported")
    return jax, options, "script", rest[0], rest[1:]


def apply_options(options):
    for opt, value in options:
        if opt == "-u":
            os.environ["PYTHONUNBUFFERED"] = "1"
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.reconfigure(line_buffering=False, write_through=True)
                except (AttributeError, ValueError):
                    pass
        elif opt == "-B":
            sys.dont_write_bytecode = True
        elif opt == "-W":
            sys.warnoptions.append(value)
            import warnings

            action = value.split(":", 1)[0]
            warnings.simplefilter({"d": "default", "e": "error", "i": "ignore"}.get(action, action))
        else:
            log("launcher: python option %s is accepted and ignored" % opt)


def main():
    jax, options, kind, target, args = parse(sys.argv[1:])
    apply_options(options)
    kwargs = jax_arguments() if jax else None
    if kwargs is not None and (jax == "jax" or "jax" in sys.modules):
        import jax as jax_module

        when = "before the job" if jax == "jax" else "before the job (jax was imported before the launcher ran)"
        init_jax(jax_module, kwargs, when)
    elif kwargs is not None:
        JaxImportHook(lambda module: init_jax(module, kwargs, "on the job's import of jax")).install()
    if kind == "-m":
        sys.argv = [target] + args
        sys.path[0] = os.getcwd()
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    elif kind == "-c":
        sys.argv = ["-c"] + args
        sys.path[0] = ""
        # A fresh `__main__` module, as runpy makes for the other kinds: the launcher's own
        # globals stay intact for the JAX import hook and the guard, which run during the job.
        main_module = types.ModuleType("__main__")
        main_module.__dict__["__builtins__"] = __builtins__
        launcher_module = sys.modules["__main__"]
        sys.modules["__main__"] = main_module
        try:
            exec(compile(target, "<string>", "exec"), main_module.__dict__)
        finally:
            sys.modules["__main__"] = launcher_module
    else:
        sys.argv = [target] + args
        sys.path[0] = os.path.dirname(os.path.abspath(target))
        runpy.run_path(target, run_name="__main__")


if __name__ == "__main__":
    main()
