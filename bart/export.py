"""Export a checkpoint as a Hugging Face folder others can load with transformers.

    python -m bart.export CKPT OUT_DIR [--tokenizer T] [--allow_tokenizer_mismatch] [--config CONFIG] [--overwrite]
                                       [--no-verify] [--ct2 CT2_DIR] [--push_to_hub OWNER/NAME [--private]]
                                       [--license ID] [--dataset ID]

CKPT: a training checkpoint (``.ckpt``, which carries its config), a weights file (then ``--config``),
a Hugging Face folder, a fairseq ``model.pt`` or a hub id. OUT_DIR receives config.json,
generation_config.json (the model's generation settings: beams, lengths, n-gram blocking, forced
tokens), model.safetensors, the tokenizer files (vocab.json and merges.txt included, whichever
transformers major is installed) and README.md, a model card written from what the run
left beside the checkpoint (data, steps and settings from run_config.json, the training summary,
ROUGE/BLEU and best-validation metrics, and the provenance record git_log.json), with a usage example and the
hub's metadata: license (``--license``), base_model, datasets (``--dataset``) and model-index (the validation
and test metrics of these weights). A post-LN model is written as BART, a Pre-LN one
as mBART (transformers' Pre-LN BART) with ``tokenizer_class`` BartTokenizer, so ``AutoTokenizer``
builds BART's byte-level BPE tokenizer rather than mBART's SentencePiece one.

The tokenizer is the one CKPT was trained with (:mod:`bart.tokenization.tokenizer_choice`): a folder's own files, the
one recorded in (or saved beside) a training checkpoint, facebook/bart-large's for NGC reference and fairseq
checkpoints. ``--tokenizer`` (else $TOKENIZER) names it for weights that carry none, and is checked
against the stored one otherwise: a different one is an error unless ``--allow_tokenizer_mismatch``.
Before the folder is moved into place, transformers loads it (``AutoModelForSeq2SeqLM``,
``AutoTokenizer``) and its logits are compared with this project's (``--no-verify`` skips that).
The folder is assembled in a temporary folder beside OUT_DIR and renamed, so no half-written
export remains; an existing non-empty OUT_DIR is replaced only with ``--overwrite``, and only when it holds an
earlier export's files and nothing else (never a run's folder, nor the checkpoint being exported).

``--ct2 CT2_DIR`` also writes CTranslate2's model of the folder (its ``TransformersConverter``), with the
tokenizer files and ``bart_translate_options.json``: the model's generation settings as
``Translator.translate_batch``'s options, so that CTranslate2 decodes as run_eval.py does; what it decodes
otherwise (no forced EOS, ...) is printed and recorded there (:mod:`bart.ct2`). A generation setting it has no
option for is refused before anything is written; without CTranslate2 installed, ``--ct2`` is one line with
the install command. ``--push_to_hub OWNER/NAME`` uploads OUT_DIR once written (``huggingface_hub``:
``create_repo(private=--private, exist_ok=True)``, ``upload_folder``; the endpoint ``HF_ENDPOINT``, the token
``HF_TOKEN`` or a stored login, checked before the export starts).

Errors in the input (missing file, not a checkpoint, unknown hub id, no token) and a refused upload end with
one line on stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import sys
import tempfile

from bart.configuration.shipped import config_file, names_help
from bart.errors import one_line
from bart.files.file_modes import staging_folder
from bart.files.json_files import read_json
from bart.hub import TOKENIZER_FILES
from bart.records.redact import mask_command
from bart.runtime.foreign_noise import no_transformers_progress_bars

EXIT_USAGE = 2


class ExportError(ValueError):
    """An export that cannot be written; the message says why and what to do."""


def _load_model(checkpoint: str, config_path: str | None, pre_ln: bool | None):
    from bart.configuration.configuration_bart import BartConfig
    from bart.modeling.modeling_bart import BartForConditionalGeneration

    config = BartConfig.from_json_file(config_path) if config_path else None
    if config is not None and pre_ln is not None:
        config.set_pre_ln(pre_ln)
    model = BartForConditionalGeneration.from_pretrained(checkpoint, config=config)
    if config is None and pre_ln is not None and model.config.pre_ln != pre_ln:
        raise ExportError(f"{checkpoint} holds a {'Pre-LN' if model.config.pre_ln else 'post-LN'} model but "
                          f"--{'' if pre_ln else 'no-'}pre_ln was given; drop the flag")
    return model.float().eval()


def _write_layer_norm_keys(folder: str, model) -> None:
    """config.json also names the layer-norm placement as facebook's bart-large and mbart-large-cc25
    configs do (``normalize_before``, ``add_final_layer_norm``, ``normalize_embedding``): transformers
    does not need them, but converters that read fairseq's names do (CTranslate2's
    ``TransformersConverter`` stops on a config without ``normalize_before``)."""
    path = os.path.join(folder, "config.json")
    with open(path, encoding="utf-8") as f:
        values = json.load(f)
    values.update(normalize_before=bool(model.config.pre_ln), add_final_layer_norm=bool(model.config.pre_ln),
                  normalize_embedding=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(values, f, indent=2, sort_keys=True)
        f.write("\n")


def _write_tokenizer(tokenizer_path: str, folder: str, model) -> list[str]:
    from bart.tokenization.tokenization_bart import BartTokenizer

    tokenizer = BartTokenizer.from_pretrained(tokenizer_path)
    if len(tokenizer) > model.config.vocab_size:
        raise ExportError(f"tokenizer {tokenizer_path} has {len(tokenizer)} tokens but the model's vocab_size is "
                          f"{model.config.vocab_size}; pass the tokenizer the model was trained with (--tokenizer)")
    before = set(os.listdir(folder))
    # a standard BART folder's files as they are (the same whichever transformers is installed), others
    # through transformers; vocab.json/merges.txt always (transformers 5.x's save writes tokenizer.json only)
    tokenizer.save_pretrained(folder)
    if not all(os.path.isfile(os.path.join(folder, n)) for n in ("vocab.json", "merges.txt")):
        tokenizer.backend.backend_tokenizer.model.save(folder)
    config_path = os.path.join(folder, "tokenizer_config.json")
    values = {}
    if os.path.isfile(config_path):
        with open(config_path, encoding="utf-8") as f:
            values = json.load(f)
    values["tokenizer_class"] = "BartTokenizer"  # also for the mBART-typed (Pre-LN) folder
    values["model_max_length"] = min(int(values.get("model_max_length", model.config.max_position_embeddings)),
                                     model.config.max_position_embeddings)
    with open(config_path, "w", encoding="utf-8") as f:
        json.dump(values, f, indent=2, sort_keys=True, ensure_ascii=False)
        f.write("\n")
    return sorted(set(os.listdir(folder)) - before)


# run_config.json keys the card shows, with their labels
_CARD_SETTINGS = (("data_dir", "data"), ("init_checkpoint", "started from"), ("max_steps", "updates (--max_steps)"),
                  ("train_batch_size", "batch size per process"), ("gradient_accumulation_steps", "accumulation"),
                  ("world_size", "processes"), ("learning_rate", "learning rate"), ("lr_scheduler", "schedule"),
                  ("warmup_steps", "warmup"), ("label_smoothing", "label smoothing"), ("dropout", "dropout"),
                  ("attention_dropout", "attention dropout"), ("max_source_length", "max source length"),
                  ("max_target_length", "max target length"), ("fp16", "fp16"), ("bf16", "bf16"), ("seed", "seed"))


def _shown_command(start: dict) -> str:
    """A start's command line as the card shows it: the interpreter by its name, no secret flag's value (a record
    written before git_log.json masked them has the interpreter's path and every value)."""
    command = start.get("command")
    if not isinstance(command, list) or not command:
        try:
            command = shlex.split(str(start.get("command_line") or ""))
        except ValueError:
            return "(not shown: unreadable)"
    return shlex.join(mask_command([os.path.basename(str(command[0])), *map(str, command[1:])])) if command else ""


DEFAULT_LICENSE = "apache-2.0"  # the recipe's own (LICENSE); --license names the one the data and base model allow
# the metrics files' keys -> the names model-index gives them
_METRIC_NAMES = {"rouge1": "ROUGE-1", "rouge2": "ROUGE-2", "rougeL": "ROUGE-L", "rougeLsum": "ROUGE-Lsum",
                 "bleu": "BLEU"}
USAGE_TEXT = ("The tower is 324 metres tall, about the same height as an 81-storey building, and the tallest "
              "structure in Paris. It was the first structure in the world to reach a height of 300 metres.")


def _log_records(folder: str) -> list[dict]:
    from bart.records.dllogger_compat import read_dllogger

    try:
        return [r for r in read_dllogger(os.path.join(folder, "dllogger.json")) if r.get("type") == "LOG"]
    except (OSError, ValueError):
        return []


def _hub_id(value) -> str | None:
    """``value`` where it names a hub repository (OWNER/NAME, no such local path), else None."""
    if isinstance(value, str) and re.fullmatch(r"[\w.-]+/[\w.-]+", value) and not os.path.exists(value):
        return value
    return None


def _eval_results(folder: str, model_path: str, run: dict, records: list[dict], summary: dict,
                  dataset: str | None) -> list:
    """model-index's results for the exported weights: the validation at their step (dllogger.json's val_* record)
    and the test split's metrics file where they are the run's final weights (--do_predict and run_eval.py of
    final_step.ckpt score those)."""
    from huggingface_hub import EvalResult

    name = os.path.basename(model_path)
    step = summary.get("steps") if name == "final_step.ckpt" else \
        int(m.group(1)) if (m := re.search(r"step(\d+)\.ckpt$", name)) else None
    if step is None:
        return []
    task = run.get("task") or "summarization"
    data = dataset or os.path.basename(str(run.get("data_dir") or "").rstrip(os.sep)) or "local data"
    splits = {"validation": {}, "test": {}}
    for record in records:
        if record.get("step") == step:
            splits["validation"].update({k[4:]: v for k, v in record.get("data", {}).items()
                                         if k.startswith("val_") and k[4:] in _METRIC_NAMES})
    if step == summary.get("steps"):
        for metrics_file in ("test_rouge.json", "test_bleu.json"):
            values = read_json(os.path.join(folder, metrics_file), None)
            if isinstance(values, dict):
                splits["test"].update({k: v for k, v in values.items() if k in _METRIC_NAMES})
    return [EvalResult(task_type=task, dataset_type=dataset or data, dataset_name=data, dataset_split=split,
                       metric_type="sacrebleu" if key == "bleu" else "rouge", metric_name=_METRIC_NAMES[key],
                       metric_value=float(value))
            for split, metrics in splits.items() for key, value in metrics.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)]


