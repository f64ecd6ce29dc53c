from datetime import datetime, timezone

from ctpipe import traffic
from ctpipe.config import TaskConfig, TrafficConfig
from ctpipe.traces import InvalidTrace, decode, iter_lines


def test_simulated_traffic_is_valid_traces_plus_some_faults(base_model, tmp_path):
    cfg = TrafficConfig(prompts=20, answers_per_prompt=3, fault_rate=0.2)
    rep = traffic.simulate(base_model, "m", "7", tmp_path, cfg, TaskConfig(), seed=3)
    assert rep.traces == 60
    valid = invalid = 0
    for f in tmp_path.rglob("*.jsonl"):
        assert f.parent.name.startswith("hour=") and f.parent.parent.name.startswith("date=")
        for _, line in iter_lines(f):
            try:
                rec = decode(line)
                valid += 1
                assert rec.model.version == "7" and rec.usage.total_tokens > 0
            except InvalidTrace:
                invalid += 1
    assert invalid == rep.faulty > 0 and valid + invalid == 60
    assert not list(tmp_path.rglob("*.tmp"))
    # Its interval has ended once written: trace_to_dataset builds no interval that has not.
    assert rep.end <= datetime.now(timezone.utc)


def test_same_seed_same_traffic(base_model, tmp_path):
    cfg = TrafficConfig(prompts=10, answers_per_prompt=2)
    a = traffic.simulate(base_model, "m", "1", tmp_path / "a", cfg, TaskConfig(), seed=5, now=None)
    b = traffic.simulate(base_model, "m", "1", tmp_path / "b", cfg, TaskConfig(), seed=5, now=a.start)
    texts = [sorted(p.read_text() for p in (tmp_path / x).rglob("*.jsonl")) for x in "ab"]
    assert texts[0] == texts[1] and a.correct == b.correct
