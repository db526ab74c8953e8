"""BART pretraining, summarization fine-tuning and evaluation (docs/ARCHITECTURE.md is the map).

``bart.__version__``: this copy's version, made from git (``bart/records/versioning.py``): a built copy's from its
build (``_build.json``), a checkout's the one a build of it would get now; read when first asked for (no torch)."""
from bart.runtime.foreign_noise import drop_known_noise

drop_known_noise()  # torchao's import lines that transformers' model loading brings (bart/runtime/foreign_noise.py)


def __getattr__(name: str):
    if name == "__version__":
        import os

        from bart.cli.console import DISTRIBUTION
        from bart.records.provenance import package_origin
        from bart.records.versioning import UNKNOWN

        version = package_origin(DISTRIBUTION, os.path.dirname(os.path.abspath(__file__)))["version"] or UNKNOWN
        globals()["__version__"] = version
        return version
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
