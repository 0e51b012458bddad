"""The framework every check kind runs in: a kind as a package of facets (:mod:`.kind`),
the run that gathers, then judges purely, then applies the verdict rules (:mod:`.run`), and
the aggregate's rules (:mod:`.items`)."""
