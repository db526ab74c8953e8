"""One declaration per setting (bart/cli/settings.py): every flag of every entry script is one field of a
Settings section, carrying its one default and its one help line; the parsers are generated from those fields
(bart/cli/args.py), the trainer reads the same record. Also the short --help and a run started from a file."""
import argparse
import dataclasses
import json
import os
import re

import pytest

from bart.cli.args import program_name
from bart.cli.parsing import TRANSLATED, build_parser, parse_command_line, resolved
from bart.cli.peer_flags import ALIASES
from bart.cli.reference_flags import SPECS
from bart.cli.settings import EVAL, FINETUNE, PRETRAIN, SECTIONS, Settings
from bart.data.noise import NoiseConfig
from tests.helpers import ROOT
from tests.helpers.entry import run_entry

SCRIPTS = (PRETRAIN, FINETUNE, EVAL)
_OWN = {"help", "help_all", "config_file"}  # the parser's own: the two helps and --config_file


def _fields():
    return {f.name: f for cls in SECTIONS.values() for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_flag_is_one_field_with_one_default_and_one_help(script):
    """Each action of a script's parser comes from one declaration: a Settings field's flag (its default and help
    are the field's), a flag parsing translates onto a field (TRANSLATED), a row of the reference recipe's table,
    or a noise field; and each field gives a script at most one action of its own."""
    parser = build_parser(script)
    fields, noise = _fields(), {f.name for f in dataclasses.fields(NoiseConfig)}
    specs = {(opt, spec.dest) for spec in SPECS if script in spec.scripts for opt in spec.options}
    peers = {(opt, dest) for opt, dest, scripts in ALIASES if script in scripts} | {("--report_to", "report_to")}
    own_actions = {}
    for action in parser._actions:
        if action.dest in _OWN or action.dest in noise or action.dest in TRANSLATED:
            continue
        if any((opt, action.dest) in specs for opt in action.option_strings):
            continue  # the reference's spelling (a row of SPECS: its help, its translation)
        if any((opt, action.dest) in peers for opt in action.option_strings):
            assert action.help == argparse.SUPPRESS and parser.get_default(action.dest) == action.default, action
            continue  # transformers' spelling (bart.cli.peer_flags): hidden, the field's destination and default
        declared = fields[action.dest].metadata.get("flag")  # a KeyError: a flag without its field
        assert declared is not None and script in declared.scripts, (script, action.dest)
        own_actions.setdefault(action.dest, []).append(action)
        own = declared.per_script.get(script, {})
        default = own.get("default", fields[action.dest].default)
        assert parser.get_default(action.dest) == default or not action.option_strings, (script, action.dest)
        if script in declared.refused_in:  # another script's flag: named in one line of --help-all, no help here
            assert action.help == argparse.SUPPRESS, (script, action.dest)
        else:
            assert action.help.startswith(own.get("help", declared.help)), (script, action.dest)  # (+ a table's)
    assert all(len(actions) == 1 for actions in own_actions.values())
    # every field that declares this script has its action (none dropped by the generator)
    assert {name for name, f in fields.items() if "flag" in f.metadata and script in f.metadata["flag"].scripts} \
        == set(own_actions)


def test_no_flag_is_written_outside_its_declaration():
    """The parser is generated: bart/cli/args.py and settings.py spell no setting's flag outside its field (not: an add_argument per
    flag there, its default again in Settings and the trainer's in TrainerConfig), and TrainerConfig is gone."""
    source = "".join(open(os.path.join(ROOT, "bart", "cli", name)).read() for name in ("args.py", "settings.py", "parsing.py"))
    assert set(re.findall(r'add_argument\("(--?[\w-]+)"', source)) == {"-h", "--help-all", "--config_file"}
    trainer = open(os.path.join(ROOT, "bart", "training", "trainer.py")).read()
    assert "TrainerConfig" not in trainer and "trainer_config" not in open(
        os.path.join(ROOT, "bart", "cli", "builder.py")).read()


def test_keep_checkpoints_and_affinity_have_one_default_each(tmp_path):
    """--keep_checkpoints and --affinity are one field each: the parsers' default, the record's, and what the trainer
    keeps (3 step checkpoints of 5, with no flag) are the same."""
    from bart.runtime.affinity import DEFAULT_MODE
    fields = _fields()
    assert fields["keep_checkpoints"].default == Settings().checkpoints.keep_checkpoints == 3
    assert fields["affinity"].default == Settings().distributed.affinity == DEFAULT_MODE == "socket_unique_interleaved"
    for script in (PRETRAIN, FINETUNE):
        parser = build_parser(script)
        assert parser.get_default("keep_checkpoints") == 3 and parser.get_default("affinity") == DEFAULT_MODE
    assert "affinity" not in {a.dest for a in build_parser(EVAL)._actions}  # run_eval.py leaves it alone

    import torch

    from bart.modeling import BartForConditionalGeneration
    from bart.optim import build_optimizer, build_scheduler
    from bart.training.strategy import prepared_strategy
    from bart.training.trainer import Trainer
    from tests.helpers.synthetic import SyntheticBatches, tiny_config
    settings = parse_command_line(PRETRAIN, ["--config_path", "c.json", "--data_dir", ".", "--max_steps", "5",
                                             "--save_checkpoint_steps", "1", "--output_dir", str(tmp_path)])
    torch.manual_seed(0)
    model = BartForConditionalGeneration(tiny_config(encoder_layers=1, decoder_layers=1))
    optimizer, clips = build_optimizer(model, "adamw", lr=1e-3, weight_decay=0.0)
    Trainer(model, optimizer, build_scheduler(optimizer, "linear", 0, 5), SyntheticBatches(4, 2), settings,
            strategy=prepared_strategy(None, 1, torch.device("cpu"), model), clips_internally=clips,
            progress_bar=False).fit()
    assert sorted(n for n in os.listdir(tmp_path) if n.endswith(".ckpt")) == \
        ["_step3.ckpt", "_step4.ckpt", "_step5.ckpt"]


def test_the_precision_flags_read_from_a_record_default_as_the_parser_does():
    """bart.runtime.precision.FLAGS is what a run's record without a precision flag is read with (Precision.from_record,
    from_args); the precision fields take their defaults from it (not: a second copy of five defaults), so a
    run's record, its resume and the parsers agree: no flag given is tf32 on every script."""
    from bart.cli.settings import PrecisionSettings
    from bart.runtime.precision import FLAGS, Precision
    assert {f.name: f.default for f in dataclasses.fields(PrecisionSettings)} == FLAGS
    for script in SCRIPTS:
        parser = build_parser(script)
        assert {name: parser.get_default(name) for name in FLAGS} == FLAGS
    settings = parse_command_line(PRETRAIN, ["--config_path", "c.json", "--data_dir", ".", "--max_steps", "1"])
    assert Precision.from_record({"fp16": False, "bf16": False}) == settings.precision == Precision("tf32")


# -- a resume's checks: a field's resume rule is its declaration ----------------------------------------------------
_OTHER_VALUE = {"bool": lambda d: not d, "int": lambda d: (d or 0) + 3, "float": lambda d: (d or 0.0) + 0.25,
                "tuple": lambda d: (0.5, 0.5)}
_OTHER_TEXT = {"lr_scheduler": "cosine", "val_metric": "bleu", "prefix": "summarize: "}


def _resume_declared():
    return {name: f for name, f in _fields().items() if "flag" in f.metadata and f.metadata["flag"].resume}


def test_a_resume_checks_every_field_declared_with_a_resume_rule():
    """``flag(..., resume="same" | "may_change")`` is all a setting needs to be checked on resume: a checkpoint's run
    that differs in it alone is refused in one line naming the flag as typed, and --allow_resume_change NAME resumes
    exactly the may_change ones (their names are its choices; schedule=True ones reshape the schedule)."""
    from bart.training.checkpoint import (
        CheckpointError,
        allowable_changes,
        check_resume,
        schedule_changes,
    )

    sections = SECTIONS.values()
    allowable, schedule = allowable_changes(sections), schedule_changes(sections)
    declared = _resume_declared()
    assert {"max_tokens_per_batch", "seed", "lr_scheduler", "prefix"} <= set(declared)
    base = Settings(n_val=2, max_tokens_per_batch=64, val_metric="rouge2").as_dict()  # a null is not compared
    for name, f in declared.items():
        rule = f.metadata["flag"]
        kind = f.type.split(" | ")[0]
        value = _OTHER_TEXT[name] if kind == "str" else _OTHER_VALUE[kind](base[name])
        saved = {"args": base, "config": {}, "world_size": 1}
        current = {"args": {**base, name: value}, "config": {}, "world_size": 1}
        with pytest.raises(CheckpointError) as refused:
            check_resume(saved, current, "c.ckpt", sections=sections)
        assert f"{name}: " in str(refused.value) and f"({rule.shown(name)}" in str(refused.value), (name, refused.value)
        assert (name in allowable) == (rule.resume == "may_change")
        assert (name in schedule) == rule.schedule
        if rule.resume == "may_change":
            notes = check_resume(saved, current, "c.ckpt", allowed=(name,), sections=sections)
            assert len(notes) == 1 and f"as --allow_resume_change {name} asks" in notes[0], notes
    assert {name for name in allowable if name not in declared} == \
        {"max_steps", "global_batch", "training_data", "precision", "distributed_strategy"}  # not one field each


def test_no_module_below_the_entry_scripts_imports_bart_cli():
    """bart/cli builds the run and hands its record down: no module of bart/ but the package's own __init__ (its
    version) imports bart.cli, at import, in a function or for the type checker (the resume rules reach
    bart/training as the record's sections)."""
    import ast

    importers = []
    for folder, _, files in os.walk(os.path.join(ROOT, "bart")):
        if os.path.relpath(folder, ROOT).split(os.sep)[:2] == ["bart", "cli"]:
            continue
        for name in (n for n in files if n.endswith(".py") and (folder, n) != (os.path.join(ROOT, "bart"),
                                                                                "__init__.py")):
            path = os.path.join(folder, name)
            for node in ast.walk(ast.parse(open(path).read())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                if any(n == "bart.cli" or n.startswith("bart.cli.") for n in names):
                    importers.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}")
    assert importers == []


def test_a_resume_checked_flag_is_written_in_one_place():
    """bart/training/checkpoint.py lists no check of a field that declares its resume rule, nor its flag: the
    field's declaration is the one place (plus its use)."""
    source = open(os.path.join(ROOT, "bart", "training", "checkpoint.py")).read()
    assert [name for name in _resume_declared() if f'"{name}": (' in source or f'"--{name}' in source] == []
    with pytest.raises(ValueError, match="resume is one of"):
        from bart.cli.args import flag
        flag(0, "a help", resume="sometimes")


# -- --help: the quick start's flags; --help-all: every group -----------------------------------------------------
@pytest.mark.parametrize("script", SCRIPTS)
def test_help_is_short_and_names_help_all(script, capsys):
    assert run_entry(script, ["--help"]) == 0
    short = capsys.readouterr().out
    lines = short.rstrip("\n").splitlines()
    assert lines[0].startswith(f"usage: {script} ") and len(lines) <= 60, len(lines)
    assert lines[-1].endswith(f"{script} --help-all")
    assert run_entry(script, ["--help-all"]) == 0
    full = capsys.readouterr().out
    assert full.startswith(f"usage: {script} ")
    groups = {cls.GROUP for cls in SECTIONS.values() if any(
        "flag" in f.metadata and script in f.metadata["flag"].scripts and script not in f.metadata["flag"].refused_in
        and "position" not in f.metadata["flag"].per_script.get(script, {}) for f in dataclasses.fields(cls))}
    assert all(f"\n{group}:\n" in full for group in groups), groups
    assert len(full.splitlines()) > len(lines)
    for flag in ("--config_path",) if script != EVAL else ("--decode_precision",):
        assert flag in short


@pytest.mark.parametrize("script, shell", [(PRETRAIN, "run_pretraining.sh"), (FINETUNE, "run_summarization.sh"),
                                           (EVAL, "run_eval_summarization.sh")])
def test_the_flags_a_shell_script_passes_are_in_the_short_help(script, shell, capsys):
    """A user reading scripts/run_*.sh finds each flag it passes to the entry script in that script's --help (each
    flag there by its first spelling)."""
    parser = build_parser(script)
    action_of = {option: action for action in parser._actions for option in action.option_strings}
    text = "\n".join(re.sub(r"(^|\s)#.*", "", line) for line in open(os.path.join(ROOT, "scripts", shell)))
    passed = sorted(set(re.findall(r"(?<![\w-])--[A-Za-z][\w-]*", text)) & set(action_of))
    assert len(passed) >= 8, passed
    assert run_entry(script, ["--help"]) == 0
    short = capsys.readouterr().out
    assert [flag for flag in passed if f"  {action_of[flag].option_strings[0]}" not in short] == []


def test_the_usage_line_names_the_command_typed():
    assert program_name(FINETUNE, "/venv/bin/bart-finetune") == "bart-finetune"
    assert program_name(FINETUNE, "/checkout/finetune.py") == "finetune.py"
    assert program_name(EVAL, "/venv/bin/bart-run-eval") == "bart-run-eval"
    assert program_name(PRETRAIN, "/venv/bin/pytest") == "pretrain.py"  # something else runs it: the script's name


# -- a run from a file: --config_file FILE / @FILE ------------------------------------------------------------
def _finetune(tmp_path, small_tokenizer_dir, out, *extra):
    from tests.helpers.corpus import micro_config
    from tests.helpers.summaries import write_summarization_data
    config = tmp_path / "config.json"
    if not config.exists():
        config.write_text(json.dumps(micro_config()))
        write_summarization_data(str(tmp_path / "data"), sizes=(("train", 8), ("val", 2), ("test", 2)))
    return ["--config_path", str(config), "--data_dir", str(tmp_path / "data"), "--tokenizer", small_tokenizer_dir,
            "--from_scratch", "--max_steps", "1", "--train_batch_size", "2", "--n_val", "0", "--num_workers", "0",
            "--max_source_length", "32", "--max_target_length", "8", "--no_tensorboard", "--output_dir",
            str(tmp_path / out), *extra]


def _recorded(path: str) -> dict:
    values = json.load(open(path))
    return {k: v for k, v in values.items() if k not in ("world_size", "model_config", "run_banner")}


def test_a_run_restarts_from_its_own_run_config(tmp_path, small_tokenizer_dir):
    """finetune.py's run_config.json read back gives the same settings, and a run started from it alone (@FILE,
    plus a new --output_dir: the command line wins) records the same settings again."""
    argv = _finetune(tmp_path, small_tokenizer_dir, "first", "--label_smoothing", "0.1", "--adam_betas", "0.8", "0.99",
                     "--early_stopping_patience", "-1", "--lamb", "--use_nvlamb")
    assert run_entry("finetune.py", argv) == 0
    first = str(tmp_path / "first" / "run_config.json")
    again = parse_command_line(FINETUNE, ["--config_file", first])
    assert json.loads(json.dumps(again.as_dict(), default=str)) == _recorded(first)
    parsed = resolved(parse_command_line(FINETUNE, argv), min_steps=0)  # as the run settled it (no --min_epochs)
    assert again.sections() == parsed.sections() and again.precision == parsed.precision
    assert run_entry("finetune.py", ["@" + first, "--output_dir", str(tmp_path / "second")]) == 0
    second = _recorded(str(tmp_path / "second" / "run_config.json"))
    assert second.pop("output_dir") == str(tmp_path / "second")
    assert second == {k: v for k, v in _recorded(first).items() if k != "output_dir"}


def test_a_hand_written_file_and_the_command_line(tmp_path):
    """A hand-written JSON of settings stands in for the required flags; a flag on the command line wins."""
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"config_path": "c.json", "data_dir": "data", "max_steps": 3, "bf16": True,
                                "adam_betas": [0.8, 0.9], "noise": {"mlm_probability": 0.2}}))
    settings = parse_command_line(PRETRAIN, ["@" + str(path), "--max_steps", "9"])
    assert (settings.schedule.max_steps, settings.model.config_path, settings.precision.name) == (9, "c.json", "bf16")
    assert settings.optimization.adam_betas == (0.8, 0.9) and settings.data.noise.mlm_probability == 0.2
    assert "max_steps" in settings.given and "bf16" in settings.given  # the file's values count as given


