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


def test_contexts_need_no_cupy_until_arrays_are_made(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    assert sg.num_gpus() == 0
    with sg.gpu(3) as ctx:  # entering a gpu scope is bookkeeping only
        assert ctx == sg.gpu(3) and sg.current_context() is ctx
        x = sg.sym.Variable("x")
        with pytest.raises(ImportError, match=r"gpu\(3\) needs CuPy: pip install symgrad\[gpu\]"):
            (x * 2.0).simple_bind(None, x=(2,))  # None: the current context, gpu(3)
    with pytest.raises(ImportError, match=r"gpu\(0\) needs CuPy"):
        _ = sg.gpu().xp


def test_context_copy_equality_and_scope_restored_after_an_exception():
    c = sg.Context(sg.gpu(2))
    assert c == sg.gpu(2) and c is not sg.gpu(2) and c.device_type == "gpu" and c.device_id == 2
    assert sg.cpu(1) != sg.cpu(0) and sg.cpu(1).xp is np and str(sg.cpu(1)) == "cpu(1)"
    assert sg.Context("cpu") == sg.cpu(0) and sg.cpu() != "cpu(0)"
    with pytest.raises(RuntimeError):
        with sg.gpu(1):
            raise RuntimeError("boom")
    assert sg.current_context() == sg.cpu(0)
