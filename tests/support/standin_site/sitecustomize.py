"""On PYTHONPATH (after `ikp record`'s own site directory) in tests that run `ikp record`: ikp_cute.pool is the
stand-in (tests/support/pool_standin.py) when the real pool cannot be imported. `ikp record` runs this file as
the site's own sitecustomize, before it starts the recorder."""

from tests.support import pool_standin

pool_standin.install()
