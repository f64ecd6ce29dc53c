import json
from datetime import timedelta
from pathlib import Path

import pytest

from ctpipe import arith, datasets
from ctpipe.materialize import materialize
from ctpipe.config import DatasetConfig, RewardConfig, TaskConfig
from tests.conftest import T0, trace, write_traces

HOUR = timedelta(hours=1)


def run(s, start=T0, end=T0 + HOUR, **kw):
    s.traces_dir.mkdir(parents=True, exist_ok=True)
    return materialize(
        str(s.traces_dir), str(s.datasets_dir), start, end,
        task=kw.get("task", s.task), reward=kw.get("reward", s.reward), dataset=kw.get("dataset", s.dataset),
    )


def held_out_prompt():
    return arith.splits(TaskConfig()).test[0].prompt


@pytest.fixture
def mixed(settings):
    lines = [
        trace(1, completion="5", feedback={"thumb": "up", "rating": None}),
        trace(2, completion="6", feedback={"thumb": "down", "rating": None}),
        trace(3, prompt="What is 1 plus 4?", completion="5"),
        '{"trace_id": "broken", ',
        trace(4, completion=""),
        trace(5, latency_ms=float("nan")),
        {k: v for k, v in trace(6).items() if k != "model"},
        trace(1, completion="something else"),  # same id, different content
        trace(7, prompt=held_out_prompt(), completion="1"),
        trace(8, prompt="Tell me a joke", completion="no", feedback={"thumb": "up", "rating": None}),
    ]
    write_traces(settings.traces_dir, lines)
    return settings


def test_every_trace_lands_in_the_dataset_or_in_quarantine(mixed):
    m = run(mixed)
    assert m.counts["traces_in"] == 10
    assert m.counts["traces"] + m.counts["quarantined"] == 10
    assert m.quarantine_reasons == {
        "duplicate_trace_id": 1, "eval_contamination": 1, "invalid_field": 1,
        "invalid_json": 1, "missing_field": 1, "non_finite_number": 1,
    }
    q = m.read("quarantine").to_pylist()
    assert {r["source_line"] for r in q} == {4, 5, 6, 7, 8, 9}
    assert all(r["raw"] and r["source_file"].endswith("part-a.jsonl") for r in q)


def test_rewards_combine_correctness_and_feedback(mixed):
    rows = {r["trace_id"]: r for r in run(mixed).read("traces").to_pylist()}
    assert rows["t1"]["final_reward"] == 1.0  # right and liked
    assert rows["t2"]["final_reward"] == 0.0  # wrong and disliked
    assert rows["t3"]["final_reward"] == 1.0  # right, no feedback: weights renormalize
    assert rows["t8"]["verifiable_reward"] is None and rows["t8"]["final_reward"] == 1.0


def test_grpo_and_dpo_tables_use_trl_conversational_columns(mixed):
    m = run(mixed)
    grpo = m.read("grpo").to_pylist()
    assert grpo == [{"prompt": [{"role": "user", "content": q}], "answer": "5"} for q in ("What is 2 plus 3?", "What is 1 plus 4?")]
    dpo = m.read("dpo").to_pylist()
    assert len(dpo) == 1
    assert dpo[0]["chosen"] == [{"role": "assistant", "content": "5"}]
    assert dpo[0]["rejected"] == [{"role": "assistant", "content": "6"}]
    assert dpo[0]["chosen_reward"] - dpo[0]["rejected_reward"] >= mixed.dataset.dpo_min_margin


@pytest.mark.parametrize("strategy", ["best_vs_worst", "all_pairs"])
def test_either_pairing_strategy_makes_the_same_pair_here(mixed, strategy):
    dataset = mixed.dataset.model_copy(update={"dpo_strategy": strategy})
    dpo = run(mixed, dataset=dataset).read("dpo").to_pylist()
    assert [(d["chosen"][0]["content"], d["rejected"][0]["content"]) for d in dpo] == [("5", "6")]


