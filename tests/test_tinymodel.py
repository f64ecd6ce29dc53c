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


def test_base_model_is_settled_on_a_plateau_and_cached(base_model):
    from ctpipe import arith, generation
    from ctpipe.config import Settings
    from ctpipe.tinymodel import ensure_base_model

    s = Settings(home=base_model.parent.parent)
    info = json.loads((base_model / "build.json").read_text())
    lo, hi = info["plateau"]
    assert hi - lo <= s.base_model.plateau_tolerance and lo <= info["dev_accuracy"] <= hi
    # Settled, not caught on its learning curve: over the last fifth of training, the recorded curve
    # moved by little, and it had climbed far before.
    curve = {int(k): v for k, v in info["dev_accuracy_by_step"].items()}
    tail = [v for k, v in curve.items() if k >= s.base_model.steps * (1 - s.base_model.plateau_fraction)]
    assert len(tail) >= 3 and max(tail) - min(tail) <= s.base_model.plateau_tolerance
    assert min(curve.values()) < info["dev_accuracy"] - 0.5
    model, tok = generation.load(base_model)
    assert model.config.head_dim >= 32
    test_acc = generation.accuracy(model, tok, arith.splits(s.task).test, max_new_tokens=8)
    assert abs(test_acc - info["dev_accuracy"]) < 0.05, (test_acc, info["dev_accuracy"])
    stamp = (base_model / "build.json").stat().st_mtime_ns
    assert ensure_base_model(s.base_model, s.task, s.models_dir) == base_model
    assert (base_model / "build.json").stat().st_mtime_ns == stamp


def test_a_base_still_on_its_learning_curve_is_refused_naming_the_setting():
    import pytest

    from ctpipe.tinymodel import settled

    recipe = BaseModelRecipe(steps=1000, plateau_fraction=0.2, plateau_tolerance=0.03)
    with pytest.raises(RuntimeError, match=r"did not settle: dev accuracy 0\.300\.\.0\.600 .* more steps"):
        settled({800: 0.3, 900: 0.45, 1000: 0.6}, recipe)
    with pytest.raises(RuntimeError, match="unmeasured"):
        settled({100: 0.3}, recipe)
    assert settled({500: 0.1, 800: 0.91, 1000: 0.92}, recipe) == (0.91, 0.92)
