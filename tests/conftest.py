# symgrad's pytest plugin: ctx / rng fixtures, the gpu marker, --symgrad-seed. When symgrad is
# pip-installed, the pytest11 entry point has already registered it and this line does nothing.
pytest_plugins = ["test_utils.pytest_plugin"]
