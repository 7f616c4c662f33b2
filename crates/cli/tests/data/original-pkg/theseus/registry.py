"""The job registry: `@job(KEY)` classes, read through `JOBS`."""

JOBS = {}


def job(key):
    def register(cls):
        JOBS[key] = cls
        return cls

    return register


import theseus.experiments  # noqa: E402,F401  (registers the built-in jobs)