def usage_snippet(where: str, max_length: int) -> str:
    """The card's Python example: the folder (or hub repository) ``where`` loaded and one text summarized."""
    return "\n".join([
        "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer", "",
        f"tokenizer = AutoTokenizer.from_pretrained({where!r})",
        f"model = AutoModelForSeq2SeqLM.from_pretrained({where!r})",
        f"text = {USAGE_TEXT!r}",
        f"inputs = tokenizer([text], max_length={max_length}, truncation=True, return_tensors=\"pt\")",
        "summary_ids = model.generate(**inputs)  # the generation settings of generation_config.json",
        "print(tokenizer.batch_decode(summary_ids, skip_special_tokens=True)[0])"])


def model_card(model, model_path: str, where: str | None = None, license: str = DEFAULT_LICENSE,
               dataset: str | None = None) -> str:
    """README.md of the export, from what the run left beside the checkpoint: run_config.json (data, steps,
    settings, the base model), the training log (dllogger.json: its summary, the validation at the weights' step),
    the metrics files ({split}_rouge.json, best_{metric}.json) and the provenance record (git_log.json: version,
    commit, versions, GPUs, command line). Its metadata (huggingface_hub's ``ModelCardData``): ``license``,
    ``base_model`` where the run started from a hub model, ``datasets`` where ``dataset`` (a hub dataset id) is
    given, and ``model-index`` with the validation and test metrics of these weights; a usage example loads
    ``where`` (the export's folder or hub repository)."""
    from huggingface_hub import ModelCard, ModelCardData

    folder = os.path.dirname(os.path.abspath(model_path)) if os.path.isfile(model_path) else model_path
    run = read_json(os.path.join(folder, "run_config.json"), None) or {}
    records = _log_records(folder) if os.path.isfile(os.path.join(folder, "dllogger.json")) else []
    summary, start_times = {}, []
    for record in records:
        if record.get("step") == []:
            summary.update(record.get("data", {}))
            if isinstance(record.get("data", {}).get("total_time_s"), (int, float)):
                start_times.append(record["data"]["total_time_s"])
    if len(start_times) > 1:  # a resumed run: each start's summary holds its own time; the run's is their sum
        summary["total_time_s"] = round(sum(start_times), 3)
    kind = "Pre-LN BART (saved as mBART, transformers' Pre-LN BART)" if model.config.pre_ln else "BART"
    c = model.config
    task = run.get("task") or "summarization"
    title = os.path.basename(folder.rstrip(os.sep)) or "BART"
    where = where or folder
    results = _eval_results(folder, model_path, run, records, summary, dataset)
    data = ModelCardData(library_name="transformers", pipeline_tag=task, tags=["bart", task], license=license,
                         base_model=_hub_id(run.get("init_checkpoint")), datasets=[dataset] if dataset else None,
                         model_name=os.path.basename(where.rstrip(os.sep)) if results else None,
                         eval_results=results or None)
    lines = ["---", data.to_yaml(), "---", "", f"# {title}", "",
             f"{kind}: d_model {c.d_model}, {c.encoder_layers}+{c.decoder_layers} layers, "
             f"{c.encoder_attention_heads} heads, vocabulary {c.vocab_size}; exported from `{os.path.basename(model_path)}` "
             f"with `python -m bart.export`. License: {license} (`bart.export --license`).", "",
             "## Usage", "", "```python",
             usage_snippet(where, min(int(run.get("max_source_length") or c.max_position_embeddings),
                                      c.max_position_embeddings)), "```", ""]
    if run:
        lines += ["## Training", "", "| setting | value |", "|---|---|"]
        lines += [f"| {label} | `{run[key]}` |" for key, label in _CARD_SETTINGS if run.get(key) not in (None, False)]
        lines.append("")
    metrics = {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        values = read_json(os.path.join(folder, name), None) if name.endswith(("_rouge.json", "_bleu.json")) else None
        if isinstance(values, dict):
            metrics.update({f"{name[:-5]}: {k}": v for k, v in values.items()
                            if k.startswith(("rouge", "bleu")) and isinstance(v, (int, float))})
        ranking = read_json(os.path.join(folder, name), None) if name.startswith("best_") and name.endswith(".json") else None
        if isinstance(ranking, dict) and ranking.get("best"):
            metrics[f"best validation {ranking.get('metric')}"] = f"{ranking['best'][0][0]} ({ranking['best'][0][1]})"
    shown = {k: summary[k] for k in ("steps", "final_loss", "avg_train_throughput", "total_time_s") if k in summary}
    if shown or metrics:
        lines += ["## Results", "", "| metric | value |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in {**shown, **metrics}.items()]
        lines.append("")
    log = read_json(os.path.join(folder, "git_log.json"), None)
    starts = log.get("starts") if isinstance(log, dict) else None
    if starts:
        trained = [start for start in starts if any(script in _shown_command(start) for script in
                                                    ("pretrain.py", "finetune.py", "bart-pretrain", "bart-finetune"))]
        first = (trained or starts)[-1]  # the last training start: the command and code that wrote these weights
        git, build = first.get("git") or {}, first.get("torch_build") or {}
        version = (first.get("package") or {}).get("version")
        gpus = first.get("gpus") or {}
        lines += ["## Provenance", "", f"From `git_log.json` beside the checkpoint ({len(starts)} start(s) of the run; "
                  "the last training start shown).", "",
                  f"- code: {f'version `{version}`, ' if version else ''}commit `{git.get('commit')}`"
                  f"{' (with uncommitted changes)' if git.get('dirty') else ''}, branch `{git.get('branch')}`",
                  f"- torch {build.get('torch')}, CUDA {build.get('cuda')}, cuDNN {build.get('cudnn')}, NCCL {build.get('nccl')}",
                  f"- GPUs: {gpus.get('count', 0)} {', '.join(sorted(set(gpus.get('names') or []))) or '(none: CPU)'}",
                  f"- container: {(first.get('container') or {}).get('NVIDIA_PYTORCH_VERSION') or 'none recorded'}",
                  f"- command: `{_shown_command(first)}`", ""]
    return str(ModelCard("\n".join(lines)))  # (ModelCard: the metadata parses as the hub reads it)


def _verify(folder: str, model) -> float:
    """Load ``folder`` with transformers' Auto classes; the largest logit difference to ``model``."""
    import torch
    import transformers

    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    if not isinstance(hf_tokenizer, (transformers.BartTokenizer, transformers.BartTokenizerFast)):
        raise ExportError(f"AutoTokenizer built a {type(hf_tokenizer).__name__} from the export, not BART's tokenizer")
    with no_transformers_progress_bars():
        hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    expected = "MBartForConditionalGeneration" if model.config.pre_ln else "BartForConditionalGeneration"
    if type(hf_model).__name__ != expected:
        raise ExportError(f"transformers built a {type(hf_model).__name__} from the export, expected {expected}")
    batch = hf_tokenizer(["The export is checked against the checkpoint."], return_tensors="pt")
    decoder_input_ids = batch["input_ids"][:, :6].clone()
    decoder_input_ids[:, 0] = model.config.decoder_start_token_id
    with torch.no_grad():
        ours = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                     decoder_input_ids=decoder_input_ids).logits
        theirs = hf_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                          decoder_input_ids=decoder_input_ids).logits
    diff = float((ours - theirs).abs().max())
    scale = float(ours.abs().max()) or 1.0
    if not diff <= 1e-4 * max(1.0, scale):
        raise ExportError(f"transformers computes different logits from the exported folder (max difference {diff:.3g}); "
                          f"the export was not written")
    return diff