@pytest.mark.parametrize("values, words", [
    ({"max_step": 3}, ["unknown key 'max_step'", "did you mean 'max_steps'?"]),
    ({"max_steps": 0}, ["key 'max_steps' (--max_steps)", "must be >= 1, got 0", "correct it in the file"]),
    ({"lr_scheduler": "cosine_annealing"}, ["key 'lr_scheduler'", "invalid choice 'cosine_annealing'"]),
    ({"fp16": "yes"}, ["key 'fp16'", "expected true or false"]),
    ({"keep_checkpoints": None}, ["key 'keep_checkpoints'", "null is not a value"]),
    ({"model_path": "x.ckpt"}, ["unknown key 'model_path' for pretrain.py (a setting of another script)"]),
    # every unknown key in one line (not: one per rerun)
    ({"max_step": 3, "lerning_rate": 1.0}, ["unknown keys for pretrain.py: 'max_step': did you mean 'max_steps'?; "
                                            "'lerning_rate': did you mean 'learning_rate'? Remove or rename them"]),
    ([1, 2], ["a JSON object of settings is expected"]),
])
def test_a_bad_file_is_one_line_naming_the_file_and_the_key(tmp_path, capsys, values, words):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(values))
    argv = ["--config_path", "c.json", "--data_dir", ".", "--max_steps", "1", "--config_file", str(path)]
    assert run_entry("pretrain.py", argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"pretrain.py: error: --config_file {path}: "), err
    assert all(w in err[0] for w in words), err[0]


