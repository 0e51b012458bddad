"""The plugin's own hooks, for conftest files and other plugins.

Importing this module must stay as cheap as importing :mod:`.plugin` (it is loaded by
``pytest_addhooks``): the types it names are imported only for type checkers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .backends import Backend
    from .backends.spec import BackendSpec


@pytest.hookspec(firstresult=True)
def pytest_infercheck_wrap_backend(
    backend: Backend, name: str, spec: BackendSpec
) -> Backend | None:
    """Wrap (or replace) a backend the plugin has just created for the ``backends:`` entry
    ``name`` of a matrix, whose options are ``spec``; return the backend to use instead, or
    None to keep ``backend``.

    Called once per process for every backend name that a resolved target uses (golden
    replays are not backends of the matrix and are never passed here). Backends named
    differently with identical options share one created ``backend`` (a model is loaded, a
    server started, once); a wrapper returned for a name is that name's own target, with its
    own cached generations. The plugin closes both: a wrapper's ``aclose`` must not close the
    backend it wraps. Stops at the first non-None result.
    """
