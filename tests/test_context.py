"""Device contexts."""

import threading

import numpy as np
import pytest

import symgrad as sg


def test_context_basics():
    assert sg.cpu() == sg.Context("cpu", 0)
    assert sg.gpu(1) == sg.Context("gpu", 1)
    assert repr(sg.gpu(2)) == "gpu(2)"
    assert sg.cpu().device_typeid == 1 and sg.gpu().device_typeid == 2
    assert len({sg.cpu(), sg.cpu(0), sg.gpu(0)}) == 2
    with pytest.raises(ValueError, match="device_type"):
        sg.Context("tpu", 0)
    with pytest.raises(ValueError, match="device_id"):
        sg.Context("cpu", -1)


def test_with_blocks_nest_and_are_thread_local():
    assert sg.current_context() == sg.cpu()
    seen = []
    with sg.gpu(1):
        assert sg.current_context() == sg.gpu(1)
        with sg.gpu(2):
            assert sg.current_context() == sg.gpu(2)
            t = threading.Thread(target=lambda: seen.append(sg.current_context()))
            t.start()
            t.join()
        assert sg.current_context() == sg.gpu(1)
    assert sg.current_context() == sg.cpu()
    assert seen == [sg.cpu()]  # another thread does not see this thread's scope


def test_cpu_context_uses_numpy():
    assert sg.cpu().xp is np
    x = sg.sym.Variable("x")
    exe = (x * 2.0).simple_bind(sg.cpu(), x=(2,))
    assert isinstance(exe.arg_dict["x"], np.ndarray)


def test_bind_uses_the_current_context_when_none_given():
    x = sg.sym.Variable("x")
    with sg.cpu(0):
        exe = (x + 1.0).simple_bind(None, x=(2,))
    assert exe._ctx == sg.cpu(0)
