"""The pytest plugin (symgrad.test_utils.pytest_plugin), run inside pytest's own ``pytester`` sessions.

Each test writes a small test file, runs pytest on it in-process with the plugin and checks the outcome:
the seed line of a failing test, the same rng values for the same seed, the ``ctx`` ids, the ``gpu``
marker, ``--symgrad-seed`` reaching ``with_seed``, and that the plugin is registered once however it is
loaded (entry point, conftest ``pytest_plugins``, ``-p``).
"""

import json
import os
import random
import re

import numpy as np
import pytest

import symgrad.test_utils.pytest_plugin as plugin

pytest_plugins = ["pytester"]

# in-process runs import the already-imported plugin module: silence the assertion-rewrite notice about it
PLUGIN = ["-p", "symgrad.test_utils.pytest_plugin", "-W", "ignore::pytest.PytestAssertRewriteWarning"]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv("SYMGRAD_TEST_SEED", raising=False)
    monkeypatch.delenv("SYMGRAD_TEST_COUNT", raising=False)
    # other installed plugins stay out of the inner sessions (hypothesis re-imports itself in each: seconds)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(plugin, "gpu_available", lambda: False)


@pytest.fixture
def fake_gpu(monkeypatch):
    monkeypatch.setattr(plugin, "gpu_available", lambda: True)


RECORD_DRAWS = """
    import json, random
    import numpy as np

    def test_draw(rng):
        values = {"rng": rng.random(4).tolist(), "np_global": np.random.rand(2).tolist(), "py": random.random()}
        with open("draws.jsonl", "a") as f:
            f.write(json.dumps(values) + "\\n")
        assert FAIL is False
"""


def _draws(pytester):
    lines = (pytester.path / "draws.jsonl").read_text().splitlines()
    (pytester.path / "draws.jsonl").unlink()
    return [json.loads(line) for line in lines]


def _expected_draws(seed):
    """What a test seeded with ``seed`` must draw, derived from numpy and random directly."""
    state = np.random.RandomState(seed)
    py = random.Random(seed)
    return {
        "rng": np.random.default_rng(seed).random(4).tolist(),
        "np_global": state.rand(2).tolist(),
        "py": py.random(),
    }


# -- rng and the seed line ------------------------------------------------------------------------------


def test_failing_test_reports_its_seed_and_passing_ones_do_not(pytester):
    pytester.makepyfile(
        """
        def test_fails_with_rng(rng):
            assert rng.random() > 2.0

        def test_passes_with_rng(rng):
            assert rng.random() < 2.0

        def test_fails_without_rng():
            assert 1 == 2
        """
    )
    result = pytester.runpytest(*PLUGIN, "--symgrad-seed=1234")
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    assert out.count("symgrad seed: 1234 (reproduce with --symgrad-seed=1234)") == 1
    # the line sits in the block of the failing rng test, not in the other failure's block
    start = re.search(r"_+ test_fails_with_rng _+", out).end()
    end = re.search(r"_+ test_fails_without_rng _+", out).start()
    assert "symgrad seed: 1234 (reproduce" in out[start:end]
    assert "symgrad: seed 1234 (from --symgrad-seed)" in out  # session header


def test_same_seed_same_values_from_option_and_env(pytester, monkeypatch):
    pytester.makepyfile(RECORD_DRAWS.replace("FAIL", "False"))
    pytester.runpytest(*PLUGIN, "--symgrad-seed=99").assert_outcomes(passed=1)
    pytester.runpytest(*PLUGIN, "--symgrad-seed=99").assert_outcomes(passed=1)
    monkeypatch.setenv("SYMGRAD_TEST_SEED", "99")
    pytester.runpytest(*PLUGIN).assert_outcomes(passed=1)
    pytester.runpytest(*PLUGIN, "--symgrad-seed=100").assert_outcomes(passed=1)  # the option beats the env
    first, second, from_env, other = _draws(pytester)
    assert first == second == from_env == _expected_draws(99)
    assert other == _expected_draws(100)


