"""From a command line to the run's :class:`~bart.cli.settings.Settings`, and the record settled at run start.

    settings = parse_command_line("finetune.py", argv, __doc__)   # flags -> Settings (exit 2 on a mistake)

The scripts' parsers are generated from the sections' fields (:func:`build_parser`: one argument group per
section, then the flags parsing translates onto a field (:data:`TRANSLATED`), the denoising noise's, the reference
recipe's and transformers' spellings). :func:`parse_command_line` is the only place flags are rewritten: the
reference recipe's spellings are translated (:mod:`bart.cli.reference_flags`), the flags the command line gave are
noted (:attr:`Settings.given`), the pairs that contradict each other are refused
(:data:`bart.cli.args.CONTRADICTIONS`), a flag a script takes only to refuse a change is refused when changed
(:func:`refused_in`), and the record checks its own rules. A run can start from a file of settings
(``--config_file FILE`` or ``@FILE``: a run's run_config.json or a hand-written JSON; the command line wins).

Nothing here reads the disk but that file: what depends on it or on what the run builds
(``--resume_from_checkpoint auto``: :func:`bart.cli.builder.start_run`; the model's positions: :func:`fit_lengths`;
the loader's epoch length: :func:`resolve_epochs`; ``--warmup_ratio``: :func:`resolve_warmup`) is settled at run
start by :func:`resolved`, which checks the record again.
"""
from __future__ import annotations

import dataclasses
import math
import sys
import textwrap

from bart.cli.args import (
    EVAL,
    FINETUNE,
    PRETRAIN,
    TRAINING,
    USAGE,
    ArgumentParser,
    Flag,
    HelpFormatter,
    _HelpAll,
    _ShortHelp,
    add_flags,
    argparse_keywords,
    check_namespace,
    declared_flags,
    generate_option_pairs,
    given_flags,
    program_name,
    read_config_file,
    reject_unused,
)
from bart.cli.peer_flags import add_peer_spellings, apply_peer_spellings
from bart.cli.reference_flags import add_reference_args, apply_reference_args
from bart.cli.settings import _SECTION_OF, SECTIONS, Settings, SettingsError
from bart.data.noise import add_noise_args, noise_config_from_args
from bart.errors import UserError
from bart.evaluation import task_metric

# Flags that only parsing reads: translated onto a field (``--lamb`` onto optim, ``--model_name_or_path`` onto
# init_checkpoint, ``--load_model_weights_only`` with --resume_from_checkpoint onto init_checkpoint), never a setting
# of their own. name -> (default, its Flag, the section whose --help group shows it)
TRANSLATED = {
    "lamb": (None, Flag("LAMB instead of AdamW (= --optim lamb)", scripts=TRAINING, quick=(PRETRAIN,),
                        argparse=dict(action="store_const", const=True)), "optimization"),
    "init_checkpoint_alias": (None, Flag(
        "starting weights: a .ckpt, a folder holding one, or a Hugging Face folder",
        ("--model_name_or_path",), (FINETUNE,)), "checkpoints"),
    "load_model_weights_only": (None, Flag(
        "with --resume_from_checkpoint P: a new run from P's weights (= --init_checkpoint P)",
        scripts=TRAINING,
        argparse=dict(nargs="?", const=True, metavar="PATH")), "checkpoints"),
}


# -- construction --------------------------------------------------------------------------------------
_FIELDS = set(_SECTION_OF) - {"noise", "generate_kwargs"}
_REFERENCE_FIELDS = {f.name for cls in SECTIONS.values() for f in dataclasses.fields(cls) if f.metadata.get("reference")}
_DEFAULTS = {f.name: (f.default if f.default is not dataclasses.MISSING else f.default_factory())
             for cls in SECTIONS.values() for f in dataclasses.fields(cls)}


_ONCE = {f.name for cls in SECTIONS.values() for f in dataclasses.fields(cls)
         if "flag" in f.metadata and f.metadata["flag"].once}  # --config_file never replays these


