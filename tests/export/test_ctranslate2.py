"""``python -m bart.export CKPT OUT --ct2 DIR``: CTranslate2's converter on the export, and
``bart_translate_options.json`` beside it, decode in ctranslate2.Translator token-identically to this project's
generate and run_eval.py (post-LN BART and Pre-LN as mBART), with generate's settings mapped by ``bart.ct2``
(``ct2_options``: lengths minus the start token, forced BOS as a target prefix, renormalize_logits=True because
CTranslate2 takes its log-softmax after the bans). Skipped when ctranslate2 (requirements.txt) is not importable;
``--ct2`` without it is one line (tested with its import stood in for)."""
import importlib.util
import json
import os
import sys

import pytest
import torch

from bart import ct2
from bart.configuration import BartConfig
from bart.export import main as export_main
from bart.modeling import BartForConditionalGeneration
from tests.helpers import ROOT
from tests.helpers.entry import run_entry

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import bench_generation  # noqa: E402

TINY = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128, init_std=0.3, dropout=0.0)
TEXTS = ["ka lo mi ne su ta ri vo ze pa do gu le ni so fa mu", "te ro bi ya ke lu ka lo ka lo mi mi ne",
         "su ta ri vo ze", "pa do gu le ni so fa mu te ro bi ya ke lu ka lo mi ne su ta ri"]
# greedy, 2 and 4 beams; lengths, n-gram blocking, length penalties (beams only: greedy has no use for one) and a
# forced BOS (min_length keeps EOS out of the step after it: CTranslate2 drops EOS from the secondary beams there)
CASES = [dict(num_beams=beams, length_penalty=lp, min_length=min_length, max_length=max_length,
              no_repeat_ngram_size=ngram, forced_bos_token_id=bos)
         for beams in (1, 2, 4) for lp in ((1.0,) if beams == 1 else (1.0, 2.0, 0.5)) for ngram in (0, 3)
         for min_length, max_length, bos in ((0, 12, None), (5, 20, None), (3, 16, 0))]
EOS_BIAS = 3.0  # on EOS's logit: rows end at different steps, some at max_length
requires_ct2 = pytest.mark.skipif(importlib.util.find_spec("ctranslate2") is None,
                                  reason="ctranslate2 (requirements.txt) is not installed")


def _identical_rows(a, b, pad):
    width = max(a.shape[1], b.shape[1])
    a, b = (torch.nn.functional.pad(t, (0, width - t.shape[1]), value=pad) for t in (a, b))
    return int((a == b).all(1).sum())


def _exported(tmp_path, tokenizer_dir, pre_ln, ct2_dir=True, **settings):
    """A tiny random model (EOS made likely; ``settings`` in its config), its training checkpoint, and its
    `python -m bart.export --ct2` folders."""
    from bart.tokenization.tokenization_bart import BartTokenizer

    tokenizer = BartTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    config = BartConfig(**TINY, vocab_size=len(tokenizer), pre_ln=pre_ln, **settings)
    model = BartForConditionalGeneration(config).eval()
    with torch.no_grad():
        model.final_logits_bias[0, config.eos_token_id] = EOS_BIAS
    torch.save({"model": model.state_dict(), "config": config.to_dict(), "step": 1}, tmp_path / "model.ckpt")
    ct2_args = ["--ct2", str(tmp_path / "ct2")] if ct2_dir and importlib.util.find_spec("ctranslate2") else []
    assert export_main([str(tmp_path / "model.ckpt"), str(tmp_path / "hf"), "--tokenizer", tokenizer_dir,
                        *ct2_args]) == 0
    return model, tokenizer, tmp_path / "hf", tmp_path / "ct2"


@pytest.fixture(scope="module")
def exported(tmp_path_factory, small_tokenizer_dir):
    """``_exported`` once per layer-norm placement, for the tests that read the folder (none changes it)."""
    made = {}

    def get(pre_ln):
        if pre_ln not in made:
            made[pre_ln] = _exported(tmp_path_factory.mktemp(f"export_pre_ln_{pre_ln}"), small_tokenizer_dir, pre_ln)
        return made[pre_ln]
    return get


