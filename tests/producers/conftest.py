"""The producers' tests' pytest set-up: the `matrix` marker (tests/CMakeLists.txt runs those cases in
<dir>_<file>_matrix, under `make test-matrix`), and the official safetensors' check of a module's files."""
import pytest

from producers import open_with_official_safetensors


def pytest_configure(config):
    config.addinivalue_line("markers", "matrix: a cross-product case `make test-matrix` runs and `make test` does not")


@pytest.fixture(scope="module")
def official_safetensors():
    """A list the tests of a module add folders to: after the module's last test, the official safetensors opens
    every .safetensors file under them and reads every tensor, in one interpreter (each start imports torch: about
    10 CPU-seconds, once per module instead of once per test). A file it refuses fails the module's last test."""
    dirs = []
    yield dirs
    if dirs:
        open_with_official_safetensors(*dirs)
