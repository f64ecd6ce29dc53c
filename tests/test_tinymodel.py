import json

from ctpipe.config import BaseModelRecipe, TaskConfig
from ctpipe.tinymodel import END, build_tokenizer, recipe_hash, render_prompt


def test_tokenizer_is_character_level_with_a_chat_template():
    tok = build_tokenizer()
    prompt = render_prompt(tok, "What is 1 plus 2?")
    assert prompt == "<|user|>What is 1 plus 2?<|assistant|>"
    ids = tok(prompt + "3" + END, add_special_tokens=False)["input_ids"]
    assert len(ids) == 1 + len("What is 1 plus 2?") + 1 + 1 + 1
    assert tok.decode(ids, skip_special_tokens=True) == "What is 1 plus 2?3"
    assert tok.eos_token == END and tok.pad_token_id != tok.eos_token_id


def test_recipe_hash_changes_only_with_the_recipe():
    a = recipe_hash(BaseModelRecipe(), TaskConfig())
    assert a == recipe_hash(BaseModelRecipe(), TaskConfig())
    assert a != recipe_hash(BaseModelRecipe(seed=1), TaskConfig())
    assert a != recipe_hash(BaseModelRecipe(), TaskConfig(split_seed=7))


def test_base_model_is_in_the_target_band_and_cached(base_model):
    from ctpipe import arith, generation
    from ctpipe.config import Settings
    from ctpipe.tinymodel import ensure_base_model

    s = Settings(home=base_model.parent.parent)
    info = json.loads((base_model / "build.json").read_text())
    lo, hi = s.base_model.target_accuracy
    assert lo <= info["dev_accuracy"] <= hi
    model, tok = generation.load(base_model)
    assert model.config.head_dim >= 32
    test_acc = generation.accuracy(model, tok, arith.splits(s.task).test, max_new_tokens=8)
    assert 0.15 <= test_acc <= 0.60, test_acc
    stamp = (base_model / "build.json").stat().st_mtime_ns
    assert ensure_base_model(s.base_model, s.task, s.models_dir) == base_model
    assert (base_model / "build.json").stat().st_mtime_ns == stamp
