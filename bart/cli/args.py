"""Command-line flags of the three entry points, generated from the settings' declarations: one name, one
default, one meaning.

A setting is one field of a :mod:`bart.cli.settings` section, declared with :func:`flag` (its default, help,
spellings, the scripts that take it, argparse's keywords); :func:`bart.cli.parsing.build_parser` generates a script's parser from
those fields (one argument group per section, run_eval.py's positional arguments in their places), then the
reference recipe's flags (:mod:`bart.cli.reference_flags`). Old names from the reference and the BERT recipe are
spellings of the same field (``--max_grad_norm`` = ``--gradient_clip_val``, ``--num_beams`` = ``--eval_beams``).
Flags that only fine-tuning uses (``refused_in``) are accepted by pretrain.py's parser (so reference command
lines parse) but :func:`reject_unused` fails loudly when one is set to anything but its default. ``--help`` shows
the quick start's flags (``quick``), ``--help-all`` every group; ``--config_file FILE`` / ``@FILE`` starts from a
JSON file of settings (:func:`read_config_file`). To add a flag: its field, in the section of its concept.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import math
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bart.errors import UserError
from bart.files.checkpoint_io import atomic_write_text
from bart.runtime.precision import Precision

PRETRAIN, FINETUNE, EVAL = "pretrain.py", "finetune.py", "run_eval.py"
TRAINING = (PRETRAIN, FINETUNE)
ALL = (PRETRAIN, FINETUNE, EVAL)
CONSOLE = {PRETRAIN: "bart-pretrain", FINETUNE: "bart-finetune", EVAL: "bart-run-eval"}  # pyproject.toml's names


# -- one declaration per setting: a field of a Settings section says its flag ------------------------------
@dataclass(frozen=True)
class Flag:
    """A setting's flag, declared on its field (:func:`flag`): spellings, help, the scripts that take it and
    argparse's keywords; the parser is generated from these (:func:`add_flags`), its default is the field's."""
    help: str
    options: tuple = ()                    # the spellings; () is --NAME
    scripts: tuple = TRAINING              # the entry scripts that take it
    quick: tuple = ()                      # the scripts whose short --help shows it (the quick start's flags)
    refused_in: tuple = ()                 # scripts that parse it (reference command lines) but refuse a change
    lazy: Callable[[], dict] | None = None  # keywords known when the parser is built (a table's choices)
    per_script: Mapping = field(default_factory=dict)  # script -> keywords over these (default, help, type, ...)
    argparse: Mapping = field(default_factory=dict)    # action, type, choices, nargs, metavar, const, required
    once: bool = False  # an action of the start it is given to: run_config.json records it, --config_file never replays it
    resume: str | None = None  # a resume compares it with the checkpoint's run: "same" or "may_change" (RESUME_RULES)
    schedule: bool = False     # a change reshapes the learning-rate schedule (recomputed from the step resumed at)
    resume_unset: Any = None   # what a run record's null means when a resume compares it (None: not compared)
    resume_note: str = ""      # what a resume's refusal says after the flag (what a change of it means)

    def shown(self, name: str) -> str:
        """The flag as a training script's user types it (its first spelling there): a resume's messages name it."""
        script = next((s for s in self.scripts if s in TRAINING), None)
        return (self.per_script.get(script, {}).get("options") or self.options or (f"--{name}",))[0]


# What a resume does with a setting that differs from the checkpoint's run (bart.training.checkpoint.check_resume):
# "same": refused, the run must keep it; "may_change": refused unless --allow_resume_change NAME allows it
RESUME_RULES = ("same", "may_change")


def flag(default: Any, help: str, *options: str, scripts=TRAINING, quick=(), refused_in=(), lazy=None,
         per_script=None, once=False, resume=None, schedule=False, resume_unset=None, resume_note="",
         **argparse_kwargs) -> Any:
    """A Settings field that is a flag: its one default, help, spellings and scripts (see :class:`Flag`); with
    ``resume``, what a resume does when it differs from the checkpoint's run (:data:`RESUME_RULES`; ``schedule``:
    a change reshapes the learning-rate schedule)."""
    if resume not in (None, *RESUME_RULES) or (schedule and resume != "may_change"):
        raise ValueError(f"resume={resume!r}, schedule={schedule!r}: resume is one of {RESUME_RULES} (a schedule "
                         f"change: may_change)")
    declared = Flag(help, tuple(options), tuple(scripts), tuple(quick), tuple(refused_in), lazy, per_script or {},
                    argparse_kwargs, once, resume, schedule, resume_unset, resume_note)
    return field(default=default, metadata={"flag": declared})


def setting(default: Any, doc: str, factory=None) -> Any:
    """A Settings field that no flag sets directly (made at parse time from other flags, or at run start)."""
    if factory is not None:
        return field(default_factory=factory, metadata={"doc": doc})
    return field(default=default, metadata={"doc": doc})


def reference(default: Any = None) -> Any:
    """A Settings field set by a flag of the reference recipe (its row in :data:`bart.cli.reference_flags.SPECS`
    holds the spelling and the help)."""
    return field(default=default, metadata={"reference": True})


def declared_flags(cls, script: str):
    """(name, Flag, default) of the fields of the section ``cls`` that ``script`` takes as flags."""
    for f in dataclasses.fields(cls):
        declared = f.metadata.get("flag")
        if declared is not None and script in declared.scripts:
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            yield f.name, declared, declared.per_script.get(script, {}).get("default", default)


def argparse_keywords(name: str, declared: Flag, default: Any, script: str) -> tuple:
    """(spellings, position or None, add_argument's keywords) of one declared flag in ``script``."""
    keywords = {**declared.argparse, "help": declared.help, "default": default}
    if declared.lazy is not None:  # e.g. choices from a training module's table; its "help" ends the declared one
        lazy = declared.lazy()
        keywords.update(lazy, help=declared.help + lazy.get("help", ""))
    if script in declared.refused_in:  # parsed for the reference's command lines, used by the other scripts: named
        keywords["help"] = argparse.SUPPRESS  # in one line of this script's --help-all (bart.cli.parsing.build_parser)
    own = dict(declared.per_script.get(script, {}))
    position, options = own.pop("position", None), own.pop("options", declared.options or (f"--{name}",))
    keywords.update(own)
    if keywords.get("action") in ("store_true", "store_false"):
        keywords.pop("type", None)
    if position is not None:  # shown as the usage line names it: MODEL_PATH, CONFIG_PATH, ...
        return (), position, {**{k: v for k, v in keywords.items() if k not in ("default", "required")},
                              "metavar": name.upper()}
    if "metavar" not in keywords and keywords.get("action") is None and keywords.get("choices") is None:
        keywords["metavar"] = short_metavar(name, keywords.get("type"))
    return options, None, {**keywords, "dest": name}


def short_metavar(name: str, kind) -> str:
    """What --help shows for a flag's value: N (a count), X (a number), DIR, FILE, PATH or TEXT; never the flag's
    name again (``--max_source_length MAX_SOURCE_LENGTH``)."""
    shown = getattr(kind, "__name__", "")
    if shown.startswith(("int", "updates")) or kind is int:
        return "N"
    if shown == "number" or kind is float:
        return "X"
    if name.endswith("_dir"):
        return "DIR"
    if name.endswith(("_file", "_summary")):
        return "FILE"
    if name.endswith(("_path", "checkpoint", "tokenizer")):
        return "PATH"
    return "TEXT"


def add_flags(parser: argparse.ArgumentParser, sections, script: str, title: str | None = None) -> list:
    """The flags of ``sections`` (Settings section classes) that ``script`` takes, each section an argument group;
    returns the actions of the quick start's flags (the short --help's)."""
    quick = []
    for cls in sections:
        group = parser.add_argument_group(title or cls.GROUP)
        for name, declared, default in declared_flags(cls, script):
            options, position, keywords = argparse_keywords(name, declared, default, script)
            if position is None:
                action = group.add_argument(*options, **keywords)
                if script in declared.quick:
                    quick.append(action)
    return quick


def _bool_or_path(value: str):
    """--resume_from_checkpoint: True (the newest checkpoint in --output_dir), "auto", or a path."""
    if value.lower() == "auto":
        return "auto"  # resolved at run start (bart.cli.builder.start_run); ./auto is a file
    return True if value.lower() in ("true", "1", "yes", "latest") else value


class ArgumentParser(argparse.ArgumentParser):
    """argparse with a one-line error: ``script: error: message (see --help)``, exit code 2. The full
    usage text stays behind --help, so the line that names the flag is not buried under it."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


# -- value checks: a bad value is one argparse line naming the flag, the value and the range ---------
def int_at_least(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value
    parse.__name__ = f"int>={low}"
    return parse


def float_in(low: float, high: float | None = None, low_open: bool = False, high_open: bool = True):
    """A finite float in [low, high) (``low_open``/``high_open`` choose the interval's ends)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        too_low = value <= low if low_open else value < low
        too_high = high is not None and (value >= high if high_open else value > high)
        if too_low or too_high:
            span = f"{'(' if low_open else '['}{low:g}, {'inf)' if high is None else f'{high:g}' + (')' if high_open else ']')}"
            raise argparse.ArgumentTypeError(f"must be in {span}, got {value:g}")
        return value
    parse.__name__ = "number"
    return parse


def count_or_all(low: int):
    """A number of examples, or -1 for all of them (the reference's convention): -1 parses as None."""
    def parse(text: str):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, or -1 for all, got {text!r}") from None
        if value == -1:
            return None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, or -1 for all, got {value}")
        return value
    parse.__name__ = f"int>={low}|-1"
    return parse


def updates_or_fraction(text: str):
    """``--val_check_interval``: a whole number of updates (0: only at the end), or a fraction in (0, 1]
    written with a decimal point: that fraction of an epoch of the training data (``1.0``: every epoch)."""
    try:
        value = float(text) if any(c in text for c in ".eE") else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of updates or a fraction of an epoch, got {text!r}") from None
    if isinstance(value, int) and value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 updates, got {value}")
    if isinstance(value, float) and not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"a fraction of an epoch must be in (0, 1], got {text}")
    return value


updates_or_fraction.__name__ = "updates|fraction"


def updates_or_ratio(text: str):
    """``--warmup_steps``: a whole number of updates, or a fraction in (0, 1) of the run's updates (transformers 5:
    a float below 1 is a ratio), made updates at run start (:func:`bart.cli.parsing.resolve_warmup`)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of updates or a fraction below 1, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    if value >= 1:
        if value != int(value):
            raise argparse.ArgumentTypeError(f"expected a whole number of updates or a fraction below 1, got {text}")
        return int(value)
    return value if value > 0 else 0


updates_or_ratio.__name__ = "updates|ratio"
POSITIVE = int_at_least(1)
NON_NEGATIVE = int_at_least(0)
PROBABILITY = float_in(0.0, 1.0)                 # dropout, smoothing: [0, 1)
POSITIVE_FLOAT = float_in(0.0, None, low_open=True)
NON_NEGATIVE_FLOAT = float_in(0.0, None)


def _value(text: str):
    """A command-line value as Python: numbers, true/false/none, lists ("[[5, 6]]"), else the text."""
    lowered = text.strip().lower()
    if lowered in ("true", "false", "none"):
        return {"true": True, "false": False, "none": None}[lowered]
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def generate_option_pairs(rest: list[str]) -> dict:
    """Extra ``--key value`` pairs of a command line as generate() options (numbers, booleans, None)."""
    if len(rest) % 2 or any(not k.startswith("--") for k in rest[::2]):
        raise ValueError(f"extra arguments must be --key value pairs for generate, got {rest}")
    return {k[2:]: _value(v) for k, v in zip(rest[::2], rest[1::2])}


def _auto_with_weights_only(args) -> bool:
    return args.resume_from_checkpoint == "auto" and args.load_model_weights_only is True


# Flags that contradict each other: given together on a command line, one of them would silently win (or do
# nothing). (flag, other flag or None, when: the values that contradict (None: any), why). A row applies when
# the command line gave the flag (and the other, when named: :func:`given_flags`) and ``when`` holds; the run is
# then refused at parse time in one line naming both. (--fp16 with --bf16: bart.runtime.precision's rule. Not here:
# --resume_from_checkpoint with the starting weights (--init_checkpoint): "the same command plus
# --resume_from_checkpoint True" is how a run is resumed, and ``auto`` starts from them when there is nothing
# to resume.)
CONTRADICTIONS = (
    ("from_scratch", "init_checkpoint", None, "random weights or a checkpoint's: give one"),
    ("from_scratch", "init_checkpoint_alias", None, "random weights or a checkpoint's: give one"),
    ("from_scratch", "load_model_weights_only", None, "random weights or a checkpoint's: give one"),
    ("init_checkpoint", "init_checkpoint_alias", lambda a: a.init_checkpoint != a.init_checkpoint_alias,
     "both name the starting weights, and they differ: give one"),
    ("resume_from_checkpoint", "load_model_weights_only", _auto_with_weights_only,
     "auto resumes this run from its own checkpoints; --load_model_weights_only starts a new run from a "
     "checkpoint's weights: give that checkpoint's PATH instead of auto"),
    ("overwrite_output_dir", "resume_from_checkpoint", None,
     "--resume_from_checkpoint goes on with the run in --output_dir; --overwrite_output_dir removes it and starts "
     "over: give one"),
    ("no_tensorboard", "tensorboard_dir", None, "no TensorBoard events are written, so the folder would stay unused: "
                                                "drop one"),
    ("use_nvlamb", None, lambda a: not (a.lamb or a.optim == "lamb"),
     "NVLAMB is a LAMB option but the optimizer is not LAMB: add --optim lamb (or --lamb), or drop it"),
    ("val_check_interval", "n_val", lambda a: a.n_val == 0 and bool(a.val_check_interval),
     "--n_val 0 turns validation off, so it would never run: give --n_val N, or drop it"),
)


def _shown(parser: argparse.ArgumentParser, args: argparse.Namespace, dest: str, argv: list[str]) -> str:
    """A flag as the command line gave it: the spelling typed (an alias included) and its value."""
    action = next(action for action in parser._actions if action.dest == dest)
    typed = next((o for token in argv for o in action.option_strings if token == o or token.startswith(o + "=")),
                 action.option_strings[0])
    value = vars(args)[dest]
    bare = action.nargs == 0 or (action.nargs == "?" and value == action.const) or value is None
    return typed if bare else f"{typed} {value}"


def given_flags(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The destinations of the flags the command line gave (any spelling, ``--flag value`` or ``--flag=value``)."""
    return {action.dest for action in parser._actions for option in action.option_strings
            if any(token == option or token.startswith(option + "=") for token in argv)}


def check_namespace(args: argparse.Namespace, parser: argparse.ArgumentParser, argv: list[str], given: set[str]) -> None:
    """The rules on the flags as typed, before the reference's spellings are translated: the first row of
    :data:`CONTRADICTIONS` the command line hits, and the precision flags' own rules and needs (one of
    --fp16/--bf16/--fp8; --fp8: torchao, the GPU); argparse's one-line error (exit 2)."""
    for flag, other, when, why in CONTRADICTIONS:
        if flag in given and (other is None or other in given) and (when is None or when(args)):
            both = _shown(parser, args, flag, argv) + ("" if other is None else " with " + _shown(parser, args, other, argv))
            parser.error(f"{both}: {why}")
    try:  # the precision flags' rules; the run's Precision is made with the record (bart.cli.settings)
        Precision.check_flags(args.fp16, args.bf16, args.fp8, args.fp8_emulate)
    except UserError as err:
        parser.error(str(err))


def reject_unused(args: argparse.Namespace, parser: argparse.ArgumentParser, defaults: dict, names, script: str,
                  other: str) -> None:
    """Fail loudly when a flag this script does not use was changed from its declared default (``defaults``)."""
    for name in names:
        if vars(args)[name] != defaults[name]:
            parser.error(f"--{name} is a {other} flag and has no effect in {script}; remove it")


def write_run_config(values: dict, output_dir: str, extra: dict | None = None) -> dict:
    """The resolved run configuration (``Settings.as_dict()``) next to the results (run_config.json);
    returns it as written (plain JSON values)."""
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, "run_config.json")
    text = json.dumps({**values, **(extra or {})}, indent=2, sort_keys=True, default=str)
    atomic_write_text(path, text)
    return json.loads(text)