def test_a_scripts_default_is_its_fields_and_an_older_records_null_takes_it(tmp_path):
    """finetune.py's generation batch and pretrain.py's shuffle window are their fields' declared defaults (a
    per-script default, a reference flag's), the record holds them; a run record from before finetune.py declared
    its own (eval_batch_size null) replays with it, while a null where the record has a value stays refused."""
    fields = _fields()
    base = ["--config_path", "c.json", "--data_dir", "d", "--max_steps", "1"]
    finetuning = parse_command_line(FINETUNE, base + ["--from_scratch"])
    assert finetuning.generation.eval_batch_size == 8 == fields["eval_batch_size"].metadata["flag"].per_script[
        FINETUNE]["default"] == build_parser(FINETUNE).get_default("eval_batch_size")
    pretraining = parse_command_line(PRETRAIN, base)
    assert pretraining.data.buffer_size == 16384 == fields["buffer_size"].default
    assert parse_command_line(PRETRAIN, base + ["--buffer_size", "5"]).data.buffer_size == 5
    assert "(default 16384)" in " ".join(build_parser(PRETRAIN).format_help().split())
    path = tmp_path / "run_config.json"
    path.write_text(json.dumps({**finetuning.as_dict(), "eval_batch_size": None, "precision": "tf32"}))
    assert parse_command_line(FINETUNE, ["--config_file", str(path)]).generation.eval_batch_size == 8