def test_rerunning_an_interval_gives_the_same_version_untouched(mixed):
    first = run(mixed)
    stamp = (Path(first.uri) / "manifest.json").stat().st_mtime_ns
    again = run(mixed)
    assert again.version == first.version
    assert (Path(first.uri) / "manifest.json").stat().st_mtime_ns == stamp
    assert not [p for p in mixed.datasets_dir.iterdir() if p.name.startswith(".tmp")]
    assert datasets.resolve(mixed.datasets_dir, "").version == first.version


def test_a_store_moved_elsewhere_is_read_where_it_is(mixed, monkeypatch):
    """A store copied to another disk or bucket, or mounted at another path: its manifests name the
    folder they are read from, not the one they were written in."""
    import shutil

    first = run(mixed)
    moved = mixed.datasets_dir.parent / "moved"
    shutil.move(mixed.datasets_dir, moved)
    found = datasets.resolve(moved, None)
    assert (found.version, found.uri) == (first.version, f"{moved}/{first.version}")
    assert found.read("traces").num_rows == first.counts["traces"]
    monkeypatch.chdir(moved)  # a relative path, named as it resolves
    assert datasets.Manifest.load(first.version).uri == f"{moved}/{first.version}"


def test_a_config_change_makes_a_new_version(mixed):
    a = run(mixed)
    b = run(mixed, reward=RewardConfig(verifiable_weight=1.0, feedback_weight=0.0))
    assert a.version != b.version


def test_interval_membership_follows_timestamps(settings):
    lines = [trace(1, at=T0 + timedelta(minutes=10)), "not json", trace(2, at=T0 + timedelta(minutes=50))]
    write_traces(settings.traces_dir, lines)
    first = run(settings, T0, T0 + timedelta(minutes=30))
    second = run(settings, T0 + timedelta(minutes=30), T0 + HOUR)
    # The unreadable line belongs with the line before it.
    assert (first.counts["traces"], first.counts["quarantined"]) == (1, 1)
    assert (second.counts["traces"], second.counts["quarantined"]) == (1, 0)


def test_empty_interval_publishes_nothing(settings):
    assert run(settings).files == 0
    with pytest.raises(datasets.DatasetNotFound, match="no dataset has been published"):
        datasets.resolve(settings.datasets_dir, "")


def test_missing_version_is_named(settings):
    with pytest.raises(datasets.DatasetNotFound, match="'nope'"):
        datasets.resolve(settings.datasets_dir, "nope")


def test_interval_must_be_ordered(settings):
    with pytest.raises(ValueError, match="not after start"):
        run(settings, T0 + HOUR, T0)


def answers(*rows) -> list[dict]:
    """One prompt's answers as dataset rows: (trace_id, final_reward, completion) each."""
    return [{"trace_id": t, "final_reward": r, "completion": c} for t, r, c in rows]


def test_dpo_pairs_best_vs_worst_with_margin():
    group = answers(("a", 1.0, "5"), ("b", 0.9, "5 "), ("c", 0.0, "7"), ("d", 0.5, "8"), ("e", None, "9"))
    pairs = datasets.dpo_pairs(group, DatasetConfig(dpo_min_margin=0.3, dpo_max_pairs_per_prompt=2))
    assert [(c["trace_id"], r["trace_id"]) for c, r in pairs] == [("a", "c"), ("b", "d")]
    assert [(c["trace_id"], r["trace_id"]) for c, r in datasets.dpo_pairs(group, DatasetConfig(dpo_min_margin=1.0))] == [
        ("a", "c")]
    assert datasets.dpo_pairs(group[:1], DatasetConfig()) == []


def test_dpo_all_pairs_takes_the_widest_gaps_first_and_skips_ties():
    group = answers(("a", 1.0, "5"), ("b", 1.0, "five"), ("c", 0.0, "7"), ("d", 0.5, "8"))
    cfg = DatasetConfig(dpo_strategy="all_pairs", dpo_min_margin=0.5, dpo_max_pairs_per_prompt=3)
    pairs = datasets.dpo_pairs(group, cfg)
    assert [(c["trace_id"], r["trace_id"]) for c, r in pairs] == [("a", "c"), ("b", "c"), ("a", "d")]
    tied = answers(*((x, 1.0, x) for x in "xyz"))
    assert datasets.dpo_pairs(tied, cfg) == [] and datasets.dpo_pairs(group[:1], cfg) == []


