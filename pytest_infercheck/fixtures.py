"""Fixtures for users' own Python tests: the generation cache, the matrix and ready targets.

``infercheck_target`` yields a ready backend for a ``model@backend`` name of the matrix,
given by indirect parametrisation or the ``infercheck_target`` marker::

    @pytest.mark.parametrize("infercheck_target", ["q4@local"], indirect=True)
    def test_adds(infercheck_target):
        assert infercheck_target.generate("2+2=", max_tokens=4).text == "4"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from .backends import GenerationParams
from .options import matrix_paths
from .stash import generation_cache_for

if TYPE_CHECKING:
    import numpy as np

    from .backends import Backend, Generation, PromptInput
    from .checks.comparison.prompt import PromptComparison
    from .config import LoadedMatrix
    from .generation_cache import GenerationCache, ResolvedTarget


@dataclass
class TargetHandle:
    """A resolved ``model@backend`` with convenience calls (cached through the generation
    cache)."""

    cache: GenerationCache
    resolved: ResolvedTarget

    @property
    def label(self) -> str:
        return self.resolved.label

    @property
    def backend(self) -> Backend:
        return self.resolved.backend

    def render(self, text: str, system: str | None = None, thinking: bool = False) -> PromptInput:
        return self.cache.run(self.backend.render(text, system, thinking))

    def generate(self, text: str, max_tokens: int = 64, system: str | None = None) -> Generation:
        """Greedy generation of ``text`` (chat template applied when the model has one)."""
        rendered = self.render(text, system)
        return self.cache.generate(self.resolved, rendered, GenerationParams(max_tokens))

    async def agenerate(
        self, text: str, max_tokens: int = 64, system: str | None = None
    ) -> Generation:
        """Like :meth:`generate`, awaited on the caller's event loop (not cached)."""
        rendered = await self.backend.render(text, system, False)
        return await self.backend.generate(rendered, GenerationParams(max_tokens))

    def score(self, prompt_ids: list[int], continuation_ids: list[int]) -> np.ndarray:
        return self.cache.score(self.resolved, prompt_ids, continuation_ids)

    def compare_to(
        self,
        baseline: TargetHandle,
        text: str,
        *,
        max_tokens: int = 64,
        answer: str | None = None,
        answer_kind: str | None = None,
    ) -> PromptComparison:
        """Compare this target against ``baseline`` on one prompt, as a check item would."""
        # the comparison layer and suites (numpy, pydantic): loaded by the tests that call it
        from .checks.comparison.gather_prompt import compare_prompt
        from .suites import Prompt, derive_prompt_id

        prompt = Prompt(
            id=derive_prompt_id(text),
            text=text,
            category=None,
            max_tokens=max_tokens,
            answer=answer,
            answer_kind=answer_kind,
            system=None,
            source="<test>",
        )
        return compare_prompt(
            self.cache, baseline.resolved, self.resolved, prompt, GenerationParams(max_tokens)
        )


@pytest.fixture(scope="session")
def infercheck_engine(pytestconfig: pytest.Config) -> GenerationCache:
    """The session's :class:`~pytest_infercheck.generation_cache.GenerationCache` (one per
    xdist worker), shared with the YAML checks: its backends (``resolve``) and its cached
    renders, generations and scores. Named ``engine`` for compatibility with users' tests;
    it was the ``Engine`` class before the generation cache and the server pool were split."""
    return generation_cache_for(pytestconfig)


@pytest.fixture(scope="session")
def infercheck_matrix(pytestconfig: pytest.Config) -> LoadedMatrix:
    """The matrix from ``--infercheck-config`` / ini ``infercheck_config`` or
    ``<rootdir>/infercheck.yaml``."""
    from .config import load_matrix  # pydantic and the kinds: loaded by tests that use it

    paths = matrix_paths(pytestconfig) or [pytestconfig.rootpath / "infercheck.yaml"]
    if not paths[0].is_file():
        pytest.fail(f"infercheck: no matrix file at {paths[0]} (use --infercheck-config)")
    return load_matrix(paths[0])


@pytest.fixture
def infercheck_target(
    request: pytest.FixtureRequest,
    infercheck_engine: GenerationCache,
    infercheck_matrix: LoadedMatrix,
) -> TargetHandle:
    """A ready ``model@backend`` (indirect parameter or ``@pytest.mark.infercheck_target``)."""
    ref = getattr(request, "param", None)
    if ref is None:
        marker = request.node.get_closest_marker("infercheck_target")
        ref = marker.args[0] if marker and marker.args else None
    if not isinstance(ref, str):
        pytest.fail("infercheck_target needs a 'model@backend' name (indirect param or marker)")
    target = infercheck_matrix.target(ref, ("models",))
    return TargetHandle(infercheck_engine, infercheck_engine.resolve(infercheck_matrix, target))
