"""``pytest-infercheck init``: probe an engine (:mod:`.probe`), write a matrix and a
``pytest.ini`` that suit it (:mod:`.matrix_text`), from flags or questions
(:mod:`.command`)."""