def test_random_seed_of_a_failure_reproduces_its_values(pytester):
    pytester.makepyfile(RECORD_DRAWS.replace("FAIL", "True"))
    seeds = []
    for _ in range(2):
        result = pytester.runpytest(*PLUGIN)
        result.assert_outcomes(failed=1)
        assert "symgrad: random seed per test" in result.stdout.str()
        m = re.search(r"symgrad seed: (\d+) \(reproduce with --symgrad-seed=(\d+)\)", result.stdout.str())
        assert m and m.group(1) == m.group(2)
        seeds.append(int(m.group(1)))
    assert seeds[0] != seeds[1]  # fresh draws (equal with probability 1 / (2**31 - 1))
    pytester.runpytest(*PLUGIN, f"--symgrad-seed={seeds[0]}").assert_outcomes(failed=1)
    run0, run1, rerun = _draws(pytester)
    assert rerun == run0 == _expected_draws(seeds[0])
    assert run1 == _expected_draws(seeds[1])


def test_rng_restores_global_state_and_tags_check_errors(pytester):
    pytester.makepyfile(
        """
        import numpy as np
        import pytest
        import symgrad.test_utils as tu

        def test_error_carries_seed(rng):
            with pytest.raises(tu.GradientCheckError) as info:
                tu.assert_almost_equal(np.ones(3), np.zeros(3))
            assert info.value.seed == 7

        def test_global_state_restored(rng):
            np.random.rand(5)
        """
    )
    state = np.random.get_state()[1].copy()
    pytester.runpytest(*PLUGIN, "--symgrad-seed=7").assert_outcomes(passed=2)
    assert (np.random.get_state()[1] == state).all()


CHECK_FAILS = """
    import numpy as np
    import symgrad as sg
    import symgrad.test_utils as tu

    class Doubled(sg.operator.CustomOp):  # y = x^2 whose backward is doubled
        def forward(self, is_train, req, in_data, out_data, aux):
            self.assign(out_data[0], req[0], in_data[0] ** 2)

        def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
            self.assign(in_grad[0], req[0], 4.0 * in_data[0] * out_grad[0])

    @sg.operator.register("pt_doubled")
    class DoubledProp(sg.operator.CustomOpProp):
        def create_operator(self, ctx, shapes, dtypes):
            return Doubled()

    def test_check():
        x = np.linspace(1.0, 2.0, 6).reshape(2, 3)
        tu.check_numeric_gradient(sg.sym.Custom(sg.sym.Variable("x"), op_type="pt_doubled"), [x])

    def test_check_rng(rng):
        x = rng.uniform(1.0, 2.0, (2, 3))
        tu.check_numeric_gradient(sg.sym.Custom(sg.sym.Variable("x"), op_type="pt_doubled"), [x])
"""


def _report(out, test):
    """The report block of ``test``: its lines from the worst-element table to the reproduction line."""
    block = out[re.search(rf"_+ {test} _+", out).end() :]
    return block[block.index("worst") : block.index("-- reproduce: ")].strip()


def test_a_failing_check_prints_the_line_that_reproduces_it(pytester, monkeypatch):
    pytester.makepyfile(test_repro=CHECK_FAILS)
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    # a plain test: the checker seeded its own random projection and prints that seed
    m = re.search(r"seed (\d+) -- reproduce: SYMGRAD_TEST_SEED=(\d+) python -m pytest test_repro.py::test_check\n", out)
    assert m and m.group(1) == m.group(2)
    # the rng test: the test's seed, which also fixes the test's own random inputs
    m_rng = re.search(
        r"seed (\d+) -- reproduce: SYMGRAD_TEST_SEED=(\d+) python -m pytest "
        r"test_repro.py::test_check_rng\n",
        out,
    )
    assert m_rng and m_rng.group(1) == m_rng.group(2)
    assert f"symgrad seed: {m_rng.group(1)}" in out
    first = {t: _report(out, t) for t in ("test_check", "test_check_rng")}
    assert "diagnosis: analytic = 2 x numeric" in first["test_check"]
    # running the printed line gives the very same report
    for test, seed in (("test_check", m.group(1)), ("test_check_rng", m_rng.group(1))):
        monkeypatch.setenv("SYMGRAD_TEST_SEED", seed)
        again = pytester.runpytest(*PLUGIN, f"test_repro.py::{test}")
        again.assert_outcomes(failed=1)
        assert _report(again.stdout.str(), test) == first[test]
    monkeypatch.delenv("SYMGRAD_TEST_SEED")
    other = pytester.runpytest(*PLUGIN, "test_repro.py::test_check")
    assert _report(other.stdout.str(), "test_check") != first["test_check"]  # another seed, other weights


