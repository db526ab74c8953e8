"""BART's configuration (``BartConfig``, :mod:`bart.configuration.configuration_bart`) and the configs the package
ships (:mod:`bart.configuration.shipped`). ``BartConfig`` is imported when first asked for, so that the shipped
configs' names (the flags' --help, ``bart.export``) cost no torch import."""


def __getattr__(name: str):
    if name == "BartConfig":
        from bart.configuration.configuration_bart import BartConfig
        return BartConfig
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BartConfig"]