@pytest.mark.parametrize("pre_ln", [False, True])
def test_export_names_the_layer_norm_placement_as_fairseq_configs_do(pre_ln, exported):
    """config.json has normalize_before / add_final_layer_norm (= Pre-LN) and normalize_embedding, as
    facebook/bart-large's and mbart-large-cc25's: converters that read them (CTranslate2's) need them; the
    project and transformers read the folder back as the same architecture."""
    import transformers

    model, _, folder, _ = exported(pre_ln)
    values = json.load(open(folder / "config.json"))
    assert (values["normalize_before"], values["add_final_layer_norm"], values["normalize_embedding"]) == \
        (pre_ln, pre_ln, True)
    assert BartForConditionalGeneration.from_pretrained(str(folder)).config.pre_ln is pre_ln
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(folder))
    assert type(hf).__name__ == ("MBartForConditionalGeneration" if pre_ln else "BartForConditionalGeneration")


@requires_ct2
@pytest.mark.parametrize("pre_ln", [False, True])
def test_ctranslate2_decodes_the_export_as_this_project(pre_ln, exported):
    """--ct2's model against generate over CASES (greedy, 2 and 4 beams; length penalties; n-gram blocking;
    lengths; forced BOS) through ct2_options, the mapping the options file is written with."""
    import ctranslate2

    model, tokenizer, folder, converted = exported(pre_ln)
    translator = ctranslate2.Translator(str(converted), device="cpu", intra_threads=1)
    vocabulary = ct2.ct2_vocabulary(str(converted))
    assert len(vocabulary) == model.config.vocab_size and vocabulary == ct2.ct2_vocabulary(str(folder))
    index = {token: i for i, token in enumerate(vocabulary)}
    batch = tokenizer(TEXTS, return_tensors="pt", padding=True)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    pad, start, eos = model.config.pad_token_id, model.config.decoder_start_token_id, model.config.eos_token_id
    differ, ended_early, cut, unnormalized_differ = [], 0, 0, 0
    for case in CASES:
        settings = dict(case, early_stopping=True, forced_eos_token_id=None)
        ours = model.generate(ids, attention_mask=mask, renormalize_logits=True, **settings)
        theirs = ct2.ct2_generate(translator, vocabulary, index, ids, mask, settings, start, pad)
        if not _identical_rows(ours, theirs, pad) == len(TEXTS):
            differ.append(f"{case}\n  ours {ours.tolist()}\n  ct2  {theirs.tolist()}")
        if case["num_beams"] > 1 and case["no_repeat_ngram_size"]:  # transformers' scores: banned after log-softmax
            plain = model.generate(ids, attention_mask=mask, **settings)
            unnormalized_differ += _identical_rows(plain, theirs, pad) < len(TEXTS)
            assert "renormalize_logits" in ct2.differences(settings)  # the export says so
        lengths = (ours != pad).sum(1)
        ended_early += int(((ours == eos).sum(1) == 2).logical_and(lengths < case["max_length"]).sum())
        cut += int((lengths == case["max_length"]).sum())
    assert not differ, f"{len(differ)} of {len(CASES)} cases differ; the first:\n" + differ[0]
    assert ended_early >= 4 and cut >= 2  # both ways of ending were compared
    assert unnormalized_differ > 0  # why the mapping needs renormalize_logits=True


# what run_eval.py decodes with, from the model's config: every setting CTranslate2 follows
RUN_EVAL_SETTINGS = dict(length_penalty=2.0, no_repeat_ngram_size=3, min_length=5, max_length=24,
                         renormalize_logits=True, forced_eos_token_id=None, early_stopping=True)


@requires_ct2
@pytest.mark.parametrize("num_beams", [1, 2, 4])
def test_the_options_file_makes_ctranslate2_decode_as_run_eval(num_beams, tmp_path, small_tokenizer_dir, monkeypatch,
                                                               capsys):
    """End to end: settings in the model's config, `bart.export --ct2`, translate_batch with the options file
    (bart.ct2.translate_options) and nothing else; its tokens are generate()'s without arguments, and its text
    run_eval.py's generations file (its --eval_max_gen_length set to the config's max_length: run_eval.py's flag
    overrides the config, the options file follows the config); nothing to note (no difference)."""
    import ctranslate2

    model, tokenizer, folder, converted = _exported(tmp_path, small_tokenizer_dir, False, num_beams=num_beams,
                                                    **RUN_EVAL_SETTINGS)
    assert "note:" not in capsys.readouterr().out
    record = json.loads((converted / ct2.OPTIONS_FILE).read_text())
    assert record["differences"] == {} and record["translate_batch"]["beam_size"] == num_beams
    translator = ctranslate2.Translator(str(converted), device="cpu", intra_threads=1)
    sources = [tokenizer.convert_ids_to_tokens(tokenizer(text)["input_ids"]) for text in TEXTS]
    results = translator.translate_batch(sources, **ct2.translate_options(str(converted), len(sources)))
    theirs = [tokenizer.convert_tokens_to_ids(r.hypotheses[0]) for r in results]
    batch = tokenizer(TEXTS, return_tensors="pt", padding=True)
    ours = model.generate(batch["input_ids"], attention_mask=batch["attention_mask"])
    pad = model.config.pad_token_id
    assert [[t for t in row[1:] if t != pad] for row in ours.tolist()] == theirs
    data = tmp_path / "data"
    data.mkdir()
    (data / "test.source").write_text("\n".join(TEXTS) + "\n")
    (data / "test.target").write_text("\n".join(TEXTS) + "\n")
    monkeypatch.delenv("TOKENIZER", raising=False)
    # CONFIG_PATH: the run's config, with the generation settings (the export's config.json has none: transformers
    # reads them from generation_config.json, run_eval.py from CONFIG_PATH)
    model.config.to_json_file(str(tmp_path / "run_config.json"))
    assert run_entry("run_eval.py", [str(folder), str(tmp_path / "run_config.json"), str(data), str(tmp_path / "eval"),
                                     "--device", "cpu", "--bs", "4", "--eval_max_gen_length", "24"]) == 0
    generations = (tmp_path / "eval" / "test_generations.txt").read_text().splitlines()
    assert generations == [tokenizer.decode(row, skip_special_tokens=True).strip() for row in theirs]


