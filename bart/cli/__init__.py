"""The front door: the flags (``args``), the run's settings (``settings``), what every entry script does
first (``start``), building a training run (``builder``), how a run ends (``exits``), and the three entry
points themselves (``pretrain``, ``finetune``, ``run_eval``: the console scripts ``bart-pretrain``,
``bart-finetune``, ``bart-run-eval``; the checkout's ``pretrain.py``, ``finetune.py``, ``run_eval.py`` call them)."""
