"""The test doubles of packages the container installs but a laptop cannot (tests/doubles/README.md):
``with_doubles(env)`` for a subprocess, ``use_doubles(monkeypatch)`` inside a test."""
import os
import sys

DOUBLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "doubles")
PACKAGES = ("dllogger", "apex", "wandb")  # the doubles that use_doubles makes importable afresh


def with_doubles(env: dict) -> dict:
    """A copy of ``env`` whose PYTHONPATH starts with the doubles' folder."""
    env = dict(env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (DOUBLES, env.get("PYTHONPATH", "")) if p)
    return env


def use_doubles(monkeypatch) -> str:
    """In a test: the doubles first on ``sys.path`` and any cached ``dllogger`` (and its submodules)
    dropped, so the next ``import dllogger`` loads a fresh double (a new, uninitialised global logger);
    ``monkeypatch`` restores both after the test. Returns the doubles' folder."""
    monkeypatch.syspath_prepend(DOUBLES)
    names = {n for n in sys.modules if n.split(".")[0] in PACKAGES}
    for package in PACKAGES:
        names.add(package)
        names.update(f"{package}.{f[:-3]}" for f in os.listdir(os.path.join(DOUBLES, package))
                     if f.endswith(".py") and f != "__init__.py")
    for name in sorted(names):
        # set, then delete: at the end monkeypatch puts back what was there, or removes the fresh import
        monkeypatch.setitem(sys.modules, name, None)
        monkeypatch.delitem(sys.modules, name)
    return DOUBLES
