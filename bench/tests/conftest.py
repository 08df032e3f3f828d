"""The test suite's data fixtures, for the benchmark drivers' tests."""

from tests.conftest import dwie_dir, fhwa_path, shared_data  # noqa: F401
