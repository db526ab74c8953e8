"""The recipe's own tools, run by its shell scripts from a checkout (not installed): ``python -m utils.launch``
(torchrun with stop signals that keep their promise), ``utils.plot_logs`` (training curves) and
``utils.benchmark_table`` (benchmark tables from dllogger logs). The library they use is ``bart``."""