def test_dpo_all_pairs_from_a_heap_are_the_widest_of_all_pairs_and_come_fast_for_a_crowded_prompt():
    """all_pairs made every pair before cutting to K (20,000 answers: 250 s); the heap gives the same
    pairs as that rule, on random groups of tied and distinct rewards and texts said again."""
    import random

    from ctpipe.rewards import reward_gap

    def every_pair(group, cfg):  # the rule as the docstring says it
        ranked = sorted((r for r in group if r["final_reward"] is not None), key=lambda r: (-r["final_reward"], r["trace_id"]))
        wide = [(a, b) for i, a in enumerate(ranked) for b in ranked[i + 1:]
                if reward_gap(a["final_reward"], b["final_reward"]) >= cfg.dpo_min_margin
                and a["completion"].strip() != b["completion"].strip()]
        wide.sort(key=lambda p: (-reward_gap(p[0]["final_reward"], p[1]["final_reward"]), p[0]["trace_id"], p[1]["trace_id"]))
        return wide[:cfg.dpo_max_pairs_per_prompt]

    rng = random.Random(0)
    for _ in range(1500):
        values = rng.choice([[0.0, 1.0], [0.0, 0.5, 1.0], [round(rng.random(), 6) for _ in range(5)], [0.1, 0.100001, 0.2]])
        group = answers(*((f"t{rng.randrange(100):02d}-{i}", rng.choice(values + [None]), rng.choice(["a", " a", "b", f"x{i}"]))
                          for i in range(rng.randrange(25))))
        cfg = DatasetConfig(dpo_strategy="all_pairs", dpo_min_margin=rng.choice([1e-6, 0.1, 0.5, 1.0]),
                            dpo_max_pairs_per_prompt=rng.choice([1, 2, 4, 50]))
        assert datasets.dpo_pairs(group, cfg) == every_pair(group, cfg)
    # 50,000 answers: about a second here, where making their 625 million pairs one by one takes hours.
    crowded = answers(*((f"t{i:06d}", float(i % 2), f"answer {i}") for i in range(50_000)))
    pairs = datasets.dpo_pairs(crowded, DatasetConfig(dpo_strategy="all_pairs", dpo_max_pairs_per_prompt=4))
    assert [(c["trace_id"], r["trace_id"]) for c, r in pairs] == [("t000001", "t000000"), ("t000001", "t000002"),
                                                                  ("t000001", "t000004"), ("t000001", "t000006")]


@pytest.mark.parametrize("strategy", ["best_vs_worst", "all_pairs"])
def test_a_gap_equal_to_the_margin_pairs_whatever_binary_makes_of_it(strategy):
    """0.7 - 0.2 is 0.49999999999999994 in binary: gaps are held to the margin as labels are rounded."""
    import numpy as np
    import pyarrow as pa

    from ctpipe.materialize import best_vs_worst

    cfg = DatasetConfig(dpo_strategy=strategy, dpo_min_margin=0.5)
    for high, low in ((0.7, 0.2), (0.9, 0.4), (0.6, 0.1)):
        group = answers(("a", high, "right"), ("b", low, "wrong"))
        assert [(c["trace_id"], r["trace_id"]) for c, r in datasets.dpo_pairs(group, cfg)] == [("a", "b")], (high, low)
        if strategy == "best_vs_worst":
            column = lambda name: pa.chunked_array([pa.array([r[name] for r in group])])  # noqa: E731
            assert best_vs_worst(np.zeros(2, np.int64), column("final_reward"), column("trace_id"), column("completion"),
                                 cfg) == ([0], [1])
    group = answers(("a", 0.7, "x"), ("b", 0.2, "y"), ("c", 0.75, "z"), ("d", 0.25, "w"))  # gaps of 0.5 and 0.55 ...
    cfg = DatasetConfig(dpo_strategy="all_pairs", dpo_min_margin=0.5, dpo_max_pairs_per_prompt=4)
    gaps = [round(c["final_reward"] - r["final_reward"], 6) for c, r in datasets.dpo_pairs(group, cfg)]
    assert gaps == [0.55, 0.5, 0.5]  # ... widest first, equal ones by trace id (0.7 - 0.25 is too narrow)


