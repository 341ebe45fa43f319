"""A DLPack capsule dropped unconsumed while an exception propagates: its
destructor is the library's native one (sluice_dlpack_capsule_destructor), which
keeps the pending exception; a ctypes callback there cleared it and the
interpreter failed or crashed (the thirty-sixth session's review)."""

import os
import subprocess
import sys
import textwrap

import pytest

PRELUDE = textwrap.dedent(
    """
    import gc, sluice
    dev = sluice.Device(); s = sluice.Stream(dev)
    b1 = sluice.Buffer.alloc(s, 16)
    b2 = sluice.Buffer.alloc(s, 16)
    live = sluice.live_handles()
    """
)

CASES = {
    # A list of exports where one fails (a closed buffer): the partial list, holding
    # an unconsumed capsule, is dropped while the SluiceError propagates.
    "list_of_exports": """
        b2.close()
        try:
            caps = [b.__dlpack__(max_version=(1, 0)) for b in (b1, b2)]
        except sluice.SluiceError as e:
            print("caught", e.name)
        """,
    # A capsule as a call argument while a later argument raises.
    "argument": """
        def consume(*a): pass
        try:
            consume(b1.__dlpack__(max_version=(1, 0)), 1 / 0)
        except ZeroDivisionError:
            print("caught ZeroDivisionError")
        """,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_unconsumed_capsule_dropped_during_exception(case):
    code = PRELUDE + textwrap.dedent(CASES[case]) + textwrap.dedent(
        """
        gc.collect()
        print("live handles delta", sluice.live_handles() - live + (1 if b2._h is None else 0))
        """
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ), timeout=60)
    print("rc", p.returncode, "\nstdout:", p.stdout, "\nstderr:", p.stderr)
    assert p.returncode == 0, f"interpreter died (rc {p.returncode})"
    assert "caught" in p.stdout
    assert "Exception ignored" not in p.stderr