# What an export writes (the Hugging Face folder; ``--ct2``: CTranslate2's): --overwrite replaces a folder
# that holds these files only, so that it never removes a run, a checkpoint or anything else of the user's.
EXPORT_FILES = frozenset({"config.json", "generation_config.json", "model.safetensors", "pytorch_model.bin",
                          "README.md", "chat_template.jinja", *TOKENIZER_FILES})
CT2_FILES = frozenset({"model.bin", "config.json", "shared_vocabulary.json", "shared_vocabulary.txt",
                       "vocabulary.json", "vocabulary.txt", "source_vocabulary.json", "target_vocabulary.json",
                       "bart_translate_options.json", *TOKENIZER_FILES})


def _check_target(folder: str, name: str, overwrite: bool, written: frozenset = EXPORT_FILES) -> None:
    """``folder`` can receive an export: new, empty, or (``overwrite``) an earlier export, holding only the
    ``written`` files; anything else in it (a run's checkpoints and log, other folders) is refused in one line."""
    if os.path.isfile(folder):
        raise ExportError(f"{name} {folder} is a file; it must be a folder (new, empty, or replaced with --overwrite)")
    if not os.path.isdir(folder) or not os.listdir(folder):
        return
    if not overwrite:
        raise ExportError(f"{name} {folder} exists and is not empty; pass --overwrite to replace it or choose another "
                          f"folder")
    foreign = sorted(entry for entry in os.listdir(folder)
                     if entry not in written or not os.path.isfile(os.path.join(folder, entry))
                     or os.path.islink(os.path.join(folder, entry)))
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise ExportError(f"{name} {folder} holds {shown}, which an export does not write: --overwrite replaces only "
                          f"an earlier export's folder; choose a new folder, such as "
                          f"{os.path.join(folder, 'hf_export')}")


