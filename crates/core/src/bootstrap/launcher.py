"""theseus launcher: runs a job's Python entrypoint like the `python` CLI would.

Usage: python launcher.py [--jax] -- (-m module | -c code | script.py) [args...]

Written by theseus next to bootstrap.sh; it is a static file: every value reaches it through
argv or the environment, never through templating.

With --jax, `jax.distributed.initialize` is called first when JAX_NUM_PROCESSES > 1, with
JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID and (if set)
JAX_COORDINATOR_BIND_ADDRESS; THESEUS_JAX_INIT_TIMEOUT (seconds) sets the initialization timeout.

The target then runs as `__main__` with sys.argv and sys.path set as python would set them, and
its SystemExit code (or an uncaught exception's exit status 1) is the process's exit status.
"""

import os
import runpy
import sys


def log(message):
    sys.stderr.write("[theseus] " + message + "\n")
    sys.stderr.flush()


def usage(message):
    log("launcher: " + message)
    log("usage: launcher.py [--jax] -- (-m module | -c code | script.py) [args...]")
    sys.exit(2)


def init_jax():
    n = int(os.environ.get("JAX_NUM_PROCESSES") or "1")
    if n <= 1:
        return
    import jax

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
    log(
        "jax.distributed.initialize(coordinator_address=%s, num_processes=%d, process_id=%d)"
        % (kwargs["coordinator_address"], n, kwargs["process_id"])
    )
    jax.distributed.initialize(**kwargs)


def parse(argv):
    """Splits argv into (jax, python options, target kind, target, args)."""
    jax = False
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] == "--jax":
            jax = True
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
    if jax:
        init_jax()
    if kind == "-m":
        sys.argv = [target] + args
        sys.path[0] = os.getcwd()
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    elif kind == "-c":
        sys.argv = ["-c"] + args
        sys.path[0] = ""
        import __main__

        namespace = {"__name__": "__main__", "__builtins__": __builtins__, "__doc__": None}
        __main__.__dict__.clear()
        __main__.__dict__.update(namespace)
        exec(compile(target, "<string>", "exec"), __main__.__dict__)
    else:
        sys.argv = [target] + args
        sys.path[0] = os.path.dirname(os.path.abspath(target))
        runpy.run_path(target, run_name="__main__")


if __name__ == "__main__":
    main()