# -- the parser: generated from the Settings sections' fields ------------------------------------------------
USAGE = {PRETRAIN: "%(prog)s --config_path FILE --data_dir DIR --max_steps N [options]",
         FINETUNE: "%(prog)s --config_path FILE --data_dir DIR (--init_checkpoint W | --from_scratch) "
                   "(--max_steps N | --max_epochs N) [options]",
         EVAL: "%(prog)s MODEL_PATH CONFIG_PATH DATA_DIR SAVE_PATH [options] [--KEY VALUE ...]"}
HELP_COLUMN = 36  # where the flags' help starts in --help and --help-all
SHORT_HELP_WIDTH = 120  # --help's width (--help-all: the terminal's)
SHORT_HELP_LINES = 60  # the most a script's --help prints (its quick start's flags); --help-all prints every group


def program_name(script: str, argv0: str | None = None) -> str:
    """The command the user typed: ``bart-finetune`` when installed, ``finetune.py`` from a checkout (the
    basename of ``sys.argv[0]``); the script's name where the process runs something else (a test, a notebook)."""
    typed = os.path.basename(sys.argv[0] if argv0 is None else argv0 or "")
    return typed if typed in (script, CONSOLE[script]) else script


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's, without breaking a line at a hyphen (``bart-large``, ``--no-tf32`` stay whole), its help column
    far enough right that a flag and its value sit on its help's line."""

    def __init__(self, prog, indent_increment=2, max_help_position=HELP_COLUMN, width=None):
        super().__init__(prog, indent_increment, max_help_position, width)

    def _split_lines(self, text, width):
        import textwrap
        return textwrap.wrap(self._whitespace_matcher.sub(" ", text).strip(), width, break_on_hyphens=False)


