"""The producers' tests' pytest set-up: the `matrix` marker (tests/CMakeLists.txt runs those cases in
<dir>_<file>_matrix, under `make test-matrix`)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "matrix: a cross-product case `make test-matrix` runs and `make test` does not")