def test_ct2_without_ctranslate2_is_one_line_naming_the_install(tmp_path, tokenizer_dir, monkeypatch, capsys):
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ctranslate2" else found(name, *a))
    code = export_main([str(tmp_path / "model.ckpt"), str(tmp_path / "hf"), "--ct2", str(tmp_path / "ct2")])
    err = capsys.readouterr().err
    assert code == 2 and err == f"bart.export: error: --ct2 needs CTranslate2, which is not installed: " \
                                f"pip install ctranslate2=={ct2.VERSION}\n"
    assert os.listdir(tmp_path) == []


@requires_ct2
def test_ct2_refuses_settings_it_has_no_option_for_before_writing(tmp_path, small_tokenizer_dir, capsys):
    """A sampling model (do_sample): one line naming the setting, nothing written (neither folder); --ct2
    inside OUT_DIR: one line."""
    with pytest.raises(AssertionError):
        _exported(tmp_path, small_tokenizer_dir, False, do_sample=True)
    err = capsys.readouterr().err
    assert err.startswith("bart.export: error: --ct2: the model's generation settings set do_sample=True") and \
        len(err.splitlines()) == 1, err
    assert sorted(os.listdir(tmp_path)) == ["model.ckpt"]
    code = export_main([str(tmp_path / "model.ckpt"), str(tmp_path / "hf"), "--ct2", str(tmp_path / "hf" / "ct2")])
    assert code == 2 and "must be separate folders" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["model.ckpt"]


def test_ct2_options_map_generate_settings_or_refuse():
    vocabulary = ["<s>", "<pad>", "</s>"]
    options = ct2.ct2_options(dict(num_beams=4, max_length=65, min_length=64, no_repeat_ngram_size=3,
                                   length_penalty=2.0, early_stopping=True, forced_bos_token_id=0), vocabulary, 2)
    assert options == dict(beam_size=4, length_penalty=2.0, no_repeat_ngram_size=3, min_decoding_length=63,
                           max_decoding_length=64, return_end_token=True, max_input_length=0,
                           target_prefix=[["<s>"], ["<s>"]])
    with pytest.raises(ValueError, match="forced_eos_token_id"):
        ct2.ct2_options(dict(max_length=5, forced_eos_token_id=2), vocabulary, 1)
    with pytest.raises(ValueError, match="do_sample"):
        ct2.ct2_options(dict(max_length=5, do_sample=True), vocabulary, 1)
    # facebook/bart-large-cnn's settings as generate runs them: what CTranslate2 does otherwise, said by the export
    cnn = dict(num_beams=4, max_length=142, min_length=56, no_repeat_ngram_size=3, length_penalty=2.0,
               early_stopping=True, forced_bos_token_id=0, forced_eos_token_id=2, renormalize_logits=False)
    assert sorted(ct2.differences(cnn)) == ["forced_eos_token_id", "renormalize_logits"]
    assert sorted(ct2.differences(dict(cnn, early_stopping=False))) == ["early_stopping", "forced_eos_token_id",
                                                                          "renormalize_logits"]
    assert ct2.differences(dict(cnn, num_beams=1, early_stopping=False, forced_eos_token_id=None)) == {}
    assert ct2.differences(dict(cnn, renormalize_logits=True, forced_eos_token_id=None)) == {}


