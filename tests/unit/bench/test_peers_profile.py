"""bench/peers.py --profile: py-spy's collapsed stacks read back as the functions with the most
samples, on their own and with their callees."""

from pathlib import Path

from _peers.profile import read, top


def test_samples_count_once_per_function_on_its_own_and_with_its_callees(tmp_path: Path):
    raw = tmp_path / "profile.txt"
    raw.write_text(
        "Thread.run (threading.py:982);AdmissionPass.run (gangplugin/admission/admit.py:187);"
        "gate (gangplugin/core/gate.py:342) 3\n"
        "Thread.run (threading.py:982);AdmissionPass.run (gangplugin/admission/admit.py:190) 2\n"
        "Thread.run (threading.py:982);f (a.py:1);f (a.py:2) 5\n"
        "not a sample line\n"
    )
    own, inclusive, total = read(raw)
    assert total == 10
    assert own == {"gate (gate.py)": 3, "AdmissionPass.run (admit.py)": 2, "f (a.py)": 5}
    # a recursive function's sample counts once for it
    assert inclusive["f (a.py)"] == 5 and inclusive["Thread.run (threading.py)"] == 10
    assert inclusive["AdmissionPass.run (admit.py)"] == 5
    text = top(raw, 2)
    assert "10 samples" in text and "50.0%  f (a.py)" in text
