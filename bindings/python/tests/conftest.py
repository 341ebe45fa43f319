import os
import pathlib

import pytest

# Tests run on the host backend unless told otherwise, against the repository's
# build when SLUICE_LIBRARY is not set.
os.environ.setdefault("SLUICE_BACKEND", "host")
if "SLUICE_LIBRARY" not in os.environ:
    root = pathlib.Path(__file__).resolve().parents[3]
    for build in ("release", "debug"):
        lib = root / "target" / build / "libsluice.so"
        if lib.exists():
            os.environ["SLUICE_LIBRARY"] = str(lib)
            break

# A script for the GPU machine (scripts/gpu-suite.sh, part "python"), not a pytest module.
collect_ignore = ["gpu_torch_test.py"]

import sluice  # noqa: E402 (after the environment above)


@pytest.fixture
def dev():
    with sluice.Device() as d:
        yield d


@pytest.fixture
def stream(dev):
    with sluice.Stream(dev) as s:
        yield s