def refused_in(script: str) -> list:
    """The flags ``script``'s parser takes only to refuse a change (pretrain.py: fine-tuning's flags)."""
    return [f.name for cls in SECTIONS.values() for f in dataclasses.fields(cls)
            if "flag" in f.metadata and script in f.metadata["flag"].refused_in]


def build_parser(script: str, description: str | None = None) -> ArgumentParser:
    """``script``'s parser, generated from the Settings sections' fields (:func:`add_flags`), then the reference
    recipe's spellings of it. ``--help`` shows the quick start's flags, ``--help-all`` every group."""
    parser = ArgumentParser(prog=program_name(script), description=description, usage=USAGE[script],
                            formatter_class=HelpFormatter, add_help=False)
    quick = [parser.add_argument("-h", "--help", action=_ShortHelp), parser.add_argument("--help-all", action=_HelpAll),
             parser.add_argument("--config_file", metavar="FILE",
                                 help="start from this JSON file of settings (a run's run_config.json; or @FILE)")]
    positional = sorted((own["position"], name, declared) for cls in SECTIONS.values()
                        for name, declared, _ in declared_flags(cls, script)
                        if "position" in (own := declared.per_script.get(script, {})))
    for _, name, declared in positional:
        quick.append(parser.add_argument(name, **argparse_keywords(name, declared, None, script)[2]))
    quick += add_flags(parser, SECTIONS.values(), script)
    groups = {group.title: group for group in parser._action_groups}
    for name, (default, declared, section) in TRANSLATED.items():
        if script in declared.scripts:
            action = groups[SECTIONS[section].GROUP].add_argument(
                *declared.options or (f"--{name}",), **argparse_keywords(name, declared, default, script)[2])
            quick += [action] * (script in declared.quick)
    refused = refused_in(script)
    if refused:  # the other scripts' flags, in one line: parsed so that their command lines run
        parser.add_argument_group("other scripts' flags (a change from the default is refused)",
                                  textwrap.fill(" ".join(f"--{name}" for name in refused), 100))
    if script == PRETRAIN:
        add_noise_args(parser)
    add_reference_args(parser, script, _DEFAULTS)
    add_peer_spellings(parser, script)  # transformers' spellings: hidden aliases
    quick += [a for a in parser._actions if "--max_epochs" in a.option_strings]  # finetune.py's, the reference's
    parser.quick_actions = quick
    return parser