def test_manifest_records_hashes_and_counts(mixed):
    m = run(mixed)
    on_disk = json.loads((Path(m.uri) / "manifest.json").read_text())
    assert on_disk["files"]["traces"]["rows"] == m.counts["traces"]
    assert len(on_disk["files"]["dpo"]["sha256"]) == 64
    import hashlib

    import xxhash

    for table in on_disk["files"].values():  # each part's digest is of its bytes; the table's of those
        digests = [xxhash.xxh3_128((Path(m.uri) / part).read_bytes()).hexdigest() for part in table["parts"]]
        assert table["parts_xxh3_128"] == digests
        assert table["sha256"] == hashlib.sha256("".join(digests).encode()).hexdigest()
    assert m.asset_extra()["rows"]["grpo_prompts"] == 2


def test_best_vs_worst_of_many_prompts_pairs_as_each_prompt_alone():
    import random

    import numpy as np
    import pyarrow as pa

    from ctpipe.materialize import best_vs_worst

    rng = random.Random(0)
    cfg = DatasetConfig(dpo_min_margin=0.3, dpo_max_pairs_per_prompt=2)
    rows = [{"group": g, "final_reward": rng.choice([None, 0.0, 0.25, 0.5, 1.0, 1.0, round(rng.random(), 2)]),
             "completion": rng.choice(["a", " a", "b", "c ", "d"])}
            for g in range(400) for _ in range(rng.randrange(1, 8))]
    rng.shuffle(rows)
    for i, row in enumerate(rows):
        row.update(i=i, trace_id=f"t{rng.randrange(10 ** 9):09d}")
    expected = [(c["i"], r["i"]) for g in range(400) for c, r in datasets.dpo_pairs([r for r in rows if r["group"] == g], cfg)]
    column = lambda name: pa.chunked_array([pa.array([r[name] for r in rows])])  # noqa: E731
    chosen, rejected = best_vs_worst(np.array([r["group"] for r in rows]), column("final_reward"), column("trace_id"),
                                     column("completion"), cfg)
    assert list(zip(chosen, rejected)) == expected and len(expected) > 200


def _point(store: str, version: str, barrier) -> None:
    barrier.wait()
    datasets.Output(store).point_latest(datasets.Manifest(version, "", ("", ""), {"traces": 1}, {}, {}, {}, "", {}))


def test_latest_names_the_newest_interval_whatever_order_concurrent_runs_finish_in(tmp_path):
    """A backfill's runs finish together (Airflow runs ten at once): one that read LATEST before another
    wrote it wrote an older interval over a newer one, 18 times in 200 before the lock."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    versions = [f"20261120T{h:02d}0000-20261120T{h + 1:02d}0000-abcdef0123" for h in range(4)]
    for trial in range(30):
        store = tmp_path / f"s{trial}"
        store.mkdir()
        barrier = context.Barrier(len(versions))
        workers = [context.Process(target=_point, args=(str(store), v, barrier)) for v in versions]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert (store / "LATEST").read_text().strip() == versions[-1], trial


def test_a_write_that_fails_leaves_no_temporary_file_beside_its_path(tmp_path):
    """A manifest or LATEST whose write failed (a full disk) left its hidden temporary file for good,
    inside a version published later."""
    from ctpipe.atomic import atomic_write_text

    for exclusive in (False, True):
        with pytest.raises(UnicodeEncodeError):  # the file is made, then its text fails, as a full disk fails it
            atomic_write_text(tmp_path / "manifest.json", "\ud800", exclusive=exclusive)
        assert list(tmp_path.iterdir()) == []
    atomic_write_text(tmp_path / "LATEST", "v1", exclusive=True)
    assert [p.name for p in tmp_path.iterdir()] == ["LATEST"]
