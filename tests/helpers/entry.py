"""An entry script run in the test's process as ``python SCRIPT ARGV`` would end: through ``bart.cli.exits.run_main``
(one line for a user's mistake, its exit code), so that tests read the exit code and what was printed."""
import importlib


def run_entry(script: str, argv: list[str]) -> int:
    """``python script argv`` (``pretrain.py``, ``finetune.py``, ``run_eval.py``) or ``python -m bart.export argv``
    in this process: its exit code (0 when main returns)."""
    from bart.cli.exits import run_main

    module = importlib.import_module(script[:-3] if script.endswith(".py") else script)
    if script == "bart.export":  # ends through its own main, as `python -m bart.export` does
        return module.main(argv)
    try:
        run_main(lambda: module.main(argv), script)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else 1
    return 0