def test_transformers_spellings_set_the_same_settings(tmp_path, capsys):
    """run_summarization.py's spellings (Seq2SeqTrainingArguments) give the recipe's own record; where the meaning
    differs the answer is one line (not: "unrecognized arguments" for each)."""
    base = ["--config_path", "c.json", "--data_dir", "d", "--from_scratch"]
    theirs = parse_command_line(FINETUNE, base + [
        "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "4", "--max_train_samples", "100",
        "--max_eval_samples", "10", "--max_predict_samples", "5", "--lr_scheduler_type", "cosine", "--warmup_ratio",
        "0.1", "--num_train_epochs", "3.0", "--save_total_limit", "2", "--save_steps", "50", "--logging_steps", "5",
        "--eval_steps", "25", "--generation_num_beams", "3", "--generation_max_length", "60",
        "--metric_for_best_model", "eval_rougeL", "--report_to", "none"])
    ours = parse_command_line(FINETUNE, base + [
        "--train_batch_size", "8", "--eval_batch_size", "4", "--n_train", "100", "--n_val", "10", "--n_test", "5",
        "--lr_scheduler", "cosine", "--warmup_steps", "0.1", "--max_epochs", "3", "--keep_checkpoints", "2",
        "--save_checkpoint_steps", "50", "--log_freq", "5", "--val_check_interval", "25", "--eval_beams", "3",
        "--eval_max_gen_length", "60", "--val_metric", "rougeL", "--no_tensorboard"])
    assert theirs.sections() == ours.sections()
    for argv, said in ((["--num_train_epochs", "2.5"], "whole epochs of 1 or more are counted here (--max_epochs)"),
                       (["--warmup_ratio", "1.5"], "a fraction of the updates must be in [0, 1), got 1.5"),
                       (["--report_to", "wandb"], "--report_to wandb: W&B needs its project here: add --wandb_project"),
                       (["--warmup_steps", "2.5"], "expected a whole number of updates or a fraction below 1")):
        with pytest.raises(SystemExit):
            parse_command_line(FINETUNE, base + ["--max_steps", "9", *argv])
        err = capsys.readouterr().err.strip().splitlines()
        assert said in err[-1], err


def test_a_warmup_ratio_becomes_updates_of_the_run(tmp_path):
    from bart.cli.parsing import resolve_warmup

    settings = parse_command_line(FINETUNE, ["--config_path", "c.json", "--data_dir", "d", "--from_scratch",
                                             "--max_steps", "1000", "--warmup_ratio", "0.05"])
    assert settings.schedule.warmup_steps == 0.05
    assert resolve_warmup(settings, 1001).schedule.warmup_steps == 51  # rounded up
    same = parse_command_line(FINETUNE, ["--config_path", "c.json", "--data_dir", "d", "--from_scratch",
                                         "--max_steps", "1000", "--warmup_steps", "40"])
    assert resolve_warmup(same, 1000).schedule.warmup_steps == 40
