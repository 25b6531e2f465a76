import pytest

import symgrad as sg


def pytest_collection_modifyitems(config, items):
    if sg.num_gpus() > 0:
        return
    skip = pytest.mark.skip(reason="needs CuPy and a CUDA GPU (pip install symgrad[gpu])")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
