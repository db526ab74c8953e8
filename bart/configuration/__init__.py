from bart.configuration.configuration_bart import BartConfig

__all__ = ["BartConfig"]