class _ShortHelpFormatter(HelpFormatter):
    """--help's: a flag by its first spelling alone (``--help-all`` shows the others)."""

    def _format_action_invocation(self, action):
        if isinstance(action, _ShortHelp):  # -h, --help
            return super()._format_action_invocation(action)
        if not action.option_strings or action.nargs == 0:
            return action.option_strings[0] if action.option_strings else super()._format_action_invocation(action)
        return f"{action.option_strings[0]} {self._format_args(action, self._get_default_metavar_for_optional(action))}"


class _HelpAll(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show every flag, in its group, and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        parser.print_help()
        parser.exit()


class _ShortHelp(argparse.Action):
    """``--help``: the flags a quick start needs (each flag's ``quick``), then where the rest are (``--help-all``)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show the flags a quick start needs and exit (--help-all: every flag)")

    def __call__(self, parser, namespace, values, option_string=None):
        parser._print_message(short_help(parser), sys.stdout)
        parser.exit()


def short_help(parser: argparse.ArgumentParser) -> str:
    """The usage, the description and, group by group (no blank line between groups), the quick start's flags;
    it ends naming --help-all."""
    quick = getattr(parser, "quick_actions", [])
    head, flags = HelpFormatter(parser.prog, width=SHORT_HELP_WIDTH), _ShortHelpFormatter(parser.prog,
                                                                                          width=SHORT_HELP_WIDTH)
    head.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    head.add_text(parser.description)
    hidden = 0
    for group in parser._action_groups:
        shown = [a for a in group._group_actions if any(a is q for q in quick)]
        hidden += sum(1 for a in group._group_actions if a not in shown and a.help != argparse.SUPPRESS)
        if shown:
            flags.start_section(group.title)
            flags.add_arguments(shown)
            flags.end_section()
    return (head.format_help() + "\n" + flags.format_help().replace("\n\n", "\n")
            + f"\n{hidden} more flags, in every group: {parser.prog} --help-all\n")


# -- a run from a file: --config_file FILE / @FILE ---------------------------------------------------------
CONFIG_EXTRAS = ("script", "precision", "world_size", "model_config", "run_banner", "data_source")  # run_config.json's other keys


def _config_files(parser: argparse.ArgumentParser, argv: list) -> tuple:
    files, rest, i = [], [], 0
    while i < len(argv):
        token = argv[i]
        if token.startswith("@") and len(token) > 1:
            files.append(token[1:])
        elif token == "--config_file":
            if i + 1 >= len(argv):
                parser.error("argument --config_file: expected one argument (a JSON file of settings)")
            files.append(argv[i + 1])
            i += 1
        elif token.startswith("--config_file="):
            files.append(token.split("=", 1)[1])
        else:
            rest.append(token)
        i += 1
    if len(files) > 1:
        parser.error(f"--config_file {files[0]} and {files[1]}: give one file of settings (@FILE is --config_file)")
    return (files[0] if files else None), rest


def _file_value(action: argparse.Action, value: Any, default: Any):
    """A file's value for ``action`` as the command line's would parse (the flag's own type and choices)."""
    if value is None or value == default:
        if value is None and default is not None:
            raise argparse.ArgumentTypeError("null is not a value of this flag; give a value, or remove the key")
        return value
    if action.nargs == 0 or isinstance(action, argparse.BooleanOptionalAction):
        if not isinstance(value, bool):
            raise argparse.ArgumentTypeError(f"expected true or false, got {json.dumps(value)}")
        return value
    many = action.nargs in ("+", "*") or isinstance(action.nargs, int)
    items = value if many else [value]
    if many and not isinstance(value, list):
        raise argparse.ArgumentTypeError(f"expected a list, got {json.dumps(value)}")
    if isinstance(action.nargs, int) and len(items) != action.nargs:
        raise argparse.ArgumentTypeError(f"expected {action.nargs} values, got {len(items)}")
    parsed = []
    for item in items:
        if isinstance(item, (dict, list)) or (action.type is None and not isinstance(item, str)):
            raise argparse.ArgumentTypeError(f"expected {'text' if action.type is None else 'a value'}, "
                                             f"got {json.dumps(item)}")
        item = action.type(str(item)) if action.type is not None else item
        if action.choices is not None and item not in action.choices:
            raise argparse.ArgumentTypeError(f"invalid choice {item!r} (choose from {', '.join(map(str, action.choices))})")
        parsed.append(item)
    return parsed if many else parsed[0]


def read_config_file(parser: argparse.ArgumentParser, argv: list, script: str, record_defaults: dict,
                     once=()) -> tuple:
    """``--config_file FILE`` or ``@FILE``: the file's settings become ``parser``'s defaults, so that the command
    line's flags win; returns (argv without it, the settings the file changed from the script's defaults).
    The file is a JSON object of settings, as a run's run_config.json records them (its ``world_size``,
    ``model_config`` ... are skipped; settings of another script are skipped at their default). ``once``: the
    one-shot actions (``--overwrite_output_dir``, ``--resume_from_checkpoint``): what the recorded start did, never
    replayed (a note says so where the file set one). An unknown key or a bad value is one line naming the file,
    the key and the fix."""
    path, argv = _config_files(parser, argv)
    if path is None:
        return argv, set()
    try:
        with open(path, encoding="utf-8") as handle:
            values = json.load(handle)
    except OSError as err:
        parser.error(f"--config_file {path}: cannot read it ({err.strerror or err}); give a JSON file of settings")
    except ValueError as err:
        parser.error(f"--config_file {path}: not JSON ({err}); give a JSON object of settings, as run_config.json")
    if not isinstance(values, dict):
        parser.error(f"--config_file {path}: a JSON object of settings is expected ({{\"max_steps\": 100, ...}}), "
                     f"got a {type(values).__name__}")
    actions = {a.dest: a for a in parser._actions if a.option_strings or a.dest not in ("help",)}
    noise = values.pop("noise", None)
    if isinstance(noise, dict) and script == PRETRAIN:
        values.update(noise)  # the noise flags (bart.data.noise), one key each
    elif noise is not None:
        parser.error(f"--config_file {path}: key 'noise': {script} has no denoising noise (pretrain.py's); "
                     f"remove the key")
    defaults, changed = {}, set()
    for key in [key for key in values if key in once]:
        value = values.pop(key)
        typed = any(token == f"--{key}" or token.startswith(f"--{key}=") for token in argv)
        if value not in (None, False, record_defaults.get(key)) and not typed and os.environ.get("RANK", "0") == "0":
            print(f"[settings] --config_file {path}: {key} {json.dumps(value)} is what that run's start did; not "
                  f"replayed (give --{key} on the command line to do it again)", flush=True)
    unknown = []
    for key, value in values.items():
        action = actions.get(key)
        if key in CONFIG_EXTRAS or (action is None and key in record_defaults and value in (record_defaults[key], None)):
            continue  # what a run records besides its settings; another script's setting at its default
        if value is None and key in record_defaults and record_defaults[key] is None:
            continue  # the record's "not set" (a run from before the script declared its own default): that default
        if action is None or key in ("help", "help_all", "config_file"):
            import difflib
            close = difflib.get_close_matches(key, [d for d in actions if not d.startswith("ref_")], n=1)
            fix = f"did you mean {close[0]!r}?" if close else f"see {parser.prog} --help-all for the settings"
            other = " (a setting of another script)" if key in record_defaults else ""
            unknown.append((f"{key!r}", other, fix))
            continue
        try:
            defaults[key] = _file_value(action, value, parser.get_default(key))
        except argparse.ArgumentTypeError as err:
            flag = action.option_strings[0] if action.option_strings else key.upper()
            parser.error(f"--config_file {path}: key {key!r} ({flag}): {err}; correct it in the file, or give "
                         f"{flag} on the command line")
        if defaults[key] != parser.get_default(key):
            changed.add(key)
    if len(unknown) == 1:
        key, other, fix = unknown[0]
        parser.error(f"--config_file {path}: unknown key {key} for {script}{other}: {fix} Remove or rename it")
    if unknown:  # every one at once: a file is corrected in one go, not one key per rerun
        keys = "; ".join(f"{key}{other}: {fix}" for key, other, fix in unknown)
        parser.error(f"--config_file {path}: unknown keys for {script}: {keys} Remove or rename them")
    parser.set_defaults(**defaults)
    for action in parser._actions:
        if action.dest in defaults:
            action.required = False
            if not action.option_strings:  # a positional given by the file: not on the command line
                action.nargs = "?"
    return argv, changed