DRAWS_THEN_FAILS = """
import numpy as np
import symgrad as sg
from symgrad.test_utils import check_numeric_gradient

def test_draws():
    x = np.random.normal(size=3)  # drawn by the test before any checker runs
    print("DRAW", repr(float(x[0])))
    check_numeric_gradient(sg.sym.Variable("x") * 2.0, {"x": x}, dtype=np.float64, progress=False)
    assert False
"""

NO_SYMGRAD = """
import numpy as np

def test_state():
    np.random.seed(3)
    np.random.random()

def test_untouched():
    print("DRAW", repr(float(np.random.random())))
"""


def test_the_reproduction_line_replays_the_tests_own_draws(pytester, monkeypatch):
    # a test of a module using symgrad is seeded before it runs: its own np.random draws replay from the
    # printed seed (before, only the checker's draws did: one element came out 10.06, then 2.76)
    pytester.makepyfile(test_draws=DRAWS_THEN_FAILS)
    first = pytester.runpytest(*PLUGIN, "-s")
    first.assert_outcomes(failed=1)
    out = first.stdout.str()
    seed = re.search(r"symgrad seed: (\d+)", out).group(1)
    draw = re.search(r"DRAW (\S+)", out).group(1)
    monkeypatch.setenv("SYMGRAD_TEST_SEED", seed)
    again = pytester.runpytest(*PLUGIN, "-s")
    assert re.search(r"DRAW (\S+)", again.stdout.str()).group(1) == draw