def _check_not_inside(model_path: str, folder: str, name: str) -> None:
    """The checkpoint being exported is never in the folder an export replaces."""
    model, target = os.path.realpath(model_path), os.path.realpath(folder)
    if model == target or model.startswith(target + os.sep):
        raise ExportError(f"{name} {folder} holds the checkpoint being exported ({model_path}); an export there would "
                          f"replace it: choose another folder")


def _check_ct2(ct2_dir: str, out_dir: str, overwrite: bool) -> None:
    """--ct2's folder and CTranslate2 itself, before anything is loaded."""
    import importlib.util

    from bart.ct2 import INSTALL

    if importlib.util.find_spec("ctranslate2") is None:
        raise ExportError(f"--ct2 needs CTranslate2, which is not installed: {INSTALL}")
    _check_target(ct2_dir, "--ct2", overwrite, CT2_FILES)
    inside = os.path.commonpath([ct2_dir, out_dir]) in (ct2_dir, out_dir)
    if inside:
        raise ExportError(f"--ct2 {ct2_dir} and OUT_DIR {out_dir} must be separate folders (neither inside the other)")


def _move_into_place(staging: str, target: str) -> None:
    """``staging`` renamed to ``target``; an existing ``target`` (checked replaceable) is replaced."""
    parent = os.path.dirname(target)
    if os.path.isdir(target):
        old = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.old-", dir=parent)
        os.replace(target, os.path.join(old, "previous"))
        os.replace(staging, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, target)


