"""An entry script run in the test's process as ``python SCRIPT ARGV`` would end: ``bart.cli.exits.run_entry``
(one line for a user's mistake, its exit code), so that tests read the exit code and what was printed."""
from bart.cli.exits import run_entry  # noqa: F401  (the tests' name for it)
