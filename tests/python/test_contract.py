"""The contract test: schemathesis generates requests from api/openapi.yaml
and checks every reply against it (status documented, body matching its
schema, content type and headers documented, 405 + Allow for undeclared
methods) and that none is a 5xx. One check is left out: "schema-valid data
must be accepted" — the spec states shapes, not every semantic rule (a job's
agents must name its models, stream_options needs stream, strings may not
hold NUL), so a valid-looking request may rightly get 400.
Bounded: PARLEY_CONTRACT_EXAMPLES (default 10) examples per operation, so
the whole run stays well under two minutes on 2 cores."""
import atexit
import os
import tempfile

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.specs.openapi.checks import positive_data_acceptance  # noqa: E402

from conftest import ROOT, Server  # noqa: E402

SPEC = os.path.join(ROOT, "api", "openapi.yaml")
EXAMPLES = int(os.environ.get("PARLEY_CONTRACT_EXAMPLES", "10"))

# The schema is parametrized at import, so the server starts at import too
# (the lazy fixture loader does not work with this pytest); it is stopped by
# its pid at the end of the module.
_jobs = tempfile.mkdtemp(prefix="parley-contract-")
_server = Server("--backend", "mock", "--log-level", "warn", "--no-access-log",
                 "--jobs-dir", _jobs, "--max-model-len", "4096")
# A run that never reaches the module's teardown (pytest --collect-only, an
# interrupted session) must not leave the server behind.
atexit.register(_server.stop)
schema = schemathesis.openapi.from_path(SPEC)
schema.config.update(base_url=_server.url, request_timeout=30)


@pytest.fixture(scope="module", autouse=True)
def _stop_server():
    yield
    assert _server.stop() == 0


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_contract(case):
    case.call_and_validate(excluded_checks=[positive_data_acceptance])
