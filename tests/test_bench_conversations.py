"""The long-conversation benchmark on a tiny made-up conversation in LoCoMo's format (the
real data is non-commercial and stays out of the repository): it skips cleanly without data,
scores hit@k from the evidence turns, and keeps the held-out half out unless asked."""
import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_conversations.py"


def sample(cid):
    return {"sample_id": cid, "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bo",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a puppy called Biscuit last week."},
                      {"speaker": "Bo", "dia_id": "D1:2", "text": "Aww, what breed is it?"},
                      {"speaker": "Ann", "dia_id": "D1:3", "text": "A corgi! Short legs, big heart."}],
        "session_2_date_time": "10:00 am on 7 July, 2023",
        "session_2": [{"speaker": "Bo", "dia_id": "D2:1", "text": "I finally finished my marathon training.",
                       "blip_caption": "a medal on a table"},
                      {"speaker": "Ann", "dia_id": "D2:2", "text": "Yes!"}]},
        "qa": [{"question": "What is the name of Ann's puppy?", "evidence": ["D1:1"], "category": 4},
               {"question": "What did Bo finish on 7 July, 2023?", "evidence": ["D2:1"], "category": 2},
               {"question": "Adversarial, not scored", "evidence": ["D1:2"], "category": 5}]}


def run(*args):
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=600)


def test_without_data_it_says_so_and_exits_0():
    r = run()
    assert r.returncode == 0 and "Skipped" in r.stdout


def test_scores_the_development_half_and_keeps_the_held_out_half_out(tmp_path):
    data = tmp_path / "locomo10.json"
    data.write_text(json.dumps([sample("conv-26"), sample("conv-44")]))
    r = run(str(data), "--modes", "bm25,plain", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["bm25"]["queries"] == 2  # one conversation (conv-26), categories 1-4 only
    assert out["bm25"]["hit@1"] == 1.0 and out["bm25"]["by_category"]["temporal"]["hit@1"] == 1.0
    r = run(str(data), "--conversations", "conv-44", "--json")
    assert r.returncode == 2 and "held-out" in r.stderr
    r = run(str(data), "--conversations", "conv-26,conv-44", "--held-out", "--json")
    assert r.returncode == 2 and "do not mix" in r.stderr


def realtalk_chat():
    """A made-up chat in REALTALK's format: a time on each message, 'clean_text', and an
    evidence id with REALTALK's stray space ('D 2:1')."""
    return {"name": {"speaker_1": "Ann", "speaker_2": "Bo"},
            "session_1_date_time": "08.05.2023, 13:56:00",
            "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "date_time": "08.05.2023, 13:56:00",
                           "clean_text": "I adopted a puppy called Biscuit last week."},
                          {"speaker": "Bo", "dia_id": "D1:2", "date_time": "08.05.2023, 14:10:00",
                           "clean_text": "Aww, what breed is it?"}],
            "session_2_date_time": "07.07.2023, 10:00:00",
            "session_2": [{"speaker": "Bo", "dia_id": "D2:1", "date_time": "07.07.2023, 10:00:00",
                           "clean_text": "I finally finished my marathon training."}],
            "qa": [{"question": "What is the name of Ann's puppy?", "evidence": ["D1:1"], "category": 1},
                   {"question": "What did Bo finish on 7 July, 2023?", "evidence": ["D 2:1"], "category": 2}]}


def test_a_realtalk_folder_is_a_second_development_set(tmp_path):
    folder = tmp_path / "realtalk"
    folder.mkdir()
    (folder / "Chat_1_Ann_Bo.json").write_text(json.dumps(realtalk_chat()))
    # REALTALK's data/locomo/ copies are LoCoMo samples: the held-out ones stay out.
    (folder / "Chat_6_Held_Out.json").write_text(json.dumps(sample("conv-44")))
    r = run(str(folder), "--modes", "bm25", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["bm25"]["queries"] == 2 and out["bm25"]["hit@1"] == 1.0
    assert "held-out" in r.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run(str(empty))
    assert r.returncode == 0 and "Skipped" in r.stdout


def test_the_auto_context_mode_writes_the_turns_through_the_gate_and_scores_them(tmp_path):
    """--context auto: no context given, the turns written with remember_many, each following the one before."""
    data = tmp_path / "locomo10.json"
    data.write_text(json.dumps([sample("conv-26")]))
    r = run(str(data), "--modes", "bm25", "--context", "auto", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["bm25"]["queries"] == 2 and out["bm25"]["hit@1"] == 1.0
