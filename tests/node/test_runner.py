"""ndfleet_node.runner: timeouts kill the whole process group, a detached child holding the output does not make
the run wait, a hung tool is not called again, a missing tool is an answer, never an exception."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest
from ndfleet_node.runner import Runner, run_tool

SLOW = 60  # what the misbehaving tools would take if we waited for them


def tool(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return str(path)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_output_status_and_bytes_are_captured(tmp_path):
    t = tool(tmp_path, "t", """
        import sys
        sys.stdout.buffer.write(b"ok \\xff\\x00 end\\n")
        sys.stderr.write("warning: something\\n")
        sys.exit(3)
    """)
    r = run_tool([t], 30)
    assert r.rc == 3 and not r.timed_out
    assert r.stdout == b"ok \xff\x00 end\n" and r.stderr == b"warning: something\n"
    assert r.error == "t exited with status 3: warning: something"
    assert "\x00" not in r.text and r.text.startswith("ok \ufffd")


def test_missing_tool_is_an_answer(tmp_path):
    r = run_tool(["no-such-tool-here"], 5, env={"PATH": str(tmp_path)})
    assert (r.rc, r.error) == (127, "no-such-tool-here not found on PATH")


def test_timeout_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    t = tool(tmp_path, "hang", f"""
        import subprocess, time
        child = subprocess.Popen(["sleep", "{SLOW}"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        time.sleep({SLOW})
    """)
    r = run_tool([t], 2)
    assert r.timed_out and r.rc is None
    assert r.error == "hang did not answer within 2 s (timed out)"
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child), "the tool's child outlived the timeout"


def test_a_detached_child_holding_the_output_does_not_block(tmp_path):
    pidfile = tmp_path / "child.pid"
    # The tool exits at once but leaves a child in its own session with stdout and stderr inherited.
    t = tool(tmp_path, "leaky", f"""
        import subprocess
        child = subprocess.Popen(["sleep", "{SLOW}"], start_new_session=True)
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print("done")
    """)
    t0 = time.monotonic()
    r = run_tool([t], SLOW * 2)
    took = time.monotonic() - t0
    try:
        assert r.rc == 0 and r.stdout == b"done\n"
        assert took < SLOW, "run_tool waited for the detached child's output"
    finally:
        os.kill(int(pidfile.read_text()), signal.SIGKILL)


def test_a_hung_tool_with_a_detached_child_still_ends_at_its_timeout(tmp_path):
    pidfile = tmp_path / "child.pid"
    t = tool(tmp_path, "hang-leaky", f"""
        import subprocess, time
        child = subprocess.Popen(["sleep", "{SLOW}"], start_new_session=True)
        open({str(pidfile)!r}, "w").write(str(child.pid))
        time.sleep({SLOW})
    """)
    t0 = time.monotonic()
    r = run_tool([t], 2)
    try:
        assert r.timed_out
        assert time.monotonic() - t0 < SLOW
    finally:
        os.kill(int(pidfile.read_text()), signal.SIGKILL)


def test_a_tool_that_timed_out_is_not_called_again(tmp_path):
    calls = tmp_path / "calls"
    t = tool(tmp_path, "nvidia-smi", f"""
        import time
        with open({str(calls)!r}, "a") as f:
            f.write("called\\n")
        time.sleep({SLOW})
    """)
    runner = Runner()
    first = runner.run([t, "-q"], 1)
    second = runner.run([t, "nvlink", "-s"], 1)
    assert first.timed_out and second.timed_out
    assert second.error == "nvidia-smi did not answer within 1 s (timed out) earlier in this run; not retried"
    assert calls.read_text() == "called\n"
    assert runner.hung("nvidia-smi")


def test_output_is_capped(tmp_path):
    t = tool(tmp_path, "loud", """
        import sys
        sys.stdout.write("x" * 3_000_000)
    """)
    r = run_tool([t], 30, max_output_bytes=1_000_000)
    assert r.ok and len(r.stdout) == 1_000_000


@pytest.mark.parametrize("env_path", ["", "/nonexistent"])
def test_empty_or_wrong_path_is_not_found(env_path):
    r = run_tool(["ibstat"], 5, env={"PATH": env_path})
    assert r.rc == 127