def test_tests_of_other_projects_keep_their_global_rng(pytester):
    # a module without symgrad is not seeded: the state a previous test left carries over, as without symgrad
    pytester.makepyfile(test_plain=NO_SYMGRAD)
    result = pytester.runpytest(*PLUGIN, "-s", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    np.random.seed(3)
    np.random.random()
    assert f"DRAW {float(np.random.random())!r}" in result.stdout.str()


def test_a_failed_check_shows_the_report_not_symgrads_frames(pytester):
    # before: ~90 lines of symgrad's own source and locals above each report
    pytester.makepyfile(
        test_frames="""
import numpy as np
import symgrad as sg
from symgrad.test_utils import check_numeric_gradient

def test_wrong():
    x = sg.sym.Variable("x")
    check_numeric_gradient(2 * x + sg.sym.BlockGrad(3 * x), {"x": np.ones(3)}, dtype=np.float64, progress=False)
"""
    )
    out = pytester.runpytest(*PLUGIN).stdout.str()
    assert "does not match the numeric gradient" in out and "test_frames.py" in out
    assert "mxnet_checks.py" not in out and "compare.py" not in out, out
    # an error that is not a failed check (here a bad argument) keeps symgrad's frames for whoever debugs it
    pytester.makepyfile(
        test_bad="""
import numpy as np
import symgrad as sg
from symgrad.test_utils import check_numeric_gradient

def test_bad():
    check_numeric_gradient(sg.sym.Variable("x") * 2.0, {"x": np.ones(3)}, dtype="float7")
"""
    )
    assert "mxnet_checks.py" in pytester.runpytest(*PLUGIN, "test_bad.py").stdout.str()


def test_bad_seed_is_a_usage_error(pytester, monkeypatch):
    pytester.makepyfile("def test_x(rng):\n    pass\n")
    result = pytester.runpytest(*PLUGIN, "--symgrad-seed=abc")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--symgrad-seed must be an integer seed, got 'abc'*"])
    monkeypatch.setenv("SYMGRAD_TEST_SEED", "-5")
    result = pytester.runpytest(*PLUGIN)
    assert "SYMGRAD_TEST_SEED must be in [0, 2**32 - 1], got -5" in result.stdout.str() + result.stderr.str()


# -- with_seed ------------------------------------------------------------------------------------------


def test_with_seed_honours_the_option_and_env_is_restored(pytester, monkeypatch):
    pytester.makepyfile(
        """
        import numpy as np
        from symgrad.test_utils import with_seed

        @with_seed()
        def test_seeded():
            with open("with_seed.txt", "w") as f:
                f.write(repr(float(np.random.rand())))
        """
    )
    monkeypatch.setenv("SYMGRAD_TEST_SEED", "11")
    pytester.runpytest(*PLUGIN, "--symgrad-seed=5").assert_outcomes(passed=1)
    assert float((pytester.path / "with_seed.txt").read_text()) == np.random.RandomState(5).rand()
    assert os.environ["SYMGRAD_TEST_SEED"] == "11"  # restored after the session
    pytester.runpytest(*PLUGIN).assert_outcomes(passed=1)
    assert float((pytester.path / "with_seed.txt").read_text()) == np.random.RandomState(11).rand()


# -- ctx and the gpu marker --------------------------------------------------------------------------------


CTX_TESTS = """
    import pytest
    import symgrad as sg

    def test_device(ctx):
        assert ctx in (sg.cpu(0), sg.gpu(0))
        assert ctx.device_id == 0

    @pytest.mark.gpu
    def test_needs_gpu():
        pass

    def test_plain():
        pass
"""


def test_ctx_gpu_case_and_gpu_marker_are_skipped_with_the_reason_without_a_gpu(pytester, no_gpu):
    # before: the ctx fixture's gpu0 case was deselected, and the run said "1 deselected" and nothing of why
    pytester.makepyfile(CTX_TESTS)
    result = pytester.runpytest(*PLUGIN, "-v", "-rs", "--strict-markers")
    result.assert_outcomes(passed=2, skipped=2)
    out = result.stdout.str()
    assert "deselected" not in out
    assert "test_device[cpu0] PASSED" in out
    assert "test_device[gpu0] SKIPPED" in out and "test_needs_gpu SKIPPED" in out
    # the short summary (-rs) gives each skip its reason: what is missing, then what to install
    summary = out[out.index("short test summary info") :].splitlines()[1:]
    assert len(summary) == 3, summary  # the two skips, then the outcome line
    for line in summary[:2]:
        assert re.match(r"SKIPPED \[1\] \S+: no GPU / CuPy: CuPy [\w ]+; needs CuPy and a CUDA GPU \(pip install", line)


USER_PROJECT = """
    import numpy as np
    import symgrad as sg

    def test_forward(ctx):
        x = sg.sym.Variable("x")
        assert (2 * x).bind(ctx, {"x": np.ones(3)}).forward()[0].tolist() == [2.0, 2.0, 2.0]

    def test_backward(ctx):
        x = sg.sym.Variable("x")
        exe = sg.sym.MakeLoss(sg.sym.sum(3 * x)).bind(ctx, {"x": np.ones(2)}, args_grad={"x": np.zeros(2)})
        exe.forward(is_train=True)
        exe.backward()
        assert exe.grad_dict["x"].tolist() == [3.0, 3.0]
"""


def test_a_user_project_using_ctx_says_why_its_gpu_cases_did_not_run(pytester, monkeypatch):
    # a user's project as `pip install symgrad` leaves it: the plugin comes in through the pytest11 entry point
    # only (no conftest, no -p), the project's tests use the ctx fixture; here CuPy is not installed
    monkeypatch.setattr(plugin, "_cupy_installed", lambda: False, raising=False)
    monkeypatch.setattr(plugin, "gpu_available", lambda: False)
    _fake_entry_point(pytester, monkeypatch)
    pytester.makepyfile(test_mine=USER_PROJECT)
    result = pytester.runpytest("-rs", "-p", "no:hypothesispytest", "-W", "ignore::pytest.PytestAssertRewriteWarning")
    result.assert_outcomes(passed=2, skipped=2)
    assert "deselected" not in result.stdout.str()
    # both gpu0 cases, on one summary line (pytest groups the skips of one reason and place)
    result.stdout.fnmatch_lines(
        ["SKIPPED [[]2[]] test_mine.py: no GPU / CuPy: CuPy is not installed; needs CuPy and a CUDA GPU (pip install*"]
    )
    # with CuPy but no device the reason says so
    monkeypatch.setattr(plugin, "_cupy_installed", lambda: True)
    result = pytester.runpytest("-rs", "-p", "no:hypothesispytest", "-W", "ignore::pytest.PytestAssertRewriteWarning")
    result.assert_outcomes(passed=2, skipped=2)
    result.stdout.fnmatch_lines(["SKIPPED [[]2[]] test_mine.py: no GPU / CuPy: CuPy sees no CUDA GPU; needs CuPy*"])


def test_ctx_ids_with_a_gpu(pytester, fake_gpu):
    pytester.makepyfile(CTX_TESTS)
    result = pytester.runpytest(*PLUGIN, "-v", "--strict-markers")
    result.assert_outcomes(passed=4)
    out = result.stdout.str()
    assert "test_device[cpu0] PASSED" in out and "test_device[gpu0] PASSED" in out
    assert "test_needs_gpu PASSED" in out
    # the gpu case carries the gpu marker, so -m "not gpu" leaves cpu only
    result = pytester.runpytest(*PLUGIN, "-v", "-m", "not gpu")
    result.assert_outcomes(passed=2, deselected=2)


def test_a_conftest_ctx_fixture_overrides_the_plugin(pytester, no_gpu):
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture(params=["gpu0"])
        def ctx(request):
            return request.param
        """
    )
    pytester.makepyfile("def test_mine(ctx):\n    assert ctx == 'gpu0'\n")
    pytester.runpytest(*PLUGIN).assert_outcomes(passed=1)


# -- registration ---------------------------------------------------------------------------------------------


WHO_IS_REGISTERED = """
    import symgrad.test_utils.pytest_plugin as plugin

    def test_registered_once(request):
        pm = request.config.pluginmanager
        names = [name for name, p in pm.list_name_plugin() if p is plugin]
        assert names == [NAME]
        assert request.config.getoption("symgrad_seed") == "3"
"""


def _fake_entry_point(pytester, monkeypatch):
    """A distribution on sys.path whose pytest11 entry point is the plugin, as `pip install symgrad` makes."""
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    site = pytester.mkdir("site")
    info = site / "fake_symgrad-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-symgrad\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[pytest11]\nsymgrad = symgrad.test_utils.pytest_plugin\n")
    pytester.syspathinsert(site)


@pytest.mark.parametrize("how", ["entry point", "entry point + conftest", "entry point + -p", "-p + conftest"])
def test_plugin_is_registered_once_however_loaded(pytester, monkeypatch, how):
    args = ["--symgrad-seed=3", "-W", "ignore::pytest.PytestAssertRewriteWarning"]
    if "entry point" in how:
        _fake_entry_point(pytester, monkeypatch)
        args += ["-p", "no:hypothesispytest"]  # autoloaded otherwise, and slow to re-import in every inner session
    if "-p" in how:
        args = PLUGIN + args
    if "conftest" in how:
        pytester.makeconftest('pytest_plugins = ["symgrad.test_utils.pytest_plugin"]\n')
    name = "symgrad" if how.startswith("entry point") and "-p" not in how else "symgrad.test_utils.pytest_plugin"
    pytester.makepyfile(WHO_IS_REGISTERED.replace("NAME", repr(name)))
    result = pytester.runpytest(*args)
    result.assert_outcomes(passed=1)