def _ct2_settings(model) -> dict:
    """The model's generation settings CTranslate2 is given; one it has no option for is an ExportError."""
    from bart.ct2 import model_settings

    try:
        return model_settings(model.config)
    except ValueError as err:
        raise ExportError(f"--ct2: {err}") from None


def _write_ct2(hf_folder: str, ct2_dir: str, model, settings: dict) -> dict:
    """CTranslate2's model of the exported folder in a staging folder beside ``ct2_dir``; returns what
    ``bart.ct2.convert`` returns plus the staging folder."""
    from bart import ct2

    parent = os.path.dirname(ct2_dir)
    os.makedirs(parent, exist_ok=True)
    staging = staging_folder(parent, prefix=f".{os.path.basename(ct2_dir)}.ct2-")
    try:
        return dict(ct2.convert(hf_folder, staging, model.config.vocab_size, settings), staging=staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def export(checkpoint: str, out_dir: str, tokenizer: str | None = None, config_path: str | None = None,
           pre_ln: bool | None = None, overwrite: bool = False, verify: bool = True,
           allow_tokenizer_mismatch: bool = False, ct2_dir: str | None = None,
           push_to_hub: str | None = None, private: bool = False, license: str = DEFAULT_LICENSE,
           dataset: str | None = None) -> dict:
    """Write the Hugging Face folder ``out_dir`` (and with ``ct2_dir`` CTranslate2's model of it; with
    ``push_to_hub`` upload ``out_dir`` to that model repository); returns what was written (paths,
    tokenizer, check, CTranslate2's options, the repository's URL). ``license``, ``dataset``: the model card's
    (:func:`model_card`)."""
    from bart.hub import check_can_push, push_folder, resolve_model_path

    out_dir = os.path.abspath(os.path.expanduser(out_dir))
    _check_target(out_dir, "OUT_DIR", overwrite)
    if ct2_dir is not None:
        ct2_dir = os.path.abspath(os.path.expanduser(ct2_dir))
        _check_ct2(ct2_dir, out_dir, overwrite)
    if push_to_hub is not None:
        check_can_push(push_to_hub)
    model_path = resolve_model_path(checkpoint)
    if os.path.isdir(model_path) and not os.path.isfile(os.path.join(model_path, "config.json")):
        from bart.modeling.weights import resolve_weights
        model_path = resolve_weights(model_path)  # a run's output folder: its newest checkpoint
    if os.path.abspath(model_path) == out_dir:
        raise ExportError(f"OUT_DIR {out_dir} is the checkpoint's own folder; choose another folder")
    if os.path.exists(model_path):  # a local checkpoint (a hub id is downloaded into the cache)
        _check_not_inside(model_path, out_dir, "OUT_DIR")
        if ct2_dir is not None:
            _check_not_inside(model_path, ct2_dir, "--ct2")
    from bart.modeling.weights import (
        write_model_files,  # torch: imported once the cheap checks passed
    )
    from bart.tokenization.tokenizer_choice import choose_tokenizer

    model = _load_model(model_path, config_path, pre_ln)
    ct2_settings = _ct2_settings(model) if ct2_dir is not None else None
    tokenizer_path = choose_tokenizer(model_path, tokenizer, allow_mismatch=allow_tokenizer_mismatch).path
    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    staging = staging_folder(parent, prefix=f".{os.path.basename(out_dir)}.export-")  # the umask's mode
    try:
        files = write_model_files(model, staging)
        _write_layer_norm_keys(staging, model)
        files += _write_tokenizer(tokenizer_path, staging, model)
        with open(os.path.join(staging, "README.md"), "w", encoding="utf-8") as f:  # the model card
            f.write(model_card(model, model_path, push_to_hub or out_dir, license, dataset))
        files.append("README.md")
        max_diff = _verify(staging, model) if verify else None
        converted = _write_ct2(staging, ct2_dir, model, ct2_settings) if ct2_dir is not None else None
        try:
            _move_into_place(staging, out_dir)
            if converted is not None:
                _move_into_place(converted["staging"], ct2_dir)
        finally:
            if converted is not None:
                shutil.rmtree(converted["staging"], ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    result = {"out_dir": out_dir, "files": sorted(files), "tokenizer": tokenizer_path,
              "model_type": "mbart" if model.config.pre_ln else "bart", "verify_max_abs_diff": max_diff,
              "ct2": None if converted is None else dict(converted, staging=None, folder=ct2_dir), "hub_url": None}
    if push_to_hub is not None:
        result["hub_url"] = push_folder(out_dir, push_to_hub, private=private)
    return result


BEST_FOLDER = "best_tfmr"  # the NVIDIA reference's name for the best checkpoint's Hugging Face folder


def export_best(output_dir: str) -> dict | None:
    """finetune.py's hand-off at the end of a run: its best validation checkpoint
    (:func:`bart.training.checkpoint.best_checkpoint`) as the Hugging Face folder ``OUTPUT_DIR/best_tfmr``, through
    :func:`export` (loaded and compared in transformers before it is moved into place; an earlier one replaced).
    None where the run kept no best checkpoint (no validation, ``--save_top_k 0``)."""
    from bart.files.checkpoint_io import CheckpointError
    from bart.training.checkpoint import best_checkpoint

    try:
        best = best_checkpoint(output_dir)
    except CheckpointError:
        return None
    return export(best, os.path.join(output_dir, BEST_FOLDER), overwrite=True)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bart.export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="training checkpoint (.ckpt), weights file, folder, fairseq model.pt or hub id")
    parser.add_argument("out_dir", help="the Hugging Face folder to write")
    parser.add_argument("--tokenizer", default=None,
                        help="tokenizer folder or hub id (default: $TOKENIZER); the checkpoint's own tokenizer is "
                             "used, and one given here must be the same, for weights that carry one")
    parser.add_argument("--allow_tokenizer_mismatch", action="store_true",
                        help="export --tokenizer / $TOKENIZER even where it differs from the checkpoint's own")
    parser.add_argument("--config", dest="config_path", default=None,
                        help=f"for a weights file that carries no config: a shipped config's name ({names_help()}) "
                             f"or a BART config.json's path")
    parser.add_argument("--pre_ln", action=argparse.BooleanOptionalAction, default=None,
                        help="with --config: Pre-LN model (default: the config's)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier export in OUT_DIR (a folder holding anything else is refused)")
    parser.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                        help="load the export with transformers and compare logits before moving it into place")
    parser.add_argument("--ct2", dest="ct2_dir", default=None, metavar="DIR",
                        help="also write CTranslate2's model of the export into DIR (its converter; the tokenizer "
                             "files; bart.ct2.OPTIONS_FILE: the model's generation settings as translate_batch's "
                             "options, see bart/ct2.py)")
    parser.add_argument("--push_to_hub", default=None, metavar="REPO",
                        help="upload OUT_DIR to the hub's model repository REPO (OWNER/NAME; made if missing) once "
                             "it is written; needs a token with write access (HF_TOKEN or `hf auth login`)")
    parser.add_argument("--private", action="store_true",
                        help="with --push_to_hub: make the repository private (default: the hub's default, public "
                             "unless the organization's is private; an existing repository keeps its visibility)")
    parser.add_argument("--license", default=DEFAULT_LICENSE, metavar="ID",
                        help=f"the model card's license, a hub license id (default {DEFAULT_LICENSE}, the recipe's "
                             f"own: name the one your data and base model allow)")
    parser.add_argument("--dataset", default=None, metavar="ID",
                        help="the hub dataset the model was trained and evaluated on (e.g. cnn_dailymail), for the "
                             "model card's datasets and model-index (default: the data folder's name, no datasets)")
    args = parser.parse_args(argv)
    if args.private and args.push_to_hub is None:
        parser.error("--private applies to the repository --push_to_hub makes; add --push_to_hub REPO or drop it")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from bart.hub import HubPushError, HubResolutionError

    try:
        config_path = args.config_path and config_file(args.config_path, "--config")  # UserError: a ValueError
        result = export(args.checkpoint, args.out_dir, args.tokenizer, config_path, args.pre_ln,
                        args.overwrite, args.verify, args.allow_tokenizer_mismatch, args.ct2_dir,
                        args.push_to_hub, args.private, args.license, args.dataset)
    except (ExportError, HubResolutionError, HubPushError, FileNotFoundError, IsADirectoryError, NotADirectoryError,
            PermissionError, ValueError) as err:  # ValueError: CheckpointError too (not imported: it imports torch)
        print(f"bart.export: error: {one_line(err)}", file=sys.stderr)
        return EXIT_USAGE
    check = ("" if result["verify_max_abs_diff"] is None else
             f"; transformers loads it (max logit difference {result['verify_max_abs_diff']:.2g})")
    print(f"wrote {result['out_dir']} ({result['model_type']}, tokenizer from {result['tokenizer']}){check}")
    for name in result["files"]:
        print(f"  {name}")
    converted = result["ct2"]
    if converted is not None:
        from bart.ct2 import OPTIONS_FILE
        placeholders = (f"; {converted['placeholder_tokens']} placeholder tokens <ct2_unused_i> for the model's "
                        f"vocabulary rows beyond the tokenizer" if converted["placeholder_tokens"] else "")
        print(f"wrote {converted['folder']} (CTranslate2; translate_batch options in {OPTIONS_FILE}{placeholders})")
        for setting, why in converted["differences"].items():
            print(f"  note: CTranslate2 decodes otherwise than generate's {setting}="
                  f"{converted['generate_settings'][setting]!r}: {why}")
    if result["hub_url"]:
        print(f"pushed {result['out_dir']} to {result['hub_url']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