NEWS = ["The council approved the new budget on Tuesday after a long debate about school funding.",
        "Heavy rain flooded the harbour district overnight, and the mayor asked residents to stay at home.",
        "Researchers at the university said the bridge would reopen next month once repairs were finished.",
        "Farmers expect a record harvest this year, helped by a mild winter and a wet spring."]


def _tiny_bench_config(tmp_path):
    values = json.load(open(os.path.join(ROOT, "configs", "config_base.json")))
    values.update(d_model=32, encoder_layers=1, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                  encoder_ffn_dim=64, decoder_ffn_dim=64, init_std=0.3)
    (tmp_path / "config.json").write_text(json.dumps(values))
    (tmp_path / "news.txt").write_text("\n".join(NEWS) + "\n")
    return tmp_path / "config.json"


def test_text_sources_are_real_text_cut_at_the_length(tokenizer):
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(NEWS) + "\n\n")
    ids = bench_generation.text_sources(tokenizer, f.name, rows=3, length=40, offset=1)
    os.remove(f.name)
    assert ids.shape == (3, 40) and (ids[:, 0] == 0).all() and (ids[:, -1] == 2).all()
    text = [tokenizer.decode(row[1:-1].tolist()).strip() for row in ids]
    assert text[0].startswith(NEWS[1] + " " + NEWS[2])  # documents 1, 2, ... one after the other, cut at 40 tokens
    assert (NEWS[1] + " " + NEWS[2] + " " + NEWS[3]).startswith(text[0]) and text[0] != NEWS[1] + " " + NEWS[2]
    assert text[2].startswith(NEWS[3] + " " + NEWS[0][:10])  # wraps around to the first document


def test_rouge_l_counts_equal_outputs_as_equal():
    assert bench_generation.rouge_l(["", "the cat sat"], ["", "the cat sat"]) == 100.0
    assert 0 < bench_generation.rouge_l(["the cat sat on the mat"], ["the cat sat"]) < 100


def test_benchmark_compares_ctranslate2_with_this_project(tmp_path, monkeypatch, tokenizer_dir):
    """bench_generation with the CTranslate2 contenders on real text: the model converted in the run,
    every contender timed and compared with ours (rows, agreement, why different), a contender that is
    not available (here: the precision module missing) named and left out, an unknown one refused."""
    pytest.importorskip("ctranslate2", reason="ctranslate2 (requirements.txt) is not installed")
    config = _tiny_bench_config(tmp_path)
    monkeypatch.setitem(sys.modules, "bart.generation.precision", None)  # import fails: left out, not a crash
    threads = torch.get_num_threads()
    argv = ["bench_generation.py", "--config", str(config), "--device", "cpu", "--batch_sizes", "3",
            "--new_tokens", "10", "--source_length", "48", "--threads", "1", "--repeats", "1",
            "--sources", str(tmp_path / "news.txt"), "--tokenizer", tokenizer_dir, "--json", str(tmp_path / "beam.json"),
            "--contenders", "ours,hf,ct2_fp32,ct2_int8,ours_int8"]
    try:
        monkeypatch.setattr(sys, "argv", argv)
        bench_generation.main()
        monkeypatch.setattr(sys, "argv", argv[:-1] + ["ours,ct2_fp16"])
        with pytest.raises(SystemExit, match="unknown \\['ct2_fp16'\\]"):
            bench_generation.main()
    finally:
        torch.set_num_threads(threads)
    report = json.loads((tmp_path / "beam.json").read_text())
    assert report["sources"].endswith("news.txt") and any(v.startswith("ctranslate2 4.") for v in report["versions"])
    assert list(report["skipped"]) == ["ours_int8"] and "bart.generation.precision" in report["skipped"]["ours_int8"]
    (row,) = report["rows"]
    assert row["identical_rows"] == 3 and row["ours_seconds"] > 0 and row["hf_seconds"] > 0
    assert set(row["contenders"]) == {"ours", "hf", "ct2_fp32", "ct2_int8"}
    for name in ("ct2_fp32", "ct2_int8"):
        entry = row["contenders"][name]
        assert entry["seconds"] > 0 and entry["vs_ours"] > 0 and 0 <= entry["token_agreement"] <= 1
        assert entry["identical_rows"] == 3 or entry["reason"]  # a difference always says why
    assert "rougeL_vs_fp32" in row["contenders"]["ct2_int8"] and "rougeL_vs_fp32" not in row["contenders"]["ct2_fp32"]
