"""Import a package's submodules without running the package's own ``__init__`` first.

Some packages import far more in their ``__init__`` than the submodule a program needs: ``nltk``'s
pulls in scipy (~1.4 s) although ROUGE needs only ``nltk.stem.porter`` and Punkt; LDDL's
``lddl.torch`` imports transformers (~3 s) although BART's loader needs only its dataset classes.
:func:`defer_package_init` registers such a package with its ``__init__`` not yet run; the first
lookup of an attribute the package module does not have (anything but its submodules loaded so far)
runs the ``__init__`` then, so code that uses the package as a whole sees all of it, only later; a
lookup of a submodule's name (``from package import submodule``) imports just that submodule.
"""
from __future__ import annotations

import importlib.util
import sys


def defer_package_init(*names: str) -> None:
    """For each package name (parents before children), unless it is imported already."""
    for name in names:
        if name in sys.modules:
            continue
        spec = importlib.util.find_spec(name)  # imports the parent packages (deferred ones stay deferred)
        if spec is None or spec.submodule_search_locations is None or spec.loader is None:
            continue  # not an installed package: the normal import reports it
        package = importlib.util.module_from_spec(spec)

        def run_init(attribute: str, package=package, spec=spec):
            if not attribute.startswith("__"):  # `from package import submodule` asks for it by attribute first
                submodule = f"{spec.name}.{attribute}"
                if submodule in sys.modules or importlib.util.find_spec(submodule) is not None:
                    return importlib.import_module(submodule)
            del package.__getattr__  # once: afterwards the package is its own
            spec.loader.exec_module(package)
            return getattr(package, attribute)

        package.__getattr__ = run_init
        sys.modules[name] = package
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, package)