def parse_command_line(script: str, argv=None, description: str | None = None) -> Settings:
    """``script``'s command line (``--config_file FILE`` / ``@FILE``: a file's settings under it) as
    :class:`Settings`; a mistake is argparse's one line and exit 2."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(script, description)
    declared = {}
    for action in parser._actions:  # each field's own action (its aliases come after it)
        declared.setdefault(action.dest, action.default)
    argv, from_file = read_config_file(parser, argv, script, _DEFAULTS, _ONCE)  # the file's values: this parser's defaults
    namespace, rest = parser.parse_known_args(argv) if script == EVAL else (parser.parse_args(argv), [])
    typed = given_flags(parser, argv)
    given = typed | from_file
    check_namespace(namespace, parser, argv, given)  # contradictions and precision, on the flags as given
    apply_reference_args(namespace, parser, script, argv, typed)
    apply_peer_spellings(namespace, parser)
    reject_unused(namespace, parser, declared, refused_in(script), script, "fine-tuning (finetune.py)")
    values = {name: tuple(value) if isinstance(value, list) else value for name, value in vars(namespace).items()
              if name in _FIELDS and not (value is None and name in _REFERENCE_FIELDS)}  # not given: the field's default
    if script in TRAINING and namespace.lamb:
        if namespace.optim not in ("adamw", "lamb"):
            parser.error(f"--lamb with --optim {namespace.optim}: two optimizers; give one")
        values["optim"] = "lamb"
    if script == FINETUNE:
        values["init_checkpoint"] = namespace.init_checkpoint or namespace.init_checkpoint_alias
        if namespace.val_metric is None:
            values["val_metric"] = task_metric(namespace.task)
    try:
        if script == PRETRAIN:
            values["noise"] = noise_config_from_args(namespace)  # its own checks: one line, not a traceback
        if script == EVAL:
            values["generate_kwargs"] = generate_option_pairs(rest)
        settings = Settings(script=script, given=frozenset(given), **values)
        settings.precision.require_supported()  # --fp8: torchao and the GPU, before anything is built
        return settings
    except (SettingsError, UserError, ValueError) as err:
        parser.error(str(err))


# -- run start: what depends on the disk, the model or the loader --------------------------------------
def resolved(settings: Settings, **values) -> Settings:
    """The settings with ``values`` replaced (checked again); a broken rule is a :class:`UserError`."""
    try:
        return settings.replace(**values)
    except SettingsError as err:
        raise UserError(f"{err} (see --help)") from None


def resolve_warmup(settings: Settings, total_steps: int) -> Settings:
    """``--warmup_steps`` below 1 (``--warmup_ratio``): that fraction of the run's ``total_steps`` updates, rounded up
    as transformers does; a whole number stays."""
    if isinstance(settings.schedule.warmup_steps, float):
        return resolved(settings, warmup_steps=math.ceil(settings.schedule.warmup_steps * total_steps))
    return settings


def resolve_epochs(settings: Settings, batches_per_epoch: int) -> Settings:
    """Epoch-counted flags as updates, with B batches per process per epoch and A accumulation steps
    (E = B / A updates per epoch):

    - ``--val_check_interval F`` (a fraction, or ``--check_val_every_n_epoch N`` as F = N): every
      max(1, floor(F x E)) updates (Lightning: every floor(F x B) batches);
    - ``--max_epochs N``: at most ceil(N x B / A) updates, fewer if ``--max_steps`` is smaller;
    - ``--min_epochs N``: early stopping waits for ceil(N x B / A) updates (and ``--min_steps``).
    """
    accumulation = settings.optimization.gradient_accumulation_steps
    values = {}
    interval = settings.validation.val_check_interval
    if isinstance(interval, float):
        values["val_check_interval"] = max(1, math.floor(interval * (batches_per_epoch / accumulation)))
    if settings.schedule.max_epochs:
        steps = max(1, math.ceil(settings.schedule.max_epochs * batches_per_epoch / accumulation))
        values["max_steps"] = min(settings.schedule.max_steps, steps) if settings.schedule.max_steps else steps
    min_steps = settings.schedule.min_steps or 0
    if settings.schedule.min_epochs:
        min_steps = max(min_steps, math.ceil(settings.schedule.min_epochs * batches_per_epoch / accumulation))
    values["min_steps"] = min_steps
    return resolved(settings, **values)


def fit_lengths(settings: Settings, limit: int, names, config_name: str = "the config") -> Settings:
    """Token lengths must fit the model's ``limit`` positions. A length the user gave that does not fit is
    an error naming the flag; a default that does not fit is lowered to ``limit``, with a note."""
    lowered, values = {}, settings.as_dict()
    for name in names:
        value = values[name]
        if value is None or value <= limit:
            continue
        if name not in settings.given:
            print(f"note: --{name} defaults to {value} but the model has {limit} positions; using {limit}",
                  file=sys.stderr)
            lowered[name] = limit
            continue
        raise UserError(f"--{name} {value} exceeds the model's max_position_embeddings {limit} "
                        f"({config_name}); use at most {limit} or a model with more positions")
    return resolved(settings, **lowered) if lowered else settings


__all__ = ["TRANSLATED", "build_parser", "parse_command_line", "refused_in", "resolved", "resolve_warmup",
           "resolve_epochs", "fit_lengths"]
